"""Which rule vLLM's n-gram speculation ran, from its own counters: drafts rebuilt from the tokens (issue 41.5).

    python experiments/vllm_ngram_rule.py --vllm-python .venv-vllm/bin/python --out results/engines/vllm/ngram-rule

The rule column of results/engines/vllm/table.md compares acceptances with the draft *model's* expectations,
which an n-gram proposer never consults: its draft is a point mass on the looked-up token d, so a lossless
verification accepts d in state c with probability p(d | c).  vLLM's counters list neither the drafted tokens nor
the steps that found no match; :mod:`harness.samples.lookup_drafts` rebuilds both from each completion and checks
them against the counters.  For the fixed engine (the cpu-expand fix plugin) and stock vLLM this draws
``--prompts`` x ``--per-prompt`` 8-token completions of the exact Markov pair with n-gram speculation (k = 4,
lookup n in [2, 4]), and writes per shim: the rule fit (judged drafts, accepted, expected, z), the exact-law
verdict at ``--epsilon`` (``verify-samples --exact``) and the engine's throughput.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import pandas as pd  # noqa: E402
import torch  # noqa: E402

from harness.core.figures import md_table  # noqa: E402
from harness.core.provenance import atomic_write_csv, atomic_write_text, metadata  # noqa: E402
from harness.laws.transformer import check_markov, load_model, transition_matrix  # noqa: E402
from harness.samples.format import read_samples  # noqa: E402
from harness.samples.producers import config_of  # noqa: E402
from harness.samples.report import report_row  # noqa: E402
from harness.samples.rules import Z_CONSISTENT, ngram_fit  # noqa: E402

PAIR = "specimpl/assets/exact_pair"
COLUMNS = ["shim", "completions", "engine_generate_s", "tokens_per_s", "judged_drafts", "accepted", "expected",
           "z", "rule", "verdict", "max_position_tv_upper", "verify_wall_s"]


def _run(cmd: list[str]) -> tuple[int, float, str]:
    tic = time.perf_counter()
    p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    return p.returncode, time.perf_counter() - tic, (p.stderr or "").strip()


def one(shim: str, args, work: Path) -> dict:
    samples = work / f"{shim}.jsonl"
    samples.unlink(missing_ok=True)
    rc, _, err = _run([sys.executable, "-m", "harness", "sample", "--engine", "vllm", "--spec", "ngram", "--k", "4",
                       "--target", f"{PAIR}/markov_target", "--prompt-vocab", "13", "--max-new-tokens", "8",
                       "--n-prompts", str(args.prompts), "--n-per-prompt", str(args.per_prompt), "--vllm-shim", shim,
                       "--vllm-python", args.vllm_python, "--no-progress", "--out", str(samples)])
    row = {"shim": shim, "completions": args.prompts * args.per_prompt}
    if rc != 0:
        return {**row, "verdict": f"engine failed (exit {rc})", "rule": err.splitlines()[-1][:200] if err else ""}
    engine = json.loads(Path(str(samples) + ".engine.json").read_text())
    row.update(engine_generate_s=round(engine["generate_s"], 1), tokens_per_s=round(engine["tokens_per_s"]))
    records = read_samples(samples)
    spec = records[0].engine["speculative"]
    target = load_model(str(REPO / PAIR / "markov_target"), torch.float64)
    check_markov(target)
    P = transition_matrix(target, config_of(records[0].controls))
    n, k, exp, z = ngram_fit(records, spec, P)
    row.update(judged_drafts=n, accepted=k, expected=round(exp, 1), z=round(z, 2),
               rule="p(d | c), lossless" if abs(z) < Z_CONSISTENT else "NOT p(d | c)")
    rc, wall, err = _run([sys.executable, "-m", "harness", "verify-samples", "--samples", str(samples), "--target",
                          f"{PAIR}/markov_target", "--exact", "--epsilon", str(args.epsilon), "--no-progress",
                          "--out", str(work / f"{shim}-report")])
    row.update(report_row(work / f"{shim}-report") if rc in (0, 1, 4) else {"verdict": f"error (exit {rc})"},
               verify_wall_s=round(wall, 1))
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vllm-python", default=".venv-vllm/bin/python")
    ap.add_argument("--out", type=Path, default=REPO / "results" / "engines" / "vllm" / "ngram-rule")
    ap.add_argument("--prompts", type=int, default=20)
    ap.add_argument("--per-prompt", type=int, default=1000)
    ap.add_argument("--epsilon", type=float, default=0.05)
    ap.add_argument("--shims", default="fixed,stock")
    args = ap.parse_args(argv)
    work = args.out / "_tmp_samples"
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for shim in args.shims.split(","):
        rows.append(one(shim, args, work))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    df = pd.DataFrame(rows)
    meta = metadata({"prompts": args.prompts, "per_prompt": args.per_prompt, "epsilon": args.epsilon,
                     "shims": args.shims, "spec": "ngram k=4 lookup n in [2, 4]"}, 0)
    head = f"<!-- {json.dumps({k: meta[k] for k in ('commit', 'dirty', 'command') if k in meta})} -->\n"
    atomic_write_csv(args.out / "table.csv", df, meta)
    atomic_write_text(args.out / "table.md", head + md_table(df.to_dict("records"), COLUMNS))
    for p in sorted(work.glob("**/*"), reverse=True):
        p.unlink() if p.is_file() else p.rmdir()
    work.rmdir()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
