"""OpenVINO GenAI's ``ContinuousBatchingPipeline`` as a sample producer, run by the engine's own Python.

    .venv-openvino/bin/python harness/samples/engines/openvino_worker.py job.json     # writes job["out"] (JSONL)

Started by ``python -m harness sample --engine openvino`` (:mod:`harness.samples.engines.openvino_engine`),
which exports the models, writes the job, reads the records back through the strict sample-format reader and
appends them to the sample file.  This file imports only the standard library, numpy and openvino(_genai), so
it runs in an environment without the harness.

The job (JSON): ``target`` / ``draft`` (OpenVINO IR folders; draft null unless ``spec`` is "draft"), ``spec``
("none", "draft", "lookup"), ``k`` (``num_assistant_tokens``), ``max_ngram_size`` (lookup), ``requests``
([request_id, prompt_id, prompt_ids, seed]), ``max_new_tokens``, ``temperature`` (0: greedy), ``top_k``
(0: off), ``top_p``, ``scheduler`` (``SchedulerConfig`` fields: ``enable_prefix_caching``,
``max_num_seqs``, ``cache_size`` GB, ``max_num_batched_tokens``, ``dynamic_split_fuse``), ``properties``
(the CPU plugin's, e.g. ``KV_CACHE_PRECISION``; given to target and draft alike), ``chunk`` (requests per
``generate`` call) and ``out``.  Every request runs with ``ignore_eos`` and its own ``rng_seed``.
The engine's speculative counters (``extended_perf_metrics``: draft tokens, accepted tokens) are totals of
one ``generate`` call, not per request: they go to the summary, one entry per call.
"""
from __future__ import annotations

import json
import os
import sys
import time

FORMAT = "specverify.samples/1"  # = harness.samples.format.FORMAT (tests/samples/test_openvino_engine.py checks)


def make_pipeline(job: dict):
    import openvino_genai as g
    sc = g.SchedulerConfig()
    for key, value in (job.get("scheduler") or {}).items():
        setattr(sc, key, value)
    props = dict(job.get("properties") or {})
    if job["spec"] == "draft":
        props["draft_model"] = g.draft_model(job["draft"], "CPU", **(job.get("properties") or {}))
    elif job["spec"] == "lookup":
        props["prompt_lookup"] = True
    return g.ContinuousBatchingPipeline(job["target"], sc, "CPU", props)


def generation_config(job: dict, seed: int):
    import openvino_genai as g
    c = g.GenerationConfig()
    c.max_new_tokens = job["max_new_tokens"]
    c.ignore_eos = True
    c.rng_seed = int(seed)
    if job["temperature"] > 0:
        c.do_sample, c.temperature, c.top_p = True, float(job["temperature"]), float(job["top_p"])
        if job["top_k"]:
            c.top_k = int(job["top_k"])  # the default (2**64 - 1) is off
    if job["spec"] == "draft":
        c.num_assistant_tokens = int(job["k"])
    elif job["spec"] == "lookup":
        c.num_assistant_tokens, c.max_ngram_size = int(job["k"]), int(job.get("max_ngram_size", 3))
    return c


def _counters(results) -> dict | None:
    """The call's speculative counters (every result of one call carries the same totals)."""
    e = getattr(results[0], "extended_perf_metrics", None) if results else None
    if e is None or not hasattr(e, "get_num_draft_tokens"):
        return None
    return {"draft_tokens": int(e.get_num_draft_tokens()), "accepted_tokens": int(e.get_num_accepted_tokens()),
            "acceptance_rate": float(e.get_draft_acceptance_rate())}


def _record(job: dict, req, ids, engine: dict, per: float) -> dict:
    rid, pid, prompt, seed = req
    greedy = job["temperature"] == 0
    ctrl = {"temperature": job["temperature"], "top_k": job["top_k"], "top_p": job["top_p"], "min_p": 0.0,
            "seed": seed, "max_new_tokens": job["max_new_tokens"], "greedy": greedy, "stop": []}
    out = [int(t) for t in ids]
    return {"format": FORMAT, "request_id": rid, "prompt_id": pid, "prompt_ids": list(prompt), "output_ids": out,
            "finish_reason": "length" if len(out) == job["max_new_tokens"] else "stop", "controls": ctrl,
            "logprobs": None, "engine": engine, "x_wall_s": per}


def engine_block(job: dict) -> dict:
    import importlib.metadata as m
    return {"name": "openvino-genai", "version": m.version("openvino-genai"), "openvino": m.version("openvino"),
            "interface": "ContinuousBatchingPipeline.generate (token ids), CPU", "spec": job["spec"],
            "speculative": None if job["spec"] == "none" else {"method": job["spec"], "k": job["k"]},
            "scheduler": job.get("scheduler") or {}, "properties": job.get("properties") or {},
            "chunk": job["chunk"], "eos": "ignored (ignore_eos=True)", "seeds": "per request (rng_seed)"}


def run(job: dict) -> dict:
    import numpy as np
    import openvino as ov
    tic = time.perf_counter()
    pipe = make_pipeline(job)
    startup = time.perf_counter() - tic
    engine = engine_block(job)
    reqs, chunk, n_tok, gen_s, calls = job["requests"], int(job["chunk"]), 0, 0.0, []
    with open(job["out"], "w", encoding="utf-8") as f:
        for s in range(0, len(reqs), chunk):
            batch = reqs[s:s + chunk]
            ids = [ov.Tensor(np.asarray([r[2]], dtype=np.int64)) for r in batch]  # (1, prompt length) each
            t0 = time.perf_counter()
            results = pipe.generate(ids, [generation_config(job, r[3]) for r in batch])
            dt = time.perf_counter() - t0
            gen_s += dt
            calls.append({"requests": len(batch), "generate_s": round(dt, 4), "counters": _counters(results)})
            for req, res in zip(batch, results):
                rec = _record(job, req, res.m_generation_ids[0], engine, dt / len(batch))
                n_tok += len(rec["output_ids"])
                f.write(json.dumps(rec, separators=(",", ":")) + "\n")
            f.flush()
            print(f"openvino worker: {s + len(batch)}/{len(reqs)} requests, {n_tok / gen_s:.0f} tokens/s",
                  file=sys.stderr, flush=True)
    return {"engine": engine, "startup_s": startup, "generate_s": gen_s, "tokens": n_tok,
            "tokens_per_s": n_tok / gen_s if gen_s else 0.0, "calls": calls, "pid": os.getpid()}


def main(argv: list[str]) -> int:
    job = json.load(open(argv[0], encoding="utf-8"))
    summary = run(job)
    json.dump(summary, open(job["out"] + ".summary.json", "w", encoding="utf-8"), indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
