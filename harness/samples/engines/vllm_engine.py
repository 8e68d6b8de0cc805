"""vLLM as a sample producer: the offline ``LLM`` API in the engine's own virtual environment (named vllm_engine,
not vllm: the worker runs from this folder, where a vllm.py would hide the real package).

    python -m harness sample --engine vllm --vllm-python .venv-vllm/bin/python --spec draft --k 4 \\
        --target exact-markov --draft exact-markov-draft \\
        --prompt-vocab 13 --n-prompts 2 --n-per-prompt 250000 --max-new-tokens 8 --no-eos --out vllm.jsonl

The harness writes a job (the requests still missing from ``--out``, the controls, vLLM's speculative config
and engine arguments), runs :mod:`harness.samples.engines.vllm_worker` with the engine's Python (vLLM is not
a dependency of the harness: users run it in its own environment, as ``make vllm-check`` does), reads the
worker's records back through the strict reader and appends them to the sample file (resumable: a rerun
sends only the requests the file lacks).

Speculation (``--spec``): ``none``; ``draft`` (a draft model, probabilistic draft sampling);
``draft-greedy`` (a draft model, argmax drafts: vLLM's default); ``ngram`` (prompt lookup);
``block`` (``rejection_sample_method = "block"``).  Each record's ``x_spec`` holds the engine's own per-step
drafted / accepted counts, so a deployment where speculation never engaged is visible
(:func:`speculation_summary`), and :mod:`harness.samples.rules` infers from them which rule ran.

The CPU build of vLLM 0.32 has a losslessness bug (vllm-project/vllm#55005: its CPU shim of
``expand_kernel`` writes into a temporary, so the rejection sampler reads uninitialised temperatures); the
test-only plugin ``experiments/vllm_cpu_expand_fix`` applies the proposed fix (PR #55006).  ``--vllm-shim
stock`` runs without it (``VLLM_PLUGINS=""``), ``fixed`` requires it loaded; every record's ``engine`` says
which ran (``cpu_expand_fix``).
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Optional

import numpy as np

from harness.core.errors import SamplerError, UsageError
from harness.core.provenance import portable_tree
from harness.samples.engines.server import free_port, local_server, stop_group
from harness.samples.format import SampleWriter, parse_record

__all__ = ["SPEC_METHODS", "speculative_config", "request_seed", "make_job", "run_worker", "produce_vllm",
           "speculation_summary", "WORKER", "default_python", "root_cause",
           "server_command", "serve", "server_spec_counters"]

WORKER = Path(__file__).resolve().with_name("vllm_worker.py")
SPEC_METHODS = ("none", "draft", "draft-greedy", "ngram", "block")
SEEDINGS = ("all", "none", "mixed")


def default_python() -> str:
    """The engine's Python: ``$SPECVERIFY_VLLM_PYTHON``, else ``.venv-vllm/bin/python`` (``make vllm-venv``)."""
    return os.environ.get("SPECVERIFY_VLLM_PYTHON", ".venv-vllm/bin/python")


