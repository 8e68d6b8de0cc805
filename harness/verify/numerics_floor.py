"""`python -m harness numerics`: the numerics floor table and figure ("lossless within hardware numerics").

For each logit source (synthetic Zipf-profile rows at V = 32k and 150k and three entropies; the shipped
tiny pair's own logits), each sampling setting and each dtype, the exact TV from the float64 target law of
every step of :data:`harness.verify.numerics.STEPS` (:func:`harness.verify.numerics.step_tvs`), as the mean and the
maximum over the rows.  The experiment is one data file (``harness/configs/numerics/default.toml``);
the results (``numerics.csv`` per cell, ``rows.csv`` per row, ``table.md``, ``figures/``, ``meta.json``)
are written whole or not at all (:func:`harness.core.atomic.staged_report`).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd
import torch

from harness.core.atomic import staged_report
from harness.core.config import CONFIGS, derive_seed, read_toml
from harness.verify.numerics import DTYPES, STEPS, step_tvs
from harness.core.options import check_out, check_option
from harness.core.outdir import claim_out
from harness.core.provenance import atomic_savefig, atomic_write_csv, atomic_write_json, atomic_write_text, metadata
from harness.core.schema import integer, number, one_of, text, validate
from specimpl.sampling import SamplingConfig
from specimpl.hf import load_tiny_pair, tiny_pair_prompts
from harness.core.figures import pyplot as _plt
from harness.core.schema import fail

__all__ = ["DEFAULT_CONFIG", "load_config", "logit_rows", "floor_table", "add_arguments", "run"]

DEFAULT_CONFIG = CONFIGS / "numerics" / "default.toml"

MAX_ROWS, MAX_VOCAB = 1_000_000, 10_000_000  # logit rows per cell (held as a list) and a Zipf row's vocabulary
_FILE = {"seed": integer(0), "rows": integer(1, MAX_ROWS),
         "dtypes": text(allowed="a list")}  # list checked below
_SOURCES = {
    "zipf": {"name": one_of("zipf"), "vocab": text(allowed="a list"), "entropy": text(allowed="a list"),
             "draft_noise": number(0, lo_open=True)},
    "tiny_pair": {"name": one_of("tiny_pair"), "prompts": integer(1)},
}
_SAMPLING = {"temperature": number(0, lo_open=True), "top_k": integer(1), "top_p": number(0, 1, lo_open=True)}


# ---------------------------------------------------------------------------------------- config
def _check_list(source: str, key: str, v, ok, allowed: str) -> None:
    if not (isinstance(v, list) and v and all(ok(x) for x in v)):
        fail(source, key, v, allowed)


def load_config(path: Path) -> dict:
    """Read and check the experiment file (unknown keys, bad values: a UsageError naming file and key)."""
    cfg = read_toml(path, "--config")
    src = str(path)
    lists = {k: cfg.pop(k) for k in ("dtypes", "source", "sampling") if k in cfg}
    validate(cfg, {k: v for k, v in _FILE.items() if k != "dtypes"}, src)
    _check_list(src, "dtypes", lists.get("dtypes"), lambda d: d in DTYPES and d != "float64",
                f"a non-empty list of {sorted(set(DTYPES) - {'float64'})}")
    for i, s in enumerate(lists.get("source") or [None]):
        name = s.get("name") if isinstance(s, dict) else None
        if name not in _SOURCES:
            fail(src, f"source[{i}].name", name, f"one of {sorted(_SOURCES)}")
        body = {k: v for k, v in s.items() if k not in ("vocab", "entropy")}
        validate(body, _SOURCES[name], src, f"source[{i}].")
        if name == "zipf":
            _check_list(src, f"source[{i}].vocab", s.get("vocab"), lambda v: isinstance(v, int) and 2 <= v <= MAX_VOCAB,
                        f"a non-empty list of integers in [2, {MAX_VOCAB:,}]")
            _check_list(src, f"source[{i}].entropy", s.get("entropy"),
                        lambda h: isinstance(h, (int, float)) and 0 < h, "a non-empty list of numbers > 0 (nats)")
    for i, s in enumerate(lists.get("sampling") or [{}]):
        validate(s, _SAMPLING, src, f"sampling[{i}].")
    return {**cfg, "dtypes": lists["dtypes"], "source": lists.get("source", []),
            "sampling": lists.get("sampling") or [{}]}


# ------------------------------------------------------------------------------------ logit rows
def _entropy(logits: torch.Tensor) -> float:
    lp = torch.log_softmax(logits, -1)
    return float(-(lp.exp() * lp).sum())


def zipf_logits(V: int, entropy: float, g: torch.Generator) -> torch.Tensor:
    """(V,) float64 logits -s * log(1 + rank) + 0.5 N(0, 1) over a random ranking of the tokens, with the
    slope s found by bisection so that the law's entropy is ``entropy`` nats (real next-token laws have a
    Zipf-like rank profile: a few likely tokens and a long tail)."""
    rank = torch.randperm(V, generator=g).to(torch.float64)
    noise = 0.5 * torch.randn(V, generator=g, dtype=torch.float64)
    lo, hi = 0.0, 64.0
    for _ in range(60):  # entropy decreases in s
        s = (lo + hi) / 2
        lo, hi = (s, hi) if _entropy(-s * torch.log1p(rank) + noise) > entropy else (lo, s)
    return -hi * torch.log1p(rank) + noise


def _tiny_pair_rows(n_prompts: int, rows: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    target, draft = load_tiny_pair()
    prompts = tiny_pair_prompts(n_prompts, length=48)
    per = max(1, math.ceil(rows / n_prompts))
    out = []
    with torch.no_grad():
        for ids in prompts:
            x = torch.tensor([ids])
            lp = target.model(x).logits[0].to(torch.float64)  # (T, V)
            lq = draft.model(x).logits[0].to(torch.float64)  # (T, V)
            for t in np.linspace(len(ids) // 4, len(ids) - 1, per).astype(int):
                out.append((lp[t], lq[t]))
    return iter(out[:rows])


def logit_rows(source: dict, rows: int, seed: int) -> Iterator[tuple[dict, torch.Tensor, torch.Tensor]]:
    """(cell labels, target logits (V,), draft logits (V,)) of a source, ``rows`` rows per cell."""
    if source["name"] == "tiny_pair":
        for lp, lq in _tiny_pair_rows(source["prompts"], rows):
            yield {"source": "tiny_pair", "vocab": int(lp.numel()), "entropy_target": float("nan")}, lp, lq
        return
    for V in source["vocab"]:
        for H in source["entropy"]:
            g = torch.Generator().manual_seed(derive_seed(seed, "zipf", V, H))
            for _ in range(rows):
                lp = zipf_logits(V, H, g)
                lq = lp + source["draft_noise"] * torch.randn(V, generator=g, dtype=torch.float64)
                yield {"source": "zipf", "vocab": V, "entropy_target": float(H)}, lp, lq


def _sampling(s: dict) -> SamplingConfig:
    return SamplingConfig(temperature=s.get("temperature", 1.0), top_k=s.get("top_k"), top_p=s.get("top_p", 1.0))


def floor_rows(cfg: dict, progress: bool = True) -> pd.DataFrame:
    """One row per (logit row, sampling, dtype): the TV of every step, the row's entropy and alpha."""
    from tqdm import tqdm
    recs = []
    settings = [(s, _sampling(s)) for s in cfg["sampling"]]
    for source in cfg["source"]:
        for r, (labels, lp, lq) in enumerate(logit_rows(source, cfg["rows"], cfg["seed"])):
            for s, sc in settings:
                for name in tqdm(cfg["dtypes"], desc=f"numerics: {labels['source']} V={labels['vocab']}",
                                 disable=not progress, leave=False, file=sys.stderr):
                    tvs = step_tvs(lp, lq, sc, DTYPES[name])
                    recs.append({**labels, "row": r % cfg["rows"], "entropy": _entropy(lp),
                                 "sampling": sc.describe(), "dtype": name, **tvs})
    return pd.DataFrame.from_records(recs)


