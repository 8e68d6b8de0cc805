"""Exact binomial test of an acceptance count, its planners, and the Clopper–Pearson interval.

Notation as in :mod:`harness.stats`.
"""
from __future__ import annotations

import math

import numpy as np
from scipy import optimize, stats

from specimpl.errors import check_arg
from harness.stats.common import DEFAULT_ALPHA, DEFAULT_POWER, _check_level, _check_n
from harness.stats.results import BinomialResult

__all__ = ["clopper_pearson", "binomial_min_detectable_deviation", "binomial_n_for_deviation", "binomial_test"]


def _z(level: float) -> float:
    return float(stats.norm.isf(level))


def binomial_min_detectable_deviation(n, p0: float, alpha: float = DEFAULT_ALPHA,
                                      power: float = DEFAULT_POWER) -> float:
    """Smallest |p − p0| a two-sided level-``alpha`` binomial test of ``n`` trials detects with
    probability ``power`` in both directions.  Normal approximation: √n |p − p0| =
    z_{α/2} √(p0(1 − p0)) + z_β √(p(1 − p)); exact for p0 ∈ {0, 1} (one success/failure rejects):
    1 − β^{1/n}."""
    _check_n("n", n)
    check_arg(isinstance(p0, (int, float, np.floating)) and 0 <= p0 <= 1, "p0", p0, "a number in [0, 1]")
    _check_level("alpha", alpha)
    _check_level("power", power)
    if p0 in (0.0, 1.0):
        return 1 - (1 - power) ** (1 / n)
    za, zb = _z(alpha / 2), _z(1 - power)
    worst = 0.0
    for sign in (+1, -1):
        room = (1 - p0) if sign > 0 else p0  # largest possible deviation this way
        g = lambda d: math.sqrt(n) * d - za * math.sqrt(p0 * (1 - p0)) - zb * math.sqrt(  # noqa: E731
            max(0.0, (p0 + sign * d) * (1 - p0 - sign * d)))
        if g(room) < 0:
            return math.inf  # not even the extreme deviation this way is detected
        worst = max(worst, float(optimize.brentq(g, 0.0, room, xtol=1e-15, rtol=1e-13)))
    return worst


def binomial_n_for_deviation(deviation: float, p0: float, alpha: float = DEFAULT_ALPHA,
                             power: float = DEFAULT_POWER) -> int:
    """Trials for a two-sided binomial test to detect |p − p0| = ``deviation`` in both directions
    (inverse of :func:`binomial_min_detectable_deviation`)."""
    check_arg(isinstance(deviation, (int, float)) and 0 < deviation <= 1, "deviation", deviation,
              "a number in (0, 1]")
    check_arg(isinstance(p0, (int, float, np.floating)) and 0 <= p0 <= 1, "p0", p0, "a number in [0, 1]")
    _check_level("alpha", alpha)
    _check_level("power", power)
    if p0 in (0.0, 1.0):
        return int(math.ceil(math.log(1 - power) / math.log1p(-deviation)))
    za, zb = _z(alpha / 2), _z(1 - power)
    n = 0.0
    for p1 in (p0 + deviation, p0 - deviation):
        if 0 <= p1 <= 1:
            n = max(n, ((za * math.sqrt(p0 * (1 - p0)) + zb * math.sqrt(p1 * (1 - p1))) / deviation) ** 2)
    return int(math.ceil(n))


def binomial_test(k: int, n: int, p0: float, *, alpha: float = DEFAULT_ALPHA,
                  power: float = DEFAULT_POWER) -> BinomialResult:
    """Exact two-sided binomial test (scipy.stats.binomtest) of ``k`` successes in ``n`` trials against
    rate ``p0`` — e.g. accepted of proposed against 1/M, or accepted drafts against the exact α."""
    check_arg(isinstance(n, (int, np.integer)) and n >= 1, "n", n, "an integer >= 1")
    check_arg(isinstance(k, (int, np.integer)) and 0 <= k <= n, "k", k, f"an integer in [0, n = {n}]")
    check_arg(isinstance(p0, (int, float, np.floating)) and 0 <= p0 <= 1, "p0", p0, "a number in [0, 1]")
    r = stats.binomtest(int(k), int(n), float(p0))
    ci = r.proportion_ci(confidence_level=1 - alpha, method="exact")
    return BinomialResult(k / n, float(r.pvalue), int(k), int(n), float(p0), float(ci.low), float(ci.high),
                          binomial_min_detectable_deviation(n, p0, alpha, power), alpha, power,
                          "exact binomial, two-sided")


def clopper_pearson(k: int, n: int, delta: float) -> tuple[float, float]:
    """Exact (Clopper–Pearson) two-sided interval for a binomial proportion from ``k`` successes in ``n``
    trials, holding with probability >= 1 - ``delta`` (delta/2 on each side); (0, 1) when n = 0.

    The beta-quantile form of the interval that ``scipy.stats.binomtest(k, n).proportion_ci(1 - delta,
    method="exact")`` finds by root finding: the same interval up to that solver's tolerance (~1e-8
    relative at proportions near 1e-7), and exactly the numbers earlier reports hold."""
    if n == 0:
        return 0.0, 1.0
    lo = 0.0 if k == 0 else float(stats.beta.ppf(delta / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(stats.beta.ppf(1 - delta / 2, k + 1, n - k))
    return lo, hi
