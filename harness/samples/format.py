"""The engine sample file: one completion per line (JSONL, UTF-8), format ``specverify.samples/1``.

    {"format": "specverify.samples/1", "request_id": "p3-s17", "prompt_id": "p3",
     "prompt_ids": [256, 100, 101], "output_ids": [32, 61, 257], "finish_reason": "eos",
     "controls": {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "seed": null,
                  "max_new_tokens": 64, "greedy": false, "stop": []},
     "logprobs": [-1.2, -0.3, -2.0], "engine": {"name": "ours", "speculative": {"method": "draft", "k": 4}}}

Fields (all required unless marked optional; any other top-level key is refused unless it starts with
``x_``, an extension the reader keeps but does not interpret):

format         "specverify.samples/1" on every line (the version: a reader refuses versions it does not know)
request_id     non-empty string, unique in the file: the resume key of the append-only writer
prompt_id      non-empty string; completions of one prompt share it (the independence checks group by it)
prompt_ids     the prompt's token ids: a non-empty list of integers >= 0
output_ids     the generated token ids (integers >= 0), EOS included when it was emitted; at most
               ``controls.max_new_tokens`` of them
finish_reason  "length" (exactly max_new_tokens tokens), "eos" (the last token is the end-of-sequence
               token) or "stop" (a stop sequence of ``controls.stop`` ended the completion)
controls       what the engine APPLIED (not what was asked): temperature (0 = greedy, or a number >= 1e-6),
               top_k (integer >= 0; 0 = off), top_p (number in (0, 1]), max_new_tokens (integer >= 1);
               optional: min_p (number in [0, 1), default 0 = off), seed (integer or null), greedy
               (bool, default false), stop (list of strings, default []).  Unknown keys are refused.
logprobs       optional (null or absent): the engine's log p(output_ids[t] | prompt, output_ids[:t]) of the
               law it sampled from, one finite number <= 0 per output token
engine         an object with at least "name" (string); free-form otherwise (version, speculative
               method and k, dtype, url, ...)
early_stop     optional (null or absent): the engine ended this completion before max_new_tokens although the
               requested controls did not allow it (an EOS it applied when asked to ignore EOS, e.g.
               transformers' generation-config EOS): {"token_id": the last token (null when output_ids is
               empty), "reason": free text}.  Only with finish_reason "stop" and fewer than max_new_tokens
               tokens.  A finding about the engine, recorded as drawn (never redone on resume), and judged by
               ``verify-samples``: a violation of the requested controls (lossy w.r.t. the requested law)

:func:`read_samples` is strict: the first malformed line raises :class:`SampleFormatError` (a
:class:`~harness.core.errors.UsageError`, exit 2) reading ``FILE:LINE: field 'X': what is wrong``.
:class:`SampleWriter` appends records, one ``write`` + flush + fsync per line, and skips request ids the
file already holds (a completed request is never redone); a last line cut short by a crash (no newline)
is removed when the writer opens the file, and said so.  The writer holds the file's exclusive lock
(``flock``) while it is open: a second writer of the same file is refused (:class:`SampleFileLocked`,
exit 2).  A file that holds a request id twice anyway (written by hand, or by an older version with two
writers at once) is repaired by ``python -m harness samples-dedupe --samples FILE``
(:mod:`harness.samples.dedupe_cli`).
"""
from __future__ import annotations

import json
import math
import os
import sys
import threading
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Iterable, Optional

from harness.core.errors import UsageError
from harness.core import jsonfile
from harness.core.limits import check_bytes, fmt_bytes
from specimpl.sampling import MIN_TEMPERATURE

__all__ = ["FORMAT", "FINISH_REASONS", "Controls", "SampleRecord", "SampleFormatError", "parse_record",
           "read_samples", "SampleWriter", "SampleFileLocked", "lock_exclusive"]

FORMAT = "specverify.samples/1"
FINISH_REASONS = ("length", "eos", "stop")
_TOP = ("format", "request_id", "prompt_id", "prompt_ids", "output_ids", "finish_reason", "controls", "logprobs",
        "engine", "early_stop")
_OPTIONAL_TOP = ("logprobs", "early_stop")


class SampleFormatError(UsageError):
    """A malformed sample file: ``FILE:LINE: field 'X': what is wrong`` (exit 2)."""


class _FieldError(ValueError):
    def __init__(self, name: str, msg: str):
        super().__init__(f"field {name!r}: {msg}")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


