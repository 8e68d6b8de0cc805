"""Anytime-valid goodness of fit: the mixture likelihood-ratio e-process of counts against an exact law.

With x_1, x_2, ... drawn from Q and the exact law P, the mixture likelihood ratio

    E_n = ∫ Π_t q(x_t) dπ(q) / Π_t P(x_t),     π = Dirichlet(1/2, ..., 1/2) on the cells P gives mass,

depends on the draws only through their counts c (the Krichevsky–Trofimov mixture):

    log E_n = log Γ(d/2) − log Γ(d/2 + n) + Σ_i [log Γ(1/2 + c_i) − log Γ(1/2)] − Σ_i c_i log P_i.

Under H0 (Q = P), E_n is a nonnegative martingale with E_0 = 1, so by Ville's inequality
P(sup_n E_n ≥ 1/α) ≤ α: the test may be looked at after every chunk of draws and a run stopped as soon as
E crosses 1/α, at no cost to its false-alarm rate.  ``pvalue = min(1, 1 / max over looks E)`` is an
anytime-valid p-value: it can join a Holm family and be read at a data-dependent stopping time.  A draw
in a cell of P = 0 is impossible under H0: E = ∞, p-value 0.

Growth under an alternative: E[log E_n] ≈ n·KL(Q‖P) − regret(n), with the mixture's regret
((d − 1)/2)·log(n / 2π) + log(Γ(1/2)^d / Γ(d/2)) against the best law in hindsight; the planners below use
it with a normal margin for the fluctuation of the log-likelihood ratio (sd ≈ sqrt(2·n·KL) for small
deviations) and are checked against simulation in ``tests/stats/test_eprocess.py``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
from scipy import special, stats as sps

from harness.stats.common import DEFAULT_ALPHA, DEFAULT_POWER, _as_counts, _as_probs, _check_level
from harness.stats.results import _Result
from harness.stats.search import smallest_n

__all__ = ["EProcessResult", "log_mixture_e", "MixtureE", "EProcess", "eprocess_test", "eprocess_n_for_kl",
           "eprocess_min_detectable_kl"]

PRIOR = 0.5  # Dirichlet concentration of the mixture (Krichevsky–Trofimov)
METHOD = "mixture likelihood ratio (Dirichlet(1/2) vs exact law), anytime-valid (Ville)"


@dataclass(frozen=True)
class EProcessResult(_Result):
    """statistic: log E at the last look; pvalue: min(1, 1/max E over the looks) (anytime-valid);
    n: draws at the last look; looks: how many times E was evaluated; n_cells: cells P gives mass;
    n_impossible: draws in cells of P = 0 (any: E = ∞); min_detectable_kl: KL(Q‖P) reaching 1/alpha by n
    draws with probability ``power`` (:func:`eprocess_min_detectable_kl`)."""

    statistic: float
    pvalue: float
    n: int
    looks: int
    n_cells: int
    n_impossible: int
    min_detectable_kl: float
    alpha: float
    power: float
    method: str = METHOD


def log_mixture_e(counts, probs) -> float:
    """log E_n of the module docstring from cumulative ``counts`` and the exact law ``probs`` (natural log;
    +inf when a cell of probability 0 was drawn)."""
    mix = MixtureE(probs)
    c = _as_counts("counts", counts)
    if c.shape != mix.P.shape:
        raise ValueError(f"`counts` has shape {c.shape} but `probs` has shape {mix.P.shape}; they must match")
    return mix.log_e(c)


class MixtureE:
    """log E_n against one exact law ``probs``, set up once (the law checked and normalised, its support and
    log-probabilities kept) for a run looked at after every shard: :meth:`log_e` of checked counts."""

    def __init__(self, probs):
        self.P = _as_probs("probs", probs)  # (d_all,)
        self.support = self.P > 0
        self.log_p = np.log(self.P[self.support])  # (d,)
        self.d = int(self.log_p.size)

    def log_e(self, counts: np.ndarray) -> float:
        """log E_n for non-negative integer ``counts`` of the law's shape (unchecked: :func:`log_mixture_e`
        checks them)."""
        if int(counts[~self.support].sum()) > 0:
            return math.inf
        c = counts[self.support].astype(np.float64)
        n = c.sum()
        log_mix = (special.gammaln(self.d * PRIOR) - special.gammaln(self.d * PRIOR + n)
                   + float(np.sum(special.gammaln(PRIOR + c) - special.gammaln(PRIOR))))
        return float(log_mix - np.dot(c, self.log_p))


def _regret(n: float, d: int) -> float:
    """The KT mixture's log-loss regret against the best law in hindsight, to leading order (never below 0)."""
    r = 0.5 * (d - 1) * math.log(max(n, 1.0) / (2 * math.pi)) + d * special.gammaln(PRIOR) - special.gammaln(d * PRIOR)
    return max(0.0, r)


