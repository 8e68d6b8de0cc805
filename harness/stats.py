"""The statistics of the verification battery: tests, their planners, bounds and error budget.

Notation (declared once)
------------------------
* ``P`` — the exact target law (probabilities ``probs``); ``Q`` — the law of the sampler under test;
  ``Q̂`` — the empirical law of ``n`` draws (``counts / n``).
* ``TV(Q, P) = ½ Σ |Q − P|``; ``w² = Σ (Q − P)² / P`` (Cohen's effect size, ``w² ≥ 4 TV²`` by
  Cauchy–Schwarz); Kolmogorov distance ``sup |F_Q − F_P|`` (≤ TV).
* ``alpha`` — the false-alarm rate of *one* test (split a family budget with :func:`split_budget`);
  ``power`` — the wanted probability of rejecting when the deviation is at least the planned one
  (``beta = 1 − power``).

Every test returns a small frozen dataclass with ``statistic``, ``pvalue`` and named extras, in
scipy's manner, and carries its *planning* figure: the smallest deviation it detects with
probability ``power`` at level ``alpha`` and its sample size.  Each test has two planners —
deviation for ``n`` and ``n`` for a deviation — that ``tests/test_stats.py`` checks against each
other.  Randomness is injected (``numpy.random.Generator`` / ``torch.Generator`` or integer seeds).

What scipy provides is taken from scipy (χ², noncentral χ², KS, exact binomial test and its
Clopper–Pearson interval, ``optimize.brentq``); what it does not is written here and tested: pooling,
the planners, the TV bounds, Holm, the Anderson–Darling limiting law's tail below 0.001 and the
two-sample midrank A².

Contents
--------
* χ² / G goodness of fit with cells pooled from the expected probabilities alone, asymptotic or
  Monte Carlo null (:func:`chi2_gof`, :func:`pool_cells`, :func:`chi2_null_statistics`);
  planners :func:`chi2_min_detectable_tv`, :func:`chi2_n_for_tv` (noncentral χ²).
* Two-sample χ² homogeneity (:func:`chi2_homogeneity`) and its planners.
* Kolmogorov–Smirnov and Anderson–Darling, one- and two-sample (:func:`ks_1samp`, :func:`ks_2samp`,
  :func:`ad_1samp`, :func:`ad_2samp`); DKW planners.
* Randomized PIT (:func:`randomized_pit`, :func:`pit_from_probs`) and its tests: pooled, per position,
  consecutive pairs (:func:`pit_pair_test`).
* Certified upper confidence bounds on TV (:func:`tv_upper_bound`, :func:`tv_upper_bound_ncx2`) and on
  the Kolmogorov distance of PIT values (:func:`kolmogorov_upper_bound`).
* Exact binomial test of an acceptance count (:func:`binomial_test`) and its planners (the accepted-length
  histogram is a :func:`chi2_gof` against its exact law).
* Multiple testing (:func:`holm`, hand-written: scipy has none; :func:`split_budget`) and a simulator of
  any test's false-alarm rate (:func:`false_alarm_rate`).  Benjamini–Hochberg is
  ``scipy.stats.false_discovery_control``.
* The von Neumann sampler's verification (:func:`verify_von_neumann`).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Callable, Optional, Sequence

import numpy as np
from scipy import integrate, optimize, special, stats

from specimpl.errors import check_arg

__all__ = [
    # results
    "Chi2Result", "HomogeneityResult", "KSResult", "ADResult", "PairResult", "TVBound", "KolmogorovBound",
    "BinomialResult", "FalseAlarmResult", "VonNeumannVerdict",
    # chi-square
    "pool_cells", "chi2_gof", "chi2_pvalue", "chi2_lattice_tail", "chi2_gof_pvalues", "chi2_homogeneity_pvalues", "chi2_null_statistics", "chi2_noncentrality", "chi2_min_detectable_tv",
    "chi2_n_for_tv", "chi2_homogeneity", "chi2_homogeneity_min_detectable_tv", "chi2_homogeneity_n_for_tv",
    # continuous
    "ks_1samp", "ks_2samp", "ad_1samp", "ad_2samp", "anderson_darling_sf", "dkw_min_detectable_distance",
    "dkw_n_for_distance", "dkw2_min_detectable_distance", "dkw2_n_for_distance", "ad_min_detectable_distance",
    "ad_n_for_distance",
    # PIT
    "randomized_pit", "pit_from_probs", "pit_uniformity_test", "pit_position_tests", "pit_pair_test", "pit_pair_phases", "pit_grid_cells", "pit_pair_counts",
    # bounds
    "tv_upper_bound", "tv_upper_bound_ncx2", "kolmogorov_upper_bound", "lump_zero_cells", "tv_upper_bound_expected",
    "tv_upper_bound_n_for", "kolmogorov_upper_bound_n_for",
    # binomial and acceptance
    "binomial_test", "binomial_min_detectable_deviation", "binomial_n_for_deviation",
    # multiple testing and calibration
    "holm", "split_budget", "false_alarm_rate",
    "verify_von_neumann",
]

DEFAULT_ALPHA = 1e-4
DEFAULT_POWER = 0.99
DEFAULT_MIN_EXPECTED = 100.0


# --------------------------------------------------------------------------------------- helpers
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


# --------------------------------------------------------------------------------------- results
@dataclass(frozen=True)
class _Result:
    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Chi2Result(_Result):
    """Goodness of fit of counts against exact probabilities.

    statistic         Pearson X² or G on the pooled cells (``inf`` when impossible cells were hit).
    pvalue            asymptotic χ²(df) tail, or Monte Carlo ``(1 + #{T* ≥ T}) / (R + 1)``.
    df                pooled cells − 1.
    n                 number of draws.
    n_cells           pooled cells of positive probability.
    min_expected      smallest expected count among pooled cells.
    n_impossible      draws in cells of probability 0 (any makes ``pvalue`` 0: impossible under H0).
    tv_hat            TV(Q̂, P) over the original cells (biased upwards by sampling noise).
    min_detectable_tv TV on the pooled cells detected with probability ``power`` at ``alpha``.
    method            "pearson" or "g", with the null ("asymptotic", "monte-carlo(R)").
    """

    statistic: float
    pvalue: float
    df: int
    n: int
    n_cells: int
    min_expected: float
    n_impossible: int
    tv_hat: float
    min_detectable_tv: float
    alpha: float
    power: float
    method: str


@dataclass(frozen=True)
class HomogeneityResult(_Result):
    """Two-sample χ² homogeneity: are counts ``a`` and ``b`` draws from one law?

    tv_hat is TV between the two empirical laws (original cells); min_detectable_tv is TV on the pooled
    cells between the two sampled laws detected with probability ``power`` at ``alpha``."""

    statistic: float
    pvalue: float
    df: int
    n_a: int
    n_b: int
    n_cells: int
    min_expected: float
    tv_hat: float
    min_detectable_tv: float
    alpha: float
    power: float
    method: str


@dataclass(frozen=True)
class KSResult(_Result):
    """Kolmogorov–Smirnov test.  ``statistic`` is the sup distance between CDFs; ``min_detectable_distance``
    the Kolmogorov distance detected with probability ``power`` at ``alpha`` (DKW, finite-sample)."""

    statistic: float
    pvalue: float
    n: int
    min_detectable_distance: float
    alpha: float
    power: float
    method: str


@dataclass(frozen=True)
class ADResult(_Result):
    """Anderson–Darling test.  ``statistic`` is A² (one sample) or Scholz–Stephens A²_akN (two samples);
    ``pvalue`` from the limiting law Σ_j χ²_1 / (j (j + 1)); ``min_detectable_distance`` is the Kolmogorov
    distance detected with probability ``power`` at ``alpha`` (bound A² ≥ (4/3) n D³ plus DKW)."""

    statistic: float
    pvalue: float
    n: int
    min_detectable_distance: float
    alpha: float
    power: float
    method: str


@dataclass(frozen=True)
class PairResult(_Result):
    """Serial test of consecutive PIT values: (U_t, U_t+1) binned on an m × m grid, expected uniform.

    Pairs are taken without overlap so the binned counts are exactly multinomial under H0: one table of
    pairs starting at even offsets (t = 0, 2, …) and one at odd offsets (t = 1, 3, …); ``pvalue`` is the
    Bonferroni combination of the tables' p-values (``pvalues``)."""

    statistic: float
    pvalue: float
    df: int
    bins: int
    n_pairs: int
    pvalues: tuple
    statistics: tuple
    min_detectable_tv: float
    alpha: float
    power: float
    method: str


@dataclass(frozen=True)
class TVBound(_Result):
    """Upper confidence bound: with probability ≥ 1 − delta, TV(Q, P) ≤ ``upper``."""

    tv_hat: float
    upper: float
    delta: float
    n: int
    n_cells: int
    method: str


@dataclass(frozen=True)
class KolmogorovBound(_Result):
    """Upper confidence bound on the Kolmogorov distance sup|F_Q − F| (not TV: Kolmogorov ≤ TV)."""

    ks_hat: float
    upper: float
    delta: float
    n: int
    method: str


@dataclass(frozen=True)
class BinomialResult(_Result):
    """Exact two-sided binomial test of ``k`` successes in ``n`` against rate ``p0``.

    ci_low/ci_high: Clopper–Pearson interval at confidence 1 − alpha; min_detectable_deviation: |p − p0|
    detected with probability ``power`` at ``alpha`` (normal approximation, exact when p0 ∈ {0, 1})."""

    statistic: float
    pvalue: float
    k: int
    n: int
    p0: float
    ci_low: float
    ci_high: float
    min_detectable_deviation: float
    alpha: float
    power: float
    method: str


@dataclass(frozen=True)
class FalseAlarmResult(_Result):
    """Measured false-alarm rate of a test under H0 with its Clopper–Pearson interval (``confidence``)
    and the exact binomial p-value of "rate = alpha"."""

    rate: float
    n_alarms: int
    n_trials: int
    alpha: float
    ci_low: float
    ci_high: float
    confidence: float
    pvalue: float


@dataclass(frozen=True)
class VonNeumannVerdict(_Result):
    """The von Neumann sampler's battery: KS and AD against the target CDF, binomial acceptance vs 1/M."""

    ks: KSResult
    ad: ADResult
    acceptance: BinomialResult
    adjusted_pvalues: tuple
    alpha: float
    lossless: bool


# ------------------------------------------------------------------------- chi-square: planners
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


# ---------------------------------------------------------------------------- chi-square: tests
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
    pvalue = max(p, that tail).  Exact enumeration of multinomials (``tests/test_calibrate_null.py``) and
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
    the one place the gof statistic and its p-value are computed (also for :mod:`harness.calibrate_null`)."""
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


# ------------------------------------------------------------------------ continuous: planners
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
    lo, hi = 1, 2
    while ad_min_detectable_distance(hi, alpha, power) > distance:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ad_min_detectable_distance(mid, alpha, power) > distance:
            lo = mid
        else:
            hi = mid
    return hi


# ---------------------------------------------------------------------- Anderson–Darling null
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


# -------------------------------------------------------------------------- continuous: tests
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


# ----------------------------------------------------------------------------------------- PIT
def randomized_pit(cdf_below, pmf, v) -> np.ndarray:
    """Randomized PIT U = F(x − 1) + V p(x) from the two quantities F(x − 1) (probability of tokens
    below x under the target's conditional) and p(x), and uniforms V ~ U(0, 1) (all same shape).
    Under H0 (sampler = target) the U are iid U(0, 1)."""
    F = np.asarray(cdf_below, dtype=np.float64)
    p = np.asarray(pmf, dtype=np.float64)
    V = np.asarray(v, dtype=np.float64)
    check_arg(F.shape == p.shape == V.shape, "pmf", f"shapes {F.shape}, {p.shape}, {V.shape}",
              "cdf_below, pmf and v of one shape")
    return np.clip(F + V * p, 0.0, 1.0)


def pit_from_probs(probs, tokens, generator=None, pad_mask=None) -> np.ndarray:
    """Randomized PIT of emitted ``tokens`` (N, T) under the target's conditionals ``probs`` (N, T, V)
    given the emitted prefix; ``generator`` (torch.Generator, numpy Generator or seed) draws V.

    ``pad_mask`` (N, T) bool marks an absorbing pad after EOS: there the target's conditional is one-hot
    on the pad, so U = V exactly.  Returns U (N, T) float64.
    """
    import torch

    if isinstance(probs, torch.Tensor):
        P = probs.detach().to(torch.float64)
        X = torch.as_tensor(tokens, device=P.device).long()
    else:
        P = torch.as_tensor(np.asarray(probs, dtype=np.float64))
        X = torch.as_tensor(np.asarray(tokens)).long()
    check_arg(P.dim() == 3, "probs", f"tensor of shape {tuple(P.shape)}", "a (N, T, V) tensor")
    check_arg(tuple(X.shape) == tuple(P.shape[:2]), "tokens", f"shape {tuple(X.shape)}",
              f"shape (N, T) = {tuple(P.shape[:2])}")
    mask = None
    if pad_mask is not None:
        mask = torch.as_tensor(np.asarray(pad_mask) if not isinstance(pad_mask, torch.Tensor) else pad_mask,
                               device=P.device).bool()
        check_arg(tuple(mask.shape) == tuple(X.shape), "pad_mask", f"shape {tuple(mask.shape)}",
                  f"shape (N, T) = {tuple(X.shape)}")
    valid = X if mask is None else X.masked_fill(mask, 0)
    V = P.shape[-1]
    check_arg(bool(((valid >= 0) & (valid < V)).all()), "tokens", "ids outside [0, V) off the pad mask",
              f"token ids in [0, {V})")
    idx = valid.unsqueeze(-1)  # (N, T, 1)
    px = P.gather(-1, idx).squeeze(-1)  # (N, T)
    F_below = (P.cumsum(-1).gather(-1, idx).squeeze(-1) - px).clamp_min(0.0)  # (N, T)
    if isinstance(generator, torch.Generator):
        v = torch.rand(X.shape, generator=generator, dtype=torch.float64, device=generator.device).to(P.device)
    else:
        v = torch.as_tensor(_rng(generator).random(tuple(X.shape)), device=P.device)
    u = (F_below + v * px).clamp(0.0, 1.0)  # (N, T)
    if mask is not None:
        u = torch.where(mask, v, u)
    return u.cpu().numpy()


def _uniform_cdf(x):
    return np.clip(x, 0.0, 1.0)


def pit_uniformity_test(u, *, alpha: float = DEFAULT_ALPHA, power: float = DEFAULT_POWER) -> KSResult:
    """KS of all PIT values pooled against U(0, 1) (iid under H0 by construction)."""
    return ks_1samp(np.asarray(u).ravel(), _uniform_cdf, alpha=alpha, power=power)


def pit_position_tests(u, *, alpha: float = DEFAULT_ALPHA, power: float = DEFAULT_POWER) -> list[KSResult]:
    """:func:`pit_uniformity_test` of each position's PIT values (columns of ``u`` (N, T))."""
    a = np.asarray(u, dtype=np.float64)
    check_arg(a.ndim == 2, "u", f"array of shape {a.shape}", "an (N, T) array")
    return [pit_uniformity_test(a[:, t], alpha=alpha, power=power) for t in range(a.shape[1])]


def pit_pair_bins(n_pairs, max_bins: int = 16, min_expected: float = DEFAULT_MIN_EXPECTED) -> int:
    """Cells per axis m of the PIT pair grid: the largest m ≤ ``max_bins`` (and ≥ 2) whose m² equally
    likely cells keep an expected count ≥ ``min_expected`` with ``n_pairs`` pairs in a table."""
    return int(max(2, min(max_bins, math.floor(math.sqrt(n_pairs / max(min_expected, 1e-9))))))


def pit_pair_phases(T: int, lag: int = 1) -> list[np.ndarray]:
    """Offsets t of the non-overlapping pairs (U_t, U_t+lag) of a length-``T`` sequence, one array per
    table: phase 0 holds the t with ⌊t / lag⌋ even, phase 1 those with ⌊t / lag⌋ odd (t + lag < T).  In
    each table every index is used at most once, so under H0 its pairs are iid; for lag 1 these are the
    even and odd offsets.  Empty phases are left out."""
    check_arg(isinstance(lag, (int, np.integer)) and lag >= 1, "lag", lag, "an integer >= 1")
    t = np.arange(max(T - lag, 0))
    return [ts for ts in (t[(t // lag) % 2 == ph] for ph in (0, 1)) if ts.size]


def pit_pair_tables(u, bins: Optional[int] = None, *, max_bins: int = 16,
                    min_expected: float = DEFAULT_MIN_EXPECTED, lag: int = 1) -> tuple[int, list[np.ndarray]]:
    """The tables of :func:`pit_pair_test`: ``(m, [even, odd])``, each table the counts (m²,) of
    non-overlapping pairs (U_t, U_t+lag) of ``u`` (N, T) on the m × m grid, cell
    ``m · bin(U_t) + bin(U_t+lag)``; the two tables are the phases of :func:`pit_pair_phases` (lag 1:
    ``even`` holds the pairs at offsets t = 0, 2, 4, …, ``odd`` those at 1, 3, 5, …; absent when T = 2).
    ``bins`` defaults to :func:`pit_pair_bins` of the smaller table."""
    a = np.asarray(u, dtype=np.float64)
    check_arg(isinstance(lag, (int, np.integer)) and lag >= 1, "lag", lag, "an integer >= 1")
    check_arg(a.ndim == 2 and a.shape[1] >= lag + 1, "u", f"array of shape {a.shape}",
              f"an (N, T) array with T >= lag + 1 = {lag + 1}")
    check_arg(bool(np.all((a >= 0) & (a <= 1))), "u", "values outside [0, 1]", "PIT values in [0, 1]")
    phases = pit_pair_phases(a.shape[1], lag)
    if bins is None:
        bins = pit_pair_bins(min(a.shape[0] * ts.size for ts in phases), max_bins, min_expected)
    check_arg(isinstance(bins, (int, np.integer)) and bins >= 2, "bins", bins, "an integer >= 2")
    return int(bins), pit_pair_counts(pit_grid_cells(a, bins), bins, lag)


def pit_grid_cells(u: np.ndarray, bins: int) -> np.ndarray:
    """The cell (0..bins-1) of each PIT value of ``u`` (any shape, in [0, 1]) on a grid of ``bins`` per axis."""
    g = (u * bins).astype(np.int64)
    return np.minimum(g, bins - 1, out=g)


def pit_pair_counts(g: np.ndarray, bins: int, lag: int = 1) -> list[np.ndarray]:
    """The tables of :func:`pit_pair_tables` from grid cells ``g`` (N, T) (:func:`pit_grid_cells`, unchecked):
    counts (bins²,) of cell ``bins · g_t + g_t+lag`` per phase of :func:`pit_pair_phases`."""
    return [np.bincount((g[:, ts] * bins + g[:, ts + lag]).ravel(), minlength=bins * bins)
            for ts in pit_pair_phases(g.shape[1], lag)]


def pit_pair_test(u, *, bins: Optional[int] = None, max_bins: int = 16,
                  min_expected: float = DEFAULT_MIN_EXPECTED, alpha: float = DEFAULT_ALPHA,
                  power: float = DEFAULT_POWER) -> PairResult:
    """Serial test of consecutive PIT values (U_t, U_{t+1}) of ``u`` (N, T), T ≥ 2.

    Each pair is binned on an m × m grid; under H0 the cells are equally likely.  Non-overlapping pairs
    (offsets 0, 2, 4, … in one table; 1, 3, 5, … in another, :func:`pit_pair_tables`) make each table's
    counts exactly multinomial; each table gets a Pearson χ² with df = m² − 1 and ``pvalue`` is the
    Bonferroni combination.  ``bins`` defaults to the largest m ≤ ``max_bins`` with expected count ≥
    ``min_expected`` per cell (:func:`pit_pair_bins`).  Catches coupled bugs whose marginal PIT law is
    exactly uniform.
    """
    bins, tables = pit_pair_tables(u, bins, max_bins=max_bins, min_expected=min_expected)
    K = bins * bins
    pvals, statsv = [], []
    for counts in tables:
        e = int(counts.sum()) / K
        s = float(((counts.astype(np.float64) - e) ** 2 / e).sum())
        statsv.append(s)
        pvals.append(float(chi2_pvalue(s, K - 1, int(counts.sum()), e)))
    m = len(tables)
    p = min(1.0, m * min(pvals))
    n_min = min(int(c.sum()) for c in tables)
    # each table is tested at alpha/m under the Bonferroni combination
    mdt = chi2_min_detectable_tv(n_min, K, alpha / m, power)
    return PairResult(statistic=max(statsv), pvalue=p, df=K - 1, bins=bins, n_pairs=sum(int(c.sum()) for c in tables),
                      pvalues=tuple(pvals), statistics=tuple(statsv), min_detectable_tv=mdt, alpha=alpha, power=power,
                      method=f"pearson on {bins}x{bins} grid, non-overlapping pairs, bonferroni over {m} table(s)")


# -------------------------------------------------------------------------------------- bounds
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
    lo, hi = guess // 2, guess  # a bracket from the closed-form guess: f(lo) > ε >= f(hi)
    while f(hi) > epsilon:
        lo, hi = hi, hi * 2
        if hi > n_max:
            return n_max + 1
    while lo >= 1 and f(lo) <= epsilon:
        lo, hi = lo // 2, lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if f(mid) > epsilon else (lo, mid)
    return hi


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


# ---------------------------------------------------------------------- binomial, acceptance
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


# --------------------------------------------------------------------------- multiple testing
def _as_pvalues(pvalues) -> np.ndarray:
    p = np.asarray(pvalues, dtype=np.float64)
    check_arg(p.ndim == 1, "pvalues", f"array of shape {p.shape}", "a 1-D array")
    check_arg(bool(np.all((p >= 0) & (p <= 1))), "pvalues", "values outside [0, 1] or NaN", "p-values in [0, 1]")
    return p


def holm(pvalues) -> np.ndarray:
    """Holm–Bonferroni adjusted p-values (step-down; controls the family-wise error rate under any
    dependence).  Reject test i at family level α iff adjusted[i] ≤ α."""
    p = _as_pvalues(pvalues)
    m = p.size
    if m == 0:
        return p.copy()
    order = np.argsort(p, kind="stable")
    adj = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    out = np.empty(m)
    out[order] = adj
    return out


def split_budget(total_alpha: float, m: int, weights: Optional[Sequence[float]] = None) -> np.ndarray:
    """Per-test levels that spend a family-wise budget ``total_alpha`` over ``m`` tests (weighted
    Bonferroni: alpha_i = total · w_i / Σ w).  These are the levels the planners should be given; Holm
    on the same family rejects at least what these levels reject."""
    _check_level("total_alpha", total_alpha)
    check_arg(isinstance(m, (int, np.integer)) and m >= 1, "m", m, "an integer >= 1")
    if weights is None:
        return np.full(m, total_alpha / m)
    w = np.asarray(weights, dtype=np.float64)
    check_arg(w.shape == (m,) and bool(np.all(w > 0)), "weights", weights, f"{m} positive numbers")
    return total_alpha * w / w.sum()


def false_alarm_rate(test: Callable, draw_null: Callable, *, alpha: float, n_trials: int, seed: int = 0,
                     confidence: float = 0.95, progress: bool = False) -> FalseAlarmResult:
    """Measure how often ``test(draw_null(rng)).pvalue <= alpha`` when H0 holds, over ``n_trials``
    independent trials (``rng`` a numpy Generator spawned from ``seed`` per trial).  Returns the rate,
    its Clopper–Pearson interval and the exact binomial p-value of "rate = alpha"."""
    _check_level("alpha", alpha)
    check_arg(isinstance(n_trials, (int, np.integer)) and n_trials >= 1, "n_trials", n_trials, "an integer >= 1")
    seeds = np.random.SeedSequence(seed).spawn(int(n_trials))
    it = range(int(n_trials))
    if progress:
        from tqdm import tqdm
        it = tqdm(it, desc="false-alarm trials")
    alarms = 0
    for i in it:
        r = test(draw_null(np.random.default_rng(seeds[i])))
        alarms += int(r.pvalue <= alpha)
    b = stats.binomtest(alarms, int(n_trials), alpha)
    ci = b.proportion_ci(confidence_level=confidence, method="exact")
    return FalseAlarmResult(alarms / n_trials, alarms, int(n_trials), alpha, float(ci.low), float(ci.high),
                            confidence, float(b.pvalue))


# -------------------------------------------------------------------------------- von Neumann
def von_neumann_tests(samples, cdf: Callable, proposed: int, accepted: int, M: float, *,
                      alpha: float = DEFAULT_ALPHA, power: float = DEFAULT_POWER
                      ) -> tuple[KSResult, ADResult, BinomialResult]:
    """The von Neumann battery, each test planned at level ``alpha``: KS and AD of ``samples`` against the
    target ``cdf``, and an exact binomial test of ``accepted`` of ``proposed`` against 1/``M``.  The
    verify runner puts the three into its own family; :func:`verify_von_neumann` judges them alone."""
    check_arg(isinstance(M, (int, float)) and M >= 1, "M", M, "an envelope constant >= 1")
    return (ks_1samp(samples, cdf, alpha=alpha, power=power), ad_1samp(samples, cdf, alpha=alpha, power=power),
            binomial_test(int(accepted), int(proposed), 1.0 / M, alpha=alpha, power=power))


def verify_von_neumann(samples, cdf: Callable, proposed: int, accepted: int, M: float, *,
                       alpha: float = DEFAULT_ALPHA, power: float = DEFAULT_POWER) -> VonNeumannVerdict:
    """The battery of :func:`von_neumann_tests` for a rejection sampler, judged alone: the family-wise
    budget ``alpha`` is split over the three tests by Holm; planners get alpha/3 each."""
    ks, ad, acc = von_neumann_tests(samples, cdf, proposed, accepted, M, alpha=alpha / 3, power=power)
    adj = holm([ks.pvalue, ad.pvalue, acc.pvalue])
    return VonNeumannVerdict(ks, ad, acc, tuple(float(x) for x in adj), alpha, bool(np.all(adj > alpha)))
