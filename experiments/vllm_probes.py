"""Batch-level probes of vLLM 0.32.0 (CPU, fix plugin loaded): each a sample set verified at exact-law strength.

    python experiments/vllm_probes.py --vllm-python .venv-vllm/bin/python --out results/engines/vllm/probes

Engines have broken losslessness at the batch level before (rows sharing a stream, a path that ignored a
control).  Each probe draws completions of the exact Markov pair with speculation on (a draft model,
probabilistic drafts, k = 4) under one batch condition and runs ``verify-samples --exact`` on them:

    max_num_seqs_1 / _2 / _4   the engine batches at most 1, 2, 4 requests
    seeding_mixed              seeded and unseeded requests in one batch
    greedy_mixed               every 4th request greedy in the same batch (the sampled and the greedy rows are
                               verified apart: the greedy law is a point mass)
    top_k_no_temperature       top_k = 5 with the temperature left unset (vLLM's default 1.0 applies)
    n_2                        SamplingParams.n = 2 (two completions per seeded request)
    prefix_caching_on / _off   prefix caching on and off
    chunked_prefill_seeded     seeded requests whose prefill is chunked (max_num_batched_tokens 64)

The table (probes.md / probes.csv): probe, verdict, largest per-position token-TV bound, first rejecting tests,
completions, engine wall time.  A probe whose engine fails is reported as such (exit status and root cause).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import pandas as pd  # noqa: E402

from harness.core.figures import md_table  # noqa: E402
from harness.core.provenance import atomic_write_csv, atomic_write_text, metadata  # noqa: E402
from harness.samples.report import report_row  # noqa: E402

PAIR = "specimpl/assets/exact_pair"
BASE = ["--engine", "vllm", "--k", "4", "--spec", "draft", "--target", f"{PAIR}/markov_target", "--draft",
        f"{PAIR}/markov_draft", "--prompt-vocab", "13", "--n-prompts", "2", "--max-new-tokens", "8", "--no-progress"]
PROBES = {  # name -> (extra sample options, completions per prompt)
    "max_num_seqs_1": (["--max-num-seqs", "1"], 1500),
    "max_num_seqs_2": (["--max-num-seqs", "2"], 1500),
    "max_num_seqs_4": (["--max-num-seqs", "4"], 3000),
    "seeding_mixed": (["--seeding", "mixed"], 10000),
    "greedy_mixed": (["--greedy-share", "0.25"], 10000),
    "top_k_no_temperature": (["--top-k", "5", "--omit-temperature"], 10000),
    "n_2": (["--n", "2"], 5000),
    "prefix_caching_on": (["--prefix-caching", "on"], 10000),
    "prefix_caching_off": (["--prefix-caching", "off"], 10000),
    "chunked_prefill_seeded": (["--max-num-batched-tokens", "64"], 2000),
}


def _verify(samples: Path, out: Path) -> dict:
    p = subprocess.run([sys.executable, "-m", "harness", "verify-samples", "--samples", str(samples), "--target",
                        f"{PAIR}/markov_target", "--exact", "--epsilon", "0.05", "--no-progress", "--out", str(out)],
                       cwd=REPO, capture_output=True, text=True)
    if p.returncode not in (0, 1):
        return {"exit": p.returncode, "verdict": f"error {p.returncode}", "detail": p.stderr.strip()[-200:]}
    return {"exit": p.returncode, **report_row(out)}


def _split_greedy(samples: Path) -> tuple[Path, Path]:
    """The greedy rows and the sampled rows of a mixed file, each a file of one configuration."""
    g, s = samples.with_suffix(".greedy.jsonl"), samples.with_suffix(".sampled.jsonl")
    with open(samples) as f, open(g, "w") as fg, open(s, "w") as fs:
        for line in f:
            (fg if json.loads(line)["controls"]["greedy"] else fs).write(line)
    return g, s


def probe(name: str, args) -> list[dict]:
    extra, n = PROBES[name]
    d = args.out / name
    d.mkdir(parents=True, exist_ok=True)
    samples = d / "samples.jsonl"
    samples.unlink(missing_ok=True)
    p = subprocess.run([sys.executable, "-m", "harness", "sample", *BASE, *extra, "--vllm-python", args.vllm_python,
                        "--n-per-prompt", str(n), "--out", str(samples)], cwd=REPO, capture_output=True, text=True)
    base = {"probe": name, "options": " ".join(extra), "completions": 2 * n * (2 if name == "n_2" else 1)}
    if p.returncode != 0:
        return [{**base, "verdict": f"engine failed (exit {p.returncode})",
                 "detail": (p.stderr.strip().splitlines() or [""])[-1][:200]}]
    eng = json.loads(Path(str(samples) + ".engine.json").read_text())
    base["engine_generate_s"] = round(eng["generate_s"], 1)
    if name == "greedy_mixed":
        g, s = _split_greedy(samples)
        rows = [{**base, "probe": f"{name} (sampled rows)", **_verify(s, d / "report_sampled")},
                {**base, "probe": f"{name} (greedy rows)", **_verify(g, d / "report_greedy")}]
    else:
        rows = [{**base, **_verify(samples, d / "report")}]
    if not args.keep_samples:
        for f in d.glob("samples*.jsonl"):
            f.unlink()
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vllm-python", default=".venv-vllm/bin/python")
    ap.add_argument("--out", type=Path, default=REPO / "results" / "engines" / "vllm" / "probes")
    ap.add_argument("--probes", default=",".join(PROBES))
    ap.add_argument("--keep-samples", action="store_true")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.probes.split(","):
        rows += probe(name, args)
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    df = pd.DataFrame(rows)
    meta = metadata({"probes": args.probes}, 0)
    cols = ["probe", "options", "verdict", "max_position_tv_upper", "first_rejecting", "completions", "engine_generate_s"]
    atomic_write_csv(args.out / "probes.csv", df, meta)
    head = f"<!-- commit {meta.get('commit')}{' (dirty)' if meta.get('dirty') else ''}; command {meta.get('command')} -->\n"
    atomic_write_text(args.out / "probes.md", head + md_table(df.to_dict("records"), cols))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
