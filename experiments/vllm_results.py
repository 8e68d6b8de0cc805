"""vLLM 0.32.0 (CPU) verified at exact-law strength: the table of results/engines/vllm/.

    python experiments/vllm_results.py --vllm-python .venv-vllm/bin/python --out results/engines/vllm

For each mode (plain sampling, a draft model with probabilistic / greedy drafts, n-gram drafts, the "block"
rejection method) and each CPU shim (stock = vLLM as shipped; fixed = the test-only plugin applying PR #55006,
experiments/vllm_cpu_expand_fix), ``python -m harness sample --engine vllm`` draws completions on the exact
Markov pair (specimpl/assets/exact_pair/markov_*: V = 16, law exact at every position) and ``verify-samples
--exact`` judges them.  Fixed runs draw ``--per-prompt`` completions of each of ``--prompts`` prompts (the
planner asks ~216k for epsilon = 0.01; 2 prompts x 250k ended at a largest bound of 0.0104, so 400k); stock runs draw ``--stock-per-prompt`` (their loss shows at a
few hundred).  ``--quick`` is the make vllm-check size.  Each mode's sample file, report and engine summary go
under ``--out/<mode>-<shim>/``; the sample files themselves are not kept (``--keep-samples`` keeps them).

The table: engine, mode, shim, verdict, the certified token TV (largest per-position bound) or the first
rejecting tests and their effect (the largest per-position TV estimate), completions, engine wall time,
acceptance per draft position (the engine's counters), the rule they are consistent with
(:mod:`harness.samples.rules`) and the dependence stage's line (:mod:`harness.samples.dependence`).

results/engines/vllm/dependence/ is this script at 20,000 completions per fixed row (``--per-prompt 20000``): the
dependence stage on every mode and shim of the table, whose 400,000-completion sample files are not kept.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import pandas as pd  # noqa: E402

from harness.core.figures import md_table  # noqa: E402
from harness.core.provenance import atomic_write_csv, atomic_write_text, metadata  # noqa: E402
from harness.samples.report import report_row  # noqa: E402

PAIR = "specimpl/assets/exact_pair"
MODES = {  # mode -> sample options
    "plain": ["--spec", "none"],
    "draft-prob": ["--spec", "draft", "--draft", f"{PAIR}/markov_draft"],
    "draft-greedy": ["--spec", "draft-greedy", "--draft", f"{PAIR}/markov_draft"],
    "ngram": ["--spec", "ngram"],
    "block": ["--spec", "block", "--draft", f"{PAIR}/markov_draft"],
}
COMMON = ["--engine", "vllm", "--k", "4", "--target", f"{PAIR}/markov_target", "--prompt-vocab", "13",
          "--max-new-tokens", "8", "--no-progress"]


def _run(cmd: list[str]) -> tuple[int, float, str]:
    tic = time.perf_counter()
    p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    return p.returncode, time.perf_counter() - tic, (p.stderr or "").strip()


def one(mode: str, shim: str, per_prompt: int, args, out: Path) -> dict:
    d = out / f"{mode}-{shim}"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    samples = d / "samples.jsonl"
    rc, wall, err = _run([sys.executable, "-m", "harness", "sample", *COMMON, "--n-prompts", str(args.prompts),
                          *MODES[mode], "--vllm-shim", shim,
                          "--vllm-python", args.vllm_python, "--n-per-prompt", str(per_prompt), "--out", str(samples)])
    row = {"engine": "vllm 0.32.0 (CPU)", "mode": mode, "shim": shim, "completions": args.prompts * per_prompt,
           "sample_wall_s": round(wall, 1)}
    if rc != 0:
        return {**row, "verdict": f"engine failed (exit {rc})", "detail": err.splitlines()[-1][:200] if err else ""}
    engine = json.loads((Path(str(samples) + ".engine.json")).read_text())
    shutil.move(str(samples) + ".engine.json", d / "engine.json")
    row.update(engine_generate_s=round(engine["generate_s"], 1), tokens_per_s=round(engine["tokens_per_s"]))
    rc, wall, err = _run([sys.executable, "-m", "harness", "verify-samples", "--samples", str(samples),
                          "--target", f"{PAIR}/markov_target", "--exact", "--epsilon", str(args.epsilon),
                          "--no-progress", "--out", str(d / "report")])
    row.update(report_row(d / "report") if rc in (0, 1, 4) else {"verdict": f"error (exit {rc})", "detail": err[-240:]},
               verify_wall_s=round(wall, 1))
    rules = subprocess.run([sys.executable, "-m", "harness.samples.rules", str(samples), f"{PAIR}/markov_target",
                            f"{PAIR}/markov_draft"], cwd=REPO, capture_output=True, text=True)
    row["rule"] = rules.stdout.strip().splitlines()[-1] if rules.returncode == 0 and rules.stdout.strip() else ""
    if not args.keep_samples:
        samples.unlink()
    return row


COLUMNS = ["engine", "mode", "shim", "verdict", "max_position_tv_upper", "max_position_tv_hat", "rejecting_tests",
           "first_rejecting", "completions", "engine_generate_s", "tokens_per_s", "rule", "dependence"]


def table_md(df: pd.DataFrame, meta: dict) -> str:
    head = f"<!-- {json.dumps({k: meta[k] for k in ('commit', 'dirty', 'command') if k in meta})} -->\n"
    return head + md_table(df.to_dict("records"), COLUMNS)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vllm-python", default=".venv-vllm/bin/python")
    ap.add_argument("--out", type=Path, default=REPO / "results" / "engines" / "vllm")
    ap.add_argument("--modes", default="draft-prob,ngram,draft-greedy,plain,block")
    ap.add_argument("--stock-modes", default="draft-prob,ngram,draft-greedy,plain", help="modes also run stock")
    ap.add_argument("--shims", default="fixed,stock")
    ap.add_argument("--prompts", type=int, default=1, help="prompts (each certified on its own: bounds are per prompt)")
    ap.add_argument("--per-prompt", type=int, default=400_000,
                    help="fixed runs: the planner asks ~216k for epsilon 0.01, and 2 x 250k ended at 0.0104")
    ap.add_argument("--stock-per-prompt", type=int, default=3000)
    ap.add_argument("--epsilon", type=float, default=0.01)
    ap.add_argument("--keep-samples", action="store_true")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for mode in args.modes.split(","):
        for shim in [s for s in args.shims.split(",") if s == "fixed" or mode in args.stock_modes.split(",")]:
            n = args.per_prompt if shim == "fixed" else args.stock_per_prompt
            rows.append(one(mode, shim, n, args, args.out))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    df = pd.DataFrame(rows)
    meta = metadata({"modes": args.modes, "shims": args.shims, "prompts": args.prompts, "per_prompt": args.per_prompt,
                     "stock_per_prompt": args.stock_per_prompt, "epsilon": args.epsilon}, 0)
    atomic_write_csv(args.out / "table.csv", df, meta)
    atomic_write_text(args.out / "table.md", table_md(df, meta))
    atomic_write_text(args.out / "meta.json", json.dumps(meta, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
