"""vLLM's offline ``LLM`` API as a sample producer, run by the engine's own Python (its own virtual environment).

    .venv-vllm/bin/python harness/samples/engines/vllm_worker.py job.json       # writes job["out"] (JSONL)

Started by ``python -m harness sample --engine vllm`` (:mod:`harness.samples.engines.vllm`), which writes the
job, reads the records back through the strict sample-format reader and appends them to the sample file.
This file imports only the standard library and vLLM, so it runs in an environment without the harness.

The job (JSON): ``target``, ``draft`` (or null), ``speculative`` (vLLM's ``speculative_config`` or null),
``requests`` ([request_id, prompt_id, prompt_ids, seed or null, greedy, overrides or absent]), ``max_new_tokens``,
``temperature``, ``top_k`` (0: off), ``top_p``, ``min_p`` (0: off), ``penalties`` (vLLM's
``repetition_penalty`` / ``presence_penalty`` / ``frequency_penalty``, or absent), ``n`` (completions per
request; > 1 is the ``n`` probe), ``engine_args``
(``max_num_seqs``, ``enable_prefix_caching``, ``kv_cache_memory_bytes``, ...), ``chunk`` (requests per
``generate`` call) and ``out``.  Every request runs with EOS ignored (``max_new_tokens`` tokens, the law the
harness enumerates), token-id prompts, and per-request speculative counters
(``per_request_spec_decode_metrics="detailed"``): each record's ``x_spec`` holds the steps' drafted and
accepted counts, so whether speculation ran, and how often each position was accepted, is in the file.
A request's ``overrides`` (``temperature``, ``top_p``, ``max_new_tokens``) replace the job's controls for that
request only (the probes "mixed controls" and "ragged max_tokens" in one generate call); its record's
``controls`` say what it ran under.  Penalties have no field in the sample format: a record drawn with them
carries them in ``x_penalties`` (the two-sample path compares such files with each other only).
"""
from __future__ import annotations

import json
import os
import sys
import time

FORMAT = "specverify.samples/1"  # = harness.samples.format.FORMAT (tests/samples/test_vllm_engine.py checks)


def _fix_active() -> bool:
    """Whether the CPU expand-kernel fix (the test-only plugin of experiments/vllm_cpu_expand_fix) is loaded."""
    try:
        from vllm.utils import cpu_triton_utils
        return bool(getattr(cpu_triton_utils._expand_kernel_impl, "_vllm_cpu_expand_fix", False))
    except ImportError:  # a vLLM without the CPU shims (a GPU build): nothing to fix
        return False


def make_llm(job: dict):
    from vllm import LLM
    args = dict(model=job["target"], tokenizer=job["target"], dtype="float32", max_model_len=512,
                max_logprobs=0, enforce_eager=True, seed=0, disable_log_stats=False,
                per_request_spec_decode_metrics="detailed", kv_cache_memory_bytes=1 << 30, max_num_seqs=64,
                # one scheduler step holds every prefill whole: a chunked prefill discards a step's sampled token and
                # rewinds a seeded request's generator with set_offset, which CPU generators refuse (the engine
                # dies: "CPU Generator does not use offset"); the probe chunked_prefill_seeded sets it back
                max_num_batched_tokens=32768)
    args.update(job.get("engine_args") or {})
    if job.get("speculative"):
        args["speculative_config"] = job["speculative"]
    else:  # vLLM refuses per-request speculative metrics without speculation
        args.pop("per_request_spec_decode_metrics")
    return LLM(**args)


def _controls(job: dict, row) -> dict:
    """The controls request ``row`` runs under: the job's, with the row's overrides (index 5) applied."""
    over = row[5] if len(row) > 5 and row[5] else {}
    greedy = bool(row[4]) or over.get("temperature") == 0
    return {"temperature": 0.0 if greedy else over.get("temperature", job["temperature"]), "top_k": job["top_k"],
            "top_p": over.get("top_p", job["top_p"]), "min_p": job.get("min_p", 0.0), "seed": row[3],
            "max_new_tokens": over.get("max_new_tokens", job["max_new_tokens"]), "greedy": greedy, "stop": []}


