"""Samples from any OpenAI-compatible completions endpoint (vLLM, SGLang, llama.cpp's server, ...).

    spec = EndpointSpec(url="http://127.0.0.1:8000/v1", model="tiny", controls=Controls(1.0, 0, 1.0, 32))
    with SampleWriter("spec.jsonl") as w:
        produce_openai(requests, spec, w)

Each request is one ``POST {url}/completions`` with ``n = 1``, the prompt as token ids (``prompt_format
= "ids"``; ``"text"`` decodes them with ``tokenizer`` first), every sampling control sent explicitly
(``temperature``, ``top_p``, ``top_k``, ``min_p`` — engines' own defaults, e.g. llama-cpp-python's
``min_p = 0.05``, would otherwise change the law), ``logprobs = 1`` and ``return_tokens_as_token_ids``
(vLLM's flag: tokens come back as ``"token_id:N"``).  The output token ids are read, in order of
preference, from ``"token_id:N"`` tokens, a ``token_ids`` list in the choice, or — when the server gives
only text — by re-encoding the text with ``tokenizer`` (recorded as ``engine.token_source =
"retokenized_text"``: a check at the level of text, not of the engine's tokens, and without logprobs).

The recorded controls are the ones *requested* (``engine.controls_source = "requested"``): an endpoint
does not report what it applied.  finish_reason: the server's "length" -> "length"; its "stop" ->
"eos" when ``controls.stop`` is empty (EOS appended when the server left it out; that row's logprobs are
then dropped), else "stop"; with ``ignore_eos`` sent, a "stop" before max_new_tokens is recorded as drawn,
finish_reason "stop" with ``early_stop`` (the server did not apply the requested controls: a finding that
``verify-samples`` reports, never a crash).

Requests run on ``concurrency`` threads; a connection error (refused, reset, dropped mid-response: an
``IncompleteRead``, ``RemoteDisconnected`` or a body cut short of valid JSON), a timeout, HTTP 429 or 5xx is
retried up to ``retries`` times with exponential backoff (``backoff * 2**i`` seconds, plus up to 25 %
jitter), each retry announced on stderr; any other HTTP error, a malformed response, or a request still
failing after its retries fails the run (:class:`~harness.core.errors.SamplerError`, exit 3, one line
naming the request id) once the requests in flight have finished and been written: the file keeps every
completed record, and the same command resumes.  Completed requests already in the file are never sent again.
"""
from __future__ import annotations

import http.client
import json
import math
import random
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from typing import Optional

from harness.core.errors import SamplerError
from harness.core.options import check_option
from harness.samples.format import Controls, SampleRecord, SampleWriter
from harness.samples.producers import Request

__all__ = ["EndpointSpec", "request_body", "parse_choice", "post_json", "complete", "produce_openai",
           "EndpointError", "RETRY_STATUS"]

RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


# what a server that drops or resets the connection raises, before, while or after it answers
TRANSIENT = (urllib.error.URLError, TimeoutError, ConnectionError, http.client.HTTPException)


class EndpointError(RuntimeError):
    """A request that failed for good (after its retries, or at once for a client error)."""


def check_endpoint(url, timeout: float, backoff: float) -> None:
    """The options of an endpoint, before any request; UsageError naming the option and its value."""
    from urllib.parse import urlsplit
    parts = urlsplit(url) if isinstance(url, str) else None
    check_option(parts is not None and parts.scheme in ("http", "https") and bool(parts.hostname), "--url", url,
                 "an http:// or https:// URL with a host, e.g. http://127.0.0.1:8000/v1")
    try:
        port = parts.port  # ValueError for a port that is not a number in [0, 65535]
    except ValueError:
        port = -1
    check_option(port is None or 1 <= port <= 65535, "--url", url, "a URL whose port, if given, is an integer in "
                 "[1, 65535], e.g. http://127.0.0.1:8000/v1")
    check_waits(timeout, backoff)


def check_waits(timeout: float, backoff: float) -> None:
    """``--timeout`` and ``--backoff``, finite (checked for every engine: a NaN is refused, not ignored)."""
    check_option(timeout > 0 and math.isfinite(timeout), "--timeout", timeout, "a number of seconds > 0")
    check_option(backoff >= 0 and math.isfinite(backoff), "--backoff", backoff, "a number of seconds >= 0")


