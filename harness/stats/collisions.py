"""Identical completions wherever they sit in a sample: are there more repeats than the law allows?

A sample file's completions of one prompt are, under H0, independent draws from one law; two of them are
identical with the probability of a collision of that law (short completions collide legitimately, long
ones almost never).  A shared random stream, a retried request written twice, or a file concatenated
with a copy of itself repeats completions far more often.  Both tests look at every completion of a
group (completions of one prompt, keyed by the prompt's token ids), in whatever order the file holds them
— not only neighbours.

:func:`repeat_test` (the law known, scored mode).  Walk each group in file order; completion ``j`` repeats
an earlier one with conditional probability ``pi_j = sum of P(v)`` over the distinct values seen before it
(``P`` the target's probability of a whole completion).  The likelihood ratio of "repeats at rate
``r_j = max(pi_j, min(1/2, K pi_j))``" against ``pi_j`` is, multiplied over the walk, a non-negative
martingale of mean 1 under H0; the average over ``K`` in :data:`BOOSTS` still is one.  Ville's
inequality: P(sup_t E_t >= 1/a) <= a, so ``p = min(1, 1/sup E)`` is a valid p-value (false-alarm rate at
most the level, at any file size).  Power: one repeat of a completion whose probability is ``pi`` (1e-30
for 32 tokens of the tiny pair) multiplies E by ``~K``; with K up to 2^40 a single repeat of an
improbable completion rejects at any level above 5/2^40 ~ 4.5e-12, while repeats of probable completions
(``pi >= 1/2``) carry no evidence and cost nothing.  Non-repeats cost a factor ``(1 - r)/(1 - pi)``
(negligible for small pi).

:func:`within_collision_test` (the law unknown, two-sample mode).  Statistic: identical pairs within
sample ``a`` (``S = sum over values of C(count, 2)`` per group).  Under H0 the pooled completions of a
group are exchangeable between ``a`` and the baseline ``b``; given the pooled counts, ``a``'s counts of the
values are multivariate hypergeometric, which is negatively associated (Joag-Dev & Proschan 1983), so
for lambda >= 0 E exp(lambda S) <= prod over values of E exp(lambda C(X_v, 2)), each factor exact from the
hypergeometric law, and ``p = min over lambda of exp(-lambda S_obs) prod ...`` (Chernoff) is a valid
p-value, deterministic, that reaches the family's small levels (a copy of every completion among 8
per prompt next to a clean baseline of 4: p ~ 0.42^(number of copies)).  A group without completions
in one of the files carries no evidence (it is left out); with no group holding both, p = 1: a test
without data in one arm does not reject.

:func:`matched_identity_permutation_test`: request ids present in both files whose completions are
identical, against the same count after the baseline's completions of each prompt are shuffled among its
request ids (independent files: exchangeable).  A baseline that shares completions with the sample set
(a copy, a seeded engine re-run) exceeds every shuffle.
"""
from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Hashable, Iterable, Sequence

import numpy as np
from scipy.optimize import minimize_scalar
from scipy.special import logsumexp
from scipy.stats import hypergeom

from harness.stats.results import _Result

__all__ = ["RepeatResult", "CollisionResult", "repeat_test", "within_collision_test",
           "matched_identity_permutation_test", "BOOSTS"]

BOOSTS = tuple(2.0 ** e for e in (2, 5, 10, 20, 40))  # the K of the mixture


@dataclass(frozen=True)
class RepeatResult(_Result):
    """repeat_test: ``statistic`` completions that repeat an earlier one of their group; ``expected`` the
    sum of their conditional probabilities under H0; ``e_max`` the largest value of the e-process;
    ``pvalue = min(1, 1/e_max)``; ``n`` completions."""

    statistic: float
    pvalue: float
    expected: float
    e_max: float
    n: int
    method: str


@dataclass(frozen=True)
class CollisionResult(_Result):
    """A permutation test of identical completions: ``statistic`` observed, ``expected`` its permutation
    mean, ``n`` the completions (or matched request ids) compared, ``resamples`` R."""

    statistic: float
    pvalue: float
    expected: float
    n: int
    resamples: int
    method: str


def repeat_test(groups: Sequence[Hashable], values: Sequence[Hashable], log_probs: Sequence[float]) -> RepeatResult:
    """Repeats of whole completions within each group, in file order, against the law's log-probabilities
    (``log_probs[i]`` = log P(values[i] | group), natural log)."""
    seen: dict = defaultdict(set)  # group -> the distinct values so far
    mass: dict = defaultdict(lambda: -math.inf)  # group -> log of their total probability
    steps, n_rep, expected = [], 0, 0.0
    for g, v, lp in zip(groups, values, log_probs):
        prior = seen[g]
        if prior:
            log_pi = min(mass[g], 0.0)
            x = v in prior
            n_rep += x
            expected += math.exp(log_pi)
            steps.append((log_pi, x))
        if v not in prior:
            prior.add(v)
            mass[g] = float(np.logaddexp(mass[g], lp))
    factors = np.array([[_log_factor(lpi, x, math.log(k)) for k in BOOSTS] for lpi, x in steps])
    factors = factors.reshape(-1, len(BOOSTS))
    path = logsumexp(np.cumsum(factors, axis=0), axis=1) - math.log(len(BOOSTS)) if len(steps) else np.zeros(1)
    best = max(0.0, float(np.max(path)))
    return RepeatResult(statistic=float(n_rep), pvalue=float(min(1.0, math.exp(-best))), expected=expected,
                        e_max=float(math.exp(min(best, 700.0))), n=len(values),
                        method=f"sequential repeats in each group (file order), mixture likelihood-ratio e-process "
                               f"over K in {{2^2..2^40}}, p = 1/sup E (Ville): {n_rep} repeats, "
                               f"{expected:.3g} expected")


