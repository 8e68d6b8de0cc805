"""Kolmogorov–Smirnov and Anderson–Darling, one- and two-sample, with their DKW / AD planners.

Notation as in :mod:`harness.stats`.
"""
from __future__ import annotations

import math
from functools import lru_cache
from typing import Callable

import numpy as np
from scipy import integrate, optimize, special, stats

from specimpl.errors import check_arg
from harness.stats.common import DEFAULT_ALPHA, DEFAULT_POWER, _check_level, _check_n
from harness.stats.results import ADResult, KSResult
from harness.stats.search import smallest_n

__all__ = ["dkw_min_detectable_distance", "dkw_n_for_distance", "dkw2_min_detectable_distance", "dkw2_n_for_distance", "ad_min_detectable_distance", "ad_n_for_distance", "anderson_darling_sf", "ks_1samp", "ks_2samp", "ad_1samp", "ad_2samp"]


def dkw_min_detectable_distance(n, alpha: float = DEFAULT_ALPHA, power: float = DEFAULT_POWER) -> float:
    """Kolmogorov distance a one-sample KS test of ``n`` values detects with probability ``power`` at
    level ``alpha``, from the DKW inequality P(sup|F_n − F| > ε) ≤ 2 exp(−2nε²):
    √(ln(2/β)/(2n)) + √(ln(2/α)/(2n)).  For K assertions sharing a budget α pass alpha = α/K."""
    _check_n("n", n)
    _check_level("alpha", alpha)
    _check_level("power", power)
    return math.sqrt(math.log(2 / (1 - power)) / (2 * n)) + math.sqrt(math.log(2 / alpha) / (2 * n))


def dkw_n_for_distance(distance: float, alpha: float = DEFAULT_ALPHA, power: float = DEFAULT_POWER) -> int:
    """Values a one-sample KS test needs to detect Kolmogorov distance ``distance`` (inverse of
    :func:`dkw_min_detectable_distance`)."""
    check_arg(isinstance(distance, (int, float)) and 0 < distance <= 1, "distance", distance, "a number in (0, 1]")
    _check_level("alpha", alpha)
    _check_level("power", power)
    s = math.sqrt(math.log(2 / (1 - power))) + math.sqrt(math.log(2 / alpha))
    return int(math.ceil(s * s / (2 * distance * distance)))


def _dkw2_terms(n_a, n_b, level):
    # union bound over the two empirical CDFs, each at level/2
    return math.sqrt(math.log(4 / level) / (2 * n_a)) + math.sqrt(math.log(4 / level) / (2 * n_b))


def dkw2_min_detectable_distance(n_a, n_b, alpha: float = DEFAULT_ALPHA, power: float = DEFAULT_POWER) -> float:
    """Kolmogorov distance a two-sample KS test detects with probability ``power`` at ``alpha`` (DKW on
    each sample, union bound: ε(α) + ε(β), ε(ℓ) = √(ln(4/ℓ)/(2 n_a)) + √(ln(4/ℓ)/(2 n_b)))."""
    _check_n("n_a", n_a)
    _check_n("n_b", n_b)
    _check_level("alpha", alpha)
    _check_level("power", power)
    return _dkw2_terms(n_a, n_b, alpha) + _dkw2_terms(n_a, n_b, 1 - power)


def dkw2_n_for_distance(distance: float, alpha: float = DEFAULT_ALPHA, power: float = DEFAULT_POWER) -> int:
    """Values *per sample* (equal sizes) for a two-sample KS test to detect ``distance``."""
    check_arg(isinstance(distance, (int, float)) and 0 < distance <= 1, "distance", distance, "a number in (0, 1]")
    _check_level("alpha", alpha)
    _check_level("power", power)
    s = 2 * (math.sqrt(math.log(4 / alpha)) + math.sqrt(math.log(4 / (1 - power))))
    return int(math.ceil(s * s / (2 * distance * distance)))


@lru_cache(maxsize=1024)
def _ad_critical(alpha: float) -> float:
    return float(optimize.brentq(lambda z: anderson_darling_sf(z) - alpha, 0.05, 200.0, xtol=1e-10))


def ad_min_detectable_distance(n, alpha: float = DEFAULT_ALPHA, power: float = DEFAULT_POWER) -> float:
    """Kolmogorov distance a one-sample AD test of ``n`` values detects with probability ``power``.

    If the sample's Kolmogorov distance is D then A² ≥ (4/3) n D³ (the integrand (F_n − F)²/(F(1 − F))
    is ≥ 4 (D − s)² over a stretch of length D next to the sup); by DKW, D ≥ Δ − √(ln(2/β)/(2n)) with
    probability 1 − β.  So Δ = (3 c_α / (4n))^{1/3} + √(ln(2/β)/(2n)), c_α the AD critical value.  AD
    is far more sensitive to tail deviations than this worst case says; the figure is a guarantee."""
    _check_n("n", n)
    _check_level("power", power)
    return (3 * _ad_critical(alpha) / (4 * n)) ** (1 / 3) + math.sqrt(math.log(2 / (1 - power)) / (2 * n))


def ad_n_for_distance(distance: float, alpha: float = DEFAULT_ALPHA, power: float = DEFAULT_POWER) -> int:
    """Values a one-sample AD test needs to detect Kolmogorov distance ``distance`` (inverse of
    :func:`ad_min_detectable_distance`, by bisection on n)."""
    check_arg(isinstance(distance, (int, float)) and 0 < distance <= 1, "distance", distance, "a number in (0, 1]")
    return smallest_n(lambda n: ad_min_detectable_distance(n, alpha, power) > distance, 2)


