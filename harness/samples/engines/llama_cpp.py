"""llama.cpp (through ``llama-cpp-python``) as a sample producer: the Python API on token ids, and the
OpenAI-compatible HTTP server that the package ships.

    from harness.samples.engines.llama_cpp import load_llama, api_records, PLAIN
    llm = load_llama("target.gguf", kv="float32", draft_k=4)          # prompt-lookup speculation, k = 4
    recs = api_records(llm, prompts, per_prompt=8, max_new_tokens=64, seed=0, engine=engine_block(llm, ...))

Plain sampling must be asked for: llama-cpp-python's defaults (``Llama.generate``: temp 0.8, top_k 40,
top_p 0.95, min_p 0.05; the server adds repeat_penalty 1.1) are *not* sampling from the model.
:data:`PLAIN` sets every stage of its sampler chain (penalties, top-k, typical, top-p, min-p,
temperature, then the seeded ``dist`` draw) to the identity, and the records say so: ``controls`` holds
the fields of the sample format, ``engine.sampler`` the rest of what was applied.

Two levels of verification, and why:

* **Python API, token level.**  ``Llama.generate`` takes token ids and yields token ids, so the records
  hold exactly what was sampled.  Generation continues past EOS (``engine.eos``: every completion has
  ``max_new_tokens`` tokens, as in :mod:`harness.verify.realmodel`); the scorer conditions on EOS like any token.
* **HTTP server, byte level up to the first lost token.**  The server accepts only text prompts and
  returns text: each token of a byte-level vocabulary is decoded on its own with ``errors="ignore"``, so
  a byte >= 0x80 (and EOS) comes back as an empty string.  :func:`http_record` recovers the ids from the
  per-token ``logprobs.tokens`` (one entry per sampled token): a one-character ASCII string is its byte;
  the server stops at EOS without listing it (``finish_reason`` "stop": EOS appended, ``logprobs`` null
  since the engine reported none for it); the first other token ends the recoverable prefix, and the record
  keeps that prefix only (``x_truncated_at``; ``finish_reason`` "stop", the nearest v1 has for a completion
  cut short by something other than length or EOS).  The cut is a
  stopping time (it depends on the tokens so far), so each kept token's PIT is still U(0, 1) given its
  past: the pooled and per-position tests stay valid; consecutive-pair tests do not (keeping a pair
  depends on the first token) and are left to the API path.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import urllib.error
import urllib.request
from typing import Iterator, Optional

import numpy as np

from harness.samples.engines.server import free_port, local_server
from harness.samples.format import FORMAT, parse_record
from specimpl.errors import check_arg

__all__ = ["PLAIN", "KV_TYPES", "FORMAT", "load_llama", "api_logits", "CountingPromptLookup", "count_accepted",
           "request_seed", "api_records", "api_record", "spec_steps", "engine_block", "api_engine_block", "serve", "http_completion", "http_record", "prompt_text", "write_jsonl",
           "ServerError", "free_port", "LLAMA_CPP_DEFAULTS"]

# every stage of llama-cpp-python's sampler chain set to the identity: plain sampling from the model
PLAIN = dict(temp=1.0, top_k=0, top_p=1.0, min_p=0.0, typical_p=1.0, repeat_penalty=1.0, frequency_penalty=0.0,
             presence_penalty=0.0, mirostat_mode=0)
# llama-cpp-python's own defaults (Llama.generate / create_completion): NOT plain sampling; the lossy control
LLAMA_CPP_DEFAULTS = dict(temp=0.8, top_k=40, top_p=0.95, min_p=0.05, typical_p=1.0, repeat_penalty=1.0,
                          frequency_penalty=0.0, presence_penalty=0.0, mirostat_mode=0)
KV_TYPES = {"float32": 0, "float16": 1}  # ggml_type of the KV cache (GGML_TYPE_F32, GGML_TYPE_F16)


class ServerError(RuntimeError):
    """The llama.cpp server did not start, or answered with an error."""


def _llama_cpp():
    try:
        import llama_cpp
    except ImportError as e:  # an optional extra
        raise ImportError(f"llama.cpp runs need the `llama-cpp-python` package (pip install -e '.[llama]'); {e}") from None
    return llama_cpp


class CountingPromptLookup:
    """llama-cpp-python's prompt-lookup draft (``LlamaPromptLookupDecoding``), recording each proposal
    (position of its first token, the tokens) so that acceptance can be counted afterwards."""

    def __init__(self, num_pred_tokens: int, max_ngram_size: int = 2):
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
        self.inner = LlamaPromptLookupDecoding(max_ngram_size=max_ngram_size, num_pred_tokens=num_pred_tokens)
        self.num_pred_tokens, self.max_ngram_size = num_pred_tokens, max_ngram_size
        self.proposals: list[tuple[int, list[int]]] = []

    def __call__(self, input_ids, /, **kwargs):
        out = self.inner(input_ids, **kwargs)
        if len(out):
            self.proposals.append((int(len(input_ids)), [int(t) for t in out]))
        return out

    def accepted(self, sequence: list[int]) -> tuple[int, int]:
        """(accepted, drafted) of the recorded proposals against the final ``sequence``: :func:`count_accepted`."""
        return count_accepted(self.proposals, sequence)


def count_accepted(proposals, sequence: list[int]) -> tuple[int, int]:
    """(accepted, drafted) over ``proposals`` (start position, drafted tokens) against the final ``sequence``
    (prompt + output): a drafted token stands when it and every drafted token before it match."""
    acc = drafted = 0
    for start, toks in proposals:
        drafted += len(toks)
        for i, t in enumerate(toks):
            if start + i >= len(sequence) or sequence[start + i] != t:
                break
            acc += 1
    return acc, drafted


def load_llama(gguf_path, *, kv: str = "float32", n_ctx: int = 512, draft_k: Optional[int] = None,
               n_threads: int = 1, seed: int = 0):
    """A ``llama_cpp.Llama`` on ``gguf_path``: all logits kept, KV cache in ``kv`` ("float32" | "float16"),
    flash attention off; ``draft_k``: prompt-lookup speculation proposing up to k tokens (None: off)."""
    check_arg(kv in KV_TYPES, "kv", kv, f"one of {sorted(KV_TYPES)}")
    check_arg(draft_k is None or (isinstance(draft_k, int) and draft_k >= 1), "draft_k", draft_k, "None or an integer >= 1")
    llama_cpp = _llama_cpp()
    draft = CountingPromptLookup(draft_k) if draft_k else None
    return llama_cpp.Llama(model_path=str(gguf_path), n_ctx=n_ctx, n_batch=n_ctx, logits_all=True,
                           type_k=KV_TYPES[kv], type_v=KV_TYPES[kv], flash_attn=False, draft_model=draft,
                           n_threads=n_threads, n_threads_batch=n_threads, seed=seed, verbose=False)


def api_logits(llm, ids: list[int], step: Optional[int] = None) -> np.ndarray:
    """The (T, V) next-token logits of ``ids`` from a fresh context (float64 copy of llama.cpp's float32):
    row t is the law of token t + 1 given ids[:t + 1].  ``step``: evaluate that many tokens per call
    (1: incremental, as in plain generation; None: all at once)."""
    llm.reset()
    step = step or len(ids)
    for s in range(0, len(ids), step):
        llm.eval(ids[s:s + step])
    return np.array(llm.scores[:len(ids)], dtype=np.float64)


def engine_block(llm, *, kv: str, gguf_path, interface: str, extra: Optional[dict] = None,
                 sampler: Optional[dict] = None) -> dict:
    """The ``engine`` object of the records: name, version, speculation, KV dtype, the sampler chain applied."""
    import llama_cpp
    draft = getattr(llm, "draft_model", None)
    spec = ({"method": "prompt_lookup", "k": draft.num_pred_tokens, "max_ngram_size": draft.max_ngram_size}
            if draft is not None else None)
    return {"name": "llama.cpp", "package": "llama-cpp-python", "version": llama_cpp.__version__,
            "interface": interface, "speculative": spec, "dtype": "float32", "kv_dtype": kv, "flash_attn": False,
            "model": os.path.basename(str(gguf_path)), "sampler": dict(sampler or PLAIN), **(extra or {})}


def api_engine_block(llm, *, kv: str, gguf_path, sampler: Optional[dict] = None) -> dict:
    """:func:`engine_block` of the Python-API records (:func:`api_records`: token ids in and out, generation
    past EOS)."""
    return engine_block(llm, kv=kv, gguf_path=gguf_path, interface="python api (Llama.generate, token ids)",
                        extra={"eos": "ignored: generation continues past EOS"}, sampler=sampler)


def _controls(max_new_tokens: int, seed: Optional[int], sampler: Optional[dict] = None) -> dict:
    c = sampler or PLAIN
    return {"temperature": c["temp"], "top_k": c["top_k"], "top_p": c["top_p"], "min_p": c["min_p"],
            "seed": seed, "max_new_tokens": max_new_tokens, "greedy": False, "stop": []}


def _generate(llm, prompt: list[int], max_new_tokens: int, seed: int, sampler: Optional[dict] = None) -> list[int]:
    """``max_new_tokens`` tokens after ``prompt`` (past EOS), from a fresh context, seeded; ``sampler``: the
    sampler-chain settings (default :data:`PLAIN`)."""
    llm.reset()  # no prefix reuse across requests: a request's tokens depend on its seed only
    llm.set_seed(seed)
    out, gen = [], llm.generate(prompt, reset=True, **(sampler or PLAIN))
    try:
        for tok in gen:
            out.append(int(tok))
            if len(out) == max_new_tokens:
                break
    finally:
        gen.close()
    return out


def request_seed(seed: int, *index: int) -> int:
    """The seed of one request, distinct per (seed, *index) — (seed, prompt, sample) here, (seed, request
    index) for ``sample --engine llama-cpp``: a uint32 below 0xFFFFFFFF, which llama.cpp reads as "draw a
    random seed" (LLAMA_DEFAULT_SEED)."""
    return int(np.random.SeedSequence([seed, *index]).generate_state(1)[0]) % 0xFFFFFFFF


def api_records(llm, prompts: list[list[int]], *, per_prompt: int, max_new_tokens: int, seed: int, engine: dict,
                progress: bool = False, sampler: Optional[dict] = None) -> Iterator[dict]:
    """Records (sample format) of ``per_prompt`` completions of each prompt through ``Llama.generate``
    (``sampler``: default :data:`PLAIN`; the records' controls say what was applied)."""
    from tqdm import tqdm
    draft = getattr(llm, "draft_model", None)
    bar = tqdm(total=len(prompts) * per_prompt, desc="llama.cpp api", disable=not progress, file=sys.stderr)
    for i, prompt in enumerate(prompts):
        for j in range(per_prompt):
            s = request_seed(seed, i, j)
            rec = api_record(llm, f"p{i}-s{j}", f"p{i}", prompt, s, _controls(max_new_tokens, s, sampler), engine,
                             sampler)
            if draft is not None:
                acc, drafted = draft.accepted(list(prompt) + rec["output_ids"])
                rec["x_draft"] = {"accepted": acc, "drafted": drafted, "proposals": len(draft.proposals)}
            bar.update()
            yield rec
    bar.close()


def api_record(llm, request_id: str, prompt_id: str, prompt: list[int], seed: int, controls: dict, engine: dict,
               sampler: Optional[dict] = None) -> dict:
    """One completion through ``Llama.generate`` (:func:`_generate`) as a sample-format record; with a
    prompt-lookup draft, ``x_spec`` holds the engine's steps and drafted tokens (:func:`spec_steps`)."""
    draft = getattr(llm, "draft_model", None)
    if draft is not None:
        draft.proposals.clear()
    tic = time.perf_counter()
    out = _generate(llm, list(prompt), controls["max_new_tokens"], seed, sampler)
    rec = {"format": FORMAT, "request_id": request_id, "prompt_id": prompt_id, "prompt_ids": list(prompt),
           "output_ids": out, "finish_reason": "length", "controls": controls, "logprobs": None, "engine": engine,
           "x_wall_s": time.perf_counter() - tic}
    if draft is not None:
        rec["x_spec"] = spec_steps(draft.proposals, len(prompt), out)
    return rec


def spec_steps(proposals: list, prompt_len: int, out: list[int]) -> dict:
    """The engine's steps over one completion, from the draft hook's ``proposals`` (start index in
    prompt + output of the first drafted token, the drafted tokens): ``drafted`` / ``accepted`` per step and
    the step's ``draft_tokens``, in the layout of :func:`harness.samples.rules.judged_states` (token 0 comes
    from the prefill; a step starting at output index s emits accepted + 1 tokens; a step without a
    proposal drafts 0).  Only drafted tokens whose position lies inside the completion count: generation stops at
    ``max_new_tokens``, so a proposal reaching past the end was never judged there (counting it would add a
    rejection that did not happen)."""
    by_start = {start - prompt_len: toks for start, toks in proposals}
    drafted, accepted, tokens = [], [], []
    s = 1
    while s < len(out):
        toks = by_start.get(s, [])[:len(out) - s]
        a = 0
        while a < len(toks) and s + a < len(out) and out[s + a] == toks[a]:
            a += 1
        drafted.append(len(toks)), accepted.append(a), tokens.append(list(toks))
        s += a + 1
    return {"drafted": drafted, "accepted": accepted, "draft_tokens": tokens}


def write_jsonl(path, records) -> int:
    """Write ``records`` (sample-format dicts, each checked by :func:`harness.samples.format.parse_record`, ``x_``
    extensions kept) to ``path``, replacing it whole (a temporary file renamed into place: a run's file is
    never mixed with an earlier run's, which the append-only :class:`harness.samples.format.SampleWriter`
    would resume from); the count."""
    path = os.fspath(path)
    tmp = f"{path}.tmp-{os.getpid()}"
    n = 0
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            for r in records:
                parse_record(r)  # a record the readers would refuse is never written
                f.write(json.dumps(r, separators=(",", ":")) + "\n")
                n += 1
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return n


# --------------------------------------------------------------------------------------------- server
@contextlib.contextmanager
def serve(gguf_path, *, kv: str = "float32", draft_k: Optional[int] = None, n_ctx: int = 512, port: Optional[int] = None,
          startup_timeout_s: float = 120.0, log_path=None, seed: int = 0):
    """``python -m llama_cpp.server`` on 127.0.0.1 (float32 weights, ``kv`` cache, flash attention off,
    prompt-lookup speculation with ``draft_k`` tokens or none), up within ``startup_timeout_s``; yields its
    base URL and stops it on exit (:func:`harness.samples.engines.server.local_server`)."""
    check_arg(kv in KV_TYPES, "kv", kv, f"one of {sorted(KV_TYPES)}")
    port = port or free_port()
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf_path), "--host", "127.0.0.1",
           "--port", str(port), "--n_ctx", str(n_ctx), "--type_k", str(KV_TYPES[kv]), "--type_v", str(KV_TYPES[kv]),
           "--flash_attn", "false", "--n_threads", "1", "--n_threads_batch", "1", "--seed", str(seed)]
    if draft_k:
        cmd += ["--draft_model", "prompt-lookup", "--draft_model_num_pred_tokens", str(draft_k)]
    url = f"http://127.0.0.1:{port}"
    with local_server(cmd, f"{url}/v1/models", timeout_s=startup_timeout_s, error=ServerError,
                      what="llama_cpp.server", log_path=log_path):
        yield url


