"""vLLM 0.32.0's rejection sampler alone, judged by make verify's exact-law battery: results/engines/vllm/kernel/.

    python experiments/vllm_kernel_results.py --vllm-python .venv-vllm/bin/python

``harness.samples.engines.vllm_kernel`` puts ``vllm.v1.sample.rejection_sampler.rejection_sample`` — the
function the engine's ``RejectionSampler.forward`` calls — in the verify step of our round loop, so the kernel
is judged on the ``base`` scenario (an exact n-gram pair: the law of every position, pair and window known) at
millions of draws, with no engine around it.  Each variant runs ``python -m harness verify --sampler ...
--scenario base`` in the vLLM environment (the harness is installed there by ``make vllm-venv``):

* ``vllm_generate``: draft probabilities given (the engine's probabilistic-draft path);
* ``vllm_greedy_q_generate``: ``draft_probs=None`` with argmax drafts (the greedy-draft path);
* ``vllm_ragged_generate``: each row verifies a random number of its drafts (ragged batches, as the engine's);
* ``vllm_seeded_generate``: per-row seeded ``torch.Generator`` (seeded requests).

Fixed shim (the test-only plugin applying PR #55006, experiments/vllm_cpu_expand_fix) at ``--draws`` sequences
each; the stock shim (``VLLM_PLUGINS=""``: vLLM as shipped) at ``--stock-draws``, where its loss shows.  The
table gives each run's verdict, the certificate it earned (TV bound by law, from the battery's runs.csv), the
first rejecting tests, sequences and wall time; each run's report goes under ``--out/<variant>-<shim>/``.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import pandas as pd  # noqa: E402

from harness.core.figures import md_table  # noqa: E402
from harness.core.provenance import atomic_write_csv, atomic_write_text, metadata, read_table_csv  # noqa: E402

VARIANTS = ["vllm_generate", "vllm_greedy_q_generate", "vllm_ragged_generate", "vllm_seeded_generate"]
COLUMNS = ["variant", "shim", "verdict", "certificate", "largest_bound", "first_rejecting", "sequences", "tokens",
           "wall_s"]


def _reference_row(out: Path) -> dict:
    """The sampler-under-test row of one verify run's runs.csv, and its first rejecting tests."""
    runs = read_table_csv(out / "runs.csv")
    r = runs[runs.role.isin(("reference", "sampler"))].iloc[0]  # the sampler under test
    tests = read_table_csv(out / "tests.csv")
    rej = tests[(tests.run == r.run) & tests.reject.astype(bool)].sort_values("p_adjusted")
    first = ", ".join(f"{t.family}/{t.test} p_adj {t.p_adjusted:.2g}" for t in rej.head(3).itertuples())
    return {"verdict": r.verdict, "certificate": r.cert_strongest if r.certificate == "certified" else "",
            "largest_bound": r.cert_worst, "first_rejecting": first, "sequences": int(r.sequences),
            "tokens": int(r.tokens)}


def one(variant: str, shim: str, draws: int, args) -> dict:
    d = args.out / f"{variant}-{shim}"
    shutil.rmtree(d, ignore_errors=True)
    env = {**os.environ, **({"VLLM_PLUGINS": ""} if shim == "stock" else {})}
    cmd = [str(Path(args.vllm_python).absolute()), "-m", "harness", "verify", "--sampler",
           f"harness.samples.engines.vllm_kernel:{variant}", "--scenario", "base", "--draws", str(draws),
           "--no-real-model", "--no-controls", "--no-progress", "--no-figures", "--out", str(d)]
    tic = time.perf_counter()
    p = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    row = {"variant": variant, "shim": shim, "wall_s": round(time.perf_counter() - tic, 1), "exit": p.returncode}
    if p.returncode not in (0, 1) or not (d / "runs.csv").exists():
        tail = (p.stderr or "").strip().splitlines()
        return {**row, "verdict": f"failed (exit {p.returncode})", "first_rejecting": tail[-1][:200] if tail else ""}
    return {**row, **_reference_row(d)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vllm-python", default=".venv-vllm/bin/python")
    ap.add_argument("--out", type=Path, default=REPO / "results" / "engines" / "vllm" / "kernel")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--draws", type=int, default=1_300_000,
                    help="fixed shim: make verify's base size (1 M x its margin 1.3; the planner asks ~820k)")
    ap.add_argument("--stock-variants", default="vllm_generate,vllm_greedy_q_generate")
    ap.add_argument("--stock-draws", type=int, default=20_000)
    args = ap.parse_args(argv)
    for v in args.variants.split(",") + args.stock_variants.split(","):
        if v and v not in VARIANTS:
            ap.error(f"--variants / --stock-variants: {v!r} is not one of {', '.join(VARIANTS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for shim, variants, n in (("fixed", args.variants, args.draws), ("stock", args.stock_variants, args.stock_draws)):
        for v in filter(None, variants.split(",")):
            rows.append(one(v, shim, n, args))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    df = pd.DataFrame(rows)
    meta = metadata({"variants": args.variants, "draws": args.draws, "stock_variants": args.stock_variants,
                     "stock_draws": args.stock_draws, "scenario": "base"}, 0)
    head = f"<!-- {json.dumps({k: meta[k] for k in ('commit', 'dirty', 'command') if k in meta})} -->\n"
    atomic_write_csv(args.out / "table.csv", df, meta)
    atomic_write_text(args.out / "table.md", head + md_table(df.to_dict("records"), COLUMNS))
    atomic_write_text(args.out / "meta.json", json.dumps(meta, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
