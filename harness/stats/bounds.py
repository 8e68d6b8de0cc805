"""Certified upper confidence bounds: TV of a count vector from its exact law, Kolmogorov distance of
PIT values; their expected widths and the sample sizes they need.

Notation as in :mod:`harness.stats`.
"""
from __future__ import annotations

import math
from typing import Callable, Optional

import numpy as np
from scipy import optimize, stats

from specimpl.errors import check_arg
from harness.stats.common import DEFAULT_MIN_EXPECTED, _as_counts, _as_probs, _check_level, _check_n, _tv
from harness.stats.results import KolmogorovBound, TVBound
from harness.stats.chi2 import _statistic
from harness.stats.continuous import _as_values
from harness.stats.pit import _uniform_cdf
from harness.stats.search import smallest_n

__all__ = ["lump_zero_cells", "tv_upper_bound", "tv_upper_bound_expected", "tv_upper_bound_n_for", "tv_upper_bound_ncx2", "kolmogorov_upper_bound", "KS_MEAN", "kolmogorov_upper_bound_expected", "kolmogorov_upper_bound_n_for"]


def lump_zero_cells(counts, probs) -> tuple[np.ndarray, np.ndarray]:
    """(counts, probs) with every cell of P = 0 merged into one last cell (none added when P has no zero).

    Exact for TV: ½ Σ_{P=0} |Q − 0| = ½ Q(P = 0), so TV(Q, P) is the same on the lumped cells, and a bound on
    the lumped TV bounds the full one; only the cell count k that the finite-sample bounds pay for shrinks
    (the joint of base: 729 cells, 513 of positive mass, 514 after lumping)."""
    c = _as_counts("counts", counts)
    p = _as_probs("probs", probs, c.size)
    zero = p <= 0
    if not zero.any():
        return c, p
    return np.append(c[~zero], c[zero].sum()), np.append(p[~zero], 0.0)


def _tv_bound_width(n: int, k: int, delta: float) -> tuple[float, str]:
    """The finite-sample deviation term of :func:`tv_upper_bound` for n draws on k cells, and its name."""
    mcd = 0.5 * math.sqrt(k / n) + math.sqrt(math.log(1 / delta) / (2 * n))
    bhc = math.sqrt((k * math.log(2) + math.log(1 / delta)) / (2 * n))
    return (mcd, "E|L1| + McDiarmid") if mcd <= bhc else (bhc, "Bretagnolle-Huber-Carol")


def tv_upper_bound(counts, probs, delta: float = 1e-4) -> TVBound:
    """Finite-sample upper confidence bound on TV(Q, P) from ``n`` draws of Q: with probability ≥ 1 − δ,

    TV(Q, P) ≤ TV(Q̂, P) + min(½√(k/n) + √(ln(1/δ)/(2n)),  √((k ln 2 + ln(1/δ))/(2n)))

    (first: E TV(Q̂, Q) ≤ ½√(k/n) plus McDiarmid's inequality; second: Bretagnolle–Huber–Carol), with k
    the number of cells after the cells of P = 0 are lumped into one (:func:`lump_zero_cells`: TV is
    unchanged by it, Q may still put mass there).  The bound covers the whole law (no cell is pooled away).
    ``n_cells`` is that k; ``method`` names the term that won."""
    c, p = lump_zero_cells(counts, probs)
    _check_level("delta", delta)
    n = int(c.sum())
    check_arg(n >= 1, "counts", "all zeros", "at least one draw")
    k = c.size
    tv_hat = _tv(c / n, p)
    width, how = _tv_bound_width(n, k, delta)
    return TVBound(tv_hat, min(1.0, tv_hat + width), delta, n, k, f"finite-sample: {how}")


def _binomial_mad(n: int, p: np.ndarray) -> np.ndarray:
    """E|X − n p| for X ~ Binomial(n, p), elementwise (de Moivre: 2 m (1 − p) P(X = m), m = ⌊n p⌋ + 1)."""
    p = np.asarray(p, dtype=np.float64)
    m = np.floor(n * p) + 1
    out = 2 * m * (1 - p) * stats.binom.pmf(m, n, p)
    return np.where((p <= 0) | (p >= 1), 0.0, out)


def tv_upper_bound_expected(probs, n, delta: float = 1e-4) -> float:
    """The expected value of :func:`tv_upper_bound` for ``n`` draws of a sampler whose law is P itself
    (a lossless sampler): E TV(Q̂, P) (exact, from the binomial mean absolute deviations) + the width.
    The planning figure of the bound; :func:`tv_upper_bound_n_for` inverts it."""
    p = _as_probs("probs", probs)
    _check_n("n", n)
    _check_level("delta", delta)
    n = int(n)
    k = int((p > 0).sum()) + int(bool((p <= 0).any()))
    return float(0.5 * _binomial_mad(n, p[p > 0]).sum() / n + _tv_bound_width(n, k, delta)[0])


