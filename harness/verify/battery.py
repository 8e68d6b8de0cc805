"""The verification battery on one (sampler, scenario) run: sufficient statistics and the tests.

Drawing and testing are split.  :class:`Accumulator` folds each sampler call's output into small
sufficient statistics (counts per position, consecutive pairs and every J-window; a histogram of
the randomized PIT per position and non-overlapping PIT pair grids; per-sequence target
log-probabilities; the acceptance instrumentation of each call).  :func:`plan_tests` then lists every
test of the run as a :class:`TestSpec` whose ``evaluate(alpha, power, delta)`` returns one
:class:`TestRow` (a row of ``tests.csv``; its fields are the columns, :data:`TEST_COLUMNS`): the runner
(:mod:`harness.verify.family`) first counts all tests of the whole ``make verify`` run, splits the
family-wise budget over them, and only then evaluates each at its Bonferroni level (for the planners)
and adjusts all p-values by Holm.  :func:`plan_pit_value_tests` and :func:`plan_von_neumann_tests` plan
the real-model and von Neumann tests the same way.

Families of tests (row field ``family``; ``loss`` marks the tests whose rejection means *lossy*):

* ``gof``         one-sample χ² against the exact law: each position (bonus positions included), each
                  consecutive pair of positions and every window of J positions (``joint[a:a+J]``,
                  a = 0..N-J, :meth:`ExactLaw.joint_at`; J = N: the whole output law).  Cells pooled from
                  the target alone (expected counts ≥ 100; a draw in a zero-probability cell is
                  impossible under H0 and rejects outright).
* ``two_sample``  χ² homogeneity against target-only sampling (``autoregressive_generate``, same budget)
                  on each position and the joint; KS and Anderson–Darling on each sequence's target
                  log-probability.
* ``pit``         randomized PIT under the target's exact conditionals: pooled, per position (KS on a
                  fine grid), pairs (χ² on an m × m grid, two tables of non-overlapping pairs each) at lag 1
                  (``pairs_even`` / ``pairs_odd``) and lags 2..k+1 (``pairs_lag{L}_even`` / ``_odd``,
                  :mod:`harness.stats.lagged`: a round apart), from the same PIT uniforms.
* ``loglik``      the whole-sequence log-likelihood: the mean of S = Σ_t log P(x_t) against its exact
                  mean and variance (:func:`harness.stats.loglik.loglik_test`); on real models the martingale
                  M = Σ_t [log p_t(x_t) + H(p_t)] (:func:`harness.stats.loglik.martingale_test`).
* ``pit`` on raw PIT values (:func:`plan_pit_value_tests`, real models: no exact law, the target's
                  conditionals come from scoring): pooled KS (exact scipy null), KS per position, χ² of
                  PIT pairs at lags 1..k+1, and the log-likelihood martingale.  The same tests, at the run's Holm level.
* ``von_neumann`` (:func:`plan_von_neumann_tests`) the rejection sampler: KS and AD of the accepted points
                  against the target CDF, exact binomial acceptance against 1/M.
* ``acceptance``  per draft position i, accepted − α_i · judged against the exact α_i of the reference
                  process; the accepted-length histogram against its exact expectation.  Rounds are not
                  independent, so both use the between-call variance (t / Hotelling T² over the
                  sampler calls of the run).  Not loss tests: a lossless sampler that accepts less
                  than allowed is reported *inefficient*.  Valid at every size (:func:`plan_acceptance`,
                  decided from the plan alone: k, N, the exact law, the call sizes): draft positions
                  >= N are dropped (their drafts are never emitted; the report's plan notes say so) and
                  accepted lengths >= N pooled; a count fixed under H0 is checked exactly from any
                  number of calls; where the between-call tests lack data (one call, fewer calls than
                  Hotelling's d + 2, or under :data:`MIN_EXPECTED_PER_CALL` of a coordinate's rarer
                  outcome per call) the exact Hoeffding bound over the sequences
                  (:func:`hoeffding_test`) replaces them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from typing import Callable, Optional

import numpy as np
from scipy import stats as sps

from harness import stats
from harness.laws.ngram import ExactLaw
from harness.stats import clopper_pearson, crossu, events, worstevent
from harness.stats.lagged import LaggedTables
from harness.stats.loglik import LoglikSums, loglik_test, martingale_test
from harness.stats.search import bisect_n

__all__ = ["gof_evaluator", "Accumulator", "TestSpec", "TestRow", "TEST_COLUMNS", "plan_tests", "plan_pit_value_tests",
           "plan_von_neumann_tests", "ks_uniform_binned", "ks_uniform_binned_pvalues", "chunk_t_test",
           "hotelling_test", "hoeffding_test",
           "plan_acceptance", "AcceptancePlan", "acceptance_notes", "chunk_t_min_detectable",
           "chunk_t_n_for_deviation", "plan_chunks", "tv_interval", "tv_upper_asymptotic", "tv_interval_expected_upper",
           "tv_interval_n_for", "tv_interval_inconclusive", "tv_interval_inconclusive_normal",
           "ACC_SETTINGS", "state_symbol_codes", "pit_of_codes"]

LOGPROB_FLOOR = -1e9  # log-probability given to sequences the target cannot produce (finite for KS/AD)
PIT_PAIR_TABLES = ("pairs_even", "pairs_odd")  # test names of the PIT pair tables at even and odd offsets


# ----------------------------------------------------------------------------- small statistics
@dataclass(frozen=True)
class BinnedKSResult:
    """KS of PIT values against U(0, 1) computed on a grid of ``bins`` equal cells.

    The grid statistic is ≤ the exact one, so its p-value is conservative.  The p-value is the exact
    Kolmogorov null (scipy ``kstwo``) for n ≤ 20,000 and the Dvoretzky–Kiefer–Wolfowitz–Massart bound
    min(1, 2 exp(−2 n D²)) above (valid for every n, and within 0.1 % of the exact tail below 0.05 — the
    exact computation costs ~30 ms per call at n = 10⁶).  ``min_detectable_distance`` is the DKW figure
    for the grid CDF."""

    statistic: float
    pvalue: float
    n: int
    bins: int
    min_detectable_distance: float
    alpha: float
    power: float
    method: str


def ks_uniform_binned_pvalues(hists) -> tuple[np.ndarray, np.ndarray]:
    """Statistics and p-values of :func:`ks_uniform_binned` for a batch of histograms ``hists`` (R, B) with one
    total n ≥ 1: the one place the binned KS statistic is computed (also for :mod:`harness.verify.calibrate_null`)."""
    h = np.asarray(hists, dtype=np.float64)
    n = int(h[0].sum())
    cdf = np.cumsum(h, axis=-1) / n  # (R, B)
    edges = np.arange(1, h.shape[-1] + 1) / h.shape[-1]
    d = np.abs(cdf - edges).max(-1)
    p = sps.kstwo.sf(d, n) if n <= 20_000 else 2.0 * np.exp(-2.0 * n * d * d)
    return d, np.minimum(1.0, p)


def ks_uniform_binned(hist, *, alpha: float, power: float) -> BinnedKSResult:
    h = np.asarray(hist, dtype=np.float64)
    n = int(h.sum())
    if n == 0:
        return BinnedKSResult(0.0, 1.0, 0, h.size, math.inf, alpha, power, "ks on grid, no values")
    d, p = ks_uniform_binned_pvalues(h[None])
    d, p = float(d[0]), float(p[0])
    how = "exact null" if n <= 20_000 else "DKW-Massart bound"
    return BinnedKSResult(d, min(1.0, p), n, h.size, stats.dkw_min_detectable_distance(n, alpha, power),
                          alpha, power, f"kolmogorov-smirnov vs U(0,1) on a {h.size}-cell grid ({how}; conservative)")


@dataclass(frozen=True)
class ChunkTResult:
    """t test that E[e_c] = 0 over C independent sampler calls (e_c a call's total deviation).

    ``deviation`` is the estimated rate deviation (e.g. measured − exact acceptance); ``min_detectable``
    the rate deviation detected with probability ``power`` at ``alpha`` given the observed spread."""

    statistic: float
    pvalue: float
    n_chunks: int
    deviation: float
    min_detectable: float
    alpha: float
    power: float
    method: str


def chunk_t_min_detectable(n_chunks: int, sd: float, scale: float, alpha: float, power: float) -> float:
    """Rate deviation a two-sided chunk t test detects with probability ``power`` at level ``alpha``:
    (t_{1-α/2} + t_{power}) · sd / √C / scale (normal-shift approximation of the noncentral t), where
    ``sd`` is the spread of one chunk's deviation total and ``scale`` the mean count it is a rate of."""
    if n_chunks < 2 or scale <= 0:
        return math.inf
    df = n_chunks - 1
    return float((sps.t.isf(alpha / 2, df) + sps.t.isf(1 - power, df)) * sd / math.sqrt(n_chunks) / scale)


def chunk_t_n_for_deviation(deviation: float, sd: float, scale: float, alpha: float, power: float) -> int:
    """Chunks needed to detect ``deviation`` (inverse of :func:`chunk_t_min_detectable`)."""
    c = 2
    while chunk_t_min_detectable(c, sd, scale, alpha, power) > deviation:
        c = c * 2 if c < 1 << 20 else c + (1 << 20)
        if c > 1 << 30:
            return c
    return bisect_n(lambda n: chunk_t_min_detectable(n, sd, scale, alpha, power) > deviation, c // 2, c)


def chunk_t_test(e, scale, *, alpha: float, power: float) -> ChunkTResult:
    """e (C,) per-call deviations with mean 0 under H0; scale (C,) the counts they are rates of."""
    e = np.asarray(e, dtype=np.float64)
    scale = np.asarray(scale, dtype=np.float64)
    C = e.size
    s_mean = float(scale.mean()) if C else 0.0
    dev = float(e.sum() / scale.sum()) if C and scale.sum() > 0 else 0.0
    if C < 2:
        return ChunkTResult(0.0, 1.0, C, dev, math.inf, alpha, power, "t over calls (too few calls)")
    sd = float(e.std(ddof=1))
    tol = 1e-9 * max(1.0, s_mean)
    if sd <= tol:  # deterministic count (alpha = 0 or 1 exactly): any deviation is impossible under H0
        bad = bool(np.abs(e).max() > tol)
        return ChunkTResult(math.inf if bad else 0.0, 0.0 if bad else 1.0, C, dev, 0.0 if not bad else math.inf,
                            alpha, power, "deterministic under H0 (zero spread): exact check")
    t = float(e.mean() / (sd / math.sqrt(C)))
    p = float(2 * sps.t.sf(abs(t), C - 1))
    return ChunkTResult(t, p, C, dev, chunk_t_min_detectable(C, sd, s_mean, alpha, power), alpha, power,
                        f"t over {C} sampler calls (df {C - 1})")


@lru_cache(maxsize=256)
def _ncf_noncentrality(d: int, df2: int, alpha: float, power: float) -> float:
    """Noncentrality of F(d, df2) that a level-``alpha`` test rejects with probability ``power``."""
    crit = sps.f.isf(alpha, d, df2)
    lo, hi = 0.0, 1.0
    while sps.ncf.sf(crit, d, df2, hi) < power:
        hi *= 2
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if sps.ncf.sf(crit, d, df2, mid) < power else (lo, mid)
    return hi


def hotelling_test(D, *, alpha: float, power: float, zero_dims=None) -> ChunkTResult:
    """Hotelling T² that the rows of D (C, d) have mean 0, F(d', C - d') null over the d' coordinates
    that vary.  ``zero_dims`` (d,) bool marks coordinates that are identically 0 under H0 (an expected
    count of 0): any non-zero value there rejects outright (p = 0); so does a coordinate with no spread
    but a non-zero mean.  ``min_detectable`` is the mean shift detected with probability ``power``, as
    a Mahalanobis distance per call."""
    D = np.asarray(D, dtype=np.float64)
    C, d = D.shape
    scale = max(1.0, float(np.abs(D).max()))
    tol = 1e-9 * scale
    zero = np.zeros(d, bool) if zero_dims is None else np.asarray(zero_dims, bool)
    dev = float(np.abs(D.mean(0)).max()) if C else 0.0
    if bool((np.abs(D[:, zero]) > tol).any()):
        return ChunkTResult(math.inf, 0.0, C, dev, 0.0, alpha, power, "a count that is 0 under H0 is not")
    sd = D.std(0, ddof=1) if C > 1 else np.zeros(d)
    live = (sd > tol) & ~zero
    flat = ~live & ~zero
    if bool((np.abs(D[:, flat].mean(0)) > tol).any()):
        return ChunkTResult(math.inf, 0.0, C, dev, 0.0, alpha, power, "a coordinate without spread deviates")
    X = D[:, live]
    d = X.shape[1]
    if d == 0:
        return ChunkTResult(0.0, 1.0, C, dev, 0.0, alpha, power, "deterministic under H0: exact check")
    if C - d < 1:
        return ChunkTResult(0.0, 1.0, C, dev, math.inf, alpha, power, f"Hotelling T² needs more than {d} calls")
    m = X.mean(0)
    S = np.cov(X, rowvar=False).reshape(d, d)
    try:
        t2 = float(C * m @ np.linalg.solve(S, m))
    except np.linalg.LinAlgError:
        t2 = float(C * m @ np.linalg.pinv(S) @ m)
    f = (C - d) / (d * (C - 1)) * t2
    p = float(sps.f.sf(f, d, C - d))
    lam = _ncf_noncentrality(d, C - d, float(alpha), float(power))
    mde = math.sqrt(lam / C)  # T²(C-d)/(d(C-1)) ~ F(d, C-d, λ) with λ = C δ'Σ⁻¹δ
    return ChunkTResult(t2, p, C, dev, mde, alpha, power, f"Hotelling T² over {C} sampler calls (d={d})")


def hoeffding_test(total, n_sequences: int, width, *, scale: float, alpha: float, power: float,
                   why: str = "") -> ChunkTResult:
    """Exact (conservative) test that E[total] = 0 where ``total`` (d,) sums ``n_sequences`` independent
    per-sequence deviations, coordinate j lying in an interval of length ``width[j]``: Hoeffding's
    inequality P(|S_j| >= t) <= 2 exp(-2 t² / (n w_j²)) per coordinate, Bonferroni over the d coordinates.
    Valid at every sample size (no asymptotics); the fallback of :func:`chunk_t_test` and
    :func:`hotelling_test` where they are not.  ``scale`` is the expected count the deviation is a rate of
    (``deviation`` = the S_j of largest size / scale; ``min_detectable`` likewise, the smallest rate deviation on one
    coordinate that rejects with probability >= ``power``, by the same inequality)."""
    S = np.atleast_1d(np.asarray(total, dtype=np.float64))
    w = np.atleast_1d(np.asarray(width, dtype=np.float64))
    d, n = S.size, int(n_sequences)
    dev = float(S[np.argmax(np.abs(S))] / scale) if d and scale > 0 else 0.0  # signed: the largest deviation
    if d == 0 or n < 1:
        return ChunkTResult(0.0, 1.0, 0, dev, math.inf, alpha, power, "Hoeffding: nothing to test")
    z = S / (w * math.sqrt(n))  # |S| / (w sqrt(n)); p_j = 2 exp(-2 z²)
    p = float(min(1.0, d * 2.0 * math.exp(-2.0 * float(np.max(z * z)))))
    reach = math.sqrt(math.log(2 * d / alpha) / 2) + math.sqrt(math.log(1 / (1 - power)) / 2)
    mde = float(reach * w.max() * math.sqrt(n) / scale) if scale > 0 else math.inf
    note = f"; {why}" if why else ""
    return ChunkTResult(float(np.abs(z).max()), p, n, dev, mde, alpha, power,
                        f"Hoeffding bound over {n} sequences (exact, conservative; d={d}){note}")




def _planned_uppers(P: np.ndarray, n: int, delta: float) -> dict:
    """{bound: its planning figure at (P, n, δ)} for the bounds offered on this law: ``worstevent`` (plug-in TV +
    one event's deviation, :mod:`harness.stats.worstevent`) always, ``events`` (Clopper–Pearson per event) on 2 to
    ``events.MAX_CELLS`` cells of positive mass, ``crossu`` (χ²-type) from n = 2.  The plug-in bound
    (Bretagnolle–Huber–Carol / McDiarmid) is never narrower than ``worstevent`` (the same T, a wider width), so it
    is not offered."""
    out = {"worstevent": worstevent.tv_upper_bound_worstevent_expected(P, n, delta)}
    if events.events_applicable(P):
        out["events"] = events.tv_upper_bound_events_expected(P, n, delta)
    if n >= 2:
        out["crossu"] = crossu.tv_upper_bound_crossu_expected(P, n, delta)
    return out


def _upper_choice(P: np.ndarray, n: int, delta: float) -> str:
    """Which bound :func:`tv_interval` takes its upper end from: the one with the smallest planning figure at
    (P, n, δ) (:func:`_planned_uppers`), chosen from the law and the size alone, before the counts are looked at,
    so the chosen bound keeps its level (no minimum of bounds, which would need δ split)."""
    figures = _planned_uppers(P, n, delta)
    return min(figures, key=figures.get)


def _one_hot(P: np.ndarray) -> bool:
    return int((P > 0).sum()) == 1


def tv_interval(counts, probs, delta: float) -> tuple[float, float, float, str]:
    """(tv_hat, lower, upper, method) for TV(Q, P) from counts of Q, holding with probability >= 1 - delta.

    Finite-sample only (the certificate's bound), delta/2 on each side: the lower end is the plug-in bound's
    (:func:`harness.stats.tv_upper_bound`: |TV(Q_hat, P) - TV(Q, P)| <= TV(Q_hat, Q)); the upper end is
    whichever of three bounds has the smallest planning figure (:func:`_upper_choice`): the plug-in TV plus one
    event's exact binomial deviation (:func:`harness.stats.worstevent.tv_upper_bound_worstevent`), on few cells
    the union over events of exact binomial bounds (:func:`harness.stats.events.tv_upper_bound_events`), the
    chi-square-type cross U-statistic bound (:func:`harness.stats.crossu.tv_upper_bound_crossu`, width
    ~ k^(1/4)/sqrt(n)).  All work on the cells of P > 0 plus one cell lumping those of
    P = 0 (exact for TV; the bound covers the whole law).  A one-hot target (greedy) is a binomial proportion:
    Clopper-Pearson.  The asymptotic noncentral-chi-square inversion is reported apart
    (:func:`tv_upper_asymptotic`): its coverage at the gate's delta (~1e-7) is not verified, so no certificate
    rests on it."""
    P = np.asarray(probs, dtype=np.float64)
    c = np.asarray(counts)
    n = int(c.sum())
    if _one_hot(P):  # one-hot target (greedy): TV = Q(outside the one cell), a binomial proportion
        m = n - int(c[P > 0].sum())
        lo, hi = clopper_pearson(m, n, delta)
        return m / n, lo, hi, "finite-sample: exact binomial (Clopper-Pearson; one-hot target)"
    fs = stats.tv_upper_bound(counts, probs, delta=delta / 2)
    eps = fs.upper - fs.tv_hat if fs.upper < 1 else math.inf
    lower = max(0.0, fs.tv_hat - eps)
    up = _BOUNDS[_upper_choice(P, n, delta / 2)](counts, probs, delta=delta / 2)
    return fs.tv_hat, lower, up.upper, up.method


def tv_upper_asymptotic(counts, probs, delta: float) -> tuple[float, str]:
    """(upper, method): the asymptotic noncentral-chi-square inversion at delta/2 (as :func:`tv_interval`'s
    upper end), where it applies (every cell of P positive with expected count >= 100), else (NaN, why not).
    Labelled asymptotic; reported, never used for a certificate."""
    P = np.asarray(probs, dtype=np.float64)
    if not bool(np.all(P > 0)):
        return NAN, "not applicable: cells of P = 0 (the chi-square cannot bound the mass Q puts there)"
    try:
        nc = stats.tv_upper_bound_ncx2(counts, probs, delta=delta / 2)
    except ValueError:
        return NAN, "not applicable: expected counts below 100"
    return nc.upper, nc.method


def tv_interval_expected_upper(probs, n: int, delta: float) -> float:
    """The expected upper end of :func:`tv_interval` for ``n`` draws of a lossless sampler (law P): its
    planning figure, inverted by :func:`tv_interval_n_for`."""
    P = np.asarray(probs, dtype=np.float64)
    if _one_hot(P):  # no draw outside the one cell: Clopper-Pearson's upper end at m = 0
        return float(clopper_pearson(0, int(n), delta)[1])
    return min(_planned_uppers(P, int(n), delta / 2).values())


def tv_interval_n_for(probs, epsilon: float, delta: float) -> int:
    """The draws at which :func:`tv_interval`'s expected upper end (lossless sampler) falls to ``epsilon``: the
    smallest of the offered bounds' planners (at that n the chosen bound is the one whose figure is smallest,
    so <= epsilon)."""
    P = np.asarray(probs, dtype=np.float64)
    if _one_hot(P):  # 1 - (delta/2)^(1/n) <= epsilon
        return int(math.ceil(math.log(delta / 2) / math.log1p(-epsilon)))
    ns = [worstevent.tv_upper_bound_worstevent_n_for(P, epsilon, delta / 2),
          crossu.tv_upper_bound_crossu_n_for(P, epsilon, delta / 2)]
    if events.events_applicable(P):
        ns.append(events.tv_upper_bound_events_n_for(P, epsilon, delta / 2))
    return min(ns)


def tv_interval_inconclusive(probs, n: int, delta: float, epsilon: float) -> float:
    """An upper bound on P(:func:`tv_interval`'s upper end >= ``epsilon``) for ``n`` draws of a lossless
    sampler (law P): the rate at which that bound leaves its certificate inconclusive (the chosen bound's
    tail: the union of exact binomial tails for the events bound, the smaller of McDiarmid and (on up to 16
    cells) that union for the worst-event bound, Bernstein for the cross U-statistic one; 0 or 1 for a one-hot
    target, whose lossless counts are fixed)."""
    P = np.asarray(probs, dtype=np.float64)
    n = int(n)
    if _one_hot(P):
        return float(clopper_pearson(0, n, delta)[1] >= epsilon)
    return _EXCEED[_upper_choice(P, n, delta / 2)](P, n, delta / 2, epsilon)


INCONCLUSIVE_REPS = 200  # simulated lossless count vectors behind tv_interval_inconclusive_normal
INCONCLUSIVE_SEED = 24  # their seed (fixed once)
_BOUNDS = {"events": events.tv_upper_bound_events, "crossu": crossu.tv_upper_bound_crossu,
           "worstevent": worstevent.tv_upper_bound_worstevent}
_EXCEED = {"events": events.tv_upper_bound_events_exceed, "crossu": crossu.tv_upper_bound_crossu_exceed,
           "worstevent": worstevent.tv_upper_bound_worstevent_exceed}


def _upper_only(counts, P: np.ndarray, delta: float, choice: str) -> float:
    """:func:`tv_interval`'s upper end alone, ``choice`` its bound (:func:`_upper_choice`, which depends on the
    law and the size only: decided once per simulation, not per count vector)."""
    return _BOUNDS[choice](counts, P, delta=delta / 2).upper


def tv_interval_inconclusive_normal(probs, n: int, delta: float, epsilon: float) -> float:
    """The normal approximation of P(:func:`tv_interval`'s upper end >= ``epsilon``) for ``n`` draws of a
    lossless sampler: 1 - Phi((epsilon - m) / s), m and s the mean and sd of the upper end over
    :data:`INCONCLUSIVE_REPS` simulated multinomial(n, P) count vectors (fixed seed).  The planning figure of the
    inconclusive rate (the rigorous :func:`tv_interval_inconclusive` is ~10-100x conservative where measured);
    computed only where the rigorous bound is above 1e-12 (elsewhere that bound is returned)."""
    rigorous = tv_interval_inconclusive(probs, n, delta, epsilon)
    P = np.asarray(probs, dtype=np.float64)
    if rigorous <= 1e-12 or _one_hot(P):
        return rigorous
    rng = np.random.default_rng(INCONCLUSIVE_SEED)
    choice = _upper_choice(P, int(n), delta / 2)
    if choice == "events":  # all count vectors at once, priced as the events planner prices them
        ups = events.tv_upper_bound_events_many(rng.multinomial(int(n), P, size=INCONCLUSIVE_REPS), P, delta / 2)
    elif choice == "worstevent":  # T + W, W fixed by (n, delta): all count vectors at once
        x = rng.multinomial(int(n), P, size=INCONCLUSIVE_REPS) / int(n)
        ups = 0.5 * np.abs(x - P).sum(axis=1) + worstevent.widest_deviation(int(n), delta / 2)
    else:
        ups = np.array([_upper_only(rng.multinomial(int(n), P), P, delta, choice) for _ in range(INCONCLUSIVE_REPS)])
    sd = float(ups.std(ddof=1))
    if sd <= 0:
        return float(ups.mean() >= epsilon)
    return float(min(rigorous, sps.norm.sf((epsilon - ups.mean()) / sd)))


def plan_chunks(draws: int, min_chunks: int, max_chunk: int, min_chunk: int = 500) -> list[int]:
    """Split ``draws`` sequences into calls of at most ``max_chunk`` each, at least ``min_chunks`` of them
    unless that would make a call smaller than ``min_chunk`` (equal sizes up to one)."""
    c = max(min(min_chunks, draws // max(min_chunk, 1)), math.ceil(draws / max_chunk), 1)
    c = min(c, draws)
    base, extra = divmod(draws, c)
    return [base + (1 if i < extra else 0) for i in range(c)]


# ------------------------------------------------------------------------------------ accumulator
def state_symbol_codes(law: ExactLaw, sym: np.ndarray) -> np.ndarray:
    """symbols (B, N) -> (B, N) codes state * W + symbol, the state being the chain's before each
    position (:meth:`harness.laws.ngram.ExactLaw.states` and the symbol in one integer, walked once)."""
    B, N = sym.shape
    W = law.n_symbols
    step_w = law.step.ravel() * W  # (S * W,) code -> next state * W
    s = np.ascontiguousarray(sym.T)  # (N, B): position-major, each step over contiguous rows
    idx = np.empty((N, B), np.int64)
    np.add(s[0], law.start * W, out=idx[0])
    for t in range(1, N):
        np.take(step_w, idx[t - 1], out=idx[t])
        idx[t] += s[t]
    return np.ascontiguousarray(idx.T)  # (B, N)


def pit_of_codes(law: ExactLaw, idx: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Randomized PIT U = F(x-1 | state) + v p(x | state) (B, N) from the codes of
    :func:`state_symbol_codes` (as :meth:`harness.laws.ngram.ExactLaw.pit`); iid U(0, 1) under H0."""
    u = np.take(law.cond_cdf_below.ravel(), idx)
    u += v * np.take(law.cond_pmf.ravel(), idx)
    return np.clip(u, 0.0, 1.0, out=u)


COMPACT_TYPES = (np.uint8, np.uint16, np.uint32)


def compact_counts(a):
    """An int64 count array (>= 0) in the first of uint8 / uint16 / uint32 that holds its largest value
    (a shard's PIT histogram of 65,536 bins holds a few counts per bin: 8 x fewer bytes to pickle and send);
    anything else unchanged.  ``int64 += compact`` adds exactly, so merging is unchanged."""
    if not isinstance(a, np.ndarray) or a.dtype != np.int64 or a.size == 0:
        return a
    lo, hi = int(a.min()), int(a.max())
    if lo < 0:
        return a
    for t in COMPACT_TYPES:
        if hi <= np.iinfo(t).max:
            return a.astype(t)
    return a


ACC_SETTINGS = ("law", "joint_tokens", "pit_bins", "pair_bins", "logprob_max", "rng", "with_pit", "pit_max_lag")  # not statistics


@dataclass
class Accumulator:
    """Sufficient statistics of one run (one sampler on one scenario with an exact law), or of one shard
    of it: every statistic is mergeable (:meth:`merge`), so a run drawn in shards and merged in shard
    order holds exactly what one accumulator fed the same calls in that order holds.

    Everything but the settings (:data:`ACC_SETTINGS`) is a statistic and merges by its type: integer
    arrays and counts add, lists (per-sequence log-probabilities, per-call acceptance totals) extend in
    order (log-probabilities up to ``logprob_max``), and any other object merges by its own ``merge``."""

    law: ExactLaw
    joint_tokens: int
    pit_bins: int
    pair_bins: int
    logprob_max: int
    rng: Optional[np.random.Generator]
    with_pit: bool = True
    pit_max_lag: int = 1  # PIT pairs at lags 1..pit_max_lag (k + 1 in verify: a round apart)
    n: int = 0
    counts: np.ndarray = field(init=False)
    pairs: np.ndarray = field(init=False)
    joint: np.ndarray = field(init=False)
    windows: np.ndarray = field(init=False)  # (N - J - 1, W^J) the J-windows [a, a + J), a = 1..N-J-1 (the last: lagged)
    pit_hist: np.ndarray = field(init=False)
    pit_pairs: np.ndarray = field(init=False)
    logprob: list = field(init=False)
    n_logprob: int = 0
    chunks: list = field(init=False)  # (B, reached (k,), accepted (k,), hist (k+1,)) per call with stats
    calls_without_stats: int = 0
    loglik: LoglikSums = field(default_factory=LoglikSums)  # sums of every sequence's S (harness.stats.loglik)
    lagged: Optional[LaggedTables] = None  # later lags and offsets (harness.stats.lagged)

    def __post_init__(self):
        self.lagged = LaggedTables.for_law(self.law, self.pit_max_lag, self.pair_bins, self.joint_tokens)
        N, W = self.law.N, self.law.n_symbols
        self.counts = np.zeros((N, W), np.int64)
        self.pairs = np.zeros((N - 1, W * W), np.int64)
        self.joint = np.zeros(W ** self.joint_tokens if self.joint_tokens >= 2 else 0, np.int64)
        J = self.joint_tokens
        self.windows = np.zeros((max(N - J - 1, 0) if J >= 2 else 0, W ** J if J >= 2 else 0), np.int64)
        self.pit_hist = np.zeros((N, self.pit_bins), np.int64)
        self.pit_pairs = np.zeros((2, self.pair_bins ** 2), np.int64)
        self.logprob = []
        self.chunks = []

    def add(self, tokens, stats_obj=None) -> None:
        """Fold one sampler call's ``tokens`` (B, N) (and its SpecStats) into the statistics."""
        law = self.law
        sym = law.symbols(tokens)  # (B, N)
        B, N = sym.shape
        self.n += B
        self._add_counts(sym)
        idx = state_symbol_codes(law, sym)  # (B, N) state * W + symbol: one code per (prefix state, symbol)
        lp_all = np.take(law.log_pmf.ravel(), idx).sum(1)  # (B,) the target's log-probability of each sequence
        self.loglik.add(lp_all)
        if self.n_logprob < self.logprob_max:
            take = min(B, self.logprob_max - self.n_logprob)
            lp = lp_all[:take]  # (take,)
            self.logprob.append(np.where(np.isfinite(lp), lp, LOGPROB_FLOOR).astype(np.float64))
            self.n_logprob += take
        u = g = None
        if self.with_pit:
            u = pit_of_codes(law, idx, self.rng.random(sym.shape, dtype=np.float32))  # (B, N)
            g = stats.pit_grid_cells(u, self.pair_bins)  # (B, N) pair-grid cell of each PIT value
            self._add_pit(u, g)
        self.lagged.add(sym, u, g)
        if stats_obj is not None and getattr(stats_obj, "reached", None) is not None:
            self.chunks.append((B, np.asarray(stats_obj.reached, np.float64).copy(),
                                np.asarray(stats_obj.accepted_at, np.float64).copy(),
                                np.asarray(stats_obj.accepted_hist, np.float64).copy()))
        else:
            self.calls_without_stats += 1

    def _add_counts(self, sym: np.ndarray) -> None:
        """Positions, consecutive pairs, the first-J joint and the middle J-windows of symbols (B, N) in one
        bincount (built position-major, so every step runs over contiguous rows)."""
        B, N = sym.shape
        W, J = self.law.n_symbols, self.joint_tokens
        n_pos, n_pair = N * W, (N - 1) * W * W
        n_mid = self.windows.shape[0]
        s = np.ascontiguousarray(sym.T)  # (N, B)
        codes = np.empty((2 * N - 1 + (J >= 2) + n_mid, B), np.int64)  # (rows, B) cell of each statistic
        np.add(s, (np.arange(N) * W)[:, None], out=codes[:N])
        pair = codes[N:2 * N - 1]  # (N-1, B)
        np.multiply(s[:-1], W, out=pair)
        pair += s[1:]
        pair += (n_pos + np.arange(N - 1) * W * W)[:, None]
        if J >= 2:
            j = codes[2 * N - 1]  # (B,)
            j[:] = s[0]
            for t in range(1, J):
                j *= W
                j += s[t]
            prev = j.copy()  # the window [a, a + J) -> [a + 1, a + 1 + J): drop x_a, append x_{a+J}
            j += n_pos + n_pair
            base = n_pos + n_pair + self.joint.size
            for a in range(1, 1 + n_mid):
                row = codes[2 * N - 1 + a]
                np.remainder(prev, W ** (J - 1), out=row)
                row *= W
                row += s[a + J - 1]
                prev[:] = row
                row += base + (a - 1) * W ** J
        tally = np.bincount(codes.ravel(), minlength=n_pos + n_pair + self.joint.size + self.windows.size)
        self.counts += tally[:n_pos].reshape(N, W)
        self.pairs += tally[n_pos:n_pos + n_pair].reshape(N - 1, W * W)
        if J >= 2:
            self.joint += tally[n_pos + n_pair:n_pos + n_pair + self.joint.size]
            self.windows += tally[n_pos + n_pair + self.joint.size:].reshape(self.windows.shape)

    def _add_pit(self, u: np.ndarray, g: np.ndarray) -> None:
        """PIT values u (B, N) and their pair-grid cells g (B, N): the per-position histograms, and the
        non-overlapping pairs (U_t, U_t+1) on the m x m grid, pairs at even t in one table and at odd t in
        the other (:func:`harness.stats.pit_pair_counts`, as behind :func:`harness.stats.pit_pair_tables`)."""
        N = u.shape[1]
        b = (u * self.pit_bins).astype(np.int64)  # (B, N) PIT bin
        np.minimum(b, self.pit_bins - 1, out=b)
        b += np.arange(N) * self.pit_bins
        self.pit_hist += np.bincount(b.ravel(), minlength=N * self.pit_bins).reshape(N, self.pit_bins)
        for ph, table in enumerate(stats.pit_pair_counts(g, self.pair_bins)):  # lag 1: even t, odd t
            self.pit_pairs[ph] += table

    def logprobs(self) -> np.ndarray:
        return np.concatenate(self.logprob) if self.logprob else np.zeros(0)

    # -- merging ---------------------------------------------------------------------------------
    def statistics(self, compact: bool = False) -> dict:
        """The statistics (every attribute but the settings), by name: what a shard sends back and
        what the resume state saves.  ``compact``: each count array in the smallest unsigned integer type
        that holds it (:func:`compact_counts`; what a shard sends), merged back exactly."""
        out = {k: v for k, v in vars(self).items() if k not in ACC_SETTINGS}
        return {k: compact_counts(v) for k, v in out.items()} if compact else out

    def merge(self, other) -> "Accumulator":
        """Fold ``other`` (an Accumulator of the same run, or its :meth:`statistics`) into this one, as if
        its calls had been added after this one's; returns self."""
        theirs = other.statistics() if isinstance(other, Accumulator) else other
        for name, mine in self.statistics().items():
            value = theirs[name]
            if name == "logprob":
                room = self.logprob_max - sum(a.size for a in mine)
                for a in value:
                    if room > 0:
                        mine.append(a[:room])
                        room -= min(room, a.size)
            elif name == "n_logprob":
                self.n_logprob = min(self.logprob_max, mine + value)
            elif isinstance(mine, np.ndarray):
                mine += value
            elif isinstance(mine, (int, np.integer)):
                setattr(self, name, mine + value)
            elif isinstance(mine, list):
                mine.extend(value)
            else:
                merged = mine.merge(value)
                if merged is not None:
                    setattr(self, name, merged)
        return self


# -------------------------------------------------------------------------------------- the tests
NAN = float("nan")


@dataclass(frozen=True)
class TestRow:
    """One evaluated test: a row of ``tests.csv``, whose columns are these fields in this order.

    A test's ``evaluate`` fills its result (from ``statistic`` on); the runner adds who was tested
    (``scenario``, ``run``, ``role``, ``family``, ``test``, ``position`` (-1: none), ``loss_test``), the
    Bonferroni level the planner used, and, after Holm over the whole family, ``p_adjusted``, ``reject``
    and ``verdict``.  Fields a test does not report stay NaN (numbers) or None (text)."""

    __test__ = False  # not a pytest test class

    scenario: str = ""
    run: str = ""
    role: str = ""
    family: str = ""
    test: str = ""
    position: int = -1
    loss_test: bool = True
    statistic: float = NAN
    pvalue: float = NAN
    p_adjusted: float = NAN
    alpha_bonferroni: float = NAN
    min_detectable: float = NAN
    min_detectable_unit: Optional[str] = None
    tv_hat: float = NAN
    tv_lower: float = NAN
    tv_upper: float = NAN
    tv_method: Optional[str] = None
    tv_cells: float = NAN  # cells the TV bound counts (positive cells + one lumping P = 0): it covers the whole law
    tv_upper_asymptotic: float = NAN  # noncentral-chi-square inversion (asymptotic; reported, not certified)
    chi2_pooled_mass: float = NAN  # target mass in the chi-square's merged rare cells (the test's blind spot)
    expected: float = NAN
    observed: float = NAN
    verdict: str = ""
    n: float = NAN  # an int when reported
    df: float = NAN  # an int when reported
    cells: float = NAN  # an int when reported
    method: Optional[str] = None
    direction: float = NAN  # sign of measured - expected (acceptance tests)
    kolmogorov_upper: float = NAN
    kolmogorov_method: Optional[str] = None
    reject: bool = False


TEST_COLUMNS = tuple(f.name for f in fields(TestRow))  # the columns of tests.csv, in order


@dataclass(frozen=True)
class TestSpec:
    """One test of a run; ``evaluate(alpha, power, delta)`` -> :class:`TestRow` with the result filled in
    (alpha: its Bonferroni level, delta: the confidence budget of its TV bound, used when
    ``wants_tv_bound``)."""

    __test__ = False  # not a pytest test class

    family: str
    test: str
    position: Optional[int]
    loss: bool
    evaluate: Callable[[float, float, float], TestRow]
    wants_tv_bound: bool = False


def _row(statistic, pvalue, mde, mde_unit, method, **extra) -> TestRow:
    return TestRow(statistic=float(statistic), pvalue=float(pvalue), min_detectable=float(mde),
                   min_detectable_unit=mde_unit, method=method, **extra)


def gof_evaluator(counts, probs, label_cells: str):
    """The evaluator of a χ² goodness-of-fit test of ``counts`` against the exact law ``probs``, with its TV
    interval at the family's δ (:func:`tv_interval`): ``make verify``'s per-position / pair / joint test, for
    callers that bring their own exact law (verify-samples' exact mode)."""
    return _gof(counts, probs, label_cells)


def _gof(counts, probs, label_cells: str):
    def ev(alpha, power, delta):
        r = stats.chi2_gof(counts, probs, alpha=alpha, power=power)
        tv_hat, lo, up, how = tv_interval(counts, probs, delta)
        up_asym, _ = tv_upper_asymptotic(counts, probs, delta)
        P = np.asarray(probs, dtype=np.float64)
        labels = stats.pool_cells(P, max(r.n, 1))
        merged = np.bincount(labels[labels >= 0])[labels[labels >= 0]] > 1 if (labels >= 0).any() else np.zeros(0, bool)
        pooled_mass = float(P[labels >= 0][merged].sum())
        mde = r.min_detectable_tv
        if r.n_cells == 1 and r.n > 0:  # one possible symbol: any draw elsewhere rejects; detected with
            mde = -math.log(1 - power) / r.n  # probability 1 - (1 - TV)^n >= power once TV >= ln(1/(1-power))/n
        return _row(r.statistic, r.pvalue, mde, f"TV ({label_cells})", r.method, df=r.df,
                    n=r.n, cells=r.n_cells, tv_hat=tv_hat, tv_lower=lo, tv_upper=up, tv_method=how,
                    tv_cells=int((P > 0).sum()) + int(bool((P <= 0).any())), tv_upper_asymptotic=up_asym,
                    chi2_pooled_mass=pooled_mass)
    return ev


def _homog(a, b, probs):
    def ev(alpha, power, delta):
        r = stats.chi2_homogeneity(a, b, probs, alpha=alpha, power=power)
        return _row(r.statistic, r.pvalue, r.min_detectable_tv, "TV between the two samples", r.method, df=r.df,
                    n=r.n_a, cells=r.n_cells, tv_hat=r.tv_hat)
    return ev


def _ks2(x, y):
    def ev(alpha, power, delta):
        r = stats.ks_2samp(x, y, alpha=alpha, power=power)
        return _row(r.statistic, r.pvalue, r.min_detectable_distance, "Kolmogorov distance", r.method, n=len(x))
    return ev


def _ad2(x, y):
    def ev(alpha, power, delta):
        r = stats.ad_2samp(x, y, alpha=alpha, power=power)
        return _row(r.statistic, r.pvalue, r.min_detectable_distance, "Kolmogorov distance (AD bound)", r.method,
                    n=len(x))
    return ev


def _ks_pit(hist):
    def ev(alpha, power, delta):
        r = ks_uniform_binned(hist, alpha=alpha, power=power)
        return _row(r.statistic, r.pvalue, r.min_detectable_distance, "Kolmogorov distance of PIT", r.method, n=r.n)
    return ev


def _pit_pairs(table, m):
    def ev(alpha, power, delta):
        K = m * m
        r = stats.chi2_gof(table, np.full(K, 1.0 / K), alpha=alpha, power=power)
        return _row(r.statistic, r.pvalue, r.min_detectable_tv, f"TV on the {m}x{m} PIT pair grid", r.method,
                    df=r.df, n=r.n, cells=r.n_cells, tv_hat=r.tv_hat)
    return ev


def _lag_pair_specs(lagged: Optional[LaggedTables]) -> list[TestSpec]:
    """χ² of the PIT pair tables at lags >= 2 (``pairs_lag{L}_even`` / ``_odd``: the phases of
    :func:`harness.stats.pit_pair_phases`), one test per non-empty table."""
    if lagged is None:
        return []
    return [TestSpec("pit", f"pairs_lag{lag}_{name.split('_')[1]}", None, True,
                     _pit_pairs(lagged.pit_pairs[i, ph], lagged.bins))
            for i, lag in enumerate(lagged.lags) for ph, name in enumerate(PIT_PAIR_TABLES)
            if lagged.pit_pairs[i, ph].sum() > 0]


def _window_specs(acc: "Accumulator", law: ExactLaw) -> list[TestSpec]:
    """χ² (and the TV bound) of each middle J-window [a, a + J), a = 1..N-J-1, against :meth:`ExactLaw.joint_at`:
    with the first (``joint[0:J]``) and the last (:func:`_later_specs`) every window of J tokens is bounded."""
    J, W = acc.joint_tokens, law.n_symbols
    return [TestSpec("gof", f"joint[{a}:{a + J}]", None, True,
                     _gof(acc.windows[a - 1], law.joint_at(a, J), f"{W ** J} sequences"), True)
            for a in range(1, 1 + acc.windows.shape[0]) if acc.windows[a - 1].sum() > 0]


def _later_specs(acc: "Accumulator", law: ExactLaw) -> list[TestSpec]:
    """χ² of the joint of the last J positions against :meth:`ExactLaw.joint_at` (none when N <= J)."""
    lg = acc.lagged
    if lg is None or not lg.tail_tokens or lg.tail_joint.sum() == 0:
        return []
    a, J, W = lg.tail_offset, lg.tail_tokens, law.n_symbols
    return [TestSpec("gof", f"joint[{a}:{a + J}]", None, True,
                     _gof(lg.tail_joint, law.joint_at(a, J), f"{W ** J} sequences"), True)]


def _loglik(sums: LoglikSums, law: ExactLaw):
    """The whole-sequence log-likelihood test (:func:`harness.stats.loglik.loglik_test`) against the law's
    exact moments of S."""
    def ev(alpha, power, delta):
        r = loglik_test(sums, law.logprob_moments(), alpha=alpha, power=power)
        return _row(r.statistic, r.pvalue, r.min_detectable_shift, "nats of mean sequence log-likelihood", r.method,
                    n=r.n, expected=r.expected, observed=r.observed, direction=float(np.sign(r.shift)))
    return ev


def _martingale(m, v, q, tokens: int):
    """The real-model log-likelihood martingale test (:func:`harness.stats.loglik.martingale_test`)."""
    def ev(alpha, power, delta):
        r = martingale_test(m, v, q, tokens=tokens, alpha=alpha, power=power)
        return _row(r.statistic, r.pvalue, r.min_detectable_shift, "nats of mean M per sequence", r.method, n=r.n,
                    expected=0.0, observed=r.observed, direction=float(np.sign(r.shift)))
    return ev


MIN_EXPECTED_PER_CALL = 20.0  # expected count per sampler call of a random acceptance coordinate's rarer
                              # outcome before the between-call t / Hotelling tests are used (below it: the
                              # exact Hoeffding bound; with >= 20 a call, equal totals in every call — zero
                              # spread, which those tests read as a deviation — do not happen by chance)
H0_TOL = 1e-12  # an exact rate within this of 0 or 1, or an expected count below it, is deterministic under H0


@dataclass(frozen=True)
class AcceptancePlan:
    """How the acceptance-law tests of one run are made, decided from the plan alone (k, N, the exact law,
    the sizes of the sampler calls) before any p-value is seen.

    positions        draft positions tested (those < N; a draft at position >= N is never emitted)
    cells            groups of accepted-length cells (n = 0..N-1 alone, n >= N pooled into one)
    deterministic    every per-sequence count is fixed under H0 (all exact rates 0 or 1, no EOS)
    calls            sequences per sampler call
    notes            what was dropped or pooled, and why (for the report)"""

    positions: tuple
    cells: tuple
    deterministic: bool
    calls: tuple
    notes: tuple


def plan_acceptance(exact, k: int, n_tokens: int, eos, calls) -> AcceptancePlan:
    """The :class:`AcceptancePlan` of a run with ``k`` drafts a round and ``n_tokens`` positions."""
    tested = min(k, n_tokens)
    cells = tuple((n,) for n in range(tested)) + ((tuple(range(tested, k + 1)),) if k >= n_tokens else ((k,),))
    notes = tuple(acceptance_notes(k, n_tokens))
    live = exact.reached > H0_TOL
    a = exact.alpha[live]
    det = eos is None and bool(np.all((a <= H0_TOL) | (a >= 1 - H0_TOL)))
    return AcceptancePlan(tuple(range(tested)), cells, det, tuple(int(b) for b in calls), notes)


def _rounds_bound(n_tokens: int, emitted: int) -> int:
    """Most rounds per sequence that emit >= ``emitted`` tokens each (pre-truncation): the sequence ends
    once N tokens are out, so (r - 1) * emitted < N."""
    return -(-n_tokens // emitted)


def _exact_zero_check(e, scale_mean: float, alpha: float, power: float) -> ChunkTResult:
    """A count fixed under H0, from any number of calls: a deviation rejects outright."""
    e = np.asarray(e, dtype=np.float64)
    bad = bool(e.size and np.abs(e).max() > 1e-9 * max(1.0, scale_mean))
    dev = float(e.sum() / max(scale_mean * e.size, 1e-300)) if e.size else 0.0
    return ChunkTResult(math.inf if bad else 0.0, 0.0 if bad else 1.0, e.size, dev, 0.0 if not bad else math.inf,
                        alpha, power, "deterministic under H0: exact check")


def _acc_position(e, scale, exact_alpha, exact_reach, i, plan: AcceptancePlan, n_tokens: int):
    C, n = e.size, sum(plan.calls)
    deterministic = exact_reach <= H0_TOL or exact_alpha <= H0_TOL or exact_alpha >= 1 - H0_TOL
    # the rarer outcome (accepted or rejected) per call: enough of it, and zero spread cannot happen by chance
    per_call = min(plan.calls) * exact_reach * min(exact_alpha, 1 - exact_alpha) if plan.calls else 0.0
    why = (f"{C} sampler call(s): the between-call t test needs >= 2" if C < 2 else
           f"{per_call:.3g} accepted or rejected drafts expected per call < {MIN_EXPECTED_PER_CALL:g}")
    asymptotic = C >= 2 and per_call >= MIN_EXPECTED_PER_CALL

    def ev(alpha, power, delta):
        if C >= 2 and (deterministic or asymptotic):
            r = chunk_t_test(e, scale, alpha=alpha, power=power)
        elif deterministic:
            r = _exact_zero_check(e, float(np.mean(scale)) if C else 0.0, alpha, power)
        else:
            r = hoeffding_test(e.sum(), n, _rounds_bound(n_tokens, i + 1), scale=n * exact_reach, alpha=alpha,
                               power=power, why=why)
        measured = exact_alpha + r.deviation
        return _row(r.statistic, r.pvalue, r.min_detectable, "acceptance rate", r.method, n=int(np.sum(scale)),
                    expected=float(exact_alpha), observed=float(measured), direction=float(np.sign(r.deviation)))
    return ev


def _acc_lengths(D, expected, observed, exact_hist, plan: AcceptancePlan, n_tokens: int):
    """Accepted-length histogram: Hotelling T² over the calls where valid (plan), else Hoeffding per cell."""
    C = D.shape[0]
    n = sum(plan.calls)
    zero_dims = exact_hist <= H0_TOL
    random = ~zero_dims & (not plan.deterministic)
    d = int(random.sum())
    rarer = np.minimum(exact_hist, exact_hist.sum() - exact_hist)[random]  # a cell's rounds, or the others
    per_call = float(min(plan.calls) * rarer.min()) if d and plan.calls else math.inf
    asymptotic = plan.deterministic or (C >= d + 2 and per_call >= MIN_EXPECTED_PER_CALL)
    why = (f"{C} sampler call(s) for {d} random cells: Hotelling T² needs >= {d + 2}" if C < d + 2 else
           f"{per_call:.3g} rounds expected per call in a cell < {MIN_EXPECTED_PER_CALL:g}")
    widths = np.array([_rounds_bound(n_tokens, min(g) + 1) for g in plan.cells], np.float64)

    def hoeff(alpha, power, note):
        tot = D.sum(0)
        if bool((np.abs(tot[zero_dims]) > 1e-9 * max(1.0, float(np.abs(D).max()))).any()):
            return ChunkTResult(math.inf, 0.0, C, 0.0, 0.0, alpha, power, "a count that is 0 under H0 is not")
        return hoeffding_test(tot[random], n, widths[random], scale=n, alpha=alpha, power=power, why=note)

    def ev(alpha, power, delta):
        unit = "Mahalanobis shift per call"
        if asymptotic:
            r = hotelling_test(D, alpha=alpha, power=power, zero_dims=zero_dims)
        else:
            r, unit = hoeff(alpha, power, why), "rounds per sequence (one length)"
        low = float(np.dot(np.arange(len(observed)), observed) - np.dot(np.arange(len(expected)), expected))
        return _row(r.statistic, r.pvalue, r.min_detectable, unit, r.method,
                    expected=float(np.dot(np.arange(len(expected)), expected)),
                    observed=float(np.dot(np.arange(len(observed)), observed)), direction=float(np.sign(low)))
    return ev


def _pool_cells(x: np.ndarray, cells: tuple) -> np.ndarray:
    """Columns of x (..., k+1) summed over each group of ``cells`` (the identity when no group pools)."""
    if all(len(g) == 1 for g in cells):
        return x
    return np.stack([x[..., list(g)].sum(-1) for g in cells], axis=-1)


def plan_tests(acc: Accumulator, baseline: Optional[Accumulator], k: int, acceptance=None) -> list[TestSpec]:
    """Every test of one run.  ``baseline`` is the target-only accumulator of the same scenario (None:
    no two-sample tests); acceptance tests only when the sampler returned SpecStats with k positions
    (k: the depth of a round), against ``acceptance`` (the expected counts of the run's algorithm,
    :func:`harness.laws.algorithms.acceptance_for`; None: the reference sampler's, ``law.acceptance_law(k)``;
    False: no exact acceptance law, no acceptance tests)."""
    law = acc.law
    N, W = law.N, law.n_symbols
    specs: list[TestSpec] = []
    marg = law.marginals()
    pairm = law.pair_marginals()
    J = acc.joint_tokens
    joint = law.joint(J) if J >= 2 else None
    for t in range(N):
        specs.append(TestSpec("gof", "position", t, True, _gof(acc.counts[t], marg[t], f"{W} symbols"), True))
    for t in range(N - 1):
        specs.append(TestSpec("gof", "pair", t, True, _gof(acc.pairs[t], pairm[t], f"{W * W} pairs"), True))
    if joint is not None:
        specs.append(TestSpec("gof", f"joint[0:{J}]", None, True, _gof(acc.joint, joint, f"{W ** J} sequences"), True))
    specs += _window_specs(acc, law)
    specs += _later_specs(acc, law)
    if baseline is not None and baseline.n > 0:
        for t in range(N):
            specs.append(TestSpec("two_sample", "position", t, True, _homog(acc.counts[t], baseline.counts[t], marg[t])))
        if joint is not None:
            specs.append(TestSpec("two_sample", f"joint[0:{J}]", None, True, _homog(acc.joint, baseline.joint, joint)))
        x, y = acc.logprobs(), baseline.logprobs()
        if x.size and y.size:
            specs.append(TestSpec("two_sample", "logprob_ks", None, True, _ks2(x, y)))
            specs.append(TestSpec("two_sample", "logprob_ad", None, True, _ad2(x, y)))
    if acc.with_pit:
        specs.append(TestSpec("pit", "pooled", None, True, _ks_pit(acc.pit_hist.sum(0))))
        for t in range(N):
            specs.append(TestSpec("pit", "position", t, True, _ks_pit(acc.pit_hist[t])))
        for start, name in enumerate(PIT_PAIR_TABLES):
            if acc.pit_pairs[start].sum() > 0:
                specs.append(TestSpec("pit", name, None, True, _pit_pairs(acc.pit_pairs[start], acc.pair_bins)))
        specs += _lag_pair_specs(acc.lagged)
    if acc.loglik.n > 0:
        specs.append(TestSpec("loglik", "sequence", None, True, _loglik(acc.loglik, law)))
    usable = [c for c in acc.chunks if c[1].shape == (k,)]
    if usable and acc.calls_without_stats == 0 and law.Q is not None and acceptance is not False:
        specs += _acceptance_specs(law, k, usable, acceptance)
    return specs


def acceptance_notes(k: int, n_tokens: int) -> list[str]:
    """What :func:`plan_tests` drops or pools of a run's acceptance tests, from k and N alone (the report's
    notes)."""
    if k <= n_tokens:
        return []
    return [f"dropped: acceptance at draft positions {n_tokens}..{k - 1} (a draft at position >= "
            f"max_new_tokens {n_tokens} is never emitted); accepted lengths >= {n_tokens} pooled into one cell"]


def _acceptance_specs(law: ExactLaw, k: int, usable: list, exact=None) -> list[TestSpec]:
    """The acceptance tests of a run whose sampler calls (``usable``) all returned SpecStats, against
    ``exact`` (None: the reference sampler's acceptance law)."""
    exact = law.acceptance_law(k) if exact is None else exact
    Bc = np.array([c[0] for c in usable], np.float64)
    plan = plan_acceptance(exact, k, law.N, law.eos, Bc)
    reached = np.stack([c[1] for c in usable])  # (C, k)
    accepted = np.stack([c[2] for c in usable])  # (C, k)
    hist = np.stack([c[3] for c in usable])  # (C, k+1)
    specs = []
    for i in plan.positions:
        e = accepted[:, i] - exact.alpha[i] * reached[:, i]
        specs.append(TestSpec("acceptance", "position", i, False,
                              _acc_position(e, reached[:, i], exact.alpha[i], exact.reached[i], i, plan, law.N)))
    D = _pool_cells(hist - Bc[:, None] * exact.hist[None, :], plan.cells)  # (C, cells)
    specs.append(TestSpec("acceptance", "lengths", None, False,
                          _acc_lengths(D, exact.hist / max(exact.rounds, 1e-300), hist.sum(0) / max(hist.sum(), 1.0),
                                       _pool_cells(exact.hist, plan.cells), plan, law.N)))
    return specs


# ------------------------------------------------------------------- raw PIT values (real models)
def _ks_pit_values(x, with_bound: bool):
    def ev(alpha, power, delta):
        r = stats.pit_uniformity_test(x, alpha=alpha, power=power)
        row = _row(r.statistic, r.pvalue, r.min_detectable_distance, "Kolmogorov distance of PIT", r.method, n=r.n)
        if with_bound:  # reported, not a certificate: DKW needs independent values, which the pooled PIT values
            kb = stats.kolmogorov_upper_bound(x, delta=delta)  # are only under H0 (harness.verify.exactmodel)
            row = replace(row, kolmogorov_upper=kb.upper,
                          kolmogorov_method=f"DKW, delta {delta:.2g}: valid only for independent PIT values (under "
                                            "H0), not a certificate")
        return row
    return ev


def plan_pit_value_tests(u, *, max_lag: int = 1, loglik=None) -> list[TestSpec]:
    """The sequential randomized-PIT tests on PIT values ``u`` (N, T), iid U(0, 1) under H0 (real models:
    no exact law, only target scoring; see :mod:`harness.verify.realmodel`): the pooled values (KS, exact
    null; its row also reports the DKW bound on the PIT law's Kolmogorov distance from U(0, 1), which holds only
    for independent values, i.e. under H0: not a certificate, not counted among the family's bounds), each
    position (KS), and pairs (U_t, U_t+L) at lags L = 1..``max_lag`` (< T) on an
    m × m grid, two tables of non-overlapping pairs per lag (χ², exactly multinomial;
    :func:`harness.stats.pit_pair_tables`; lag 1: ``pairs_even`` / ``pairs_odd``, lag L:
    ``pairs_lag{L}_even`` / ``_odd``).  ``loglik`` (M, V, Q), each (N,): adds the log-likelihood martingale
    test (:func:`harness.stats.loglik.martingale_test`)."""
    a = np.asarray(u, dtype=np.float64)
    if a.ndim != 2 or a.shape[0] < 1 or a.shape[1] < 2:
        raise ValueError(f"`u` must be an (N, T) array of PIT values with N >= 1, T >= 2; got shape {a.shape}")
    if not bool(np.all((a >= 0) & (a <= 1))):
        raise ValueError("`u` must hold PIT values in [0, 1]; got values outside")
    specs = [TestSpec("pit", "pooled", None, True, _ks_pit_values(a.ravel(), True))]
    for t in range(a.shape[1]):
        specs.append(TestSpec("pit", "position", t, True, _ks_pit_values(a[:, t].copy(), False)))
    for lag in range(1, min(int(max_lag), a.shape[1] - 1) + 1):
        m, tables = stats.pit_pair_tables(a, lag=lag)
        for name, counts in zip(PIT_PAIR_TABLES, tables):
            label = name if lag == 1 else f"pairs_lag{lag}_{name.split('_')[1]}"
            specs.append(TestSpec("pit", label, None, True, _pit_pairs(counts, m)))
    if loglik is not None:
        specs.append(TestSpec("loglik", "martingale", None, True, _martingale(*loglik, tokens=a.size)))
    return specs


# ------------------------------------------------------------------------------- von Neumann sampler
def plan_von_neumann_tests(samples, cdf: Callable, proposed: int, accepted: int, M: float) -> list[TestSpec]:
    """The von Neumann battery (:func:`harness.stats.von_neumann_tests`: KS and AD of the accepted
    ``samples`` against the target ``cdf``, exact binomial of ``accepted`` of ``proposed`` against 1/M)
    as three tests of the run's family; the three are computed once per level."""

    @lru_cache(maxsize=1)
    def results(alpha, power):
        return stats.von_neumann_tests(samples, cdf, proposed, accepted, M, alpha=alpha, power=power)

    def ks(alpha, power, delta):
        r = results(alpha, power)[0]
        return _row(r.statistic, r.pvalue, r.min_detectable_distance, "Kolmogorov distance", r.method, n=r.n)

    def ad(alpha, power, delta):
        r = results(alpha, power)[1]
        return _row(r.statistic, r.pvalue, r.min_detectable_distance, "Kolmogorov distance (AD bound)", r.method,
                    n=r.n)

    def acceptance(alpha, power, delta):
        r = results(alpha, power)[2]
        return _row(r.statistic, r.pvalue, r.min_detectable_deviation, "acceptance rate", r.method, n=r.n,
                    expected=1.0 / M, observed=r.statistic)

    return [TestSpec("von_neumann", name, None, True, ev) for name, ev in
            (("ks", ks), ("ad", ad), ("acceptance", acceptance))]
