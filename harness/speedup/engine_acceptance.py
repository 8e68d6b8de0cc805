"""An engine's own acceptance counters, read from the files it (or a serving benchmark) writes: per draft position,
how many drafts reached the position and how many of those were accepted (``tune --acceptance FILE``).

Formats, told apart by the file's extension (docs/roofline.md, "tune from an engine's own numbers"):

- **Prometheus text** (any extension but the three below; e.g. ``curl -s host:8000/metrics > m.prom``): vLLM's
  counters ``vllm:spec_decode_num_drafts`` and ``vllm:spec_decode_num_accepted_tokens_per_pos{position="i"}``
  (the ``_total`` suffix optional; series of several engines or models are summed), and
  ``vllm:spec_decode_num_draft_tokens`` when present.  ``accepted_per_pos[i]`` counts the drafts whose first
  i + 1 tokens were all accepted, so position i was tried by ``accepted_per_pos[i - 1]`` of them
  (``num_drafts`` for i = 0).  That assumes every draft proposed all k tokens; where ``num_draft_tokens`` is
  below k x ``num_drafts`` the shortfall is reported (``short_drafts``).
- **JSONL** (``.jsonl``), one request a line: vLLM's per-request ``spec_decode_metrics`` (``per_step_drafted`` and
  ``per_step_accepted``, the ``detailed`` level; or its ``acceptance_histogram`` with ``num_spec_tokens``),
  either at the top level or under ``spec_decode_metrics``, or a harness sample record's ``x_spec``
  (``drafted``, ``accepted``); a line whose counters are null (no speculation ran) is skipped.  Position i of a
  step was tried when the step drafted more than i tokens and accepted at least i, accepted when it accepted
  more than i.
- **CSV** (``.csv``): columns ``position`` (0-based, consecutive) and either ``accepted`` and ``drafts`` (counts as
  vLLM's: drafts whose first position + 1 tokens were accepted, of ``drafts`` in all) or ``rate`` (that count
  over the drafts: vLLM's logged "Per-position acceptance rate") with an optional ``drafts`` column.
- **JSON** (``.json``): ``{"num_drafts": N, "accepted_per_pos": [...]}`` or ``{"per_position_rate": [...]}``
  (``num_drafts`` optional).

Rates without a draft count carry no sampling error: the intervals are then the points, and ``tune`` says that
a tie cannot be judged.  Bad input is a :class:`~harness.core.errors.UsageError` naming the file and the key.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from harness.core.errors import UsageError
from harness.core.jsonfile import loads, read_json
from harness.stats import clopper_pearson

__all__ = ["PositionCounts", "read_acceptance", "from_steps", "from_cumulative", "from_prometheus"]


@dataclass(frozen=True)
class PositionCounts:
    """Per draft position i = 0..k-1: ``tried[i]`` drafts reached it (every earlier position accepted),
    ``accepted[i]`` of them accepted it; ``counted``: whether these are counts (False: rates scaled to a nominal
    count, no sampling error); ``fmt``, ``short_drafts`` (drafts that proposed fewer than k tokens, when known)."""

    tried: np.ndarray  # (k,) float
    accepted: np.ndarray  # (k,) float
    counted: bool
    fmt: str
    short_drafts: float = 0.0

    @property
    def k(self) -> int:
        return int(self.tried.size)

    @property
    def alpha(self) -> np.ndarray:
        """(k,) conditional acceptance per position (0 where no draft reached it)."""
        return np.divide(self.accepted, self.tried, out=np.zeros(self.k), where=self.tried > 0)

    def frame(self, level: float = 0.95) -> pd.DataFrame:
        """Per position: tried, accepted, alpha and its exact (Clopper-Pearson) interval (the point without counts)."""
        rows = []
        for i, (n, x, a) in enumerate(zip(self.tried, self.accepted, self.alpha)):
            lo, hi = clopper_pearson(int(round(x)), int(round(n)), 1 - level) if self.counted else (a, a)
            rows.append({"position": i, "tried": n, "accepted": x, "alpha": a, "alpha_lo": lo, "alpha_hi": hi})
        return pd.DataFrame(rows)


def _bad(path, key: str, value, allowed: str) -> UsageError:
    return UsageError(f"`--acceptance` {str(path)}: `{key}` must be {allowed}; got {value!r}")


def from_cumulative(drafts: float, acc_per_pos, counted: bool, fmt: str, path, key: str,
                    draft_tokens: float | None = None) -> PositionCounts:
    """vLLM's form: ``acc_per_pos[i]`` drafts (of ``drafts``) accepted their first i + 1 tokens."""
    a = np.asarray(acc_per_pos, dtype=float)
    if a.ndim != 1 or a.size < 1 or not np.isfinite(a).all() or (a < 0).any():
        raise _bad(path, key, list(acc_per_pos), "a non-empty list of finite counts >= 0")
    if not (math.isfinite(drafts) and drafts > 0):
        raise _bad(path, "num_drafts", drafts, "a count > 0")
    tried = np.concatenate([[drafts], a[:-1]])
    if (a > tried + 1e-9).any():
        raise _bad(path, key, a.tolist(), f"non-increasing over positions and at most num_drafts = {drafts:g} "
                                          "(drafts accepting position i accepted every earlier one)")
    short = 0.0 if draft_tokens is None else max(0.0, a.size * drafts - draft_tokens) / a.size
    return PositionCounts(tried, a, counted, fmt, short)


