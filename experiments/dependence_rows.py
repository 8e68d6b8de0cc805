"""The dependence stage of ``verify-samples`` (harness/samples/dependence.py) on the engine rows that can be redrawn
here: the tiny-pair rows of results/engines/table.md (our sampler, transformers' assisted generation and prompt
lookup, the engine-level controls), drawn with that table's commands, sizes and seeds
(:mod:`experiments.engine_figures`: ``python -m harness sample`` then ``python -m harness verify-samples``, scored
and two-sample), each row's stage line, p-values and planner figures read from its report's meta.json.

    python experiments/dependence_rows.py --out results/engines/dependence            # the table's sizes
    python experiments/dependence_rows.py --quick --out /tmp/dependence               # a small look (~25 min here)

The exact-law rows (results/engines/vllm/, llama_cpp/) hold reports only, not their 400,000-completion sample
files, and need vLLM's and llama.cpp's environments to redraw: not run here, but by their own scripts at 20,000
completions per mode (results/engines/vllm/dependence/, llama_cpp/dependence/; docs/engines.md, *Dependence between
completions*).
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "experiments"))

import engine_figures as E  # noqa: E402
from harness.core.provenance import atomic_write_csv, atomic_write_json, atomic_write_text, metadata  # noqa: E402


def stage_row(name: str, role: str, mode: str, sample_wall: float, v: dict) -> dict:
    """One table row from a verify-samples report: the verdict and the dependence stage's two tests."""
    info = json.loads((Path(v["report"]) / "meta.json").read_text())["info"]
    dep = info["dependence"]
    t = {x["name"]: x for x in dep["tests"]}
    return dict(engine=name, role=role, mode=mode, verdict=v["verdict"], completions=v["completions"],
                duplicates_p=t["duplicates"]["pvalue"], duplicates_detects=t["duplicates"]["detects"],
                repeats=t["duplicates"]["statistic"], repeats_expected=t["duplicates"]["expected"],
                siblings_p=t["siblings"]["pvalue"], siblings_detects=t["siblings"]["detects"],
                designated_pairs=t["siblings"]["n"], finding=dep["finding"] or "", line=dep["line"],
                sample_wall_s=sample_wall, verify_wall_s=v["verify_wall_s"])


def run(a, work: Path, names: list[str], done=lambda df: None) -> pd.DataFrame:
    """Every row of ``names`` in every mode of ``a.modes``; ``done(table so far)`` after each row (a long run leaves
    the rows it finished)."""
    rows, bases = [], {}
    for name in names:
        role, args, size, temp = E.RUNS[name]
        print(f"[{time.strftime('%H:%M:%S')}] {name}", file=sys.stderr, flush=True)
        f, wall = E.sample(a, work, name, args, size, a.seed)
        for mode in a.modes.split(","):
            if mode == "two-sample" and (size, temp) not in bases:
                bases[(size, temp)] = E.baseline(a, work, size, temp)[0]
            ref = E.TARGET if mode == "scored" else str(bases[(size, temp)])
            rows.append(stage_row(name, role, mode, wall, E.verify(a, work, name, f, mode, ref)))
        done(pd.DataFrame(rows))
    return pd.DataFrame(rows)


def _pct(x: float) -> str:
    return "-" if x != x else ("none" if x > 1 else f"{100 * x:.3g} %")


def table_md(df: pd.DataFrame, meta: dict) -> str:
    lines = ["# The dependence stage on the engine rows redrawn here", "",
             "`verify-samples`' dependence stage (docs/engines.md, *Dependence between completions*) at its default "
             "false-alarm rate 1e-3 per file (two tests at 5e-4), on the tiny-pair rows of ../table.md redrawn with "
             "that table's commands and seeds at this commit, at the sizes in `completions` (the command below says "
             "whether `--quick` made them smaller than that table's). `copies detected`: the share of completions "
             "copied under new ids that the duplicates test catches with probability 0.95 at the file's size (the "
             "planner; `-`: two-sample mode has none); `shared streams detected`: the share of designated pairs "
             "sharing one random stream the siblings test catches with probability 0.95.", "",
             "| engine | role | mode | verdict | completions | repeats (expected) | duplicates p | copies detected | "
             "pairs | siblings p | shared streams detected | finding |",
             "|---|---|---|---|---:|---|---:|---:|---:|---:|---:|---|"]
    for r in df.itertuples():
        lines.append(f"| {r.engine} | {r.role} | {r.mode} | **{r.verdict}** | {r.completions:.0f} | "
                     f"{r.repeats:.0f} ({r.repeats_expected:.3g}) | {r.duplicates_p:.2g} | {_pct(r.duplicates_detects)} | "
                     f"{r.designated_pairs:.0f} | {r.siblings_p:.2g} | {_pct(r.siblings_detects)} | "
                     f"{r.finding.replace('|', '/') or '-'} |")
    lines += ["", "The exact-law rows (../vllm/, ../llama_cpp/) are not here: their sample files are not committed and "
              "redrawing them needs vLLM's and llama.cpp's environments (docs/engines.md).", "",
              f"commit {meta['commit'][:12]}{' (dirty)' if meta['dirty'] else ''}; command `{meta['command']}`"]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for k, v in E.DEFAULTS.items():
        ap.add_argument("--" + k.replace("_", "-"), type=type(v), default=v)
    ap.add_argument("--quick", action="store_true", help="small sizes: " + json.dumps(E.QUICK))
    ap.add_argument("--rows", default=",".join(E.RUNS), help="rows of engine_figures.RUNS, comma-separated")
    ap.add_argument("--modes", default="scored,two-sample")
    ap.add_argument("--out", type=Path, default=REPO / "results" / "engines" / "dependence")
    ap.add_argument("--work", type=Path, help="sample files and reports (default: OUT/work, removed at the end)")
    a = ap.parse_args(argv)
    if a.quick:
        for k, v in E.QUICK.items():
            setattr(a, k, v)
    work = a.work or a.out / "work"
    work.mkdir(parents=True, exist_ok=True)
    meta = metadata({k: getattr(a, k) for k in [*E.DEFAULTS, "rows", "modes"]}, a.seed)

    def write(df: pd.DataFrame) -> None:
        atomic_write_csv(a.out / "table.csv", df, meta)
        atomic_write_text(a.out / "table.md", table_md(df, meta))
        atomic_write_json(a.out / "meta.json", meta)
    run(a, work.resolve(), a.rows.split(","), write)
    if a.work is None:
        shutil.rmtree(work)
    print((a.out / "table.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