def _log_factor(log_pi: float, repeat: bool, log_k: float) -> float:
    """log of r/pi (a repeat) or (1-r)/(1-pi) (none) with r = max(pi, min(1/2, K pi))."""
    if log_pi == -math.inf:
        return math.inf if repeat else 0.0  # a repeat of a value of probability 0: impossible under H0
    if log_pi >= math.log(0.5):
        return 0.0
    log1m_pi = math.log1p(-math.exp(log_pi))
    if log_pi + log_k <= math.log(0.5):
        return log_k if repeat else math.log1p(-math.exp(log_pi + log_k)) - log1m_pi
    return (math.log(0.5) - log_pi) if repeat else (math.log(0.5) - log1m_pi)


def _pairs(c: np.ndarray) -> np.ndarray:
    return c * (c - 1) // 2


def within_collision_test(a: Iterable[tuple], b: Iterable[tuple]) -> CollisionResult:
    """Identical pairs of completions within ``a`` (items ``(group, value)``) against relabellings of the
    pooled ``a`` + ``b`` of each group (see the module docstring): a Chernoff bound under negative
    association, exact terms from the hypergeometric law."""
    ca, cb = Counter(a), Counter(b)
    na, nb = Counter(g for g, _ in ca.elements()), Counter(g for g, _ in cb.elements())
    both = {g for g in na if nb.get(g)}
    terms: Counter = Counter()  # (pooled N, value count m, draws n) -> how many values
    observed, n = 0, sum(na[g] for g in both)
    for (g, v), m in (ca + cb).items():
        if g in both and m >= 2:
            terms[(na[g] + nb[g], m, na[g])] += 1
            observed += ca.get((g, v), 0) * (ca.get((g, v), 0) - 1) // 2
    pmfs = [(_pairs(np.arange(min(m, k) + 1)), hypergeom(N, m, k).pmf(np.arange(min(m, k) + 1)), w)
            for (N, m, k), w in terms.items()]
    mean = float(sum(w * np.dot(c, p) for c, p, w in pmfs))
    p = _chernoff(observed, pmfs) if observed > mean else 1.0
    return CollisionResult(statistic=float(observed), pvalue=p, expected=mean, n=int(n), resamples=0,
                           method=f"identical pairs within the file, {observed} vs {mean:.3g} expected when each "
                                  f"prompt's "
                                  f"pooled completions are relabelled at random (Chernoff bound, multivariate "
                                  f"hypergeometric: negatively associated); {len(both)} prompt(s) in both files")


def _chernoff(s: int, pmfs) -> float:
    """min over lambda >= 0 of exp(-lambda s) prod E exp(lambda C(X, 2)) (the terms' pair counts, pmfs, weights)."""
    def log_bound(lam: float) -> float:
        return -lam * s + sum(w * float(logsumexp(lam * c, b=p)) for c, p, w in pmfs)
    res = minimize_scalar(log_bound, bounds=(0.0, 60.0), method="bounded", options={"xatol": 1e-6})
    return float(min(1.0, math.exp(min(0.0, res.fun, log_bound(60.0)))))


def matched_identity_permutation_test(a: dict, b: dict, *, resamples: int = 999, seed: int = 0) -> CollisionResult:
    """``a``, ``b``: request id -> (group, value).  Matched ids with identical values, against shuffles of
    ``b``'s values among its request ids of the same group."""
    matched = [r for r in a if r in b and a[r][0] == b[r][0]]
    observed = sum(a[r][1] == b[r][1] for r in matched)
    if observed == 0:
        return CollisionResult(0.0, 1.0, float("nan"), len(matched), 0, "no request id holds the same completion "
                               "in both files")
    rng = np.random.default_rng(seed)
    sims = np.zeros(resamples, dtype=np.int64)
    groups: dict = defaultdict(list)
    for r, (g, v) in b.items():
        groups[g].append(r)
    for g, ids in groups.items():
        slots = [i for i, r in enumerate(ids) if r in a and a[r][0] == g]
        if not slots:
            continue
        codes = {v: i for i, v in enumerate({b[r][1] for r in ids} | {a[ids[i]][1] for i in slots})}
        bv = np.array([codes[b[r][1]] for r in ids])
        av = np.array([codes[a[ids[i]][1]] for i in slots])
        for start in range(0, resamples, 64):
            m = min(64, resamples - start)
            perm = rng.permuted(np.tile(bv, (m, 1)), axis=1)
            sims[start:start + m] += (perm[:, slots] == av).sum(1)
    p = float((1 + np.sum(sims >= observed)) / (resamples + 1))
    return CollisionResult(float(observed), p, float(sims.mean()), len(matched), resamples,
                           f"{observed} of {len(matched)} request ids hold the same completion in both files, "
                           f"{sims.mean():.3g} expected of independent files ({resamples} shuffles)")
