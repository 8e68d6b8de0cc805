"""One vLLM engine (its own process, the vLLM venv's Python) timed at several batch sizes: the worker of
experiments/vllm_speedup.py.

    .venv-vllm/bin/python experiments/vllm_speedup_worker.py job.json      # writes job["out"] (JSON)

The job: ``target``, ``speculative`` (vLLM's speculative_config or null), ``prompts`` (token-id lists),
``batches``, ``max_new_tokens``, ``repeats``, ``temperature``, ``engine_args``.  After one discarded warm-up
call per batch, each repeat times, per batch B (order alternating between repeats), one ``generate`` of the
first B prompts with max_new_tokens tokens (EOS ignored) and one with a single token (prefill + first step).
The output also holds the engine's own acceptance counters: ``spec_requests``, each timed request's vLLM
per-request ``spec_decode_metrics`` (per-step drafted / accepted), and ``metrics_prom``, the engine's
``vllm:spec_decode_*`` counters (``LLM.get_metrics``, every call of the process) as Prometheus text.
With ``configs`` in the job (:func:`run_interleaved`) every engine is held in this one process and the timed
calls of all of them interleave.  Imports only the standard library, vLLM and harness/samples/engines/vllm_worker.py (itself stdlib + vLLM).
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "harness" / "samples" / "engines"))

from vllm_worker import engine_block, make_llm  # noqa: E402


def _generate(llm, prompts, max_tokens: int, temperature: float):
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    sp = SamplingParams(temperature=temperature, max_tokens=max_tokens, ignore_eos=True)
    t0 = time.perf_counter()
    outs = llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts], sp, use_tqdm=False)
    dt = time.perf_counter() - t0
    tokens = sum(len(o.outputs[0].token_ids) for o in outs)
    drafted = accepted = 0
    per_request = []
    for o in outs:
        m = getattr(o.outputs[0], "spec_decode_metrics", None)
        if m is not None:
            d = m.to_dict()
            drafted += sum(d.get("per_step_drafted") or [])
            accepted += sum(d.get("per_step_accepted") or [])
            per_request.append({"per_step_drafted": d.get("per_step_drafted") or [],
                                "per_step_accepted": d.get("per_step_accepted") or []})
    return dt, tokens, drafted, accepted, per_request


def _prometheus(llm) -> str:
    """The engine's spec-decode counters as /metrics would show them (Prometheus text; '' without speculation)."""
    lines = []
    for m in llm.get_metrics():
        if not m.name.startswith("vllm:spec_decode"):
            continue
        lab = ",".join(f'{k}="{v}"' for k, v in sorted(m.labels.items()))
        if hasattr(m, "values"):  # the per-position vector
            lines += [f'{m.name}_total{{{lab}{"," if lab else ""}position="{i}"}} {float(v)}'
                      for i, v in enumerate(m.values)]
        elif hasattr(m, "value"):
            lines.append(f"{m.name}_total{{{lab}}} {float(m.value)}")
    return "\n".join(lines) + ("\n" if lines else "")


def run(job: dict) -> dict:
    tic = time.perf_counter()
    llm = make_llm({"target": job["target"], "speculative": job["speculative"],
                    "engine_args": job.get("engine_args") or {}})
    startup = time.perf_counter() - tic
    N, T, P = int(job["max_new_tokens"]), float(job["temperature"]), job["prompts"]
    for B in job["batches"]:  # warm-up, discarded
        _generate(llm, P[:B], N, T)
    rows, spec_requests = [], []
    for rep in range(int(job["repeats"])):
        for B in (job["batches"] if rep % 2 == 0 else job["batches"][::-1]):
            for kind, n in (("generate", N), ("first_token", 1)):
                dt, tokens, drafted, accepted, per_request = _generate(llm, P[:B], n, T)
                spec_requests += [{"rep": rep, "batch": B, **r} for r in per_request if kind == "generate"]
                rows.append({"rep": rep, "batch": B, "kind": kind, "max_new_tokens": n, "seconds": dt,
                             "tokens": tokens, "drafted": drafted, "accepted": accepted})
    return {"engine": engine_block(job), "startup_s": startup, "rows": rows, "spec_requests": spec_requests,
            "metrics_prom": _prometheus(llm) if job["speculative"] else ""}


def _timed(llm, job, name: str, rep: int, B: int, rows: list, spec_requests: list) -> None:
    """One generate of B prompts and one single-token call, appended to ``rows`` (and the per-request counters)."""
    N, T, P = int(job["max_new_tokens"]), float(job["temperature"]), job["prompts"]
    for kind, n in (("generate", N), ("first_token", 1)):
        dt, tokens, drafted, accepted, per_request = _generate(llm, P[:B], n, T)
        rows.append({"config": name, "rep": rep, "batch": B, "kind": kind, "max_new_tokens": n, "seconds": dt,
                     "tokens": tokens, "drafted": drafted, "accepted": accepted})
        spec_requests += [{"config": name, "rep": rep, "batch": B, **r} for r in per_request if kind == "generate"]


def run_interleaved(job: dict) -> dict:
    """Every engine of ``job["configs"]`` ({name: {target, speculative}}) held in this one process, their timed calls
    interleaved: per repeat and batch, each engine once, in a fresh random order (seed 0), so that all of them see
    the same spells of a shared machine's load."""
    import random
    llms, engines = {}, {}
    for name, c in job["configs"].items():
        j = {**job, "target": c["target"], "speculative": c["speculative"]}
        llms[name] = make_llm({"target": c["target"], "speculative": c["speculative"],
                               "engine_args": job.get("engine_args") or {}})
        engines[name] = engine_block(j)
    for name, llm in llms.items():  # warm-up, discarded
        for B in job["batches"]:
            _generate(llm, job["prompts"][:B], int(job["max_new_tokens"]), float(job["temperature"]))
    rng, rows, spec_requests = random.Random(0), [], []
    for rep in range(int(job["repeats"])):
        for B in (job["batches"] if rep % 2 == 0 else job["batches"][::-1]):
            for name in rng.sample(list(llms), len(llms)):
                _timed(llms[name], job, name, rep, B, rows, spec_requests)
    return {"engines": engines, "rows": rows, "spec_requests": spec_requests,
            # vLLM keeps one Prometheus registry per process and each new engine replaces the last one's counters:
            # they are the last-created engine's only (run 6e629e8 wrote the k = 2 engine's under spec-k1 too)
            "metrics_prom": {n: _prometheus(llms[n]) for n in list(llms)[-1:] if job["configs"][n]["speculative"]}}


def main(argv: list[str]) -> int:
    job = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    out = run_interleaved(job) if "configs" in job else run(job)
    Path(job["out"]).write_text(json.dumps(out, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":  # vLLM spawns its engine process on CPU: the guard is required
    raise SystemExit(main(sys.argv[1:]))
