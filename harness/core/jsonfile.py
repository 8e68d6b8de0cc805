"""JSON from files a user hands us (sample files, stored results, configs, model folders), decoded so that what
cannot be decoded is always a :class:`json.JSONDecodeError` -- also a nesting deeper than Python's decoder can
follow, which the standard library reports as a ``RecursionError`` (probe 47: a 300,000-deep ``meta.json`` given
to ``report`` was exit 3 with a RecursionError, not exit 2 naming the file)."""
from __future__ import annotations

import json
from pathlib import Path

from harness.core.errors import UsageError

__all__ = ["loads", "read_json"]


def loads(text):
    """``json.loads(text)``; a nesting too deep to decode is a JSONDecodeError (a ValueError), as bad syntax is."""
    try:
        return json.loads(text)
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply to decode", text if isinstance(text, str) else "", 0) from None


def read_json(path, what: str):
    """The JSON held by file ``path``; UsageError naming ``what`` (e.g. "`--results`") and the file when it cannot
    be read or decoded."""
    try:
        return loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise UsageError(f"{what} {str(path)!r} is not readable JSON: {e}") from None
