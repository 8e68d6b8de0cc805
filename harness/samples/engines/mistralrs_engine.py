"""mistral.rs as a sample producer: its Python package in the engine's own virtual environment, plain decoding.

    python -m harness sample --engine mistralrs --target exact-markov --prompt-vocab 13 --n-prompts 1 \\
        --n-per-prompt 2000 --max-new-tokens 4 --out mrs.jsonl

The harness exports ``--target`` for mistral.rs (:func:`export`, cached by content), writes a job (the requests
still missing from ``--out`` and the controls), runs :mod:`harness.samples.engines.mistralrs_worker` with the
engine's Python (``make mistralrs-venv``: ``.venv-mistralrs``, mistralrs 0.9.5, the CPU wheel), reads the records
back through the strict reader and appends them to the sample file.

One process, one stream: mistral.rs refuses a seed on CPU and its unseeded generator starts at the same point in
every process (two runs of the same requests return the same completions; two engine processes would draw the
same "independent" completions, which the dependence check of ``verify-samples`` names).  So the requests run in
one engine process, in order (the ``Runner`` serves one request at a time; a second thread on it raises "Already
borrowed"), and a resumed run replays the requests its file already holds without writing them, so that it
continues the stream an uninterrupted run would have drawn.

What mistral.rs 0.9.5 offers on CPU (``experiments/mistralrs_probe.py`` prints each from the engine):
plain decoding only.  Its one speculative path in the Python API is an MTP assistant (``Runner(mtp_model=...)``),
which needs PagedAttention ("MTP speculative decoding currently requires PagedAttention for this pipeline"), and
PagedAttention is not available on CPU ("paged attention is unavailable on this device").  It refuses a seed on
CPU ("cannot seed the CPU rng with set_seed"), so records carry ``seed: null`` (and see "one process, one
stream" above).  Its CPU KV cache is float16 by
default; ``--kv-precision f32`` (the default here) sets ``MISTRALRS_CPU_KV_F32``.  ``--prefix-caching on`` keeps
the engine's prefix cache (16 sequences, its default), ``off`` sets ``prefix_cache_n = 0``.

The export (:func:`export`): mistral.rs reads ``rope_theta`` at the top of config.json (transformers 5 writes it
under ``rope_parameters``), and its API speaks text, so the exported tokenizer spells token i as the i-th
character of :data:`ALPHABET` (a byte-level BPE without merges and without special tokens, so no id is dropped
when text is decoded).  The weights are the checkpoint's own bytes.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from harness.core.errors import UsageError
from harness.samples.engines.job_worker import run_job
from harness.samples.format import SampleWriter, parse_record

__all__ = ["ALPHABET", "KV_PRECISIONS", "WORKER", "default_python", "export", "make_job", "run_worker", "replayed",
           "produce_mistralrs"]

WORKER = Path(__file__).resolve().with_name("mistralrs_worker.py")
ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
KV_PRECISIONS = ("f32", "f16")
STAMP = "specverify-export.json"


def default_python() -> str:
    """The engine's Python: ``$SPECVERIFY_MISTRALRS_PYTHON``, else ``.venv-mistralrs/bin/python``."""
    return os.environ.get("SPECVERIFY_MISTRALRS_PYTHON", ".venv-mistralrs/bin/python")