def speculative_config(method: str, k: int, draft: Optional[str]) -> Optional[dict]:
    """vLLM's ``speculative_config`` for one of :data:`SPEC_METHODS`."""
    if method == "none":
        return None
    if method == "ngram":
        return {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_min": 2, "prompt_lookup_max": 4}
    if not draft:
        raise UsageError(f"`--spec {method}` needs `--draft` (a draft model folder); got none")
    cfg = {"method": "draft_model", "model": str(Path(draft).resolve()), "num_speculative_tokens": k,
           "draft_sample_method": "greedy" if method == "draft-greedy" else "probabilistic"}
    if method == "block":
        cfg["rejection_sample_method"] = "block"
    return cfg


def request_seed(seed: int, index: int) -> int:
    """A distinct 31-bit seed per (run seed, request index)."""
    return int(np.random.SeedSequence([seed, index]).generate_state(1)[0] >> 1)


def _seed_of(seeding: str, seed: int, i: int) -> Optional[int]:
    if seeding == "none" or (seeding == "mixed" and i % 2):
        return None
    return request_seed(seed, i)


def make_job(reqs, *, target: str, spec: Optional[dict], controls, seed: int, seeding: str = "all",
             greedy_share: float = 0.0, n: int = 1, omit_temperature: bool = False,
             engine_args: Optional[dict] = None, chunk: int = 20000, row_controls: tuple = (),
             penalties: Optional[dict] = None, out: str) -> dict:
    """The worker's job for the requests ``reqs`` (:class:`harness.samples.producers.Request`); every
    ``round(1 / greedy_share)``-th request runs greedy (the probe "greedy and sampled rows in one batch");
    ``row_controls`` (override dicts: temperature, top_p, max_new_tokens), when given, are cycled over the
    requests in order (request i runs under ``row_controls[i % len]``: mixed controls in one generate call);
    ``penalties`` (vLLM's repetition / presence / frequency penalty) apply to every request."""
    every = round(1 / greedy_share) if greedy_share > 0 else 0
    rows = [[r.request_id, r.prompt_id, list(r.prompt_ids), _seed_of(seeding, seed, i),
             bool(every) and i % every == 0, dict(row_controls[i % len(row_controls)]) if row_controls else None]
            for i, r in enumerate(reqs)]
    return {"target": str(Path(target).resolve()), "speculative": spec, "requests": rows,
            "max_new_tokens": controls.max_new_tokens, "temperature": controls.temperature, "top_k": controls.top_k,
            "top_p": controls.top_p, "min_p": controls.min_p, "penalties": penalties or None, "n": n,
            "omit_temperature": omit_temperature, "engine_args": engine_args or {}, "chunk": chunk, "out": out}


def _worker_env(shim: str) -> dict:
    env = dict(os.environ)
    if shim == "stock":
        env["VLLM_PLUGINS"] = ""  # no general plugin loads: vLLM as shipped
    else:
        env.pop("VLLM_PLUGINS", None)
    env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "auto")
    return env


def run_worker(job: dict, python: str, shim: str = "fixed", timeout: float = 3600.0) -> tuple[list[dict], dict]:
    """Run the worker on ``job``; (records as dicts, the worker's summary).  SamplerError (exit 3) when the
    engine fails or the requested shim did not load."""
    if not Path(python).exists():
        raise UsageError(f"`--vllm-python` must be the Python of an environment with vLLM (make vllm-venv); "
                         f"got {python!r}, which does not exist")
    with tempfile.TemporaryDirectory(prefix="specverify-vllm-") as tmp:
        job = {**job, "out": str(Path(tmp) / "records.jsonl")}
        path = Path(tmp) / "job.json"
        path.write_text(json.dumps(job))
        log = Path(tmp) / "worker.log"
        with open(log, "w") as lf:  # its own process group: the engine's children stop with it, whatever happens
            proc = subprocess.Popen([python, str(WORKER), str(path)], env=_worker_env(shim), stdout=lf,
                                    stderr=subprocess.STDOUT, start_new_session=True)
            try:
                rc = proc.wait(timeout)
            finally:
                stop_group(proc)
        if rc != 0:
            raise SamplerError(f"the vLLM worker exited with status {rc}: {root_cause(log.read_text(errors='replace'))}")
        summary = json.loads(Path(job["out"] + ".summary.json").read_text())
        records = [json.loads(x) for x in Path(job["out"]).read_text().splitlines()]
    fixed = summary["engine"]["cpu_expand_fix"]
    if (shim == "fixed") != fixed:
        raise SamplerError(f"`--vllm-shim {shim}` asked, but the engine ran with cpu_expand_fix = {fixed} "
                           "(pip install experiments/vllm_cpu_expand_fix into the engine's environment)")
    return records, summary


def root_cause(log: str) -> str:
    """The first error line of a worker's log (vLLM prints the engine core's exception before the client's)."""
    for line in log.splitlines():
        s = line.split("] ", 1)[-1].strip()
        if s.startswith(("RuntimeError", "ValueError", "TypeError", "AssertionError", "IndexError", "KeyError",
                         "vllm.exceptions.")):
            return s[:300]
    tail = [x for x in log.strip().splitlines() if x.strip()][-3:]
    return " | ".join(tail)[:300]


