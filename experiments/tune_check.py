"""Is `tune` right at every batch?  Its recommendation against measured sweeps (issue 25, item 3).

    python experiments/tune_check.py --pair membound --tune results/tune/membound-local \\
        --measured results/sweep/membound results/sweep/membound_rerun \\
                   results/sweep/membound_b1 results/sweep/membound_b1_seed2 \\
        --pair tiny --tune results/tune/tiny-local --measured results/tune/measured/tiny_batches \\
                   results/sweep/tiny_b1 results/sweep/tiny_b1_seed2 \\
        --out results/tune/check

For each pair, batch and measured sweep: the configuration `tune` recommends (algorithm and k, or off), its
measured speedup (the sweep's ``speedup_measured``: tokens/s of speculative over target-only, measured side by
side in one cell; off = 1 exactly), the best measured configuration (off included) and the gap
(best - recommended) / best.  A row passes when the gap is at most 5 % and, where every measured
configuration loses, `tune` says off.  The tune folder's workload (a context = the prompt length,
max_new_tokens) must be the sweep's, and tune's configurations must have been measured: otherwise exit 2;
tune's other contexts are left out.

Prompts: a sweep whose cells share their prompts across k (``prompts_shared``, harness.speedup.sweep.suites) times
every configuration of a batch on the same ``prompts`` prompts; an older sweep drew each cell's prompts from the
cell's own seed, so at batch 1 each k ran on one prompt of its own and a measured best k was partly that prompt's
acceptance.  Where a pair has a shared-prompt sweep at a batch, the rows of its per-cell-prompt sweeps at that
batch are still listed but superseded (``counted`` False); the exit status is that of the counted rows.
Gap interval (gap_lo, gap_hi; shared-prompt sweeps only): 95 % percentile bootstrap over the batch's prompts
(:func:`gap_interval`), the uncertainty of the gap from which prompts and draws the cells got; it is reported,
the pass rule is the gap's point value.
Loss established (diagnostic, not the verdict): each measured configuration's 95 % upper bound on S, a percentile
bootstrap over its cell's timed pairs (one target-only and one speculative run of one pass on one prompt batch;
:func:`s_upper`); ``loss_established`` where every configuration's upper bound is below 1.  A row that fails only
because tune left speculation on where the best measured S is below 1 but that loss is not established
(``tie_with_off``) is a tie with off within the cells' own timing noise; check.md counts those apart.  The pass rule
is unchanged.
Run-to-run spread: for each configuration measured by two or more sweeps of the same protocol at a batch, its
measured S in each and (max - min) / mean: a gap can only be told from a tie where this spread is below it.
A tune folder made with ``--confirm`` (its recommendation the measured best of the model's shortlist) also keeps the
model's own pick: model_recommended, model_gap and model_pass judge it by the same rule (not counted in the exit status;
model_pass is empty where the sweep did not measure the model's pick).
Writes check.csv, spread.csv and check.md (with provenance: both inputs' commits, this run's) to ``--out``.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from harness.core.figures import md_table  # noqa: E402
from harness.core.provenance import atomic_write_csv, atomic_write_text, command_line, metadata, read_table_csv  # noqa: E402

TOLERANCE = 0.05
BOOT = 2000  # bootstrap resamples of the gap interval


def _bad(msg: str) -> SystemExit:
    print(f"tune_check: {msg}", file=sys.stderr)
    return SystemExit(2)


def _measured(folder: Path) -> pd.DataFrame:
    path = folder / "measured.csv"
    if not path.is_file():
        raise _bad(f"`--measured` {str(folder)!r} has no measured.csv (a sweep results folder is needed)")
    m = read_table_csv(path)
    if "prompts_shared" not in m:  # a sweep of before shared prompts: each cell its own batch of prompts
        m = m.assign(prompts_shared=False, prompts=m["batch"])
    return m[m.suite.isin(["real", "membound"]) & (m.draft == "draft")].assign(algorithm="chain")


def _protocol(cell: pd.DataFrame) -> tuple[bool, int]:
    """(prompts shared across k, prompts per cell) of one batch's cells of a sweep."""
    shared, n = set(cell.prompts_shared.astype(bool)), set(cell.prompts.astype(int))
    if len(shared) != 1 or len(n) != 1:
        raise _bad(f"the cells of one batch mix prompt protocols (prompts_shared {sorted(shared)}, prompts "
                   f"{sorted(n)}): not one measurement")
    return shared.pop(), n.pop()


