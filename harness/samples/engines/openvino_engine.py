"""OpenVINO GenAI as a sample producer: ``ContinuousBatchingPipeline`` in the engine's own virtual environment.

    python -m harness sample --engine openvino --spec draft --k 4 --target exact --draft exact-draft \\
        --prompt-vocab 13 --prompt-lengths 4 4 --n-prompts 1 --n-per-prompt 10000 --max-new-tokens 4 --out ov.jsonl

The harness exports ``--target`` (and ``--draft``) to OpenVINO IR with optimum-intel in the engine's
environment (:mod:`harness.samples.engines.openvino_export`, cached by content), writes a job (the requests
still missing from ``--out``, the controls, the scheduler and plugin settings), runs
:mod:`harness.samples.engines.openvino_worker` with the engine's Python (``make openvino-venv``:
``.venv-openvino``, openvino-genai 2026.4.1, optimum-intel 2.2.0, its own transformers), reads the records
back through the strict reader and appends them to the sample file (resumable).

Speculation (``--spec``): ``none``; ``draft`` (a draft model, ``num_assistant_tokens = --k``; OpenVINO
samples the draft at the request's temperature); ``lookup`` (prompt lookup, ``max_ngram_size`` 3).
``--prefix-caching on|off`` sets ``SchedulerConfig.enable_prefix_caching``.  ``--kv-precision`` sets the CPU
plugin's ``KV_CACHE_PRECISION`` for target and draft (default f32; the CPU plugin's own default is u8, a
quantised cache); the CPU plugin of 2026.4.1 accepts f32, f16, u8 and u4 and refuses bf16 on a CPU without
bf16 and i8.  ``INFERENCE_PRECISION_HINT`` is f32.  The engine's speculative counters are totals per
``generate`` call (``--openvino-chunk`` requests each): they go to ``<out>.engine.json``, with the versions and
the configuration, and :func:`speculation_summary` prints them.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Optional

from harness.core.errors import UsageError
from harness.core.provenance import portable_tree
from harness.samples.engines.openvino_export import export
from harness.samples.engines.job_worker import root_cause, run_job
from harness.samples.engines.vllm_engine import request_seed
from harness.samples.format import SampleWriter, parse_record

__all__ = ["SPECS", "KV_PRECISIONS", "WORKER", "default_python", "make_job", "run_worker", "produce_openvino", "pooled_calls",
           "speculation_summary", "root_cause"]

WORKER = Path(__file__).resolve().with_name("openvino_worker.py")
SPECS = ("none", "draft", "lookup")
KV_PRECISIONS = ("f32", "f16", "u8", "u4")


def default_python() -> str:
    """The engine's Python: ``$SPECVERIFY_OPENVINO_PYTHON``, else ``.venv-openvino/bin/python``."""
    return os.environ.get("SPECVERIFY_OPENVINO_PYTHON", ".venv-openvino/bin/python")


def make_job(reqs, *, target: str, draft: Optional[str], spec: str, k: int, controls, seed: int,
             prefix_caching: bool = False, max_num_seqs: int = 256, kv_precision: str = "f32",
             chunk: int = 4096, index_of: Optional[dict] = None, out: str = "") -> dict:
    """The worker's job for the requests ``reqs`` (:class:`harness.samples.producers.Request`); ``target`` and
    ``draft`` are OpenVINO IR folders.  Request i of the whole run (``index_of[request_id]``, default its place
    in ``reqs``) is seeded ``request_seed(seed, i)``, so a resumed run seeds its requests as a whole run would."""
    index_of = index_of or {r.request_id: i for i, r in enumerate(reqs)}
    rows = [[r.request_id, r.prompt_id, list(r.prompt_ids), request_seed(seed, index_of[r.request_id])] for r in reqs]
    scheduler = {"enable_prefix_caching": bool(prefix_caching), "max_num_seqs": int(max_num_seqs), "cache_size": 1,
                 "max_num_batched_tokens": 32768, "dynamic_split_fuse": False}
    return {"target": str(target), "draft": str(draft) if draft else None, "spec": spec, "k": int(k),
            "max_ngram_size": 3, "requests": rows, "max_new_tokens": controls.max_new_tokens,
            "temperature": controls.temperature, "top_k": controls.top_k, "top_p": controls.top_p,
            "scheduler": scheduler, "properties": {"KV_CACHE_PRECISION": kv_precision,
                                                   "INFERENCE_PRECISION_HINT": "f32"},
            "chunk": int(chunk), "out": out}


