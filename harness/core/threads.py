"""Threads of one process: run a function with torch and the BLAS libraries at a set thread count.

    with_threads(1, lambda: work())     # torch, numpy's and scipy's OpenBLAS at one thread, restored after
"""
from __future__ import annotations

from typing import Callable

from harness.core.backends import limit_threads

__all__ = ["with_threads"]


def with_threads(threads: int, fn: Callable):
    """``fn()`` with torch and the BLAS libraries using ``threads`` threads (at least 1), restored afterwards
    (:func:`harness.core.backends.limit_threads`; the children :func:`harness.core.forkmap.fork_map` forks
    inherit them, pool and Ray workers set their own)."""
    restore = limit_threads(threads)
    try:
        return fn()
    finally:
        restore()