@dataclass(frozen=True)
class EndpointSpec:
    """Where and how to request completions.  ``seed``: base of the per-request seeds sent to the engine
    (None: no seed is sent, the engine draws from its own stream)."""

    url: str
    model: str
    controls: Controls
    prompt_format: str = "ids"
    tokenizer: object = None
    eos_token_id: Optional[int] = None
    seed: Optional[int] = None
    concurrency: int = 4
    retries: int = 5
    backoff: float = 0.5
    timeout: float = 120.0
    engine: dict = field(default_factory=dict)
    ignore_eos: bool = False  # send "ignore_eos": true (vLLM, SGLang): every completion has max_new_tokens tokens


def request_body(spec: EndpointSpec, req: Request, seed: Optional[int]) -> dict:
    c = spec.controls
    if spec.prompt_format == "ids":
        prompt = list(req.prompt_ids)
    else:
        prompt = spec.tokenizer.decode(list(req.prompt_ids))
    body = {"model": spec.model, "prompt": prompt, "max_tokens": c.max_new_tokens, "n": 1, "stream": False,
            "temperature": 0.0 if c.greedy else c.temperature, "top_p": c.top_p, "top_k": c.top_k, "min_p": c.min_p,
            "logprobs": 1, "echo": False, "return_tokens_as_token_ids": True}
    if c.stop:
        body["stop"] = list(c.stop)
    if seed is not None:
        body["seed"] = seed
    if spec.ignore_eos:
        body["ignore_eos"] = True
    return body


def _output_ids(spec: EndpointSpec, choice: dict) -> tuple[list[int], Optional[list[float]], str]:
    lp = choice.get("logprobs") or {}
    toks = lp.get("tokens")
    if toks and all(isinstance(t, str) and t.startswith("token_id:") for t in toks):
        ids = [int(t.split(":", 1)[1]) for t in toks]
        return ids, lp.get("token_logprobs"), "token_id"
    if isinstance(choice.get("token_ids"), list):
        return [int(t) for t in choice["token_ids"]], lp.get("token_logprobs"), "token_ids"
    if spec.tokenizer is None:
        raise ValueError("the response has neither 'token_id:N' tokens nor 'token_ids'; pass --tokenizer to "
                         "re-encode its text")
    return list(spec.tokenizer.encode(choice.get("text", ""), add_special_tokens=False)), None, "retokenized_text"


def parse_choice(spec: EndpointSpec, req: Request, resp: dict, seed: Optional[int]) -> SampleRecord:
    """The record of one response; ValueError naming what is malformed."""
    choices = resp.get("choices") if isinstance(resp, dict) else None
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
        raise ValueError(f"expected one choice in 'choices'; got {str(resp)[:200]!r}")
    ch = choices[0]
    ids, logprobs, source = _output_ids(spec, ch)
    c = replace(spec.controls, seed=seed)
    fr = ch.get("finish_reason")
    early = None
    if fr == "length":
        reason = "length"
    elif fr == "stop" and spec.ignore_eos and not c.stop and len(ids) < c.max_new_tokens:  # stopped anyway: a finding
        reason, early = "stop", {"token_id": ids[-1] if ids else None,
                                 "reason": f"the server ended the completion after {len(ids)} of {c.max_new_tokens} "
                                           "tokens (finish_reason 'stop') although ignore_eos was sent"}
    elif fr == "stop":
        reason = "stop" if c.stop else "eos"
        if reason == "eos" and (not ids or ids[-1] != spec.eos_token_id):
            if spec.eos_token_id is None:
                raise ValueError("finish_reason 'stop' without the EOS token in the output; pass --eos-token-id")
            ids, logprobs = ids + [spec.eos_token_id], None
    else:
        raise ValueError(f"finish_reason must be 'length' or 'stop'; got {fr!r}")
    if logprobs is not None and not isinstance(logprobs, list):
        raise ValueError(f"'token_logprobs' must be a list of numbers; got {str(logprobs)[:80]!r}")
    if logprobs is not None and len(logprobs) != len(ids):  # never stored as null in silence: the record is refused
        raise ValueError(f"'token_logprobs' holds {len(logprobs)} values for the {len(ids)} output tokens "
                         f"({source}); one log-probability per token is required")
    if logprobs is not None and any(x is None for x in logprobs):
        logprobs = None  # a server that omits some (null entries): the record keeps none
    eng = {"name": "openai-compatible", "url": spec.url, "model": spec.model, "token_source": source,
           "controls_source": "requested", **spec.engine}
    return SampleRecord(req.request_id, req.prompt_id, req.prompt_ids, tuple(ids), reason, c, eng,
                        None if logprobs is None else tuple(float(x) for x in logprobs), early_stop=early)


