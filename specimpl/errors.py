"""Argument checking in scipy's manner: name the argument, echo the value, say what is allowed."""
from __future__ import annotations

__all__ = ["check_arg"]


def check_arg(ok: bool, name: str, value, allowed: str, exc=ValueError) -> None:
    """Raise ``exc`` naming ``name`` and its bad ``value`` unless ``ok``."""
    if not ok:
        raise exc(f"`{name}` must be {allowed}; got {value!r}")