def _supersede(rows: list[dict]) -> list[dict]:
    """Mark ``counted``: False for a per-cell-prompt row where a shared-prompt sweep measured the same batch."""
    shared = {(r["pair"], r["batch"], r["context"]) for r in rows if r["prompts_shared"]}
    for r in rows:
        r["counted"] = r["prompts_shared"] or (r["pair"], r["batch"], r["context"]) not in shared
    return rows


def gap_interval(timings: pd.DataFrame, cells: dict, key: tuple, n_boot: int = BOOT, seed: int = 0) -> tuple:
    """95 % percentile-bootstrap interval of the gap over a batch's shared prompts: prompt indices resampled with
    replacement, the same resample for every configuration (they were timed on the same prompts), each
    configuration's S the ratio of summed times over the resampled prompts (all passes), the best re-chosen in
    each resample (off = 1).  ``cells``: configuration -> cell id."""
    per = timings[timings.cell.isin(cells.values())].groupby(["cell", "prompt", "arm"]).seconds.sum().unstack("arm")
    n = per.index.get_level_values("prompt").nunique()
    idx = np.random.default_rng(seed).integers(0, n, (n_boot, n))
    s = {("off", 0): np.ones(n_boot)}
    for conf, cell in cells.items():
        ar, spec = per.loc[cell, "ar"].to_numpy(), per.loc[cell, "spec"].to_numpy()
        s[conf] = ar[idx].sum(axis=1) / spec[idx].sum(axis=1)
    best = np.max(np.stack(list(s.values())), axis=0)
    lo, hi = np.quantile((best - s[key]) / best, [0.025, 0.975])
    return float(lo), float(hi)


def s_upper(timings: pd.DataFrame, cell: str, n_boot: int = BOOT, seed: int = 0, level: float = 0.95) -> float:
    """Upper end of the two-sided ``level`` percentile-bootstrap interval of one cell's measured S: its timed pairs
    (pass, prompt batch) resampled with replacement, S the ratio of summed target-only to summed speculative
    seconds."""
    units = ["rep", "prompt"] if "prompt" in timings else ["rep"]  # sweeps before shared prompts: one batch a pass
    per = timings[timings.cell == cell].groupby(units + ["arm"]).seconds.sum().unstack("arm")
    ar, spec = per["ar"].to_numpy(), per["spec"].to_numpy()
    idx = np.random.default_rng(seed).integers(0, len(per), (n_boot, len(per)))
    return float(np.quantile(ar[idx].sum(axis=1) / spec[idx].sum(axis=1), (1 + level) / 2))


def _row(pair: str, r, folder: Path, cell: pd.DataFrame, meas: dict, key: tuple) -> dict:
    best = max(meas, key=meas.get)
    gap = (meas[best] - meas[key]) / meas[best]
    shared, n_prompts = _protocol(cell)
    lo = hi = up = float("nan")
    if (folder / "timings.csv").is_file():
        timings = read_table_csv(folder / "timings.csv")
        cells = {(c.algorithm, int(c.k)): c.cell for c in cell.itertuples()}
        if shared:
            lo, hi = gap_interval(timings, cells, key)
        up = max(s_upper(timings, c) for c in cells.values())
    passed = gap <= TOLERANCE and (best[0] != "off" or key[0] == "off")
    return {**_model_pick(r, meas, best),
            "pair": pair, "batch": int(r.batch), "context": int(r.context), "sweep": folder.name,
            "prompts": n_prompts, "prompts_shared": shared, "recommended": r.recommendation,
            "predicted_S": r.speedup, "predicted_lo": r.speedup_lo, "predicted_hi": r.speedup_hi,
            "measured_S_of_recommended": meas[key],
            "best_measured": "off (target-only)" if best[0] == "off" else f"{best[0]}, k = {best[1]}",
            "best_measured_S": meas[best], "gap": gap, "gap_lo": lo, "gap_hi": hi,
            "every_config_loses": best[0] == "off", "max_S_upper": up, "loss_established": bool(up < 1.0),
            "pass": passed, "tie_with_off": bool(not passed and gap <= TOLERANCE and best[0] == "off" and np.isfinite(up) and up >= 1.0)}


