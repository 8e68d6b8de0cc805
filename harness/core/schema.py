"""A small schema for the settings files (TOML tables): known keys, their types and ranges.

A schema is a dict ``key -> Field`` (a setting) or ``key -> dict`` (a nested table, itself a schema).
:func:`validate` checks one file's table against it and raises :class:`harness.core.errors.UsageError`
(exit 2) with one line naming the file and the dotted key::

    sd/bad.toml: key `sampling.temprature` is not a known setting; known: ['greedy', 'temperature', ...]
    sd/bad.toml: `draft.kind` must be one of 'same', 'noisy', 'tempered', 'disjoint', 'random'; got 'bogus'
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Optional

from harness.core.errors import UsageError

__all__ = ["Field", "integer", "number", "boolean", "text", "one_of", "validate", "fail"]


@dataclass(frozen=True)
class Field:
    """A setting: ``ok(value)`` says whether the value is allowed, ``allowed`` says so in words."""

    ok: Callable[[Any], bool]
    allowed: str


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def integer(lo: Optional[int] = None, hi: Optional[int] = None, allowed: Optional[str] = None) -> Field:
    """An integer in [lo, hi] (either bound optional)."""
    words = allowed or ("an integer" + (f" >= {lo}" if lo is not None and hi is None else "") +
                        (f" in [{lo}, {hi}]" if lo is not None and hi is not None else "") +
                        (f" <= {hi}" if hi is not None and lo is None else ""))
    return Field(lambda v: _is_int(v) and (lo is None or v >= lo) and (hi is None or v <= hi), words)


def number(lo: Optional[float] = None, hi: Optional[float] = None, *, lo_open: bool = False,
           allowed: Optional[str] = None) -> Field:
    """A finite number (int or float) above ``lo`` (``lo_open``: strictly) and at most ``hi``."""
    def ok(v):
        return _is_num(v) and (lo is None or (v > lo if lo_open else v >= lo)) and (hi is None or v <= hi)
    if allowed is None:
        left = "(" if lo_open else "["
        allowed = (f"a number in {left}{lo}, {hi}]" if lo is not None and hi is not None else
                   f"a number {'>' if lo_open else '>='} {lo}" if lo is not None else "a finite number")
    return Field(ok, allowed)


def boolean() -> Field:
    return Field(lambda v: isinstance(v, bool), "true or false")


def text(ok: Callable[[str], bool] = lambda s: True, allowed: str = "a string") -> Field:
    return Field(lambda v: isinstance(v, str) and ok(v), allowed)


def one_of(*choices) -> Field:
    return Field(lambda v: v in choices, "one of " + ", ".join(repr(c) for c in choices))


def fail(source: str, key: str, value, allowed: str) -> None:
    """Raise the UsageError of a bad ``key`` = ``value`` in the file ``source``."""
    raise UsageError(f"{source}: `{key}` must be {allowed}; got {value!r}")


def validate(table: dict, schema: dict, source: str, where: str = "", free: tuple = ()) -> None:
    """Check ``table`` (one file's settings) against ``schema``: every key known, every value allowed.
    Keys of tables named in ``free`` (dotted) are not checked (their content is someone else's)."""
    if not isinstance(table, dict):
        fail(source, where.rstrip(".") or "(file)", table, "a table")
    for key, v in table.items():
        dotted = f"{where}{key}"
        spec = schema.get(key)
        if spec is None:
            raise UsageError(f"{source}: key `{dotted}` is not a known setting; known: {sorted(schema)}")
        if isinstance(spec, dict):
            if not isinstance(v, dict):
                fail(source, dotted, v, f"a table (with keys {sorted(spec)})")
            if dotted not in free:
                validate(v, spec, source, f"{dotted}.", free)
        elif not spec.ok(v):
            fail(source, dotted, v, spec.allowed)
