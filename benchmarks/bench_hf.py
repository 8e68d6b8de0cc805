"""Side-by-side decoding speed on the shipped tiny pair: our sampler vs transformers.

    .venv/bin/python benchmarks/bench_hf.py [--repeats 5] [--prompts 8] [--max-new-tokens 128] [--k 4]
                                            [--threads 1] [--out results/hf/bench.csv]

Decoders, same prompts, same k, same sampling controls (temperature 1, no top-k/top-p), EOS off:

    ours_spec_b1      specimpl.speculative_generate, one prompt at a time
    hf_assisted_b1    transformers generate(assistant_model=draft, do_sample=True), k drafts a round
    hf_plain_b1       transformers generate(do_sample=True), target only
    ours_ar_b1        specimpl.autoregressive_generate (target only, our wrapper), one prompt at a time
    ours_spec_b8/b32  speculative_generate on batches of 8 / 32 prompts

Each repeat runs every decoder on the same prompts, in small work units (one prompt for the
batch-1 decoders, one batch for the others) shuffled together, so load spikes on a shared machine
hit all decoders alike; one warm-up repeat is discarded.  tokens/s = emitted tokens / wall time of
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

import pandas as pd
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.core.provenance import atomic_write_csv, metadata  # noqa: E402
from specimpl.autoregressive import autoregressive_generate  # noqa: E402
from specimpl.hf import load_tiny_pair, tiny_pair_prompts  # noqa: E402
from specimpl.hf_assisted import hf_assisted_generate, hf_generate  # noqa: E402
from specimpl.sampling import SamplingConfig  # noqa: E402
from specimpl.speculative import speculative_generate  # noqa: E402


class ForwardClock:
    """Wraps a model's forward/prefill, accumulating the time spent inside them (outermost call only:
    our prefill calls forward)."""

    def __init__(self, model):
        self.model, self.t, self.depth = model, 0.0, 0
        self._fwd, self._pre = model.forward, model.prefill
        model.forward, model.prefill = self._timed(self._fwd), self._timed(self._pre)

    def _timed(self, fn):
        def f(*a, **kw):
            self.depth += 1
            tic = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                self.depth -= 1
                if self.depth == 0:
                    self.t += time.perf_counter() - tic
        return f

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

    def spec(prompts, g):
        return speculative_generate(target, draft, prompts, k=k, max_new_tokens=T, config=cfg, generator=g)

    # batch-1 decoders: one prompt at a time, interleaved prompt by prompt in a fresh random order
    b1 = {
        "ours_spec_b1": spec,
        "hf_assisted_b1": lambda ps, g: hf_assisted_generate(target, draft, ps, k=k, max_new_tokens=T, config=cfg,
                                                             generator=g),
        "hf_plain_b1": lambda ps, g: hf_generate(target, ps, max_new_tokens=T, config=cfg, generator=g),
        "ours_ar_b1": lambda ps, g: autoregressive_generate(target, ps, max_new_tokens=T, config=cfg, generator=g),
    }
    batched = {"ours_spec_b8": 8, "ours_spec_b32": 32}
    names = list(b1) + list(batched)
    rng = random.Random(args.seed)
    rows = []
    for rep in range(-1, args.repeats):  # rep -1: warm-up, discarded
        acc = {n: {"tokens": 0, "wall": 0.0, "t_models": 0.0, "results": []} for n in names}
        g = {n: torch.Generator().manual_seed(args.seed * 1000 + rep + 1) for n in names}
        units = [(n, [p]) for p in p1 for n in b1]  # (decoder, prompts) work units
        units += [(n, pb[s:s + B]) for n, B in batched.items() for s in range(0, len(pb), B)]
        rng.shuffle(units)
        for name, ps in units:
            clocks = [ForwardClock(target), ForwardClock(draft)] if name.startswith("ours") else []
            fn = b1.get(name, spec)
            tic = time.perf_counter()
            r = fn(ps, g[name])
            wall = time.perf_counter() - tic
            for c in clocks:
                c.remove()
            a = acc[name]
            a["tokens"] += int(r.lengths.sum())
            a["wall"] += wall
            a["t_models"] += sum(c.t for c in clocks)
            a["results"].append(r)
        for name in names:
            a = acc[name]
            results = a["results"]
            tokens, wall = a["tokens"], a["wall"]
            row = {"decoder": name, "repeat": rep, "tokens": tokens, "wall_s": wall, "tokens_per_s": tokens / wall,
                   "batch": 1 if name.endswith("b1") else batched[name], "k": k, "max_new_tokens": T,
                   "threads": args.threads}
            if name.startswith("ours"):
                row["t_model_forward_s"] = a["t_models"]
                row["sampler_share"] = (wall - a["t_models"]) / wall  # time outside both models' forwards
            stats = [r.stats for r in results if r.stats is not None]
            if stats:
                tot = [s.totals() for s in stats]
                n_acc = sum(t["accepted"] for t in tot)
                n_dr = sum(t["drafted"] for t in tot)
                n_rounds = sum(t["sequence_rounds"] for t in tot)
                row.update(acceptance_rate=n_acc / n_dr, tokens_per_round=tokens / n_rounds,
                           t_draft_s=sum(t["t_draft"] for t in tot), t_target_s=sum(t["t_target"] for t in tot),
                           t_sampler_s=sum(t["t_sampler"] for t in tot))
            if name.startswith("hf"):
                tc = sum(r.timings.get("target_calls", 0) for r in results)
                row["target_calls"] = tc
                row["tokens_per_target_call"] = tokens / max(tc, 1)
            if rep >= 0:
                rows.append(row)
            print(f"[{rep}] {name:15s} {tokens:6d} tok in {wall:7.2f} s = {tokens / wall:8.1f} tok/s"
                  + (f"  outside forwards {row['sampler_share']:.1%}" if "sampler_share" in row else ""), flush=True)
    df = pd.DataFrame(rows)
    piv = df.pivot(index="repeat", columns="decoder", values="tokens_per_s")
    summary = []
    for name in names:
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
