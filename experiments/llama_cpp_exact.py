"""llama.cpp (llama-cpp-python) verified at exact-law strength: the table of results/engines/llama_cpp/.

    python experiments/llama_cpp_exact.py --out results/engines/llama_cpp

For each mode (plain sampling; prompt-lookup speculation, k = 4, verified by exact match)
``python -m harness sample --engine llama-cpp`` draws completions on the exact Markov pair
(specimpl/assets/exact_pair/markov_target: V = 16, law exact at every position; one 4-token prompt) through
llama.cpp's Python API, and ``verify-samples --exact`` judges them against the float64 law (per-position token
TV certificate); for prompt lookup ``harness.samples.rules`` checks the engine's acceptances against p(d | c).
Exact-match verification draws one uniform per position whether a draft is there or not, so with the same
per-request seeds the two modes' completions coincide token for token (the coupled check of
experiments/llama_cpp_check.py): the table shows that (``same_as_plain``) instead of hiding it.  Each mode's
report and engine summary go under ``--out/<mode>/``; sample files are not kept (``--keep-samples`` keeps them).
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

TARGET = "specimpl/assets/exact_pair/markov_target"
MODES = {"plain": ["--spec", "none"], "prompt-lookup": ["--spec", "ngram", "--k", "4"]}
COMMON = ["--engine", "llama-cpp", "--target", TARGET, "--prompt-vocab", "13", "--prompt-lengths", "4", "4",
          "--max-new-tokens", "8", "--no-progress"]  # a 4-token prompt: prefill is a third of the work at 35
COLUMNS = ["engine", "mode", "verdict", "max_position_tv_upper", "max_position_tv_hat", "rejecting_tests",
           "first_rejecting", "completions", "engine_generate_s", "tokens_per_s", "rule"]


def _run(cmd: list[str]) -> tuple[int, float, str]:
    tic = time.perf_counter()
    p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    return p.returncode, time.perf_counter() - tic, (p.stderr or "").strip()


def one(mode: str, args, out: Path) -> dict:
    d = out / mode
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    samples = d / "samples.jsonl"
    rc, wall, err = _run([sys.executable, "-m", "harness", "sample", *COMMON, *MODES[mode], "--n-prompts",
                          str(args.prompts), "--n-per-prompt", str(args.per_prompt), "--llama-workers",
                          str(args.workers), "--out", str(samples)])
    row = {"engine": "llama.cpp (llama-cpp-python)", "mode": mode, "completions": args.prompts * args.per_prompt,
           "sample_wall_s": round(wall, 1)}
    if rc != 0:
        return {**row, "verdict": f"engine failed (exit {rc})", "detail": err.splitlines()[-1][:200] if err else ""}
    engine = json.loads(Path(str(samples) + ".engine.json").read_text())
    shutil.move(str(samples) + ".engine.json", d / "engine.json")
    row["engine"] = f"llama.cpp (llama-cpp-python {engine['engine']['version']})"
    row.update(engine_generate_s=round(engine["generate_s"], 1), tokens_per_s=round(engine["tokens_per_s"]))
    rc, wall, err = _run([sys.executable, "-m", "harness", "verify-samples", "--samples", str(samples), "--target",
                          TARGET, "--exact", "--epsilon", str(args.epsilon), "--no-progress", "--out", str(d / "report")])
    row.update(report_row(d / "report") if rc in (0, 1, 4) else {"verdict": f"error (exit {rc})", "detail": err[-240:]},
               verify_wall_s=round(wall, 1))
    if mode != "plain":
        rules = subprocess.run([sys.executable, "-m", "harness.samples.rules", str(samples), TARGET, TARGET],
                               cwd=REPO, capture_output=True, text=True)
        row["rule"] = rules.stdout.strip().splitlines()[-1] if rules.returncode == 0 and rules.stdout.strip() else ""
    if not args.keep_samples:
        samples.unlink()
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO / "results" / "engines" / "llama_cpp")
    ap.add_argument("--modes", default="plain,prompt-lookup")
    ap.add_argument("--prompts", type=int, default=1, help="prompts (each certified on its own: bounds are per prompt)")
    ap.add_argument("--per-prompt", type=int, default=400_000, help="as the vLLM table: ~216k planned for 0.01")
    ap.add_argument("--workers", type=int, default=2, help="engine processes (one thread each)")
    ap.add_argument("--epsilon", type=float, default=0.01)
    ap.add_argument("--keep-samples", action="store_true")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for mode in args.modes.split(","):
        rows.append(one(mode, args, args.out))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    df = pd.DataFrame(rows)
    meta = metadata({"modes": args.modes, "prompts": args.prompts, "per_prompt": args.per_prompt,
                     "workers": args.workers, "epsilon": args.epsilon}, 0)
    atomic_write_csv(args.out / "table.csv", df, meta)
    head = f"<!-- {json.dumps({k: meta[k] for k in ('commit', 'dirty', 'command') if k in meta})} -->\n"
    atomic_write_text(args.out / "table.md", head + md_table(df.to_dict("records"), [c for c in COLUMNS if c in df]))
    atomic_write_text(args.out / "meta.json", json.dumps(meta, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
