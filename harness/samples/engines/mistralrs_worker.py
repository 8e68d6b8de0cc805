"""mistral.rs (its Python package, ``mistralrs``) as a sample producer, run by the engine's own Python.

    .venv-mistralrs/bin/python harness/samples/engines/mistralrs_worker.py job.json    # writes job["out"] (JSONL)

Started by ``python -m harness sample --engine mistralrs`` (:mod:`harness.samples.engines.mistralrs_engine`), which
exports the model (a copy whose tokenizer spells every token id as one character), writes the job, reads the
records back through the strict sample-format reader and appends them to the sample file.  This file imports only
the standard library and mistralrs, so it runs in an environment without the harness.

mistral.rs 0.9.5's Python API takes text prompts and returns text, so token ids travel as characters:
``alphabet[i]`` is token i.  Each completion is checked before it is written: the engine's own token counts must
equal the prompt's length and ``max_tokens`` (EOS is ignored), and every returned character must be a token of the
alphabet; anything else stops the worker (exit 1: the engine failed), never a silently shortened record.

The job (JSON): ``model`` (the exported folder), ``alphabet``, ``requests`` ([request_id, prompt_id, prompt_ids]),
``max_new_tokens``, ``temperature`` (0: greedy), ``top_k`` (0: off), ``top_p``, ``max_seqs``,
``prefix_cache_n`` (0: prefix caching off), ``replay`` (leading requests run and not written: a resumed run,
whose engine stream restarts where every process's does), ``kv`` ("f32" or "f16": the CPU KV cache's precision,
``MISTRALRS_CPU_KV_F32``) and ``out``.  mistral.rs refuses a seed on CPU (``Runner(seed=...)``: "cannot seed the
CPU rng"), so every record's ``seed`` is null: completions are independent draws of the engine's own generator.
"""
from __future__ import annotations

import json
import os
import sys
import time

FORMAT = "specverify.samples/1"  # = harness.samples.format.FORMAT (tests/samples/test_mistralrs_engine.py checks)


def make_runner(job: dict):
    if job.get("kv", "f32") == "f32":
        os.environ["MISTRALRS_CPU_KV_F32"] = "1"  # read when the KV cache is built: the CPU default is f16
    else:
        os.environ.pop("MISTRALRS_CPU_KV_F32", None)
    import mistralrs as m
    which = m.Which.Plain(model_id=job["model"], arch=m.Architecture.Llama, dtype=m.ModelDType.F32)
    return m.Runner(which=which, max_seqs=int(job["max_seqs"]), prefix_cache_n=int(job["prefix_cache_n"]),
                    token_source="none")


def request(job: dict, prompt_ids: list[int]):
    import mistralrs as m
    greedy = job["temperature"] == 0
    return m.CompletionRequest(prompt="".join(job["alphabet"][t] for t in prompt_ids), model="specverify",
                               max_tokens=int(job["max_new_tokens"]), ignore_eos=True,
                               temperature=0.0 if greedy else float(job["temperature"]),
                               top_p=None if greedy else float(job["top_p"]),
                               top_k=int(job["top_k"]) if job["top_k"] and not greedy else None)


def output_ids(job: dict, prompt_ids: list[int], res) -> list[int]:
    """The completion's token ids, checked against the engine's own counts (module docstring)."""
    index = {ch: i for i, ch in enumerate(job["alphabet"])}
    if len(res.choices) != 1:
        raise RuntimeError(f"mistral.rs returned {len(res.choices)} choices for one request")
    text, usage = res.choices[0].text, res.usage
    bad = sorted({ch for ch in text if ch not in index})
    if bad or usage.prompt_tokens != len(prompt_ids) or usage.completion_tokens != len(text) \
            or len(text) != job["max_new_tokens"]:
        raise RuntimeError(f"mistral.rs output does not map to token ids: text {text!r} (characters outside the "
                           f"alphabet: {bad}), prompt_tokens {usage.prompt_tokens} for {len(prompt_ids)} prompt ids, "
                           f"completion_tokens {usage.completion_tokens}, max_tokens {job['max_new_tokens']}")
    return [index[ch] for ch in text]


def engine_block(job: dict) -> dict:
    import importlib.metadata as im
    return {"name": "mistralrs", "version": im.version("mistralrs"),
            "interface": "Runner.send_completion_request (text prompts; token ids as one character each), CPU",
            "speculative": None, "dtype": "float32", "kv_cache": job.get("kv", "f32"),
            "max_seqs": job["max_seqs"], "prefix_cache_n": job["prefix_cache_n"], "eos": "ignored (ignore_eos=True)",
            "seeds": "none (mistral.rs refuses a seed on CPU)"}


def _record(job: dict, req, ids: list[int], engine: dict, wall: float) -> dict:
    rid, pid, prompt = req
    ctrl = {"temperature": job["temperature"], "top_k": job["top_k"], "top_p": job["top_p"], "min_p": 0.0,
            "seed": None, "max_new_tokens": job["max_new_tokens"], "greedy": job["temperature"] == 0, "stop": []}
    return {"format": FORMAT, "request_id": rid, "prompt_id": pid, "prompt_ids": list(prompt), "output_ids": ids,
            "finish_reason": "length", "controls": ctrl, "logprobs": None, "engine": engine, "x_wall_s": wall}


def run(job: dict) -> dict:
    tic = time.perf_counter()
    runner = make_runner(job)
    startup = time.perf_counter() - tic
    engine = engine_block(job)
    reqs, n_tok, gen_s, replay = job["requests"], 0, 0.0, int(job.get("replay", 0))
    for req in reqs[:replay]:  # a resumed run: the engine's stream back where the file left it
        output_ids(job, req[2], runner.send_completion_request(request(job, req[2])))
    with open(job["out"], "w", encoding="utf-8") as f:
        for i, req in enumerate(reqs[replay:], start=replay):
            t0 = time.perf_counter()
            res = runner.send_completion_request(request(job, req[2]))
            dt = time.perf_counter() - t0
            gen_s += dt
            ids = output_ids(job, req[2], res)
            n_tok += len(ids)
            f.write(json.dumps(_record(job, req, ids, engine, dt), separators=(",", ":")) + "\n")
            if (i + 1) % 1000 == 0 or i + 1 == len(reqs):
                f.flush()
                print(f"mistralrs worker: {i + 1}/{len(reqs)} requests, {n_tok / gen_s:.0f} tokens/s",
                      file=sys.stderr, flush=True)
    return {"engine": engine, "startup_s": startup, "generate_s": gen_s, "tokens": n_tok,
            "tokens_per_s": n_tok / gen_s if gen_s else 0.0, "pid": os.getpid()}


def main(argv: list[str]) -> int:
    job = json.load(open(argv[0], encoding="utf-8"))
    summary = run(job)
    json.dump(summary, open(job["out"] + ".summary.json", "w", encoding="utf-8"), indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
