"""A tiny OpenAI-compatible completions server on 127.0.0.1, serving samples from our own sampler.

    with OpenAIStub(target, draft) as srv:           # starts on a free port, stops on exit
        url = srv.url                                 # "http://127.0.0.1:<port>/v1"

For tests and controls only: ``POST /v1/completions`` with a token-id prompt (``"prompt": [ids]``) and
``n = 1``; it draws one completion with ``fn`` (a generate function, default our autoregressive sampler)
under the request's temperature / top_k / top_p, and answers in the completions schema with
``logprobs.tokens`` as ``"token_id:N"`` (as vLLM's ``return_tokens_as_token_ids``) and
``logprobs.token_logprobs`` scored by the target (float32 forward, float64 warp).  A request ``seed``
seeds its own generator; unseeded requests draw from the server's one generator (``shared_stream=True``
is the engine bug where every unseeded request restarts the same stream).  ``fail_first`` answers the
first requests with HTTP 503 and ``drop_first`` drops the connection halfway through the body of the first
responses it draws (a promised Content-Length, half of it sent: the client's ``IncompleteRead``), to
exercise retries; ``served`` counts completed requests.  Refuses
``min_p > 0``, ``n != 1`` and text prompts (HTTP 400 / 422).
"""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Callable, Optional

import torch

from harness.samples.producers import autoregressive_sampler
from specimpl.result import PAD
from specimpl.sampling import SamplingConfig
from harness.samples.scoring import score_records

__all__ = ["OpenAIStub"]


class OpenAIStub:
    def __init__(self, target, draft=None, fn: Callable = autoregressive_sampler, *, k: int = 4,
                 eos_token_id: Optional[int] = 257, seed: int = 0, fail_first: int = 0, shared_stream: bool = False,
                 drop_first: int = 0):
        self.target, self.draft, self.fn, self.k, self.eos = target, draft, fn, k, eos_token_id
        self.seed, self.fail_left, self.shared_stream = seed, fail_first, shared_stream
        self.drop_left = drop_first
        self.gen = torch.Generator().manual_seed(seed)
        self.lock = threading.Lock()
        self.served = 0
        self.requests = 0
        self.httpd, self.thread = None, None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> "OpenAIStub":
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                stub._handle(self)

            def log_message(self, *a):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)

    # ------------------------------------------------------------------------------------------------
    def _send(self, h, code: int, obj: dict, drop: bool = False) -> None:
        data = json.dumps(obj).encode()
        h.send_response(code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data[:len(data) // 2] if drop else data)
        if drop:
            h.wfile.flush()
            h.close_connection = True

    def _handle(self, h) -> None:
        with self.lock:
            self.requests += 1
            fail = self.fail_left > 0
            self.fail_left -= int(fail)
        if h.path.rstrip("/") != "/v1/completions":
            return self._send(h, 404, {"error": {"message": f"no route {h.path}"}})
        if fail:
            return self._send(h, 503, {"error": {"message": "overloaded (stub: fail_first)"}})
        body = json.loads(h.rfile.read(int(h.headers.get("Content-Length", 0))) or b"{}")
        prompt = body.get("prompt")
        if not (isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt)):
            return self._send(h, 422, {"error": {"message": "the stub takes token-id prompts only"}})
        if float(body.get("min_p", 0) or 0) > 0 or int(body.get("n", 1)) != 1:
            return self._send(h, 400, {"error": {"message": "the stub applies no min_p and serves n = 1"}})
        resp = self._complete(prompt, body)
        with self.lock:
            drop = self.drop_left > 0
            self.drop_left -= int(drop)
        return self._send(h, 200, resp, drop=drop)

    def _generator(self, body) -> torch.Generator:
        if body.get("seed") is not None:
            return torch.Generator().manual_seed(int(body["seed"]))
        if self.shared_stream:
            return torch.Generator().manual_seed(self.seed)
        return self.gen

    def _complete(self, prompt: list, body: dict) -> dict:
        t = float(body.get("temperature", 1.0))
        cfg = SamplingConfig(greedy=True) if t == 0 else SamplingConfig(
            temperature=t, top_k=int(body.get("top_k") or 0) or None, top_p=float(body.get("top_p", 1.0)))
        T = int(body.get("max_tokens", 16))
        with self.lock:
            res = self.fn(self.target, self.draft, [prompt], k=self.k, max_new_tokens=T, config=cfg,
                          eos_token_id=self.eos, generator=self._generator(body))
            out = [int(x) for x in res.tokens[0].tolist() if x != PAD]
            sc = score_records(self.target, [SimpleNamespace(prompt_ids=tuple(prompt), output_ids=tuple(out),
                                                             request_id="stub")], cfg, progress=False)
            self.served += 1
        lp = [float(x) for x in sc.logp[0, :len(out)]]
        ended = bool(out) and out[-1] == self.eos
        as_ids = bool(body.get("return_tokens_as_token_ids"))
        return {"id": f"cmpl-{self.served}", "object": "text_completion", "model": body.get("model"),
                "choices": [{"index": 0, "text": bytes(x for x in out if x < 256).decode("latin-1"),
                             "finish_reason": "stop" if ended else "length",
                             "logprobs": {"tokens": [f"token_id:{x}" if as_ids else chr(x) for x in out],
                                          "token_logprobs": lp}}]}