def _model_pick(r, meas: dict, best: tuple) -> dict:
    """Where tune ran with ``--confirm`` (its recommendation measured, the model's kept as model_*): the model's own
    pick judged by the same rule, so the check shows what the measurement changed; empty otherwise."""
    if "model_recommendation" not in r._fields or not isinstance(r.model_recommendation, str):
        return {}
    key = ("off", 0) if r.model_recommendation.startswith("off") else (r.model_algorithm, int(r.model_k))
    if key not in meas:
        return {"model_recommended": r.model_recommendation, "model_gap": float("nan"), "model_pass": None}
    gap = (meas[best] - meas[key]) / meas[best]
    return {"model_recommended": r.model_recommendation, "model_gap": gap,
            "model_pass": bool(gap <= TOLERANCE and (best[0] != "off" or key[0] == "off"))}


def check_pair(pair: str, tune: Path, sweeps: list[Path]) -> list[dict]:
    rec = read_table_csv(tune / "recommendation.csv")
    cfg = json.loads((tune / "meta.json").read_text())["config"]
    rows = []
    for folder in sweeps:
        m = _measured(folder)
        if set(m.prompt_len.astype(int)).isdisjoint(set(rec.context.astype(int))) or \
                {int(cfg["max_new_tokens"])} != set(m.max_new_tokens):
            raise _bad(f"`--tune` {str(tune)!r} predicts contexts {sorted(set(rec.context))}, max_new_tokens "
                       f"{cfg['max_new_tokens']}; {folder} measured prompt_len {sorted(set(m.prompt_len))}, "
                       f"max_new_tokens {sorted(set(m.max_new_tokens))}: not the same workload")
        for r in rec.itertuples():
            cell = m[(m.batch == r.batch) & (m.prompt_len == r.context)]  # other contexts: predicted, not measured
            if cell.empty:
                continue
            meas = {("off", 0): 1.0, **{(c.algorithm, int(c.k)): float(c.speedup_measured) for c in cell.itertuples()}}
            key = (r.algorithm, int(r.k)) if r.speculate else ("off", 0)
            if key not in meas:
                raise _bad(f"`--tune` {str(tune)!r} recommends {r.recommendation} at batch {r.batch}, which {folder} "
                           f"did not measure (measured: {sorted(meas)})")
            rows.append(_row(pair, r, folder, cell, meas, key))
    return _supersede(rows)


SPREAD_COLUMNS = ["pair", "batch", "context", "prompts", "prompts_shared", "configuration", "sweeps", "measured_S",
                  "spread"]


