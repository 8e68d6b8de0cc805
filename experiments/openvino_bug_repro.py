"""Minimal reproduction: OpenVINO GenAI's draft-model speculative decoding does not sample the target's law
(openvinotoolkit/openvino.genai#4190), standalone (openvino-genai and numpy only; run it with the engine's Python).

    .venv-openvino/bin/python experiments/openvino_bug_repro.py TARGET_IR DRAFT_IR [--n 20000] [--k 4] [--tokens 4]
        [--chunk 4096] [--prefix-caching] [--temperature 1.0] [--compare draft,plain-draft-model]

TARGET_IR / DRAFT_IR: OpenVINO IR folders of a target and a draft sharing a vocabulary (here: the shipped exact
pair exported by ``python -m harness.samples.engines.openvino_export exact`` / ``exact-draft``, which prints them).
One prompt, ``--n`` completions of ``--tokens`` tokens, each its own request with its own ``rng_seed``, EOS
ignored, KV cache f32, temperature ``--temperature``.  Draws the same requests three ways in the same
``ContinuousBatchingPipeline`` API -- the target alone, the draft alone, the target with the draft as speculative
assistant (``num_assistant_tokens = --k``) -- and prints, per position, the TV between each pair of empirical
token laws (a lossless engine: spec vs target ~ the noise, sqrt(V / n) order) and the engine's acceptance counters.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import openvino as ov
import openvino_genai as g

PROMPT = [8, 7, 8, 1]  # the prompt the results table uses (python -m harness sample --prompt-vocab 13 --prompt-lengths 4 4)


def pipeline(target: str, draft: str | None, prefix_caching: bool):
    sc = g.SchedulerConfig()
    sc.enable_prefix_caching, sc.cache_size, sc.max_num_seqs = prefix_caching, 1, 256
    props = {"KV_CACHE_PRECISION": "f32", "INFERENCE_PRECISION_HINT": "f32"}
    if draft:
        props["draft_model"] = g.draft_model(draft, "CPU", KV_CACHE_PRECISION="f32", INFERENCE_PRECISION_HINT="f32")
    return g.ContinuousBatchingPipeline(target, sc, "CPU", props)


def draw(pipe, args, spec: bool) -> tuple[np.ndarray, dict]:
    """(n, tokens) token ids and the engine's counters summed over the generate calls."""
    out, counters = [], {"draft": 0, "accepted": 0}
    for s in range(0, args.n, args.chunk):
        cfgs = []
        for i in range(s, min(args.n, s + args.chunk)):
            c = g.GenerationConfig()
            c.max_new_tokens, c.ignore_eos, c.rng_seed = args.tokens, True, 1_000_003 * args.seed + i
            c.do_sample, c.temperature = True, args.temperature
            if spec:
                c.num_assistant_tokens = args.k
            cfgs.append(c)
        res = pipe.generate([ov.Tensor(np.asarray([PROMPT], dtype=np.int64))] * len(cfgs), cfgs)
        out += [r.m_generation_ids[0] for r in res]
        e = res[0].extended_perf_metrics
        if spec and e is not None:
            counters["draft"] += e.get_num_draft_tokens()
            counters["accepted"] += e.get_num_accepted_tokens()
    return np.asarray(out), counters


def tv(a: np.ndarray, b: np.ndarray, V: int) -> float:
    pa, pb = np.bincount(a, minlength=V) / len(a), np.bincount(b, minlength=V) / len(b)
    return 0.5 * float(np.abs(pa - pb).sum())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("target")
    ap.add_argument("draft")
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=4)
    ap.add_argument("--chunk", type=int, default=4096, help="requests per generate call")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prefix-caching", action="store_true")
    args = ap.parse_args()
    runs = {}
    for name, (target, draft, spec) in {"target": (args.target, None, False), "draft": (args.draft, None, False),
                                        "spec": (args.target, args.draft, True)}.items():
        tic = time.perf_counter()
        runs[name] = draw(pipeline(target, draft, args.prefix_caching and spec), args, spec)
        print(f"{name}: {args.n} completions in {time.perf_counter() - tic:.1f} s"
              + (f"; engine counters: {runs[name][1]}" if spec else ""))
    V = int(max(r[0].max() for r in runs.values())) + 1
    noise = np.sqrt(V / args.n)
    print(f"per-position TV of the empirical token laws (n = {args.n} each; noise scale ~{noise:.3f}):")
    print("position  spec-vs-target  spec-vs-draft  draft-vs-target")
    for t in range(args.tokens):
        s, a, d = runs["spec"][0][:, t], runs["target"][0][:, t], runs["draft"][0][:, t]
        print(f"{t:>8}  {tv(s, a, V):>14.4f}  {tv(s, d, V):>13.4f}  {tv(d, a, V):>15.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
