"""Anytime-valid upper bounds by a union over a fixed grid of looks ("stop at the need", issue 42 item 1).

A fixed-n bound U_δ(n) (any of :mod:`harness.stats.worstevent`, :mod:`harness.stats.events`,
:mod:`harness.stats.crossu`, Clopper–Pearson) holds with probability ≥ 1 − δ at ONE sample size chosen before the
data.  Looking at it after every chunk and stopping as soon as it falls below ε breaks that: the stopping time τ is
chosen by the data, and P(TV > U_δ(τ)) can be far above δ (the running minimum of a noisy bound).

The construction (a union bound over looks; Bonferroni 1936, as used for group-sequential designs with a
pre-set spending of the error, Lan & DeMets 1983 Biometrika 70 in its simplest, discrete form)
------------------------------------------------------------------------------------------------------
Fix before the data a grid of look sizes n_1 < n_2 < ... < n_L (the last one the cap) and miss probabilities
δ_1, ..., δ_L with Σ_i δ_i ≤ δ.  At look i the bound is U_{δ_i}(n_i).  Then for EVERY stopping time τ with values
in the grid (any rule that decides from the data seen so far, or from anything else),

    P(TV > U_{δ_τ}(n_τ)) ≤ P(∃ i: TV > U_{δ_i}(n_i)) ≤ Σ_i δ_i ≤ δ,

because each look's bound misses with probability ≤ δ_i whatever happened at the other looks.  No independence
between looks, no martingale, nothing about the bound beyond its fixed-n level is used: it is a confidence
sequence on the grid.  Its price is δ_i < δ at each look: with the worst-event bound U = T + W and W ≈ z_δ / (2√n),
the width W grows by z_{δ_i} / z_δ (at δ = 4e-7 and δ_i = δ / 10: 5.39 / 4.93 = 1.09), the draws to reach a given
width by its square (1.19), less where the plug-in part T dominates (the verify battery at its default ε and δ:
x 1.13 for 10 looks, x 1.17 for 20; :func:`price`).

Spending: :func:`look_deltas` gives the cap a share ``cap_share`` of δ (so that a run that reaches the cap is
judged almost as tightly as a fixed-n run of that size) and splits the rest evenly over the earlier looks.

Planners (checked against each other in tests/stats/test_anytime.py): :func:`epsilon_at` (the smallest ε a
lossless sampler's expected bound certifies at look n, under the looks' δ) and :func:`n_for` (the first look at
which it is ≤ ε), both from any fixed-n planning figure ``expected(n, δ)``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from specimpl.errors import check_arg
from harness.stats.common import _check_level, _check_n

__all__ = ["Looks", "look_sizes", "look_deltas", "looks_for", "epsilon_at", "n_for", "price", "miss_rate_bound", "METHOD"]

METHOD = "anytime-valid: union bound over a fixed grid of looks (delta spent per look)"


@dataclass(frozen=True)
class Looks:
    """A grid of looks fixed before the data: ``sizes`` (increasing, the last one the cap) and the miss
    probability ``deltas`` of each look's bound (Σ ≤ the bound's δ)."""

    sizes: tuple
    deltas: tuple

    def __post_init__(self):
        check_arg(len(self.sizes) == len(self.deltas) >= 1, "sizes, deltas", (len(self.sizes), len(self.deltas)),
                  "as many sizes as deltas, at least one")
        check_arg(all(b > a for a, b in zip(self.sizes, self.sizes[1:])), "sizes", self.sizes, "increasing sizes")

    @property
    def cap(self) -> int:
        return int(self.sizes[-1])

    def delta_at(self, n: int) -> float:
        """δ_i of the look at size ``n`` (ValueError if ``n`` is not a look: a bound read elsewhere has no level)."""
        try:
            return float(self.deltas[self.sizes.index(int(n))])
        except ValueError:
            raise ValueError(f"`n` must be one of the looks {list(self.sizes)}; got {n!r}") from None


def look_sizes(first: int, cap: int, ratio: float = 1.1) -> tuple:
    """Looks first, first·ratio, first·ratio², ... (rounded up) below ``cap``, then ``cap`` itself (a look within
    ratio^(1/2) of the cap is dropped: the cap replaces it).  ``first`` ≥ ``cap``: the cap alone (fixed n)."""
    _check_n("first", first)
    _check_n("cap", cap)
    check_arg(isinstance(ratio, (int, float)) and ratio > 1, "ratio", ratio, "a number > 1")
    out, x = [], float(first)
    while x * math.sqrt(ratio) < cap:
        out.append(int(math.ceil(x)))
        x *= ratio
    return tuple(sorted(set(out))) + (int(cap),)


def look_deltas(delta: float, n_looks: int, cap_share: float = 0.5) -> tuple:
    """δ of each of ``n_looks`` looks: the last (the cap) ``cap_share`` · δ, the others (1 − cap_share) · δ
    evenly; one look: δ (a fixed-n bound).  Σ = δ."""
    _check_level("delta", delta)
    check_arg(isinstance(n_looks, int) and n_looks >= 1, "n_looks", n_looks, "an integer >= 1")
    check_arg(isinstance(cap_share, (int, float)) and 0 < cap_share < 1, "cap_share", cap_share, "a number in (0, 1)")
    if n_looks == 1:
        return (float(delta),)
    early = delta * (1.0 - cap_share) / (n_looks - 1)
    return (early,) * (n_looks - 1) + (delta * cap_share,)


def looks_for(first: int, cap: int, delta: float, ratio: float = 1.1, cap_share: float = 0.5) -> Looks:
    """The :class:`Looks` of :func:`look_sizes` with :func:`look_deltas`."""
    sizes = look_sizes(first, cap, ratio)
    return Looks(sizes, look_deltas(delta, len(sizes), cap_share))


def epsilon_at(expected: Callable[[int, float], float], looks: Looks, n: int) -> float:
    """The smallest ε the bound certifies at look ``n`` for a lossless sampler, by its planning figure:
    ``expected(n, δ_n)`` (e.g. :func:`harness.stats.worstevent.tv_upper_bound_worstevent_expected` with its law
    bound in), δ_n the look's share."""
    return float(expected(int(n), looks.delta_at(n)))


def n_for(expected: Callable[[int, float], float], looks: Looks, epsilon: float) -> int:
    """The first look at which :func:`epsilon_at` is ≤ ``epsilon`` (looks.cap + 1 if none: the cap does not
    reach it)."""
    check_arg(isinstance(epsilon, (int, float)) and 0 < epsilon <= 1, "epsilon", epsilon, "a number in (0, 1]")
    for n in looks.sizes:
        if epsilon_at(expected, looks, n) <= epsilon:
            return int(n)
    return looks.cap + 1


def price(n_for_fixed: Callable[[float, float], int], epsilon: float, delta: float, looks: Looks) -> float:
    """Draws to reach ``epsilon`` at the earliest look's δ over those at the fixed-n δ: ``n_for_fixed(ε, δ_i) /
    n_for_fixed(ε, δ)``, δ_i the smallest early look's share (the price of looking, before the grid's rounding up
    to a look)."""
    d = min(looks.deltas[:-1]) if len(looks.deltas) > 1 else looks.deltas[0]
    return float(n_for_fixed(epsilon, d)) / float(n_for_fixed(epsilon, delta))


def miss_rate_bound(looks: Looks) -> float:
    """Σ_i δ_i: the probability that the bound misses at ANY look (so at any stopping time among them)."""
    return float(np.sum(looks.deltas))
