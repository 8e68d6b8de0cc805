"""One integer search for the planners: the smallest n at which a monotone condition first holds.

Every "smallest n such that ..." planner (:func:`harness.stats.bounds.tv_upper_bound_n_for`,
:func:`harness.stats.continuous.ad_n_for_distance`, :func:`harness.stats.eprocess.eprocess_n_for_kl`, the
log-likelihood planners, :func:`harness.verify.battery.chunk_t_n_for_deviation`) brackets n by doubling and
then bisects the bracket.  :func:`smallest_n` is that search and :func:`bisect_n` its second half; both
take ``short(n)``: True while n is too small (the planner's deviation at n is still above the target).

The result is exact for a monotone ``short`` and, for any ``short``, the very n the hand-written loops
returned: the bracket grows from ``start`` by ``step`` (doubling by default), its lower end is always
``hi // 2``, and the bisection keeps ``short(lo)`` and ``not short(hi)`` and returns ``hi``.
"""
from __future__ import annotations

from typing import Callable, Optional

from specimpl.errors import check_arg

__all__ = ["smallest_n", "bisect_n"]


def bisect_n(short: Callable[[int], bool], lo: int, hi: int) -> int:
    """The smallest n in (lo, hi] with ``short(n)`` False, by bisection, given ``short(lo)`` (or lo below
    the domain) and not ``short(hi)``; returns ``hi`` when hi - lo <= 1."""
    check_arg(isinstance(lo, int) and isinstance(hi, int) and lo < hi, "lo, hi", (lo, hi), "integers with lo < hi")
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if short(mid) else (lo, mid)
    return hi


def _double(n: int) -> int:
    return 2 * n


def smallest_n(short: Callable[[int], bool], start: int = 1, *, n_max: Optional[int] = None,
               step: Callable[[int], int] = _double, down: bool = False) -> int:
    """The smallest n with ``short(n)`` False: exponential search from ``start`` (``step``, doubling by
    default, while ``short(hi)``), then :func:`bisect_n` on (hi // 2, hi].

    ``n_max``: past it the search stops and returns ``n_max + 1`` (None: no limit).  ``down``: a ``start``
    that is already long enough is halved while its half is too (``start`` is a guess that may lie above
    the answer), so the answer below a generous guess is found too."""
    check_arg(isinstance(start, int) and start >= 1, "start", start, "an integer >= 1")
    hi = start
    while short(hi):
        hi = step(hi)
        if n_max is not None and hi > n_max:
            return n_max + 1
    lo = hi // 2
    while down and lo >= 1 and not short(lo):
        lo, hi = lo // 2, lo
    return bisect_n(short, lo, hi)