def _margin(n: float, kl: float, d: int, power: float) -> float:
    """Expected log E_n under an alternative at KL ``kl``, less a z_power normal margin."""
    return n * kl - _regret(n, d) - sps.norm.ppf(power) * math.sqrt(2 * n * kl)


def eprocess_n_for_kl(kl: float, n_cells: int, alpha: float = DEFAULT_ALPHA, power: float = DEFAULT_POWER) -> int:
    """Draws after which E ≥ 1/alpha with probability ≈ ``power`` when KL(Q‖P) = ``kl``."""
    if not (kl > 0 and math.isfinite(kl)):
        raise ValueError(f"`kl` must be a finite number > 0; got {kl!r}")
    _check_level("alpha", alpha)
    _check_level("power", power)
    target = math.log(1 / alpha)
    return smallest_n(lambda n: _margin(n, kl, n_cells, power) < target, 2)


def eprocess_min_detectable_kl(n, n_cells: int, alpha: float = DEFAULT_ALPHA, power: float = DEFAULT_POWER) -> float:
    """The smallest KL(Q‖P) that takes E to 1/alpha within ``n`` draws with probability ≈ ``power``."""
    _check_level("alpha", alpha)
    _check_level("power", power)
    if n < 1:
        return math.inf
    target = math.log(1 / alpha)
    lo, hi = 0.0, 1.0
    while _margin(n, hi, n_cells, power) < target:
        hi *= 2
        if hi > 1e6:
            return math.inf
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _margin(n, mid, n_cells, power) < target else (lo, mid)
    return hi


@dataclass
class EProcess:
    """The e-process of one law, looked at after each chunk: :meth:`look` with the cumulative counts."""

    probs: np.ndarray
    alpha: float = DEFAULT_ALPHA
    power: float = DEFAULT_POWER
    log_e: list = field(default_factory=list)
    n: int = 0
    n_impossible: int = 0

    def look(self, counts) -> float:
        """Record log E at the cumulative ``counts``; returns it."""
        c = np.asarray(counts)
        self.n = int(c.sum())
        self.n_impossible = int(c[np.asarray(self.probs) == 0].sum())
        self.log_e.append(log_mixture_e(c, self.probs))
        return self.log_e[-1]

    @property
    def pvalue(self) -> float:
        """min(1, 1 / max E) over the looks so far (1 before any look)."""
        return 1.0 if not self.log_e else float(min(1.0, math.exp(-max(self.log_e))))

    def crossed(self, level: Optional[float] = None) -> bool:
        """Whether E has reached 1/level (default: 1/alpha) at some look."""
        return self.pvalue <= (self.alpha if level is None else level)

    def result(self) -> EProcessResult:
        d = int((np.asarray(self.probs) > 0).sum())
        return EProcessResult(statistic=self.log_e[-1] if self.log_e else 0.0, pvalue=self.pvalue, n=self.n,
                              looks=len(self.log_e), n_cells=d, n_impossible=self.n_impossible,
                              min_detectable_kl=eprocess_min_detectable_kl(self.n, d, self.alpha, self.power),
                              alpha=self.alpha, power=self.power)


def eprocess_test(counts, probs, *, alpha: float = DEFAULT_ALPHA, power: float = DEFAULT_POWER) -> EProcessResult:
    """The e-process at one look (fixed n): the same p-value bound 1/E, valid also when n was chosen by
    looking at the data."""
    e = EProcess(_as_probs("probs", probs), alpha, power)
    e.look(counts)
    return e.result()
