"""Argument checking in scipy's manner: name the argument, echo the value, say what is allowed."""
from __future__ import annotations

import operator

__all__ = ["check_arg", "as_int"]


def check_arg(ok: bool, name: str, value, allowed: str, exc=ValueError) -> None:
    """Raise ``exc`` naming ``name`` and its bad ``value`` unless ``ok``."""
    if not ok:
        raise exc(f"`{name}` must be {allowed}; got {value!r}")


def as_int(value):
    """``value`` as a Python int when it is integer-like, else None.

    Integer-like: a Python int, a NumPy integer scalar, a 0-d integer tensor or array — anything with
    ``__index__`` — but not a bool (``True`` is no count).  Floats, even 4.0, are not integer-like.
    """
    if isinstance(value, bool) or getattr(value, "ndim", 0) != 0 or "bool" in str(getattr(value, "dtype", "")):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None