def from_steps(steps, path, fmt: str = "jsonl") -> PositionCounts:
    """(drafted, accepted) per verify step -> counts per position."""
    steps = [(int(d), int(a)) for d, a in steps]
    if not steps:
        raise UsageError(f"`--acceptance` {str(path)}: no speculative step in the file (every line's counters are "
                         "null or empty: speculation never ran)")
    k = max(d for d, _ in steps)
    if k < 1 or any(a > d or a < 0 or d < 0 for d, a in steps):
        bad = next((d, a) for d, a in steps if a > d or a < 0 or d < 0) if k >= 1 else (k, 0)
        raise _bad(path, "per_step_accepted", bad, "a count in [0, drafted] with drafted >= 1 somewhere")
    d, a = np.array([s[0] for s in steps]), np.array([s[1] for s in steps])
    pos = np.arange(k)[:, None]  # (k, 1) against (steps,)
    tried = ((d[None, :] > pos) & (a[None, :] >= pos)).sum(1).astype(float)
    accepted = (a[None, :] > pos).sum(1).astype(float)
    return PositionCounts(tried, accepted, True, fmt, float((d < k).sum()))


def _steps_of(obj: dict, path, line: int):
    """The (drafted, accepted) steps of one JSONL object, or None when its counters are null."""
    if "x_spec" in obj:
        x = obj["x_spec"]
        if x is None:
            return None
        if not isinstance(x, dict) or "drafted" not in x or "accepted" not in x:
            raise UsageError(f"`--acceptance` {str(path)}: line {line}: `x_spec` must hold `drafted` and `accepted` "
                             f"lists; got {str(x)[:80]!r}")
        return _pairs(x["drafted"], x["accepted"], path, line, "x_spec")
    m = obj.get("spec_decode_metrics", obj)
    if m is None:
        return None
    if isinstance(m, dict) and m.get("per_step_drafted") is not None:
        return _pairs(m["per_step_drafted"], m.get("per_step_accepted"), path, line, "per_step_drafted")
    if isinstance(m, dict) and m.get("acceptance_histogram") is not None:
        h, k = m["acceptance_histogram"], m.get("num_spec_tokens", len(m["acceptance_histogram"]) - 1)
        if not (isinstance(h, list) and all(isinstance(c, int) and c >= 0 for c in h) and k == len(h) - 1):
            raise UsageError(f"`--acceptance` {str(path)}: line {line}: `acceptance_histogram` must be a list of "
                             f"num_spec_tokens + 1 counts >= 0; got {str(h)[:80]!r}")
        return [(k, j) for j, c in enumerate(h) for _ in range(c)]
    raise UsageError(f"`--acceptance` {str(path)}: line {line}: no `x_spec`, `per_step_drafted` or "
                     "`acceptance_histogram` (a vLLM per-request spec_decode_metrics or a harness sample record)")


def _pairs(drafted, accepted, path, line, key):
    ok = (isinstance(drafted, list) and isinstance(accepted, list) and len(drafted) == len(accepted)
          and all(isinstance(v, int) and not isinstance(v, bool) for v in drafted + accepted))
    if not ok:
        raise UsageError(f"`--acceptance` {str(path)}: line {line}: `{key}` and its accepted list must be integer "
                         f"lists of one length; got {str(drafted)[:60]!r} / {str(accepted)[:60]!r}")
    return list(zip(drafted, accepted))


def _read_jsonl(path: Path, text: str) -> PositionCounts:
    steps = []
    for i, ln in enumerate(text.splitlines(), 1):
        if not ln.strip():
            continue
        try:
            obj = loads(ln)
        except ValueError as e:
            raise UsageError(f"`--acceptance` {str(path)}: line {i} is not JSON: {e}") from None
        if not isinstance(obj, dict):
            raise UsageError(f"`--acceptance` {str(path)}: line {i} must be a JSON object; got {str(obj)[:60]!r}")
        steps += _steps_of(obj, path, i) or []
    return from_steps(steps, path)


_PROM = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)(\s+\S+)?\s*$")