def floor_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (source, vocab, entropy target, sampling, dtype, step): mean and max TV over the rows."""
    keys = ["source", "vocab", "entropy_target", "sampling", "dtype"]
    long = rows.melt(id_vars=keys + ["row"], value_vars=list(STEPS), var_name="step", value_name="tv")
    g = long.groupby(keys + ["step"], sort=False, dropna=False)["tv"]
    t = g.agg(tv_mean="mean", tv_max="max", rows="count").reset_index()
    t["step"] = pd.Categorical(t["step"], list(STEPS), ordered=True)
    t["dtype"] = pd.Categorical(t["dtype"], [d for d in DTYPES if d != "float64"], ordered=True)
    for col in ("source", "sampling"):  # the order of the experiment file
        t[col] = pd.Categorical(t[col], list(dict.fromkeys(rows[col])), ordered=True)
    return t.sort_values(keys + ["step"], kind="stable").reset_index(drop=True)


# --------------------------------------------------------------------------------------- outputs
def _cell_label(r) -> str:
    return f"{r.source} V={r.vocab}"


def table_md(table: pd.DataFrame, meta: dict) -> str:
    """Markdown: per source and sampling, the largest TV over rows and entropies, steps x dtypes."""
    lines = ["# The numerics floor: exact TV from the float64 target law", "",
             "Largest TV over the rows (and, for the synthetic rows, over the entropies) of each step run in "
             "the dtype (the rest in float64); exact laws, no sampling (`harness/verify/numerics.py`).", "",
             "Steps: " + "; ".join(f"**{k}**: {v}" for k, v in STEPS.items()) + ".", ""]
    table = table.assign(cell=[_cell_label(r) for r in table.itertuples()])
    for (cell, sampling), sub in table.groupby(["cell", "sampling"], sort=False, observed=True):
        piv = sub.pivot_table(index="step", columns="dtype", values="tv_max", aggfunc="max", observed=True)
        lines += [f"## {cell}, {sampling}", "", "| step | " + " | ".join(piv.columns) + " |",
                  "|---|" + "---:|" * len(piv.columns)]
        lines += [f"| {step} | " + " | ".join(f"{v:.2e}" for v in row) + " |" for step, row in piv.iterrows()]
        lines.append("")
    lines.append(f"Command: `{meta['command']}`; commit {meta.get('commit')}.")
    return "\n".join(lines) + "\n"


def draw_figure(table: pd.DataFrame, out: Path, meta: dict) -> list[Path]:
    """TV (largest over rows and entropies, first sampling setting) per step, one line per dtype, one
    panel per logit source; the per-position ε of the default certificate (5e-3, 1e-3) drawn for scale."""
    plt = _plt()
    first = table["sampling"].iloc[0]
    sub = table[table["sampling"] == first].assign(cell=[_cell_label(r) for r in
                                                       table[table["sampling"] == first].itertuples()])
    cells = list(dict.fromkeys(sub["cell"]))
    fig, axes = plt.subplots(1, len(cells), figsize=(3.2 * len(cells), 3.0), sharey=True, squeeze=False)
    steps = list(STEPS)
    for ax, cell in zip(axes[0], cells):
        c = sub[sub["cell"] == cell]
        for dt in c["dtype"].cat.categories:
            y = c[c["dtype"] == dt].groupby("step", observed=True)["tv_max"].max().reindex(steps)
            ax.plot(range(len(steps)), np.maximum(y.to_numpy(float), 1e-12), marker="o", ms=3, label=dt)
        for eps in (5e-3, 1e-3):
            ax.axhline(eps, color="grey", lw=0.6, ls=":")
        ax.set_yscale("log")
        ax.set_xticks(range(len(steps)), steps, rotation=40, ha="right")
        ax.set_title(f"{cell} ({first})")
    axes[0][0].set_ylabel("TV from the float64 law (exact)")
    axes[0][0].legend()
    fig.tight_layout()
    return [atomic_savefig(fig, out / f"numerics_floor.{fmt}", meta) for fmt in ("png", "pdf")]


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="experiment file (default: %(default)s)")
    ap.add_argument("--out", type=Path, default=None,
                    help="output folder (default: runs/numerics/<config>-<hash of the options>; the committed "
                         "reference is written only by --out results/numerics)")
    ap.add_argument("--rows", type=int, default=None, help="logit rows per cell (default: the file's `rows`)")
    ap.add_argument("--no-figures", action="store_true", help="write the tables only")
    ap.add_argument("--no-progress", action="store_true", help="no progress bars")


def run(args) -> int:
    check_out(args.out)
    check_option(args.rows is None or 1 <= args.rows <= MAX_ROWS, "--rows", args.rows,
                 f"an integer in [1, {MAX_ROWS:,}] (logit rows per cell, held in memory)")
    cfg = load_config(args.config)
    if args.rows is not None:
        cfg["rows"] = args.rows
    claim_out(args, "numerics", ("config",))  # --out, or runs/numerics/<name>-<hash>; locked
    torch.set_num_threads(1)  # small vectors: threads only add contention
    rows = floor_rows(cfg, progress=not args.no_progress)
    table = floor_table(rows)
    meta = metadata({**cfg, "steps": STEPS}, cfg["seed"])
    with staged_report(args.out, "numerics") as st:
        atomic_write_csv(st.dir / "rows.csv", rows, meta)
        atomic_write_csv(st.dir / "numerics.csv", table, meta)
        atomic_write_text(st.dir / "table.md", table_md(table, meta))
        atomic_write_json(st.dir / "meta.json", meta)
        if not args.no_figures:
            draw_figure(table, st.dir / "figures", meta)
    worst = table.groupby("dtype", observed=True)["tv_max"].max()
    print("numerics: largest TV per dtype: " + ", ".join(f"{d} {v:.2e}" for d, v in worst.items())
          + f"; wrote {args.out}")
    return 0