def tv_upper_bound_n_for(probs, epsilon: float, delta: float = 1e-4, n_max: int = 10**13) -> int:
    """The smallest n whose expected :func:`tv_upper_bound` (:func:`tv_upper_bound_expected`) is ≤
    ``epsilon`` for a sampler with law P: the draws that certify TV ≤ ε at confidence 1 − δ (in
    expectation: half the runs of that size certify or so).  ``n_max`` + 1 when none up to n_max does."""
    check_arg(isinstance(epsilon, (int, float)) and 0 < epsilon <= 1, "epsilon", epsilon, "a number in (0, 1]")
    f = lambda n: tv_upper_bound_expected(probs, n, delta)  # noqa: E731 -- decreasing in n (up to lattice wiggle)
    p = _as_probs("probs", probs)
    k = int((p > 0).sum()) + int(bool((p <= 0).any()))
    c = 0.5 * float(np.sqrt(2 * p * (1 - p) / math.pi).sum())  # E TV(Q̂, P) ≈ c/√n (normal approximation)
    guess = max(1, int(((c + math.sqrt((k * math.log(2) + math.log(1 / delta)) / 2)) / epsilon) ** 2 / 2))
    # a bracket from the closed-form guess, searched up or down: f(lo) > ε >= f(hi)
    return smallest_n(lambda n: f(n) > epsilon, guess, n_max=n_max, down=True)


def tv_upper_bound_ncx2(counts, probs, delta: float = 1e-4, min_expected: float = DEFAULT_MIN_EXPECTED) -> TVBound:
    """Asymptotic upper confidence bound on TV(Q, P) by inverting the noncentral χ²: λ_U is the largest
    noncentrality with P(ncχ²(df, λ_U) ≤ X²_obs) ≥ δ; then w² ≤ λ_U/n and TV ≤ ½√(λ_U/n).

    Valid asymptotically when every cell's expected count is large; cells are *not* pooled (pooling
    would bound only the pooled TV), so this raises if some positive cell has n P < ``min_expected``.
    Draws in cells of P = 0 make w infinite: the bound is then 1 (use :func:`tv_upper_bound`)."""
    c = _as_counts("counts", counts)
    p = _as_probs("probs", probs, c.size)
    _check_level("delta", delta)
    n = int(c.sum())
    pos = p > 0
    e = n * p[pos]
    check_arg(bool(e.min() >= min_expected), "counts",
              f"{n} draws (smallest expected count {e.min():.3g})",
              f"enough draws for expected counts >= {min_expected:g} in every cell (or use tv_upper_bound)")
    tv_hat = _tv(c / n, p)
    method = "asymptotic: noncentral chi-square inversion"
    if c[~pos].sum() > 0:
        return TVBound(tv_hat, 1.0, delta, n, c.size, method + " (impossible cells hit)")
    df = int(pos.sum()) - 1
    if df < 1:
        return TVBound(tv_hat, 0.0, delta, n, c.size, method + " (single cell)")
    x2 = float(_statistic(c[pos], e, "pearson"))
    f = lambda lam: stats.ncx2.cdf(x2, df, lam) - delta if lam > 0 else stats.chi2.cdf(x2, df) - delta  # noqa
    if f(0.0) <= 0:
        lam_u = 0.0
    else:
        hi = max(1.0, x2)
        while f(hi) > 0:
            hi *= 2
        lam_u = float(optimize.brentq(f, 0.0, hi, xtol=1e-10))
    return TVBound(tv_hat, min(1.0, 0.5 * math.sqrt(lam_u / n)), delta, n, c.size, method)


def kolmogorov_upper_bound(x, cdf: Callable = _uniform_cdf, delta: float = 1e-4) -> KolmogorovBound:
    """With probability ≥ 1 − δ, sup|F_Q − F| ≤ D_n + √(ln(2/δ)/(2n)) (DKW).  For PIT values (default
    ``cdf`` uniform) this bounds the Kolmogorov distance of the PIT law from U(0, 1) — a lower bound on
    TV(sampler, target), so not a TV certificate."""
    v = _as_values("x", x)
    _check_level("delta", delta)
    d = float(stats.ks_1samp(v, cdf, method="asymp").statistic)
    return KolmogorovBound(d, min(1.0, d + math.sqrt(math.log(2 / delta) / (2 * v.size))), delta, v.size, "DKW")


KS_MEAN = math.sqrt(math.pi / 2) * math.log(2)  # E sup|F_n − F| · √n → √(π/2) ln 2 (the Kolmogorov law's mean)


def kolmogorov_upper_bound_expected(n, delta: float = 1e-4) -> float:
    """The expected :func:`kolmogorov_upper_bound` for ``n`` values of the law itself (a lossless sampler):
    (√(π/2) ln 2 + √(ln(2/δ)/2)) / √n, the Kolmogorov law's mean for E D_n (asymptotic: a slight
    overestimate at small n, where E D_n √n is below its limit)."""
    _check_n("n", n)
    _check_level("delta", delta)
    return (KS_MEAN + math.sqrt(math.log(2 / delta) / 2)) / math.sqrt(n)


def kolmogorov_upper_bound_n_for(epsilon: float, delta: float = 1e-4, power: Optional[float] = None) -> int:
    """The smallest n with :func:`kolmogorov_upper_bound_expected` ≤ ``epsilon``; with ``power``, the n at which
    the bound of a lossless sampler falls below ``epsilon`` with that probability (the Kolmogorov law's
    ``power`` quantile in place of its mean; asymptotic, conservative at small n)."""
    check_arg(isinstance(epsilon, (int, float)) and 0 < epsilon <= 1, "epsilon", epsilon, "a number in (0, 1]")
    _check_level("delta", delta)
    if power is not None:
        _check_level("power", power)
    d = KS_MEAN if power is None else float(stats.kstwobign.ppf(power))
    return int(math.ceil(((d + math.sqrt(math.log(2 / delta) / 2)) / epsilon) ** 2))