def produce_vllm(reqs, writer: SampleWriter, *, python: str, shim: str, progress: bool = True, **job_kw) -> int:
    """Run the requests the file lacks through vLLM; the number of records written."""
    todo = [r for r in reqs if r.request_id not in writer.done]
    if not todo:
        return 0
    records, summary = run_worker(make_job(todo, out="", **job_kw), python, shim)
    n = writer.write_batch(parse_record(r) for r in records)
    if progress:
        print(f"vllm {summary['engine']['version']}: {summary['tokens']} tokens in {summary['generate_s']:.1f} s "
              f"({summary['tokens_per_s']:.0f} tokens/s; engine start {summary['startup_s']:.1f} s); "
              f"{speculation_summary(records)}", file=sys.stderr)
    Path(str(writer.path) + ".engine.json").write_text(json.dumps(portable_tree(summary), indent=1))  # no machine paths
    return n


def speculation_summary(records: list[dict]) -> str:
    """Drafted and accepted tokens per draft position over the records' ``x_spec`` (the engine's counters)."""
    steps = [(d, a) for r in records if r.get("x_spec") for d, a in zip(r["x_spec"]["drafted"], r["x_spec"]["accepted"])]
    if not steps:
        return "speculation never ran (no drafted tokens in the engine's counters)"
    k = max(d for d, _ in steps)
    drafted = [sum(d > j for d, _ in steps) for j in range(k)]
    accepted = [sum(a > j for _, a in steps) for j in range(k)]
    rates = ", ".join(f"{a / d:.3f}" if d else "-" for a, d in zip(accepted, drafted))
    return f"{len(steps)} speculative steps, acceptance per position {rates}"


# --------------------------------------------------------------------------------------------- server
def server_command(python: str, target: str, port: int, spec: Optional[dict], max_num_seqs: int = 64) -> list[str]:
    """``vllm serve`` for the CPU build: the module entry point (vllm-cpu 0.32's ``vllm`` console script looks
    for a distribution named "vllm" and fails), float32, token-id friendly, bounded memory."""
    cmd = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(Path(target).resolve()),
           "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--max-model-len", "512",
           "--kv-cache-memory-bytes", str(1 << 30), "--max-num-seqs", str(max_num_seqs),
           "--max-num-batched-tokens", "32768", "--enforce-eager", "--seed", "0"]
    return cmd + (["--speculative-config", json.dumps(spec)] if spec else [])


@contextlib.contextmanager
def serve(target: str, *, python: str, spec: Optional[dict] = None, shim: str = "fixed", start_timeout: float = 300.0,
          log_path: Optional[Path] = None):
    """A vLLM OpenAI-compatible server on 127.0.0.1 (a free port) for the ``with`` block; yields its base URL
    (``http://127.0.0.1:P/v1``), stopped with its engine processes on exit
    (:func:`harness.samples.engines.server.local_server`)."""
    port = free_port()
    with local_server(server_command(python, target, port, spec), f"http://127.0.0.1:{port}/health",
                      timeout_s=start_timeout, error=SamplerError, what="the vLLM server", env=_worker_env(shim),
                      log_path=log_path):
        yield f"http://127.0.0.1:{port}/v1"


def server_spec_counters(base_url: str) -> dict:
    """The server's speculative counters from /metrics: drafts, draft tokens, accepted tokens, per position."""
    with urllib.request.urlopen(base_url.rsplit("/v1", 1)[0] + "/metrics", timeout=10) as r:
        text = r.read().decode()
    out: dict = {"per_position": {}}
    for line in text.splitlines():
        if not line.startswith("vllm:spec_decode"):
            continue
        name, value = line.rsplit(" ", 1)
        key = name.split("{")[0].removeprefix("vllm:spec_decode_").removesuffix("_total")
        pos = re.search(r'position="(\d+)"', name)
        if pos:
            out["per_position"][int(pos.group(1))] = out["per_position"].get(int(pos.group(1)), 0) + float(value)
        else:
            out[key] = out.get(key, 0) + float(value)
    return out