def _params(job: dict, row):
    from vllm import SamplingParams
    c = _controls(job, row)
    kw = dict(temperature=c["temperature"], top_p=c["top_p"], max_tokens=c["max_new_tokens"], ignore_eos=True,
              seed=c["seed"], n=job.get("n", 1), **(job.get("penalties") or {}))
    if c["min_p"]:
        kw["min_p"] = c["min_p"]
    greedy = c["greedy"]
    if job["top_k"]:
        kw["top_k"] = job["top_k"]
    if job.get("omit_temperature") and not greedy:
        kw.pop("temperature")  # the probe "temperature unset with top_k set": vLLM's default (1.0) applies
    return SamplingParams(**kw)


def _spec_of(completion) -> dict | None:
    m = getattr(completion, "spec_decode_metrics", None)
    if m is None:
        return None
    d = m.to_dict()
    return {"drafted": list(d.get("per_step_drafted") or []), "accepted": list(d.get("per_step_accepted") or [])}


def _records(job: dict, batch, outputs, engine: dict, wall: float) -> list[dict]:
    out = []
    per = wall / max(1, len(batch))
    pen = {"x_penalties": job["penalties"]} if job.get("penalties") else {}
    for row, res in zip(batch, outputs):
        rid, pid, prompt = row[:3]
        ctrl = _controls(job, row)
        for c, comp in enumerate(res.outputs):
            out.append({"format": FORMAT, "request_id": rid if len(res.outputs) == 1 else f"{rid}-n{c}",
                        "prompt_id": pid, "prompt_ids": list(prompt), "output_ids": [int(t) for t in comp.token_ids],
                        "finish_reason": "length" if len(comp.token_ids) == ctrl["max_new_tokens"] else "stop",
                        "controls": ctrl, "logprobs": None, "engine": engine, "x_spec": _spec_of(comp),
                        "x_wall_s": per, **pen})
    return out


def engine_block(job: dict) -> dict:
    import importlib.metadata
    import vllm
    dists = importlib.metadata.packages_distributions().get("vllm") or ["vllm"]
    return {"name": "vllm", "package": dists[0],
            "version": vllm.__version__, "interface": "offline LLM.generate (token ids)", "dtype": "float32",
            "speculative": job.get("speculative"), "engine_args": job.get("engine_args") or {},
            "cpu_expand_fix": _fix_active(), "eos": "ignored (ignore_eos=True)", "n": job.get("n", 1),
            **({"penalties": job["penalties"]} if job.get("penalties") else {}),
            "omit_temperature": bool(job.get("omit_temperature"))}


def run(job: dict) -> dict:
    from vllm.inputs import TokensPrompt
    tic = time.perf_counter()
    llm = make_llm(job)
    startup = time.perf_counter() - tic
    engine = engine_block(job)
    reqs, chunk, n_tok, gen_s = job["requests"], int(job.get("chunk", 4096)), 0, 0.0
    with open(job["out"], "w", encoding="utf-8") as f:
        for s in range(0, len(reqs), chunk):
            batch = reqs[s:s + chunk]
            prompts = [TokensPrompt(prompt_token_ids=list(r[2])) for r in batch]
            t0 = time.perf_counter()
            outputs = llm.generate(prompts, [_params(job, r) for r in batch], use_tqdm=False)
            dt = time.perf_counter() - t0
            gen_s += dt
            for rec in _records(job, batch, outputs, engine, dt):
                n_tok += len(rec["output_ids"])
                f.write(json.dumps(rec, separators=(",", ":")) + "\n")
            f.flush()
            print(f"vllm worker: {min(s + chunk, len(reqs))}/{len(reqs)} requests, {n_tok / gen_s:.0f} tokens/s",
                  file=sys.stderr, flush=True)
    return {"engine": engine, "startup_s": startup, "generate_s": gen_s, "tokens": n_tok,
            "tokens_per_s": n_tok / gen_s if gen_s else 0.0, "pid": os.getpid()}


def main(argv: list[str]) -> int:
    job = json.load(open(argv[0], encoding="utf-8"))
    summary = run(job)
    json.dump(summary, open(job["out"] + ".summary.json", "w", encoding="utf-8"), indent=1)
    return 0


if __name__ == "__main__":  # vLLM spawns its engine process on CPU: the guard is required
    raise SystemExit(main(sys.argv[1:]))