class TruncatedBody(ValueError):
    """A body that is not complete JSON (most often the connection closed before the server finished; retried,
    as a dropped connection is)."""


def post_json(url: str, body: dict, timeout: float) -> dict:
    data = json.dumps(body).encode()
    r = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(r, timeout=timeout) as resp:  # noqa: S310 - the user's endpoint
        raw = resp.read()
    try:
        return json.loads(raw.decode("utf-8"))
    except ValueError as e:  # UnicodeDecodeError is one
        raise TruncatedBody(f"{len(raw)} bytes that are not complete JSON ({e})") from None


def _describe(e: BaseException) -> str:
    reason = getattr(e, "reason", None)
    return " ".join(f"{type(e).__name__}: {e if reason is None else reason}".split())[:200]


def complete(spec: EndpointSpec, req: Request, seed: Optional[int], sleep=time.sleep, say=None) -> SampleRecord:
    """One request with its retries (each announced by ``say``, default stderr); :class:`EndpointError`
    when it fails for good."""
    url = spec.url.rstrip("/") + "/completions"
    body = request_body(spec, req, seed)
    say = say or (lambda msg: print(msg, file=sys.stderr, flush=True))
    last = ""
    for attempt in range(spec.retries + 1):
        try:
            return parse_choice(spec, req, post_json(url, body, spec.timeout), seed)
        except urllib.error.HTTPError as e:
            detail = e.read()[:300].decode("utf-8", "replace")
            last = " ".join(f"HTTP {e.code}: {detail}".split())
            if e.code not in RETRY_STATUS:
                raise EndpointError(f"request {req.request_id}: {last}") from None
        except (TRANSIENT + (TruncatedBody,)) as e:
            last = _describe(e)
        except ValueError as e:
            raise EndpointError(f"request {req.request_id}: malformed response: {e}") from None
        if attempt < spec.retries:
            delay = spec.backoff * 2 ** attempt * (1 + 0.25 * random.random())
            say(f"request {req.request_id}: {last}; retry {attempt + 1} of {spec.retries} in {delay:.2f} s")
            sleep(delay)
    raise EndpointError(f"request {req.request_id}: failed after {spec.retries + 1} attempts "
                        f"({spec.retries} retries); last: {last}")


def _seed(spec: EndpointSpec, index: int) -> Optional[int]:
    return None if spec.seed is None else (spec.seed * 1_000_003 + index) % (2 ** 63)


def produce_openai(requests: list[Request], spec: EndpointSpec, writer: SampleWriter, progress: bool = True) -> int:
    """Request every completion not yet in ``writer``'s file, ``spec.concurrency`` at a time, and append
    each record as it arrives; the number written.  SamplerError (exit 3) when a request fails for good."""
    from tqdm import tqdm
    todo = [(i, r) for i, r in enumerate(requests) if r.request_id not in writer.done]
    bar = tqdm(total=len(requests), initial=len(requests) - len(todo), desc=f"sample {spec.url}",
               disable=not progress, file=sys.stderr)
    say = (lambda msg: bar.write(msg, file=sys.stderr)) if progress else None
    written, failed = 0, None
    with ThreadPoolExecutor(max_workers=spec.concurrency) as pool:
        it = iter(todo)
        running = set()
        try:
            while True:
                while failed is None and len(running) < spec.concurrency:  # after a failure: drain, send no more
                    nxt = next(it, None)
                    if nxt is None:
                        break
                    running.add(pool.submit(complete, spec, nxt[1], _seed(spec, nxt[0]), say=say))
                if not running:
                    break
                finished, running = wait(running, return_when=FIRST_COMPLETED)
                for f in finished:
                    try:
                        rec = f.result()
                    except EndpointError as e:
                        failed = failed or e
                        continue
                    writer.write(rec)
                    written += 1
                    bar.update(1)
        finally:
            bar.close()
    if failed is not None:
        raise SamplerError(f"the endpoint failed: {failed}; {written} new completions written to {writer.path}, "
                           f"{len(writer.done)} of {len(requests)} in it: the same command resumes (completed "
                           "requests are not sent again)")
    return written
