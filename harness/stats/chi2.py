"""χ² / G goodness of fit and two-sample homogeneity on counts, with their noncentral-χ² planners.

Cells are pooled from the expected probabilities alone (:func:`pool_cells`); the null is asymptotic,
lattice-corrected, or Monte Carlo (:func:`chi2_null_statistics`).

Notation as in :mod:`harness.stats`.
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from scipy import optimize, special, stats

from specimpl.errors import check_arg
from harness.stats.common import DEFAULT_ALPHA, DEFAULT_MIN_EXPECTED, DEFAULT_POWER, _as_counts, _as_probs, _check_level, _check_n, _rng, _tv
from harness.stats.results import Chi2Result, HomogeneityResult

__all__ = ["chi2_noncentrality", "chi2_min_detectable_tv", "chi2_n_for_tv", "pool_cells", "chi2_null_statistics", "chi2_lattice_tail", "chi2_pvalue", "chi2_gof_pvalues", "chi2_gof", "chi2_homogeneity_min_detectable_tv", "chi2_homogeneity_n_for_tv", "chi2_homogeneity_pvalues", "chi2_homogeneity"]


@lru_cache(maxsize=4096)
def chi2_noncentrality(df: int, alpha: float, power: float = DEFAULT_POWER) -> float:
    """λ* such that P(ncχ²(df, λ*) > χ²_{df, 1−alpha}) = power: the noncentrality a level-``alpha``
    χ² test detects with probability ``power``."""
    check_arg(isinstance(df, (int, np.integer)) and df >= 1, "df", df, "an integer >= 1")
    _check_level("alpha", alpha)
    _check_level("power", power)
    check_arg(power > alpha, "power", power, f"a number > alpha = {alpha!r}")
    crit = stats.chi2.isf(alpha, df)
    f = lambda lam: stats.ncx2.sf(crit, df, lam) - power  # noqa: E731
    hi = max(1.0, crit)
    while f(hi) < 0:
        hi *= 2
    return float(optimize.brentq(f, 1e-12, hi, xtol=1e-10, rtol=1e-12))


def chi2_min_detectable_tv(n, n_cells: int, alpha: float = DEFAULT_ALPHA, power: float = DEFAULT_POWER) -> float:
    """Smallest TV (on the test's ``n_cells`` cells) a Pearson χ² test of ``n`` draws detects with
    probability ``power`` at level ``alpha``: ½ √(λ*/n), because λ = n w² and w² ≥ 4 TV²."""
    _check_n("n", n)
    check_arg(isinstance(n_cells, (int, np.integer)) and n_cells >= 1, "n_cells", n_cells, "an integer >= 1")
    if n_cells == 1:
        return math.inf
    return 0.5 * math.sqrt(chi2_noncentrality(int(n_cells) - 1, alpha, power) / n)


def chi2_n_for_tv(tv: float, n_cells: int, alpha: float = DEFAULT_ALPHA, power: float = DEFAULT_POWER) -> int:
    """Draws a Pearson χ² test over ``n_cells`` cells needs to detect TV ``tv`` with probability
    ``power`` at level ``alpha`` (inverse of :func:`chi2_min_detectable_tv`)."""
    check_arg(isinstance(tv, (int, float)) and 0 < tv <= 1, "tv", tv, "a number in (0, 1]")
    check_arg(isinstance(n_cells, (int, np.integer)) and n_cells >= 2, "n_cells", n_cells, "an integer >= 2")
    return int(math.ceil(chi2_noncentrality(int(n_cells) - 1, alpha, power) / (4 * tv * tv)))


def pool_cells(probs, n, min_expected: float = DEFAULT_MIN_EXPECTED) -> np.ndarray:
    """Group labels that pool cells so every group's expected count ``n · P`` is ≥ ``min_expected``.

    Chosen from the expected probabilities alone — never from observed counts — so the test keeps its
    level.  Cells with expected count ≥ ``min_expected`` stay single; smaller cells are merged in
    ascending order of probability; a short remainder joins the last merged group (or the smallest
    single cell).  Cells of probability 0 get label −1 (kept apart: any draw there is impossible under
    H0).  Returns int labels 0..G−1 (−1 for zero cells).
    """
    p = _as_probs("probs", probs)
    _check_n("n", n)
    check_arg(isinstance(min_expected, (int, float)) and min_expected >= 0, "min_expected", min_expected,
              "a number >= 0")
    labels = np.full(p.size, -1, dtype=np.int64)
    pos = np.flatnonzero(p > 0)
    exp = n * p[pos]
    big = pos[exp >= min_expected]
    small = pos[exp < min_expected]
    small = small[np.argsort(p[small], kind="stable")]
    g = 0
    for i in big:
        labels[i] = g
        g += 1
    acc, members, last_small_group = 0.0, [], None
    for i in small:
        members.append(i)
        acc += n * p[i]
        if acc >= min_expected:
            labels[members] = g
            last_small_group = g
            g += 1
            acc, members = 0.0, []
    if members:  # remainder below the minimum
        if last_small_group is not None:
            labels[members] = last_small_group
        elif big.size:
            labels[members] = labels[big[np.argmin(p[big])]]
        else:
            labels[members] = g
            g += 1
    return labels


def _n_groups(labels: np.ndarray) -> int:
    return int(labels.max() + 1) if labels.size and labels.max() >= 0 else 0


def _pool(labels: np.ndarray, weights: np.ndarray, n_groups: int) -> np.ndarray:
    """Sums of ``weights`` over each group of :func:`pool_cells` labels (cells labelled −1 left out)."""
    ok = labels >= 0
    return np.bincount(labels[ok], weights=weights[ok], minlength=n_groups)


def _pooled(counts: np.ndarray, probs: np.ndarray, labels: np.ndarray):
    G = _n_groups(labels)
    return _pool(labels, counts, G), _pool(labels, probs, G)


def _statistic(obs: np.ndarray, exp: np.ndarray, kind: str) -> np.ndarray:
    """Pearson X² or G along the last axis.  obs (..., G), exp (G,)."""
    if kind == "pearson":
        return ((obs - exp) ** 2 / exp).sum(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(obs > 0, obs * np.log(obs / exp), 0.0)
    return 2.0 * t.sum(-1)


def chi2_null_statistics(probs, n: int, n_resamples: int, rng=None, statistic: str = "pearson",
                         chunk: int = 1 << 16) -> np.ndarray:
    """Statistics of ``n_resamples`` multinomial(``n``, ``probs``) samples: the Monte Carlo null of
    :func:`chi2_gof` (vectorised in chunks of ``chunk`` samples)."""
    p = _as_probs("probs", probs)
    check_arg(isinstance(n_resamples, (int, np.integer)) and n_resamples >= 1, "n_resamples", n_resamples,
              "an integer >= 1")
    check_arg(statistic in ("pearson", "g"), "statistic", statistic, "'pearson' or 'g'")
    gen = _rng(rng)
    exp = n * p
    out = np.empty(n_resamples)
    for s in range(0, n_resamples, chunk):
        m = min(chunk, n_resamples - s)
        sim = gen.multinomial(int(n), p, size=m).astype(np.float64)  # (m, G)
        out[s:s + m] = _statistic(sim, exp, statistic)
    return out


def chi2_lattice_tail(x, n, e_min) -> np.ndarray:
    """P(X²₁ ≥ ``x``) of the exact two-cell Pearson statistic widened by one count: X²₁ = (k − e)² / (e (1 − e/n))
    for k ~ Binomial(``n``, ``e_min`` / n), and the region |k − e| ≥ √(x · var) − 1 (one lattice step wider,
    an envelope of the binomial tail's steps).  Vectorised over ``x``."""
    x, n, e = np.broadcast_arrays(np.asarray(x, dtype=np.float64), np.asarray(n, dtype=np.float64),
                                  np.asarray(e_min, dtype=np.float64))
    p = np.clip(np.where(n > 0, e / np.maximum(n, 1.0), 0.0), 0.0, 1.0)
    inner = (p > 0) & (p < 1)
    p = np.where(inner, p, 0.5)
    mean = n * p
    r = np.sqrt(np.maximum(x, 0.0) * mean * (1.0 - p)) - 1.0
    lo = np.floor(mean - r + 1e-9)
    hi = np.ceil(mean + r - 1e-9)
    return np.where(inner, np.minimum(1.0, stats.binom.cdf(lo, n, p) + stats.binom.sf(hi - 1, n, p)), 0.0)


def chi2_pvalue(statistic, df, n, e_min):
    """p-value of a pooled Pearson χ² with ``df`` degrees of freedom from ``n`` draws whose smallest expected
    cell count is ``e_min``: the asymptotic χ² tail, raised where it is too light.

    The χ²(df) tail is several times too light at the gate's levels (≈ 6e-8 per test) when a cell's expected
    count is small: the Poisson-like skew of the smallest cell dominates (exactly, df = 1 with an expected count
    of 100 has 4.9× the nominal tail at 5.9e-8, three cells of expected count 100 each 3.3×).  The correction
    maps the asymptotic p-value to its one-degree-of-freedom statistic χ²₁⁻¹(p) and takes the exact tail of a
    two-cell table whose small cell has expected count ``e_min`` (:func:`chi2_lattice_tail`, one count wider):
    pvalue = max(p, that tail).  Exact enumeration of multinomials (``tests/verify/test_calibrate_null.py``) and
    simulation (``python -m harness calibrate --null``) show the corrected size ≤ nominal from 1e-2 to 2.9e-8 (the gate level).
    Vectorised over ``statistic``."""
    s = np.asarray(statistic, dtype=np.float64)
    p = stats.chi2.sf(s, df)
    e = np.asarray(e_min, dtype=np.float64)
    x1 = 2.0 * special.erfcinv(p) ** 2  # χ²₁⁻¹(p): the one-degree-of-freedom statistic with tail p
    tail = chi2_lattice_tail(x1, n, np.where(np.isfinite(e) & (e > 0), e, 0.0))
    return np.maximum(p, tail)


def chi2_gof_pvalues(obs, probs_pooled, n: int, statistic: str = "pearson") -> tuple[np.ndarray, np.ndarray]:
    """Statistics and asymptotic (lattice-corrected) p-values of :func:`chi2_gof` for a batch of pooled count
    vectors ``obs`` (R, G) of ``n`` draws each against pooled probabilities ``probs_pooled`` (G,), G ≥ 2:
    the one place the gof statistic and its p-value are computed (also for :mod:`harness.verify.calibrate_null`)."""
    pp = np.asarray(probs_pooled, dtype=np.float64)
    exp = n * pp
    stat = _statistic(np.asarray(obs, dtype=np.float64), exp, statistic)
    return stat, chi2_pvalue(stat, pp.size - 1, n, float(exp.min()))


def chi2_gof(counts, probs, *, statistic: str = "pearson", min_expected: float = DEFAULT_MIN_EXPECTED,
             null: str = "asymptotic", n_resamples: int = 9999, rng=None, alpha: float = DEFAULT_ALPHA,
             power: float = DEFAULT_POWER) -> Chi2Result:
    """Goodness of fit of ``counts`` (K,) against exact probabilities ``probs`` (K,).

    Cells are pooled by :func:`pool_cells` from ``probs`` so expected counts are ≥ ``min_expected``
    (the asymptotic χ² tail is several times too light at small α with expected counts of 5).  With
    ``null="monte-carlo"`` the p-value is exact up to Monte Carlo error, from ``n_resamples`` multinomial
    samples (its smallest value is 1/(n_resamples + 1)); pass a smaller ``min_expected`` (even 0) then.
    Draws in cells of probability 0 give ``pvalue = 0`` (impossible under H0).
    """
    c = _as_counts("counts", counts)
    p = _as_probs("probs", probs, c.size)
    check_arg(statistic in ("pearson", "g"), "statistic", statistic, "'pearson' or 'g'")
    check_arg(null in ("asymptotic", "monte-carlo"), "null", null, "'asymptotic' or 'monte-carlo'")
    n = int(c.sum())
    check_arg(n >= 1, "counts", "all zeros", "at least one draw")
    labels = pool_cells(p, n, min_expected)
    obs, pp = _pooled(c, p, labels)
    n_imp = int(c[labels < 0].sum())
    G = obs.size
    exp = n * pp
    df = G - 1
    tv_hat = _tv(c / n, p)
    mdt = chi2_min_detectable_tv(n, G, alpha, power) if G >= 2 else math.inf
    method = statistic
    if n_imp > 0:
        stat, pval = math.inf, 0.0
        method += ", impossible cells hit"
    elif G < 2:
        stat, pval = 0.0, 1.0  # one possible cell: only the support check above can fail
        method += ", single cell (support check only)"
    else:
        st, pv = chi2_gof_pvalues(obs, pp, n, statistic)
        stat = float(st)
        if null == "asymptotic":
            pval = float(pv)
            method += ", asymptotic with lattice correction"
        else:
            sim = chi2_null_statistics(pp, n, n_resamples, rng, statistic)
            pval = float((1 + np.count_nonzero(sim >= stat * (1 - 1e-12))) / (n_resamples + 1))
            method += f", monte-carlo({n_resamples})"
    return Chi2Result(statistic=stat, pvalue=pval, df=max(df, 0), n=n, n_cells=G,
                      min_expected=float(exp.min()) if G else 0.0, n_impossible=n_imp, tv_hat=tv_hat,
                      min_detectable_tv=mdt, alpha=alpha, power=power, method=method)


def chi2_homogeneity_min_detectable_tv(n_a, n_b, n_cells: int, alpha: float = DEFAULT_ALPHA,
                                       power: float = DEFAULT_POWER) -> float:
    """Smallest TV between two sampled laws that a χ² homogeneity test of ``n_a`` and ``n_b`` draws over
    ``n_cells`` cells detects with probability ``power``: ½ √(λ*/n_eff), n_eff = n_a n_b / (n_a + n_b)
    (the noncentrality is n_eff Σ (Q_a − Q_b)² / m with m the mixture, ≥ 4 n_eff TV²)."""
    _check_n("n_a", n_a)
    _check_n("n_b", n_b)
    return chi2_min_detectable_tv(n_a * n_b / (n_a + n_b), n_cells, alpha, power)


def chi2_homogeneity_n_for_tv(tv: float, n_cells: int, alpha: float = DEFAULT_ALPHA,
                              power: float = DEFAULT_POWER) -> int:
    """Draws *per sample* (equal sizes) for a χ² homogeneity test to detect TV ``tv`` (inverse of
    :func:`chi2_homogeneity_min_detectable_tv` with n_a = n_b)."""
    return 2 * chi2_n_for_tv(tv, n_cells, alpha, power)


def chi2_homogeneity_pvalues(A, B) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Statistics, lattice-corrected asymptotic p-values (:func:`chi2_pvalue`) and smallest expected counts of
    :func:`chi2_homogeneity` for a batch of pooled 2 × G tables, rows ``A`` and ``B`` (R, G) of fixed totals:
    the one place the homogeneity statistic is computed.  Columns empty in both rows are left out (df =
    non-empty columns − 1)."""
    A = np.asarray(A, dtype=np.float64)
    B = np.asarray(B, dtype=np.float64)
    n_a, n_b = A.sum(-1, keepdims=True), B.sum(-1, keepdims=True)  # (R, 1)
    C = A + B
    N = n_a + n_b
    keep = C > 0
    EA, EB = np.where(keep, n_a * C / N, 1.0), np.where(keep, n_b * C / N, 1.0)
    stat = (np.where(keep, (A - EA) ** 2 / EA + (B - EB) ** 2 / EB, 0.0)).sum(-1)
    e_min = np.where(keep, np.minimum(EA, EB), np.inf).min(-1)
    df = keep.sum(-1) - 1
    n_min = np.minimum(n_a, n_b)[:, 0]
    p = np.where(df >= 1, chi2_pvalue(stat, np.maximum(df, 1), n_min, e_min), 1.0)
    return stat, np.asarray(p, dtype=np.float64), e_min


def chi2_homogeneity(counts_a, counts_b, probs=None, *, min_expected: float = DEFAULT_MIN_EXPECTED,
                     alpha: float = DEFAULT_ALPHA, power: float = DEFAULT_POWER) -> HomogeneityResult:
    """Pearson χ² test that ``counts_a`` and ``counts_b`` (K,) come from one law (2 × K table).

    Cells are pooled so both rows' expected counts are ≥ ``min_expected``: from ``probs`` when given
    (e.g. the exact target), otherwise from the combined counts (a function of the column margins only,
    which the conditional null does not depend on).
    """
    a = _as_counts("counts_a", counts_a)
    b = _as_counts("counts_b", counts_b)
    check_arg(a.size == b.size, "counts_b", f"{b.size} cells", f"as many cells as counts_a ({a.size})")
    n_a, n_b = int(a.sum()), int(b.sum())
    check_arg(n_a >= 1, "counts_a", "all zeros", "at least one draw")
    check_arg(n_b >= 1, "counts_b", "all zeros", "at least one draw")
    N = n_a + n_b
    if probs is None:
        ref = (a + b) / N
        how = "pooled from combined counts"
    else:
        ref = _as_probs("probs", probs, a.size)
        # cells with P = 0 but draws still form cells of their own (pooled among themselves)
        extra = (ref == 0) & ((a + b) > 0)
        if extra.any():
            ref = ref + extra * ((a + b) / N)
            ref = ref / ref.sum()
        how = "pooled from probs"
    labels = pool_cells(ref, min(n_a, n_b), min_expected)
    G = _n_groups(labels)
    A, B = _pool(labels, a, G), _pool(labels, b, G)
    C = A + B
    keep = C > 0
    A, B, C = A[keep], B[keep], C[keep]
    G = A.size
    tv_hat = _tv(a / n_a, b / n_b)
    if G < 2:
        return HomogeneityResult(0.0, 1.0, 0, n_a, n_b, G, float(min(n_a, n_b)), tv_hat, math.inf, alpha, power,
                                 f"pearson 2xK, {how}, single cell")
    st, pv, e_min = chi2_homogeneity_pvalues(A[None], B[None])
    stat, df = float(st[0]), G - 1
    e_min = float(e_min[0])
    return HomogeneityResult(stat, float(pv[0]), df, n_a, n_b, G, e_min,
                             tv_hat, chi2_homogeneity_min_detectable_tv(n_a, n_b, G, alpha, power), alpha, power,
                             f"pearson 2xK, {how}, asymptotic with lattice correction")