def _adinf_cdf(z: float) -> float:
    """CDF of the limiting AD law (Anderson & Darling 1954 series; absolute error ~1e-13)."""
    if z <= 0.02:
        return 0.0
    s = 0.0
    for j in range(60):
        logc = special.gammaln(2 * j + 1) - j * math.log(4) - 2 * special.gammaln(j + 1)
        a2 = (4 * j + 1) ** 2 * math.pi ** 2 / (8 * z)
        f = lambda w: math.exp(z / (8 * (w * w + 1)) - a2 * w * w - a2)  # noqa: E731
        val = integrate.quad(f, 0, np.inf, epsabs=0, epsrel=1e-12, limit=200)[0]
        term = (-1) ** j * math.exp(logc) * (4 * j + 1) * val
        s += term
        if abs(term) < 1e-17:
            break
    return min(1.0, max(0.0, math.sqrt(2 * math.pi) / z * s))


def anderson_darling_sf(z: float) -> float:
    """P(A² > z) under the limiting law Σ_j χ²_1/(j(j+1)) of the AD statistic.

    z ≤ 20: one minus the Anderson–Darling (1954) series (absolute error ~1e-13, so relative ≤ 1e-3 down
    to p ≈ 1e-10).  z > 20: the tail √3 erfc(√z)(1 + 0.3/z) (leading term from the mgf: the largest
    weight ½ gives erfc(√z), the others a factor Π_{j≥2}(1 − 2/(j(j+1)))^{-1/2} = √3), matched to the
    series at z = 15–20 to ~0.1 %.  The finite-n correction is ignored (small for n ≥ 10)."""
    z = float(z)
    if not math.isfinite(z):
        return 0.0 if z > 0 else 1.0
    if z > 20:
        return math.sqrt(3) * special.erfc(math.sqrt(z)) * (1 + 0.3 / z)
    return max(0.0, 1.0 - _adinf_cdf(z))


def _as_values(name: str, x) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64).ravel()
    check_arg(a.size >= 1, name, "an empty array", "a non-empty array")
    check_arg(bool(np.all(np.isfinite(a))), name, "values that are NaN or infinite", "finite values")
    return a


def ks_1samp(x, cdf: Callable, *, alpha: float = DEFAULT_ALPHA, power: float = DEFAULT_POWER) -> KSResult:
    """One-sample KS of values ``x`` against a continuous ``cdf`` (vectorised callable on numpy arrays)."""
    v = _as_values("x", x)
    r = stats.ks_1samp(v, cdf, method="auto")
    return KSResult(float(r.statistic), float(r.pvalue), v.size, dkw_min_detectable_distance(v.size, alpha, power),
                    alpha, power, "kolmogorov-smirnov 1-sample (scipy, auto)")


def ks_2samp(x, y, *, alpha: float = DEFAULT_ALPHA, power: float = DEFAULT_POWER) -> KSResult:
    """Two-sample KS of values ``x`` and ``y`` (e.g. each sequence's target log-probability).  With ties
    (discrete statistics) the p-value is conservative."""
    a, b = _as_values("x", x), _as_values("y", y)
    r = stats.ks_2samp(a, b, method="auto")
    return KSResult(float(r.statistic), float(r.pvalue), a.size + b.size,
                    dkw2_min_detectable_distance(a.size, b.size, alpha, power), alpha, power,
                    "kolmogorov-smirnov 2-sample (scipy, auto)")


def ad_1samp(x, cdf: Callable, *, alpha: float = DEFAULT_ALPHA, power: float = DEFAULT_POWER) -> ADResult:
    """One-sample Anderson–Darling A² of ``x`` against a continuous, fully specified ``cdf``."""
    v = _as_values("x", x)
    n = v.size
    u = np.sort(np.clip(np.asarray(cdf(v), dtype=np.float64), 1e-300, 1 - 1e-16))
    i = np.arange(1, n + 1)
    a2 = -n - np.sum((2 * i - 1) * (np.log(u) + np.log1p(-u[::-1]))) / n
    return ADResult(float(a2), anderson_darling_sf(a2), n, ad_min_detectable_distance(n, alpha, power), alpha, power,
                    "anderson-darling 1-sample, limiting null")


def ad_2samp(x, y, *, alpha: float = DEFAULT_ALPHA, power: float = DEFAULT_POWER) -> ADResult:
    """Two-sample Anderson–Darling (Scholz & Stephens 1987, midrank A²_akN, valid with ties), p-value
    from the limiting law (exact for continuous data as n → ∞; approximate with ties).

    ``min_detectable_distance`` is a heuristic: the one-sample figure at n_eff = n_a n_b/(n_a + n_b)
    with the two-sample DKW term."""
    a, b = _as_values("x", x), _as_values("y", y)
    n_a, n_b = a.size, b.size
    N = n_a + n_b
    z = np.concatenate([a, b])
    zs, l = np.unique(z, return_counts=True)  # (L,) distinct values, multiplicities
    Bj = np.cumsum(l)
    Baj = Bj - l / 2.0
    total = 0.0
    for xs, ni in ((a, n_a), (b, n_b)):
        fij = np.bincount(np.searchsorted(zs, xs), minlength=zs.size)
        Maij = np.cumsum(fij) - fij / 2.0
        den = Baj * (N - Baj) - N * l / 4.0
        with np.errstate(divide="ignore", invalid="ignore"):
            term = np.where(den > 0, l / N * (N * Maij - ni * Baj) ** 2 / den, 0.0)
        total += term.sum() / ni
    a2 = (N - 1) / N * total
    n_eff = n_a * n_b / N
    mdd = (3 * _ad_critical(alpha) / (4 * n_eff)) ** (1 / 3) + _dkw2_terms(n_a, n_b, 1 - power)
    return ADResult(float(a2), anderson_darling_sf(a2), N, mdd, alpha, power,
                    "anderson-darling 2-sample (Scholz-Stephens midrank), limiting null")