def spread_table(pair: str, sweeps: list[Path]) -> list[dict]:
    """Run-to-run spread: each configuration's measured S in every sweep of one protocol at one batch."""
    frames = [_measured(f).assign(sweep=f.name) for f in sweeps]
    m = pd.concat(frames, ignore_index=True)
    rows = []
    for (B, L, shared, n, k), g in m.groupby(["batch", "prompt_len", "prompts_shared", "prompts", "k"]):
        if g.sweep.nunique() < 2:
            continue
        s = g.speedup_measured.astype(float)
        rows.append({"pair": pair, "batch": int(B), "context": int(L), "prompts": int(n), "prompts_shared": bool(shared),
                     "configuration": f"chain, k = {int(k)}", "sweeps": " / ".join(g.sweep),
                     "measured_S": " / ".join(f"{x:.3g}" for x in s), "spread": float((s.max() - s.min()) / s.mean())})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", action="append", required=True, help="a name for the pair (repeat per pair)")
    ap.add_argument("--tune", action="append", type=Path, required=True, help="its tune results folder")
    ap.add_argument("--measured", action="append", nargs="+", type=Path, required=True,
                    help="its measured sweep folders (results/sweep/<name>)")
    ap.add_argument("--out", type=Path, default=REPO / "results" / "tune" / "check")
    args = ap.parse_args(argv)
    if not (len(args.pair) == len(args.tune) == len(args.measured)):
        raise _bad(f"`--pair`, `--tune`, `--measured` must come once per pair; got {len(args.pair)}, "
                   f"{len(args.tune)}, {len(args.measured)}")
    rows, spread = [], []
    for pair, tune, sweeps in zip(args.pair, args.tune, args.measured):
        rows += check_pair(pair, tune, sweeps)
        spread += spread_table(pair, sweeps)
    table, spread = pd.DataFrame(rows), pd.DataFrame(spread, columns=SPREAD_COLUMNS)  # header even with no rows
    sources = {str(p): json.loads((p / "meta.json").read_text()).get("commit") for p in
               args.tune + [s for ss in args.measured for s in ss]}
    meta = metadata({"pairs": args.pair, "tune": args.tune, "measured": args.measured, "tolerance": TOLERANCE,
                     "sources": sources, "name": "tune-check"}, None)
    meta["command"] = command_line([__file__, *(argv if argv is not None else sys.argv[1:])])  # paths portable
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_csv(args.out / "check.csv", table, meta)
    atomic_write_csv(args.out / "spread.csv", spread, meta)
    atomic_write_text(args.out / "check.md", _markdown(table, spread, meta, sources))
    print(_markdown(table, spread, meta, sources))
    return 0 if table.loc[table.counted, "pass"].all() else 1


def _markdown(table: pd.DataFrame, spread: pd.DataFrame, meta: dict, sources: dict) -> str:
    cols = ["pair", "batch", "sweep", "prompts", "prompts_shared", "recommended", "predicted_S", "predicted_lo",
            "predicted_hi", "measured_S_of_recommended", "best_measured", "best_measured_S", "gap", "gap_lo",
            "gap_hi", "max_S_upper", "loss_established", "pass", "tie_with_off", "counted"]
    cols += [c for c in ("model_recommended", "model_gap", "model_pass") if c in table]
    counted = table[table.counted]
    ties = int(counted.tie_with_off.sum())
    return (f"`tune` against measured sweeps: gap = (best measured - measured S of the recommendation) / best; pass "
            f"when gap <= {TOLERANCE:.0%} and, where every measured configuration loses, tune says off.  "
            f"{int(counted['pass'].sum())} of {len(counted)} counted rows pass; {int((~table.counted).sum())} rows "
            "superseded (counted False: each k timed on its own prompts, where a sweep timing every k of the batch "
            "on the same prompts exists).  "
            f"Of the failing counted rows, {ties} fail only by leaving speculation on where the best measured S is "
            "below 1 but no configuration's loss is established (max_S_upper >= 1: a tie with off within the cells' "
            "own timing noise; diagnostic, the pass rule is unchanged).  "
            f"Command: `{meta['command']}`; commit {meta['commit']}; inputs' commits {json.dumps(sources)}.\n\n"
            + md_table(table.to_dict("records"), cols) + "\n\n"
            "Run-to-run spread of the measured S ((max - min) / mean over sweeps of one protocol): a gap below it "
            "cannot be told from a tie.\n\n"
            + (md_table(spread.to_dict("records"), list(spread.columns)) if len(spread) else "(no configuration "
               "measured twice)") + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
