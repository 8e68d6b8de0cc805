"""`python -m harness alpha`: the acceptance of every draft variant on the shipped tiny transformers pair.

    python -m harness alpha                                  # every variant, temperature 1 and greedy
    python -m harness alpha --variant draft --variant uniform --n-sequences 64

Each variant of :func:`specimpl.hf_drafts.tiny_pair_variants` (α from ≈ 0, a uniform draft, to 1, the
target itself) drafts for the reference sampler; the table (``results/hf/alpha.csv``) holds, per
variant and sampling setting:

    alpha_judged            accepted / judged drafts: the per-token acceptance probability α of the
                            iid model (a draft after the first rejection of a round is never judged),
                            with its exact (Clopper–Pearson) 99 % interval, ``alpha_ci99_low/high``
                            (treats judged drafts as independent)
    acceptance_rate         accepted / drafted = accepted / (k · rounds) (vLLM V0's "draft acceptance
                            rate"; counts the never-judged drafts after a rejection as drafted)
    alpha_<i>               per draft position i: accepted at i / judged at i
    mean_acceptance_length  1 + accepted / rounds (vLLM V1; the bonus or resampled token included)
    tokens_per_target_call  emitted tokens per target forward
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Optional

import pandas as pd
import torch

from harness.stats import clopper_pearson
from specimpl.hf import load_tiny_pair as tiny_pair
from specimpl.sampling import SamplingConfig
from specimpl.speculative import speculative_generate
from specimpl.hf import tiny_pair_positions, tiny_pair_prompts
from specimpl.hf_drafts import tiny_pair_variants
from harness.core.errors import UsageError
from harness.core.options import check_option, check_out, check_seed, check_threads, check_unique
from harness.core.outdir import claim_out
from harness.core.provenance import atomic_write_csv, metadata
from harness.core.threads import with_threads

__all__ = ["add_arguments", "run", "measure_alpha"]

CONFIDENCE = 0.99  # of the interval on alpha_judged


def measure_alpha(variants: Optional[list[str]] = None, *, configs=(SamplingConfig(temperature=1.0),
                                                                SamplingConfig(greedy=True)),
                  n_sequences: int = 256, max_new_tokens: int = 64, k: int = 4, seed: int = 0,
                  progress: bool = True) -> pd.DataFrame:
    """One row per (draft variant, sampling config): the columns of the module docstring."""
    from tqdm import tqdm
    target, draft = tiny_pair()
    drafts = tiny_pair_variants(target, draft, variants)
    prompts = tiny_pair_prompts(n_sequences, length=48, min_length=8, seed=seed)
    rows = []
    for name, d in tqdm(drafts.items(), desc="alpha", disable=not progress, file=sys.stderr):
        for cfg in configs:
            tic = time.perf_counter()
            r = speculative_generate(target, d, prompts, k=k, max_new_tokens=max_new_tokens, config=cfg,
                                     generator=torch.Generator().manual_seed(seed))
            wall = time.perf_counter() - tic
            totals, per_position = _acceptance(r.stats)
            rows.append({"variant": name, "config": cfg.describe(), "k": k, "n_sequences": n_sequences,
                         "max_new_tokens": max_new_tokens, **totals, "wall_s": wall, **per_position})
    return pd.DataFrame(rows)


def _acceptance(st) -> tuple[dict, dict]:
    """The acceptance columns from one call's SpecStats: the totals, and α per draft position."""
    tot = st.totals()
    judged = int(st.reached.sum())
    accepted = int(st.accepted_at.sum())
    lo, hi = clopper_pearson(accepted, judged, 1 - CONFIDENCE)
    out = {"rounds": int(tot["sequence_rounds"]), "drafted": int(tot["drafted"]), "accepted": int(tot["accepted"]),
           "acceptance_rate": float(tot["acceptance_rate"]), "alpha_judged": accepted / max(judged, 1),
           "alpha_ci99_low": lo, "alpha_ci99_high": hi, "mean_acceptance_length": float(tot["mean_acceptance_length"]),
           "tokens_per_target_call": float(tot["tokens_per_target_call"])}
    return out, {f"alpha_{i + 1}": float(a) for i, a in enumerate(tot["alpha_per_position"])}


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--variant", action="append", default=None, help="variant names (default: all)")
    ap.add_argument("--n-sequences", type=int, default=256)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None,
                    help="table to write (default: runs/alpha/<name>-<hash of the options>/alpha.csv; the committed "
                         "one is written only by --out results/hf/alpha.csv)")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args) -> int:
    check_threads(args.threads)
    check_seed(args.seed)
    check_out(args.out, is_file=True)
    mpe = tiny_pair_positions()
    for name, v, hi, why in (("--n-sequences", args.n_sequences, 1_000_000, "prompts held with their tokens"),
                             ("--k", args.k, 64, "draft tokens per round"),
                             ("--max-new-tokens", args.max_new_tokens, mpe - 48 - min(args.k, 64) - 1,
                              f"the tiny pair's {mpe:,} positions = prompt up to 48 + T + k + 1")):
        check_option(1 <= v <= hi, name, v, f"an integer in [1, {hi:,}] ({why})")  # probe 48: 10^9 was a MemoryError
    check_unique(args.variant, "--variant")
    claim_out(args, "alpha", ("variant",), filename="alpha.csv")  # --out, or runs/alpha/<name>-<hash>/alpha.csv
    try:
        df = with_threads(args.threads, lambda: measure_alpha(
            args.variant, n_sequences=args.n_sequences, max_new_tokens=args.max_new_tokens, k=args.k, seed=args.seed,
            progress=not args.no_progress))
    except ValueError as e:
        if not str(e).startswith("`which`"):
            raise
        raise UsageError(str(e).replace("`which`", "`--variant`", 1)) from None  # an unknown --variant
    cols = ["variant", "config", "alpha_judged", "alpha_ci99_low", "alpha_ci99_high", "acceptance_rate",
            "mean_acceptance_length", "tokens_per_target_call"] + \
        [c for c in df.columns if c.startswith("alpha_") and c[6:].isdigit()]
    print(df[cols].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    atomic_write_csv(args.out, df, metadata(vars(args), args.seed))
    print(f"wrote {args.out}")
    return 0