def _key(src: Path) -> str:
    h = hashlib.sha256(b"mistralrs-export/1")
    for p in sorted(src.iterdir()):
        if p.is_file():
            h.update(p.name.encode() + b"\0" + hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()[:16]


def _tokenizer(vocab_size: int) -> dict:
    vocab = {ALPHABET[i]: i for i in range(vocab_size)}
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
            "post_processor": None, "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                                                "use_regex": False},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                      "vocab": vocab, "merges": []}}


def export(model_dir) -> Path:
    """The mistral.rs folder of ``model_dir`` (a transformers Llama checkpoint with safetensors weights), written
    when the cache (``$SPECVERIFY_MISTRALRS_CACHE``, default ``~/.cache/specverify/mistralrs``) lacks it."""
    src = Path(model_dir).resolve()
    config = json.loads((src / "config.json").read_text())
    V = int(config["vocab_size"])
    if V > len(ALPHABET) or config.get("model_type") != "llama" or not (src / "model.safetensors").exists():
        raise UsageError(f"`--target` {str(src)!r}: the mistral.rs export takes a Llama checkpoint with "
                         f"model.safetensors and at most {len(ALPHABET)} tokens (one character each); got model_type "
                         f"{config.get('model_type')!r}, vocab_size {V}")
    root = Path(os.environ.get("SPECVERIFY_MISTRALRS_CACHE") or Path.home() / ".cache" / "specverify" / "mistralrs")
    dest = root / f"{src.name}-{_key(src)}"
    if (dest / STAMP).exists():
        return dest
    root.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{dest.name}.staging-", dir=root))
    try:
        rope = (config.get("rope_parameters") or {}).get("rope_theta", config.get("rope_theta", 10000.0))
        (stage / "config.json").write_text(json.dumps({**config, "rope_theta": rope}, indent=1))
        shutil.copyfile(src / "model.safetensors", stage / "model.safetensors")
        (stage / "tokenizer.json").write_text(json.dumps(_tokenizer(V)))
        (stage / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast",
                                                                  "add_bos_token": False, "add_eos_token": False}))
        (stage / STAMP).write_text(json.dumps({"source": src.name, "sha256_16": _key(src), "alphabet": ALPHABET[:V],
                                               "rope_theta": rope}, indent=1))
        try:
            os.replace(stage, dest)
        except OSError:  # another process exported the same bytes first: keep its folder
            if not (dest / STAMP).exists():
                raise
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return dest


def make_job(reqs, *, model: str, controls, kv: str = "f32", prefix_caching: bool = True, max_seqs: int = 32) -> dict:
    """The worker's job for the requests ``reqs`` (:class:`harness.samples.producers.Request`)."""
    V = len(json.loads((Path(model) / STAMP).read_text())["alphabet"])
    return {"model": str(model), "alphabet": ALPHABET[:V], "requests": [[r.request_id, r.prompt_id, list(r.prompt_ids)]
                                                                         for r in reqs],
            "max_new_tokens": controls.max_new_tokens, "temperature": controls.temperature, "top_k": controls.top_k,
            "top_p": controls.top_p, "max_seqs": int(max_seqs), "prefix_cache_n": 16 if prefix_caching else 0,
            "kv": kv, "out": ""}


def run_worker(job: dict, python: str, timeout: float = 7200.0) -> tuple[list[dict], dict]:
    """Run the worker on ``job``; (records as dicts, its summary).  SamplerError (exit 3) naming the engine's
    error when it fails."""
    if not Path(python).exists():
        raise UsageError(f"`--mistralrs-python` must be the Python of an environment with mistralrs (make "
                         f"mistralrs-venv); got {python!r}, which does not exist")
    return run_job(job, python, WORKER, "mistral.rs", timeout)


def replayed(reqs, done: set) -> int:
    """How many leading requests a resumed run replays: the file must hold exactly a prefix of ``reqs``, because
    the engine's stream restarts at the same point in every process (module docstring)."""
    k = len(done)
    if {r.request_id for r in reqs[:k]} != set(done):
        raise UsageError(f"`--out` holds {k} completions that are not the first {k} requests of this run: mistral.rs "
                         f"cannot be seeded on CPU and replays the same stream in every process, so a run resumes only "
                         f"from a file it wrote itself, in order")
    return k


def produce_mistralrs(reqs, writer: SampleWriter, *, python: str, target: str, controls, progress: bool = True,
                      **job_kw) -> int:
    """Export the model, run the requests the file lacks through mistral.rs (replaying those it holds, unwritten:
    :func:`replayed`); the number of records written."""
    skip = replayed(list(reqs), set(writer.done))
    if skip == len(reqs):
        return 0
    model = export(target)
    job = {**make_job(reqs, model=str(model), controls=controls, **job_kw), "replay": skip}
    records, summary = run_worker(job, python)
    n = writer.write_batch(parse_record(r) for r in records)
    summary.update(model=Path(target).name, export=model.name, replayed=skip)
    if progress:
        print(f"mistralrs {summary['engine']['version']}: {summary['tokens']} tokens in {summary['generate_s']:.1f} s "
              f"({summary['tokens_per_s']:.0f} tokens/s; plain decoding"
              + (f"; {skip} earlier requests replayed unwritten" if skip else "") + ")", file=sys.stderr)
    Path(str(writer.path) + ".engine.json").write_text(json.dumps(summary, indent=1))
    return n