def run_worker(job: dict, python: str, timeout: float = 7200.0) -> tuple[list[dict], dict]:
    """Run the worker on ``job``; (records as dicts, the worker's summary).  SamplerError (exit 3) when the
    engine fails, naming its failed check."""
    if not Path(python).exists():
        raise UsageError(f"`--openvino-python` must be the Python of an environment with openvino-genai (make "
                         f"openvino-venv); got {python!r}, which does not exist")
    return run_job(job, python, WORKER, "OpenVINO", timeout)


def speculation_summary(summary: dict) -> str:
    """Draft and accepted tokens over the run's ``generate`` calls (the engine's own counters)."""
    calls = [c["counters"] for c in summary.get("calls", []) if c.get("counters")]
    drafted = sum(c["draft_tokens"] for c in calls)
    if not drafted:
        return "speculation never ran (the engine's counters hold no draft tokens)"
    accepted = sum(c["accepted_tokens"] for c in calls)
    return f"{drafted} draft tokens, {accepted} accepted ({accepted / drafted:.3f}; the engine's counters)"


def pooled_calls(calls: list[dict], keep: int = 64) -> list[dict]:
    """The worker's per-call entries, or past ``keep`` calls one entry totalling them (``n_calls``): a run of one
    request per call would otherwise write an entry per request."""
    if len(calls) <= keep:
        return calls
    counted = [c["counters"] for c in calls if c.get("counters")]
    drafted = sum(c["draft_tokens"] for c in counted)
    accepted = sum(c["accepted_tokens"] for c in counted)
    counters = {"draft_tokens": drafted, "accepted_tokens": accepted,
                "acceptance_rate": accepted / drafted if drafted else 0.0} if counted else None
    return [{"n_calls": len(calls), "requests": sum(c["requests"] for c in calls),
             "generate_s": round(sum(c["generate_s"] for c in calls), 4), "counters": counters}]


def produce_openvino(reqs, writer: SampleWriter, *, python: str, target: str, draft: Optional[str], spec: str,
                     progress: bool = True, **job_kw) -> int:
    """Export the models, run the requests the file lacks through OpenVINO GenAI; the number of records written."""
    todo = [r for r in reqs if r.request_id not in writer.done]
    if not todo:
        return 0
    ir_target = export(target, python)
    ir_draft = export(draft, python) if spec == "draft" else None
    job = make_job(todo, target=str(ir_target), draft=ir_draft, spec=spec,
                   index_of={r.request_id: i for i, r in enumerate(reqs)}, **job_kw)
    records, summary = run_worker(job, python)
    n = writer.write_batch(parse_record(r) for r in records)
    summary["calls"] = pooled_calls(summary["calls"])
    summary["models"] = {"target": Path(target).name, "target_ir": ir_target.name,
                         "draft": Path(draft).name if ir_draft else None, "draft_ir": ir_draft.name if ir_draft else None}
    if progress:
        print(f"openvino-genai {summary['engine']['version']}: {summary['tokens']} tokens in {summary['generate_s']:.1f} s "
              f"({summary['tokens_per_s']:.0f} tokens/s; engine start {summary['startup_s']:.1f} s); "
              f"{speculation_summary(summary)}", file=sys.stderr)
    Path(str(writer.path) + ".engine.json").write_text(json.dumps(portable_tree(summary), indent=1))
    return n
