"""The frozen results the tests return (``statistic``, ``pvalue`` and named extras, as scipy.stats does).

Notation as in :mod:`harness.stats`.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass



__all__ = ["Chi2Result", "HomogeneityResult", "KSResult", "ADResult", "PairResult", "TVBound", "KolmogorovBound", "BinomialResult", "FalseAlarmResult", "VonNeumannVerdict"]


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
