"""Shared argument checks, defaults and small helpers of the statistics (private to the package).

Notation as in :mod:`harness.stats`.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from specimpl.errors import check_arg

__all__ = ["DEFAULT_ALPHA", "DEFAULT_POWER", "DEFAULT_MIN_EXPECTED"]


DEFAULT_ALPHA = 1e-4
DEFAULT_POWER = 0.99
DEFAULT_MIN_EXPECTED = 100.0


def _check_level(name: str, value: float) -> None:
    check_arg(isinstance(value, (int, float, np.floating)) and not isinstance(value, bool) and 0 < value < 1,
              name, value, "a number in (0, 1)")


def _check_n(name: str, value) -> None:
    check_arg(isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
              and math.isfinite(value) and value >= 1, name, value, "a sample size >= 1")


def _as_counts(name: str, counts) -> np.ndarray:
    a = np.asarray(counts)
    check_arg(a.ndim == 1 and a.size >= 1, name, f"array of shape {a.shape}", "a non-empty 1-D array of counts")
    check_arg(np.all(np.isfinite(a)) and np.all(a >= 0) and np.all(a == np.round(a)), name,
              "entries that are negative, fractional or not finite", "non-negative integer counts")
    return a.astype(np.int64)


def _as_probs(name: str, probs, size: Optional[int] = None, atol: float = 1e-6) -> np.ndarray:
    p = np.asarray(probs, dtype=np.float64)
    check_arg(p.ndim == 1 and p.size >= 1, name, f"array of shape {p.shape}", "a non-empty 1-D array")
    if size is not None:
        check_arg(p.size == size, name, f"{p.size} cells", f"as many cells as the counts ({size})")
    check_arg(bool(np.all(np.isfinite(p)) and np.all(p >= 0)), name, "entries that are negative or not finite",
              "probabilities >= 0")
    s = p.sum()
    check_arg(abs(s - 1) <= atol, name, f"probabilities summing to {s!r}", "probabilities that sum to 1")
    return p / s


def _tv(x: np.ndarray, y: np.ndarray) -> float:
    """TV = ½ Σ |x − y| between two laws on the same cells (every TV estimate here is this one)."""
    return 0.5 * float(np.abs(x - y).sum())


def _rng(seed) -> np.random.Generator:
    if isinstance(seed, np.random.Generator):
        return seed
    check_arg(seed is None or (isinstance(seed, (int, np.integer)) and not isinstance(seed, bool)), "rng", seed,
              "a numpy Generator or an integer seed")
    return np.random.default_rng(seed)
