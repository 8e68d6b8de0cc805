"""Side-by-side decoding speed on the shipped tiny pair: our sampler vs transformers.

    .venv/bin/python benchmarks/bench_hf.py [--repeats 5] [--prompts 8] [--max-new-tokens 128] [--k 4]
                                            [--threads 1] [--out results/hf/bench.csv]

Decoders, same prompts, same k, same sampling controls (temperature 1, no top-k/top-p), EOS off:

    ours_spec_b1      specimpl.speculative_generate, one prompt at a time
    hf_assisted_b1    transformers generate(assistant_model=draft, do_sample=True), k drafts a round
    hf_plain_b1       transformers generate(do_sample=True), target only
    ours_ar_b1        specimpl.autoregressive_generate (target only, our wrapper), one prompt at a time
    ours_spec_b8/b32  speculative_generate on batches of 8 / 32 prompts

Each repeat runs every decoder once, in a fresh random order (load spikes on a shared machine hit
all decoders alike), after one discarded warm-up pass.  tokens/s = emitted tokens / wall time of
the whole call (prefill included).  Ratios are paired per repeat, then summarised (median and
range).  For our sampler the script also measures the time spent *outside* the two models'
forward calls (the sampler's own logic: warping, drawing, verification, bookkeeping), as a share
of the round.  Results go to ``results/hf/bench.csv`` with provenance (atomic write).
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.provenance import atomic_write_csv, metadata  # noqa: E402
from specimpl.autoregressive import autoregressive_generate  # noqa: E402
from specimpl.hf import load_tiny_pair, tiny_pair_prompts  # noqa: E402
from specimpl.hf_assisted import hf_assisted_generate, hf_generate  # noqa: E402
from specimpl.sampling import SamplingConfig  # noqa: E402
from specimpl.speculative import speculative_generate  # noqa: E402


class ForwardClock:
    """Wraps a model's forward/prefill, accumulating the time spent inside them."""

    def __init__(self, model):
        self.model, self.t = model, 0.0
        self._fwd, self._pre = model.forward, model.prefill

        def fwd(*a, **kw):
            tic = time.perf_counter()
            try:
                return self._fwd(*a, **kw)
            finally:
                self.t += time.perf_counter() - tic

        def pre(*a, **kw):
            tic = time.perf_counter()
            try:
                return self._pre(*a, **kw)
            finally:
                self.t += time.perf_counter() - tic
        model.forward, model.prefill = fwd, pre

    def remove(self):
        del self.model.forward, self.model.prefill


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--prompts", type=int, default=8, help="prompts for the batch-1 decoders")
    ap.add_argument("--batch-prompts", type=int, default=32, help="prompts for ours at batch 8 and 32")
    ap.add_argument("--prompt-length", type=int, default=32)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(ROOT / "results" / "hf" / "bench.csv"))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    target, draft = load_tiny_pair()
    cfg = SamplingConfig(temperature=1.0)
    k, T = args.k, args.max_new_tokens
    p1 = tiny_pair_prompts(args.prompts, length=args.prompt_length, seed=args.seed)
    pb = tiny_pair_prompts(args.batch_prompts, length=args.prompt_length, seed=args.seed + 1)

    def ours_b1(g):
        return [speculative_generate(target, draft, [p], k=k, max_new_tokens=T, config=cfg, generator=g) for p in p1]

    def ours_batch(B):
        def f(g):
            return [speculative_generate(target, draft, pb[s:s + B], k=k, max_new_tokens=T, config=cfg, generator=g)
                    for s in range(0, len(pb), B)]
        return f

    decoders = {
        "ours_spec_b1": ours_b1,
        "hf_assisted_b1": lambda g: [hf_assisted_generate(target, draft, p1, k=k, max_new_tokens=T, config=cfg,
                                                          generator=g)],
        "hf_plain_b1": lambda g: [hf_generate(target, p1, max_new_tokens=T, config=cfg, generator=g)],
        "ours_ar_b1": lambda g: [autoregressive_generate(target, [p], max_new_tokens=T, config=cfg, generator=g)
                                 for p in p1],
        "ours_spec_b8": ours_batch(8),
        "ours_spec_b32": ours_batch(32),
    }
    rng = random.Random(args.seed)
    rows = []
    for rep in range(-1, args.repeats):  # rep -1: warm-up, discarded
        order = list(decoders)
        rng.shuffle(order)
        for name in order:
            g = torch.Generator().manual_seed(args.seed * 1000 + rep + 1)
            clocks = [ForwardClock(target), ForwardClock(draft)] if name.startswith("ours") else []
            tic = time.perf_counter()
            results = decoders[name](g)
            wall = time.perf_counter() - tic
            t_models = sum(c.t for c in clocks)
            for c in clocks:
                c.remove()
            tokens = int(sum(int(r.lengths.sum()) for r in results))
            row = {"decoder": name, "repeat": rep, "tokens": tokens, "wall_s": wall, "tokens_per_s": tokens / wall,
                   "batch": 1 if name.endswith("b1") else int(name.rsplit("b", 1)[1]), "k": k,
                   "max_new_tokens": T, "threads": args.threads}
            if name.startswith("ours"):
                row["t_model_forward_s"] = t_models
                row["sampler_share"] = (wall - t_models) / wall  # time outside both models' forwards
            stats = [r.stats for r in results if r.stats is not None]
            if stats:
                tot = [s.totals() for s in stats]
                acc = sum(t["accepted"] for t in tot)
                dr = sum(t["drafted"] for t in tot)
                rows_r = sum(t["sequence_rounds"] for t in tot)
                row.update(acceptance_rate=acc / dr, tokens_per_round=tokens / rows_r,
                           t_draft_s=sum(t["t_draft"] for t in tot), t_target_s=sum(t["t_target"] for t in tot),
                           t_sampler_s=sum(t["t_sampler"] for t in tot))
            tc = sum(r.timings.get("target_calls", 0) for r in results if r.timings)
            if name.startswith("hf"):
                row["target_calls"] = tc
                row["tokens_per_target_call"] = tokens / max(tc, 1)
            if rep >= 0:
                rows.append(row)
            print(f"[{rep}] {name:15s} {tokens:6d} tok in {wall:7.2f} s = {tokens / wall:8.1f} tok/s"
                  + (f"  outside forwards {row['sampler_share']:.1%}" if "sampler_share" in row else ""), flush=True)
    df = pd.DataFrame(rows)
    piv = df.pivot(index="repeat", columns="decoder", values="tokens_per_s")
    summary = []
    for name in decoders:
        s = piv[name]
        summary.append({"decoder": name, "repeat": "median", "tokens_per_s": float(s.median()),
                        "tokens_per_s_min": float(s.min()), "tokens_per_s_max": float(s.max())})
    for num, den in (("ours_spec_b1", "hf_assisted_b1"), ("ours_spec_b1", "hf_plain_b1"),
                     ("hf_assisted_b1", "hf_plain_b1"), ("ours_spec_b1", "ours_ar_b1"),
                     ("ours_spec_b8", "ours_spec_b1"), ("ours_spec_b32", "ours_spec_b1")):
        r = piv[num] / piv[den]  # paired per repeat
        summary.append({"decoder": f"ratio {num}/{den}", "repeat": "median", "ratio": float(r.median()),
                        "ratio_min": float(r.min()), "ratio_max": float(r.max())})
    share = df[df.decoder.str.startswith("ours_spec")].groupby("decoder")["sampler_share"].median()
    for name, v in share.items():
        summary.append({"decoder": f"outside-forward share {name}", "repeat": "median", "ratio": float(v)})
    out = pd.concat([df, pd.DataFrame(summary)], ignore_index=True)
    atomic_write_csv(args.out, out, metadata(vars(args), args.seed))
    print(pd.DataFrame(summary).to_string(index=False))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