@dataclass(frozen=True)
class Controls:
    """The sampling controls an engine applied to one completion."""

    temperature: float
    top_k: int
    top_p: float
    max_new_tokens: int
    min_p: float = 0.0
    seed: Optional[int] = None
    greedy: bool = False
    stop: tuple = ()

    def law_key(self) -> tuple:
        """The controls that define the sampled law (everything but the seed)."""
        return (float(self.temperature), int(self.top_k), float(self.top_p), int(self.max_new_tokens),
                float(self.min_p), bool(self.greedy or self.temperature == 0), tuple(self.stop))

    def to_json(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["stop"] = list(self.stop)
        return d

    @classmethod
    def parse(cls, obj) -> "Controls":
        if not isinstance(obj, dict):
            raise _FieldError("controls", f"must be an object; got {obj!r}")
        names = {f.name for f in fields(cls)}
        extra = sorted(set(obj) - names)
        if extra:
            raise _FieldError(f"controls.{extra[0]}", f"unknown control (allowed: {sorted(names)})")
        for req in ("temperature", "top_k", "top_p", "max_new_tokens"):
            if req not in obj:
                raise _FieldError(f"controls.{req}", "missing")
        checks = {
            "temperature": (lambda v: _is_num(v) and (v == 0 or v >= MIN_TEMPERATURE),
                            f"0 (greedy) or a finite number >= {MIN_TEMPERATURE:g} (below that the target's law "
                            "cannot be formed in float32)"),
            "top_k": (lambda v: _is_int(v) and v >= 0, "an integer >= 0 (0: off)"),
            "top_p": (lambda v: _is_num(v) and 0 < v <= 1, "a number in (0, 1]"),
            "max_new_tokens": (lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
            "min_p": (lambda v: _is_num(v) and 0 <= v < 1, "a number in [0, 1) (0: off)"),
            "seed": (lambda v: v is None or _is_int(v), "an integer or null"),
            "greedy": (lambda v: isinstance(v, bool), "true or false"),
            "stop": (lambda v: isinstance(v, list) and all(isinstance(s, str) and s for s in v),
                     "a list of non-empty strings"),
        }
        for name, v in obj.items():
            ok, allowed = checks[name]
            if not ok(v):
                raise _FieldError(f"controls.{name}", f"must be {allowed}; got {v!r}")
        kw = dict(obj)
        kw["stop"] = tuple(kw.get("stop", ()))
        return cls(**kw)


@dataclass(frozen=True)
class SampleRecord:
    """One completion of a sample file (see the module docstring for the fields)."""

    request_id: str
    prompt_id: str
    prompt_ids: tuple
    output_ids: tuple
    finish_reason: str
    controls: Controls
    engine: dict
    logprobs: Optional[tuple] = None
    extra: dict = field(default_factory=dict, compare=False)
    early_stop: Optional[dict] = None  # {"token_id", "reason"}: the engine stopped early against the controls

    def to_json(self) -> dict:
        d = {"format": FORMAT, "request_id": self.request_id, "prompt_id": self.prompt_id,
             "prompt_ids": list(self.prompt_ids), "output_ids": list(self.output_ids),
             "finish_reason": self.finish_reason, "controls": self.controls.to_json(),
             "logprobs": None if self.logprobs is None else list(self.logprobs), "engine": self.engine}
        if self.early_stop is not None:
            d["early_stop"] = dict(self.early_stop)
        d.update(self.extra)
        return d

    def line(self) -> str:
        """The record as one JSONL line (no newline)."""
        return json.dumps(self.to_json(), separators=(",", ":"), allow_nan=False)


def _ids(obj: dict, name: str, nonempty: bool) -> tuple:
    v = obj[name]
    if not isinstance(v, list) or (nonempty and not v):
        raise _FieldError(name, f"must be a {'non-empty ' if nonempty else ''}list of integers >= 0; got "
                                f"{_short(v)}")
    for i, x in enumerate(v):
        if not (_is_int(x) and x >= 0):
            raise _FieldError(name, f"entry {i} must be an integer >= 0; got {x!r}")
    return tuple(v)


def _short(v) -> str:
    s = repr(v)
    return s if len(s) <= 60 else s[:57] + "..."


def _logprobs(obj: dict, n: int) -> Optional[tuple]:
    v = obj.get("logprobs")
    if v is None:
        return None
    if not isinstance(v, list) or len(v) != n:
        raise _FieldError("logprobs", f"must be null or a list of {n} numbers (one per output token); got "
                                      f"{_short(v)}")
    for i, x in enumerate(v):
        if not (_is_num(x) and x <= 1e-6):
            raise _FieldError("logprobs", f"entry {i} must be a finite log-probability <= 0; got {x!r}")
    return tuple(float(x) for x in v)


def _early_stop(obj: dict, out: tuple, fr: str, max_new_tokens: int) -> Optional[dict]:
    v = obj.get("early_stop")
    if v is None:
        return None
    if not isinstance(v, dict) or "token_id" not in v or sorted(set(v) - {"token_id", "reason"}):
        raise _FieldError("early_stop", f"must be null or an object {{\"token_id\", \"reason\"}}; got {_short(v)}")
    tok, reason = v["token_id"], v.get("reason", "")
    if tok != (out[-1] if out else None):
        raise _FieldError("early_stop.token_id", f"must be the last output token ({out[-1] if out else None}); "
                                                 f"got {tok!r}")
    if not isinstance(reason, str):
        raise _FieldError("early_stop.reason", f"must be a string; got {_short(reason)}")
    if fr != "stop" or len(out) >= max_new_tokens:
        raise _FieldError("early_stop", f"is set but finish_reason is {fr!r} with {len(out)} of {max_new_tokens} "
                                        "tokens (an early stop has finish_reason 'stop' and fewer tokens)")
    return dict(v)


def _string(obj: dict, name: str) -> str:
    v = obj[name]
    if not isinstance(v, str) or not v:
        raise _FieldError(name, f"must be a non-empty string; got {v!r}")
    return v


def parse_record(obj) -> SampleRecord:
    """A :class:`SampleRecord` from one parsed JSON line; ValueError ``field 'X': ...`` when malformed."""
    if not isinstance(obj, dict):
        raise _FieldError("<line>", f"must be a JSON object; got {_short(obj)}")
    if "format" not in obj:
        raise _FieldError("format", f"missing (every line must carry \"format\": \"{FORMAT}\")")
    if obj["format"] != FORMAT:
        raise _FieldError("format", f"must be {FORMAT!r} (the version this reader knows); got {obj['format']!r}")
    for name in _TOP:
        if name not in obj and name not in _OPTIONAL_TOP:
            raise _FieldError(name, "missing")
    extra = sorted(k for k in obj if k not in _TOP and not str(k).startswith("x_"))
    if extra:
        raise _FieldError(extra[0], f"unknown field (allowed: {list(_TOP)}, or an extension named x_...)")
    controls = Controls.parse(obj["controls"])
    out = _ids(obj, "output_ids", nonempty=False)
    fr = obj["finish_reason"]
    if fr not in FINISH_REASONS:
        raise _FieldError("finish_reason", f"must be one of {list(FINISH_REASONS)}; got {fr!r}")
    if len(out) > controls.max_new_tokens:
        raise _FieldError("output_ids", f"holds {len(out)} tokens, more than controls.max_new_tokens = "
                                        f"{controls.max_new_tokens}")
    if fr == "length" and len(out) != controls.max_new_tokens:
        raise _FieldError("finish_reason", f"is 'length' but output_ids holds {len(out)} tokens, not "
                                           f"controls.max_new_tokens = {controls.max_new_tokens}")
    if fr == "eos" and not out:
        raise _FieldError("finish_reason", "is 'eos' but output_ids is empty (the EOS token is included)")
    eng = obj["engine"]
    if not isinstance(eng, dict) or not isinstance(eng.get("name"), str) or not eng.get("name"):
        raise _FieldError("engine", f"must be an object with a non-empty string \"name\"; got {_short(eng)}")
    return SampleRecord(_string(obj, "request_id"), _string(obj, "prompt_id"), _ids(obj, "prompt_ids", True), out,
                        fr, controls, eng, _logprobs(obj, len(out)),
                        {k: v for k, v in obj.items() if str(k).startswith("x_")},
                        _early_stop(obj, out, fr, controls.max_new_tokens))


def _parse_line(path: Path, lineno: int, text: str) -> SampleRecord:
    try:
        obj = jsonfile.loads(text)
    except json.JSONDecodeError as e:
        raise SampleFormatError(f"{path}:{lineno}: field '<line>': not valid JSON ({e.msg} at column {e.colno})")
    try:
        return parse_record(obj)
    except ValueError as e:
        raise SampleFormatError(f"{path}:{lineno}: {e}") from None


READ_FACTOR = 8  # bytes of memory per byte of a sample file while it is read (bytes, text, lines, records)


def read_samples(path, *, option: str = "--samples") -> list[SampleRecord]:
    """Every record of the sample file ``path``, in file order; :class:`SampleFormatError` (exit 2) on the
    first malformed line, a duplicate request_id, a missing or unreadable file, or a file with no records."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError:
        size = 0  # the read below names what is wrong
    check_bytes(f"`{option}`", str(path), READ_FACTOR * size,
                f"a {fmt_bytes(size)} file read whole: about {READ_FACTOR} bytes of memory per byte, its text, lines "
                "and parsed records")
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise SampleFormatError(f"`{option}` must be a readable sample file; got {str(path)!r} "
                                f"({e.strerror or e})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise SampleFormatError(f"{path}:{line}: field '<line>': not UTF-8 (byte {raw[e.start]:#04x})") from None
    records, seen = [], {}
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        rec = _parse_line(path, lineno, line)
        if rec.request_id in seen:
            raise SampleFormatError(f"{path}:{lineno}: field 'request_id': {rec.request_id!r} repeats line "
                                    f"{seen[rec.request_id]} (request ids are unique in a file; `python -m harness "
                                    f"samples-dedupe --samples {path}` keeps the first of each)")
        seen[rec.request_id] = lineno
        records.append(rec)
    if not records:
        raise SampleFormatError(f"`{option}` must hold at least one record; got {str(path)!r}, which holds none")
    return records


class SampleFileLocked(UsageError):
    """Another process holds a sample file's lock (exit 2)."""


def lock_exclusive(f, path: Path, option: str) -> None:
    """Take the exclusive advisory lock (``flock``) of the open file ``f`` or raise :class:`SampleFileLocked`:
    one writer per sample file (two ``sample --out same.jsonl`` at once would both append every request)."""
    try:
        import fcntl
    except ImportError:  # not a POSIX system: no lock
        return
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise SampleFileLocked(f"`{option}` {str(path)!r} is locked: another process is writing it (one writer per "
                               "sample file); wait for it to end, or write to another file") from None


class SampleWriter:
    """Append-only writer of a sample file; ``done`` holds the request ids already in it.

        with SampleWriter("spec.jsonl") as w:
            for rec in todo:
                if rec.request_id not in w.done:
                    w.write(rec)

    Opening reads the existing file strictly (a malformed line is an error, exit 2, and nothing is
    written), except a last line without its newline — a write cut short — which is truncated away and
    reported on stderr.  ``write`` validates the record, refuses a request id already written, and makes
    the line durable (flush + fsync) before returning; it may be called from several threads."""

    def __init__(self, path, *, quiet: bool = False):
        self.path = Path(path)
        self.quiet = quiet
        self.done: set[str] = set()
        self._lock = threading.Lock()
        self._f = None

    def __enter__(self) -> "SampleWriter":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self.path, "a", encoding="utf-8")
        try:
            lock_exclusive(self._f, self.path, "--out")
            self._drop_partial_line()
            if self.path.stat().st_size:
                self.done = {r.request_id for r in read_samples(self.path, option="--out")}
        except BaseException:
            self._f.close()
            self._f = None
            raise
        return self

    def __exit__(self, *exc) -> None:
        if self._f is not None:
            self._f.close()  # closing releases the lock
            self._f = None

    def _drop_partial_line(self) -> None:
        raw = self.path.read_bytes()
        if not raw or raw.endswith(b"\n"):
            return
        keep = raw.rfind(b"\n") + 1
        with open(self.path, "r+b") as f:
            f.truncate(keep)
        if not self.quiet:
            print(f"{self.path}: removed an unfinished last line ({len(raw) - keep} bytes, a write cut short); "
                  "its request will be redone", file=sys.stderr)

    def write(self, rec: SampleRecord) -> None:
        line = rec.line()
        parse_record(json.loads(line))  # the record must read back as written
        with self._lock:
            if rec.request_id in self.done:
                raise ValueError(f"request_id {rec.request_id!r} is already in {self.path} (append-only: a "
                                 "completed request is never redone)")
            self._f.write(line + "\n")
            self._f.flush()
            os.fsync(self._f.fileno())
            self.done.add(rec.request_id)

    def write_batch(self, records: Iterable[SampleRecord]) -> int:
        """Write the records not yet in the file with one flush + fsync for the whole batch (a large engine
        run: one fsync per line would dominate); a crash mid-batch leaves at most a torn last line, which the
        next open removes.  How many were written."""
        lines, ids = [], set()
        for r in records:
            if r.request_id in self.done or r.request_id in ids:
                continue
            line = r.line()
            parse_record(json.loads(line))
            lines.append(line), ids.add(r.request_id)
        with self._lock:
            self._f.write("".join(x + "\n" for x in lines))
            self._f.flush()
            os.fsync(self._f.fileno())
            self.done.update(ids)
        return len(ids)

    def write_all(self, records: Iterable[SampleRecord]) -> int:
        """Write the records not yet in the file; how many were written."""
        n = 0
        for r in records:
            if r.request_id not in self.done:
                self.write(r)
                n += 1
        return n
