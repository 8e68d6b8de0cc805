"""An upper confidence bound on TV(Q, P) for a KNOWN law P that pays for ONE event: the plug-in TV plus the
widest one-sided Clopper–Pearson deviation of a single binomial proportion.  No union over events, no
triangle inequality, any number of cells.

Notation as in :mod:`harness.stats`; X(A) = n Q̂(A), the count of draws in event A; u_δ(x) the one-sided
Clopper–Pearson upper end Beta⁻¹(1 − δ; x + 1, n − x) (1 at x = n): P(Q(A) > u_δ(X(A))) ≤ δ for a FIXED event A
and every Q (Clopper & Pearson 1934, Biometrika 26).

The argument (valid for EVERY law Q; n iid draws)
------------------------------------------------
1. Let A* = {Q > P}, a fixed event (it depends on Q, which is unknown, but not on the draws), a = P(A*).  Then
   TV(Q, P) = Q(A*) − a, and X(A*) ~ Binomial(n, Q(A*)).
2. T = TV(Q̂, P) = max_A (Q̂(A) − P(A)) ≥ Q̂(A*) − a, i.e. a ≥ X(A*)/n − T (and a ≥ 0).
3. With probability ≥ 1 − δ (one binomial, step 1), Q(A*) ≤ u_δ(X(A*)), so
   TV(Q, P) ≤ u_δ(X) − max(0, X/n − T)  with X = X(A*) ≤ n.
   If X ≥ nT this is T + (u_δ(X) − X/n); if X < nT it is u_δ(X) ≤ u_δ(x₀) ≤ T + (u_δ(x₀) − x₀/n), x₀ = ⌊nT⌋.
   Either way TV(Q, P) ≤ T + W, W = max over integers x₀ ≤ x ≤ n of (u_δ(x) − x/n): the widest Clopper–Pearson
   deviation at level δ, which needs neither a nor A*.  (No union bound: A* is one event; the maximum over x is
   the worst case of an unknown constant, not of a random choice.)  The code starts the maximum at ⌊nT⌋ − 1, one
   lower: a larger W, safe against T's rounding.

T's upward bias under Q ≈ P (E T = ½ Σ E|Q̂ − P|, about √(k/n)/√(2π) on k even cells) is what the bound pays
beyond the z_δ √(max var / n) that any valid bound's median must exceed (experiments/tv_oracle_limit.py); the
union-of-events bound (:mod:`harness.stats.events`) pays ln(2^k) in z² instead, the plug-in bound
(:func:`harness.stats.bounds.tv_upper_bound`) both T and the union (Bretagnolle–Huber–Carol), so this bound is
never wider than the plug-in one.  W ≈ z_δ / (2√n) (+ O(z²/n)); computed exactly by :func:`widest_deviation`.

Planner: E U = E T + W with E T exact from the binomial mean absolute deviations (U is T + W, W fixed by (n, δ)
while E T < ½); rigorous inconclusive tail: P(T ≥ ε − W) ≤ exp(−2 n (ε − W − E T)²) (McDiarmid: T moves by at
most 1/n when one draw changes), on few cells also ≤ the union over events of exact binomial tails.
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from scipy import special, stats

from specimpl.errors import check_arg
from harness.stats.bounds import _binomial_mad, lump_zero_cells
from harness.stats.common import _as_probs, _check_level, _check_n, _tv
from harness.stats.events import _membership
from harness.stats.results import TVBound
from harness.stats.search import smallest_n

__all__ = ["widest_deviation", "tv_upper_bound_worstevent", "tv_upper_bound_worstevent_expected",
           "tv_upper_bound_worstevent_n_for", "tv_upper_bound_worstevent_exceed", "hoeffding_width"]


def cp_upper(x, n: int, delta: float):
    """u_δ(x): the one-sided Clopper–Pearson upper end for integer counts x in [0, n] (float64)."""
    x = np.asarray(x, dtype=np.float64)
    # the complemented inverse takes the upper tail δ itself (no 1 − δ rounding at δ ~ 1e-7)
    return np.where(x >= n, 1.0, special.betainccinv(x + 1.0, np.maximum(n - x, 1.0), delta))


def _dev(x, n: int, delta: float):
    """u_δ(x) − x/n for integer x in [0, n] (float64)."""
    return cp_upper(x, n, delta) - np.asarray(x, dtype=np.float64) / n


def _dev1(x: int, n: int, delta: float) -> float:
    """:func:`_dev` at one integer x, without numpy's array set-up (the same ufunc on the same float64 values: the
    same bits; the ternary search calls it ~60 times per search)."""
    return (1.0 if x >= n else special.betainccinv(x + 1.0, max(n - x, 1.0), delta)) - x / n


@lru_cache(maxsize=4096)
def _widest(n: int, delta: float, x0: int) -> tuple[float, int]:
    """(max over integers x0 ≤ x ≤ n of u_δ(x) − x/n, the x that attains it), exactly: the function is unimodal
    in x (it rises from x = 0, or falls from it at tiny n and δ, and falls to 0 at x = n; checked by brute force
    for n ≤ 2·10⁴ and δ from 0.4 to 1e-12 in tests/stats/test_worstevent.py, and at n = 2·10⁵ by hand), so an
    integer ternary search finds its maximum."""
    lo, hi = x0, n
    while hi - lo > 2:
        m1, m2 = lo + (hi - lo) // 3, hi - (hi - lo) // 3
        if _dev1(m1, n, delta) < _dev1(m2, n, delta):
            lo = m1 + 1
        else:
            hi = m2
    xs = np.arange(lo, hi + 1)
    f = _dev(xs, n, delta)
    return float(f.max()), int(xs[int(np.argmax(f))])


def widest_deviation(n: int, delta: float, x0: int = 0) -> float:
    """W = max over integers x0 ≤ x ≤ n of (u_δ(x) − x/n) (exact): the widest one-sided Clopper–Pearson deviation
    of a proportion of n draws at level δ (from x0 on)."""
    _check_n("n", n)
    _check_level("delta", delta)
    n, x0 = int(n), max(0, min(int(x0), int(n)))
    w, arg = _widest(n, float(delta), 0)
    return w if x0 <= arg else _widest(n, float(delta), x0)[0]  # unimodal: from x0 past the peak it falls


def tv_upper_bound_worstevent(counts, probs, delta: float = 1e-4) -> TVBound:
    """Upper confidence bound on TV(Q, P) from ``n`` draws of Q (``counts``): with probability ≥ 1 − δ, for every
    Q, TV(Q, P) ≤ TV(Q̂, P) + W (the module docstring's argument; W = :func:`widest_deviation` from ⌊n TV(Q̂, P)⌋)."""
    c, p = lump_zero_cells(counts, probs)
    _check_level("delta", delta)
    n = int(c.sum())
    check_arg(n >= 1, "counts", f"{n} draws", "at least one draw")
    t = _tv(c / n, p)
    x0 = max(0, int(math.floor(n * t)) - 1)  # one below ⌊nT⌋: safe against T's rounding
    return TVBound(t, min(1.0, t + widest_deviation(n, delta, x0)), delta, n, c.size,
                   "finite-sample: plug-in TV + one event's exact binomial deviation (Clopper-Pearson)")


def _expected_tv(p: np.ndarray, n: int) -> float:
    """E TV(Q̂, P) for n draws of P itself (exact: ½ Σ E|X − nP| / n)."""
    return 0.5 * float(_binomial_mad(n, p[p > 0]).sum()) / n


def tv_upper_bound_worstevent_expected(probs, n, delta: float = 1e-4) -> float:
    """The planning figure: the mean of :func:`tv_upper_bound_worstevent` for ``n`` draws of a lossless sampler
    (Q = P), E T + W (its mean while T stays below W's peak near ½, which holds wherever a certificate is planned;
    an upper bound on the mean beyond)."""
    p = _as_probs("probs", probs)
    _check_n("n", n)
    _check_level("delta", delta)
    return min(1.0, _expected_tv(p, int(n)) + widest_deviation(int(n), delta))


def tv_upper_bound_worstevent_n_for(probs, epsilon: float, delta: float = 1e-4, *, n_max: int = 10**13) -> int:
    """The smallest n whose :func:`tv_upper_bound_worstevent_expected` is ≤ ``epsilon`` (``n_max`` + 1 if none)."""
    check_arg(isinstance(epsilon, (int, float)) and 0 < epsilon <= 1, "epsilon", epsilon, "a number in (0, 1]")
    p = _as_probs("probs", probs)
    c = 0.5 * float(np.sqrt(2 * p * (1 - p) / math.pi).sum())  # E T ≈ c / √n
    z = float(stats.norm.isf(delta))
    guess = max(2, int(((c + z / 2) / epsilon) ** 2))
    return smallest_n(lambda m: tv_upper_bound_worstevent_expected(p, m, delta) > epsilon, guess, n_max=n_max,
                      down=True)


def hoeffding_width(delta: float, *ns: int) -> float:
    """One event's deviation by Hoeffding's inequality (Hoeffding 1963, JASA 58, Theorem 2: independent terms, each
    in a range of 1/n_i, identical or not): √(ln(1/δ) Σ_i (1/n_i) / 2) — one sample of n (``ns = (n,)``: the
    Rao–Blackwellised engine bound, :mod:`harness.stats.rbtv`) or the difference of two samples' proportions
    (``ns = (n_a, n_b)``: two-sample mode, :mod:`harness.samples.certificate`)."""
    _check_level("delta", delta)
    return math.sqrt(math.log(1 / delta) * sum(1 / n for n in ns) / 2)


MAX_UNION_CELLS = 16  # positive cells up to which the tail also takes the union over events (2^16 events)


def _union_tail(p: np.ndarray, n: int, t: float) -> float:
    """P(T ≥ t) ≤ Σ_A P(X(A) ≥ n (P(A) + t)) under Q = P, over the proper non-empty subsets A of the positive cells
    (T = max_A (Q̂(A) − P(A)); the cells of P = 0 hold no draw of a lossless sampler): exact binomial tails."""
    pos = p[p > 0]
    PA = _membership(pos.size, False) @ pos  # (2^k - 2,)
    x = np.floor(n * (PA + t))  # X(A) ≥ n (P(A) + t) implies X(A) ≥ this (conservative under rounding)
    return float(np.where(PA + t <= 1, stats.binom.sf(x - 1, n, PA), 0.0).sum())


def tv_upper_bound_worstevent_exceed(probs, n, delta: float, epsilon: float) -> float:
    """An upper bound on P(:func:`tv_upper_bound_worstevent` ≥ ``epsilon``) for ``n`` draws of a lossless sampler,
    i.e. on P(T ≥ t), t = ε − W: the smaller of McDiarmid's exp(−2 n (t − E T)²) (1 where t ≤ E T) and, on 2 to
    :data:`MAX_UNION_CELLS` positive cells, the union over events of exact binomial tails (:func:`_union_tail`;
    far sharper on few cells: it prices each event's own variance, McDiarmid a proxy ~2x T's spread)."""
    p = _as_probs("probs", probs)
    _check_n("n", n)
    _check_level("delta", delta)
    check_arg(isinstance(epsilon, (int, float)) and 0 < epsilon <= 1, "epsilon", epsilon, "a number in (0, 1]")
    n = int(n)
    t = epsilon - widest_deviation(n, delta)  # the plug-in TV at and above which the bound reaches ε
    s = t - _expected_tv(p, n)
    mcd = 1.0 if s <= 0 else float(math.exp(-2 * n * s * s))
    if t <= 0 or not 2 <= int((p > 0).sum()) <= MAX_UNION_CELLS:
        return mcd
    return min(mcd, _union_tail(p, n, t))