def http_completion(url: str, prompt: str, *, max_tokens: int, seed: int, timeout_s: float = 120.0) -> dict:
    """POST /v1/completions with plain-sampling controls (every server default overridden) and per-token
    log-probabilities; the parsed JSON answer."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": PLAIN["temp"], "top_k": PLAIN["top_k"],
            "top_p": PLAIN["top_p"], "min_p": PLAIN["min_p"], "repeat_penalty": PLAIN["repeat_penalty"],
            "frequency_penalty": 0.0, "presence_penalty": 0.0, "mirostat_mode": 0, "seed": seed, "logprobs": 1,
            "stream": False}
    req = urllib.request.Request(f"{url}/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        raise ServerError(f"POST {url}/v1/completions: HTTP {e.code}: {e.read()[:300]!r}") from None


def prompt_text(prompt: list[int], bos: int) -> Optional[str]:
    """The text the server tokenizes back into ``prompt`` (BOS first, then printable ASCII bytes; the
    GGUF's add_bos_token prepends BOS), or None when the prompt has other bytes."""
    body = prompt[1:] if prompt and prompt[0] == bos else None
    if body is None or not all(32 <= b < 127 or b in (9, 10) for b in body):
        return None
    return bytes(body).decode("ascii")


def http_record(answer: dict, *, request_id: str, prompt_id: str, prompt_ids: list[int], max_new_tokens: int,
                seed: int, eos: int, engine: dict) -> dict:
    """A record from a /v1/completions answer: output ids recovered from ``logprobs.tokens`` up to the first
    token the text interface lost (see the module notes)."""
    choice = answer["choices"][0]
    lp = choice.get("logprobs") or {}
    texts, lps = lp.get("tokens"), lp.get("token_logprobs")
    if texts is None or lps is None or len(texts) != len(lps):
        raise ServerError(f"{request_id}: the answer has no per-token logprobs (logprobs.tokens / token_logprobs)")
    ids, cut = [], None
    for t, s in enumerate(texts):
        b = s.encode("utf-8")
        if len(b) == 1 and b[0] < 0x80:
            ids.append(b[0])
        else:  # a byte >= 0x80 (or a special token): its id is lost
            cut = t
            break
    known = [float(x) for x in lps[:len(ids)]]
    if cut is None and choice.get("finish_reason") == "stop":  # the server stops at EOS and leaves it out
        ids.append(eos)
        finish, logprobs = "eos", None
    else:
        finish, logprobs = ("length" if len(ids) == max_new_tokens else "stop"), known
    rec = {"format": FORMAT, "request_id": request_id, "prompt_id": prompt_id, "prompt_ids": list(prompt_ids),
           "output_ids": ids, "finish_reason": finish, "controls": _controls(max_new_tokens, seed),
           "logprobs": logprobs, "engine": engine, "x_server_finish_reason": choice.get("finish_reason"),
           "x_token_logprobs": known, "x_text": choice.get("text")}
    if cut is not None:
        rec["x_truncated_at"] = {"position": cut, "reason": "token text lost by the HTTP interface (byte >= 0x80)"}
    return rec
