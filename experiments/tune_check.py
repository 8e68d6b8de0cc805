"""Is `tune` right at every batch?  Its recommendation against measured sweeps (issue 25, item 3).

    python experiments/tune_check.py --pair membound --tune results/tune/membound-local \\
        --measured results/sweep/membound results/sweep/membound_rerun \\
        --pair tiny --tune results/tune/tiny-local --measured results/sweep/tiny_batches \\
        --out results/tune/check

For each pair, batch and measured sweep: the configuration `tune` recommends (algorithm and k, or off), its
measured speedup (the sweep's ``speedup_measured``: tokens/s of speculative over target-only, measured side by
side in one cell; off = 1 exactly), the best measured configuration (off included) and the gap
(best - recommended) / best.  A row passes when the gap is at most 5 % and, where every measured
configuration loses, `tune` says off.  The tune folder's workload (a context = the prompt length,
max_new_tokens) must be the sweep's, and tune's configurations must have been measured: otherwise exit 2;
tune's other contexts are left out.
Writes check.csv and check.md (with provenance: both inputs' commits, this run's) to ``--out``.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import pandas as pd  # noqa: E402

from harness.core.figures import md_table  # noqa: E402
from harness.core.provenance import atomic_write_csv, atomic_write_text, metadata  # noqa: E402

TOLERANCE = 0.05


def _bad(msg: str) -> SystemExit:
    print(f"tune_check: {msg}", file=sys.stderr)
    return SystemExit(2)


def _measured(folder: Path) -> pd.DataFrame:
    path = folder / "measured.csv"
    if not path.is_file():
        raise _bad(f"`--measured` {str(folder)!r} has no measured.csv (a sweep results folder is needed)")
    m = pd.read_csv(path, comment="#")
    return m[m.suite.isin(["real", "membound"]) & (m.draft == "draft")].assign(algorithm="chain")


def check_pair(pair: str, tune: Path, sweeps: list[Path]) -> list[dict]:
    rec = pd.read_csv(tune / "recommendation.csv", comment="#")
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
            best = max(meas, key=meas.get)
            gap = (meas[best] - meas[key]) / meas[best]
            rows.append({"pair": pair, "batch": int(r.batch), "context": int(r.context), "sweep": folder.name,
                         "recommended": r.recommendation, "predicted_S": r.speedup, "predicted_lo": r.speedup_lo,
                         "predicted_hi": r.speedup_hi, "measured_S_of_recommended": meas[key],
                         "best_measured": "off (target-only)" if best[0] == "off" else f"{best[0]}, k = {best[1]}",
                         "best_measured_S": meas[best], "gap": gap, "every_config_loses": best[0] == "off",
                         "pass": gap <= TOLERANCE and (best[0] != "off" or key[0] == "off")})
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
    rows = []
    for pair, tune, sweeps in zip(args.pair, args.tune, args.measured):
        rows += check_pair(pair, tune, sweeps)
    table = pd.DataFrame(rows)
    sources = {str(p): json.loads((p / "meta.json").read_text()).get("commit") for p in
               args.tune + [s for ss in args.measured for s in ss]}
    meta = metadata({"pairs": args.pair, "tune": args.tune, "measured": args.measured, "tolerance": TOLERANCE,
                     "sources": sources, "name": "tune-check"}, None)
    meta["command"] = "python experiments/tune_check.py " + " ".join(argv if argv is not None else sys.argv[1:])
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_csv(args.out / "check.csv", table, meta)
    cols = ["pair", "batch", "sweep", "recommended", "predicted_S", "predicted_lo", "predicted_hi",
            "measured_S_of_recommended", "best_measured", "best_measured_S", "gap", "pass"]
    text = (f"`tune` against measured sweeps: gap = (best measured - measured S of the recommendation) / best; pass "
            f"when gap <= {TOLERANCE:.0%} and, where every measured configuration loses, tune says off.  Command: `{meta['command']}`; commit {meta['commit']}; inputs' commits "
            f"{json.dumps(sources)}.\n\n" + md_table(table.to_dict("records"), cols) + "\n")
    atomic_write_text(args.out / "check.md", text)
    print(text)
    return 0 if table["pass"].all() else 1


if __name__ == "__main__":
    raise SystemExit(main())
