"""``python -m harness sample --engine llama-cpp``: llama.cpp's Python API as a sample producer.

    python -m harness sample --engine llama-cpp --target exact-markov \\
        --prompt-vocab 13 --n-prompts 1 --n-per-prompt 400000 --max-new-tokens 8 --spec ngram --k 4 \\
        --workers 2 --out llama.jsonl
    python -m harness verify-samples --samples llama.jsonl --target exact-markov --exact

The Hugging Face ``--target`` is exported to a float32 GGUF (:mod:`harness.samples.engines.gguf_export`; or
give ``--gguf``), loaded by ``--workers`` processes (one ``llama_cpp.Llama`` each, one thread), and every
request is one ``Llama.generate`` call on token ids from a fresh context
(:func:`harness.samples.engines.llama_cpp.api_record`), seeded per request (``request_seed`` of the run seed
and the request's index), generating past EOS (``max_new_tokens`` tokens per completion).  ``--spec ngram``
is llama-cpp-python's prompt-lookup speculation (``LlamaPromptLookupDecoding``, up to ``k`` tokens a step),
verified by exact match: the target samples each position in turn and a draft token stands only when the
sample equals it.  ``--spec none`` is plain sampling.

Every record carries ``x_spec``: the engine's steps (drafted, accepted) and the drafted tokens, rebuilt from
the proposals the draft hook saw (:func:`spec_steps`), so :mod:`harness.samples.rules` can check the
acceptances against the target's law (a fixed draft token d is accepted with probability p(d | c) by every
lossless verification).  Records are written in request order; a rerun writes only the requests the file
lacks (resume).
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Optional

from harness.core.errors import UsageError
from harness.core.models import model_path
from harness.core.provenance import portable_tree
from harness.samples.engines.gguf_export import export_gguf
from harness.samples.engines.llama_cpp import PLAIN, api_record, load_llama, request_seed, spec_steps
from harness.samples.format import SampleWriter, parse_record
from specimpl.errors import check_arg

__all__ = ["SPEC_CHOICES", "spec_steps", "sampler_chain", "produce_llama"]

SPEC_CHOICES = ("none", "ngram")
CHUNK = 2000  # requests per task handed to a worker


def sampler_chain(controls) -> dict:
    """llama-cpp-python's sampler settings for ``controls`` (every other stage the identity)."""
    return {**PLAIN, "temp": controls.temperature, "top_k": controls.top_k, "top_p": controls.top_p,
            "min_p": controls.min_p}


_LLM = None  # the worker process's engine


def _init(gguf: str, kv: str, draft_k: Optional[int], n_ctx: int) -> None:
    global _LLM
    _LLM = load_llama(gguf, kv=kv, n_ctx=n_ctx, draft_k=draft_k)


def _chunk(job: dict, rows: list) -> list[dict]:
    return [api_record(_LLM, rid, pid, prompt, seed, {**job["controls"], "seed": seed}, job["engine"], job["sampler"])
            for rid, pid, prompt, seed in rows]


def _engine(gguf: str, kv: str, spec: str, k: int, workers: int, target: Optional[str], sampler: dict) -> dict:
    import llama_cpp
    return {"name": "llama.cpp", "package": "llama-cpp-python", "version": llama_cpp.__version__,
            "interface": "python api (Llama.generate, token ids)", "dtype": "float32", "kv_dtype": kv,
            "flash_attn": False, "model": os.path.basename(gguf), "target": target, "workers": workers,
            "speculative": {"method": "prompt_lookup", "k": k, "max_ngram_size": 2} if spec == "ngram" else None,
            "eos": "ignored: generation continues past EOS", "sampler": sampler}


def _gguf(target: Optional[str], gguf: Optional[str], tmp: str) -> str:
    if gguf is not None:
        if not Path(gguf).is_file():
            raise UsageError(f"`--gguf` must be a GGUF file; got {gguf!r}, which does not exist")
        return gguf
    src = target or str(model_path("tiny"))
    try:
        return str(export_gguf(src, Path(tmp) / (Path(src).name + ".gguf")))
    except (ValueError, OSError) as e:
        raise UsageError(f"`--target` {src!r} cannot be exported to GGUF for llama.cpp: {e}") from None


def produce_llama(reqs, writer: SampleWriter, *, controls, seed: int, spec: str = "none", k: int = 4,
                  workers: int = 1, kv: str = "float32", target: Optional[str] = None, gguf: Optional[str] = None,
                  progress: bool = True) -> int:
    """Run the requests the file lacks through llama.cpp (module docstring); the number of records written."""
    from tqdm import tqdm
    check_arg(spec in SPEC_CHOICES, "spec", spec, f"one of {SPEC_CHOICES} for --engine llama-cpp")
    check_arg(isinstance(workers, int) and 1 <= workers <= 64, "workers", workers, "an integer in [1, 64]")
    index = {r.request_id: i for i, r in enumerate(reqs)}
    todo = [(r.request_id, r.prompt_id, list(r.prompt_ids), request_seed(seed, index[r.request_id]))
            for r in reqs if r.request_id not in writer.done]
    if not todo:
        return 0
    sampler = sampler_chain(controls)
    n_ctx = max(len(r[2]) for r in todo) + controls.max_new_tokens + k + 8
    with tempfile.TemporaryDirectory(prefix="specverify-llama-") as tmp:
        path = _gguf(target, gguf, tmp)
        job = {"sampler": sampler, "controls": {**controls.to_json(), "stop": []},
               "engine": _engine(path, kv, spec, k, workers, target, sampler)}
        chunks = [todo[i:i + CHUNK] for i in range(0, len(todo), CHUNK)]
        bar = tqdm(total=len(todo), desc="llama.cpp", disable=not progress, file=sys.stderr)
        n, tic = 0, time.perf_counter()
        with ProcessPoolExecutor(workers, mp_context=get_context("spawn"), initializer=_init,
                                 initargs=(path, kv, k if spec == "ngram" else None, n_ctx)) as pool:
            for recs in pool.map(_chunk, [job] * len(chunks), chunks):
                n += writer.write_batch(parse_record(r) for r in recs)
                bar.update(len(recs))
        bar.close()
    wall = time.perf_counter() - tic
    summary = {"engine": job["engine"], "completions": n, "tokens": n * controls.max_new_tokens,
               "generate_s": wall, "tokens_per_s": n * controls.max_new_tokens / max(wall, 1e-9)}
    Path(str(writer.path) + ".engine.json").write_text(json.dumps(portable_tree(summary), indent=1))  # no machine paths
    if progress:
        print(f"llama.cpp {job['engine']['version']}: {n * controls.max_new_tokens} tokens in {wall:.1f} s "
              f"({n * controls.max_new_tokens / wall:.0f} tokens/s, {workers} worker(s))", file=sys.stderr)
    return n