def from_prometheus(text: str, path) -> PositionCounts:
    """vLLM's spec-decode counters out of a /metrics scrape."""
    tot: dict[str, float] = {}
    per_pos: dict[int, float] = {}
    for i, ln in enumerate(text.splitlines(), 1):
        if not ln.strip() or ln.startswith("#"):
            continue
        m = _PROM.match(ln.strip())
        if not m:
            raise UsageError(f"`--acceptance` {str(path)}: line {i} is not a Prometheus sample "
                             f"(`name{{labels}} value`); got {ln[:80]!r}")
        name = m.group(1).removesuffix("_total")
        if not name.startswith("vllm:spec_decode_num_"):
            continue
        try:
            v = float(m.group(3))
        except ValueError:
            raise _bad(path, m.group(1), m.group(3), "a number") from None
        if name == "vllm:spec_decode_num_accepted_tokens_per_pos":
            p = re.search(r'position="(\d+)"', m.group(2) or "")
            if p is None:
                raise _bad(path, m.group(1), m.group(2), 'labels with position="<integer>"')
            per_pos[int(p.group(1))] = per_pos.get(int(p.group(1)), 0.0) + v
        else:
            tot[name] = tot.get(name, 0.0) + v
    key = "vllm:spec_decode_num_accepted_tokens_per_pos"
    if "vllm:spec_decode_num_drafts" not in tot or not per_pos:
        missing = "vllm:spec_decode_num_drafts" if "vllm:spec_decode_num_drafts" not in tot else key
        raise UsageError(f"`--acceptance` {str(path)}: `{missing}` is missing (a /metrics scrape of a vLLM server "
                         "with speculative decoding, e.g. `curl -s host:8000/metrics`)")
    if sorted(per_pos) != list(range(len(per_pos))):
        raise _bad(path, key, sorted(per_pos), "positions 0..k-1, each once")
    return from_cumulative(tot["vllm:spec_decode_num_drafts"], [per_pos[i] for i in range(len(per_pos))], True,
                           "prometheus", path, key, tot.get("vllm:spec_decode_num_draft_tokens"))


def _rates(rates, drafts, path, key: str, fmt: str) -> PositionCounts:
    r = np.asarray(rates, dtype=float)
    if r.ndim != 1 or r.size < 1 or not np.isfinite(r).all() or (r < 0).any() or (r > 1).any():
        raise _bad(path, key, list(rates), "a non-empty list of rates in [0, 1]")
    counted = drafts is not None
    n = float(drafts) if counted else 1e6  # no count: a nominal one, no sampling error used
    return from_cumulative(n, r * n if not counted else np.round(r * n), counted, fmt, path, key)


def _read_csv(path: Path) -> PositionCounts:
    try:
        df = pd.read_csv(path)
    except (OSError, ValueError, pd.errors.ParserError) as e:
        raise UsageError(f"`--acceptance` {str(path)} is not a readable CSV: {' '.join(str(e).split())[:200]}") from None
    if "position" not in df or not ({"accepted", "drafts"} <= set(df) or "rate" in df):
        raise _bad(path, "columns", list(df.columns), "position and either accepted + drafts, or rate (+ drafts)")
    df = df.sort_values("position")
    if df.position.tolist() != list(range(len(df))):
        raise _bad(path, "position", df.position.tolist(), "0, 1, ..., k-1, each once")
    drafts = None
    if "drafts" in df:
        d = pd.to_numeric(df.drafts, errors="coerce")
        if d.isna().any() or d.nunique() != 1:
            raise _bad(path, "drafts", df.drafts.tolist(), "one count of drafts, the same on every row")
        drafts = float(d.iloc[0])
    if {"accepted", "drafts"} <= set(df):
        acc = pd.to_numeric(df.accepted, errors="coerce")
        if acc.isna().any():
            raise _bad(path, "accepted", df.accepted.tolist(), "counts")
        return from_cumulative(drafts, acc.to_numpy(), True, "csv", path, "accepted")
    rate = pd.to_numeric(df.rate, errors="coerce")
    return _rates(rate.to_numpy(), drafts, path, "rate", "csv")


def _read_json(path: Path) -> PositionCounts:
    obj = read_json(path, "`--acceptance`")
    if not isinstance(obj, dict):
        raise _bad(path, "(top level)", str(obj)[:60], "a JSON object")
    drafts = obj.get("num_drafts")
    if drafts is not None and not (isinstance(drafts, (int, float)) and not isinstance(drafts, bool)):
        raise _bad(path, "num_drafts", drafts, "a count > 0")
    if "accepted_per_pos" in obj:
        if drafts is None:
            raise _bad(path, "num_drafts", None, "given with accepted_per_pos (a count > 0)")
        return from_cumulative(float(drafts), _list(obj, "accepted_per_pos", path), True, "json", path,
                               "accepted_per_pos")
    if "per_position_rate" in obj:
        return _rates(_list(obj, "per_position_rate", path), drafts, path, "per_position_rate", "json")
    raise _bad(path, "keys", sorted(obj), "accepted_per_pos (+ num_drafts) or per_position_rate")


def _list(obj, key, path):
    v = obj[key]
    if not (isinstance(v, list) and v and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v)):
        raise _bad(path, key, v, "a non-empty list of numbers")
    return v


def read_acceptance(path) -> PositionCounts:
    """The per-position counts in ``path`` (format by extension: .jsonl, .csv, .json, else Prometheus text)."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"`--acceptance` must be a file (Prometheus text, .jsonl, .csv or .json); got {str(path)!r}")
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return _read_csv(path)
    if suffix == ".json":
        return _read_json(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"`--acceptance` {str(path)!r} is not readable text: {e}") from None
    return _read_jsonl(path, text) if suffix == ".jsonl" else from_prometheus(text, path)
