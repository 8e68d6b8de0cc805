"""Token-TV certificate of one generation step from a single sample: the Rao–Blackwellised (RB) marginal.

Setting (scored mode of ``verify-samples``).  n completions, drawn independently; at position t completion i
has the prefix h_i (prompt and its first t tokens) and the token x_i.  The engine draws x_i from its own
conditional law Q(· | h_i); the scorer gives the target's conditional law p_i = p(· | h_i) over k cells (the
vocabulary) for the very prefix the engine drew.  Two laws of the token at t, both averaged over the n
prefixes the engine drew:

    m^Q = (1/n) Σ_i Q(· | h_i)     the engine's step (its position-t law given those prefixes)
    m   = (1/n) Σ_i p(· | h_i)     one *target* step from the same prefixes (the RB marginal: ``law_sum / n``)

The bounded quantity is τ = TV(m^Q, m) = sup over token sets A of (1/n) Σ_i [Q(A | h_i) − p(A | h_i)]: for every
event on the token at t, how far the engine's probability is from the target's, averaged over the engine's own
prefixes.  It is *not* the average over prefixes of TV(Q(· | h), p(· | h)) (a sup over events that may depend on
the prefix, ≥ τ), and it is not TV of the engine's position-t marginal from the *target's* position-t marginal
(the target's own prefixes differ from the engine's); see :data:`RB_LAW` and docs/engines.md.

Why it is cheap.  Given all prefixes H, the x_i are independent with laws Q(· | h_i) (completions independent:
the independence tests of ``verify-samples`` check this).  So nothing needs a second sample: a target baseline
drawn by the harness at the same prefixes (y_i ~ p_i) has empirical law whose conditional mean given H is m —
m is its Rao–Blackwellisation, and replacing y's counts by their mean removes its noise entirely (one sample's
noise instead of two).  Under H0 (Q = p) the vector Σ_i (e_{x_i} − p_i) is a sum of independent, bounded,
mean-zero increments (a martingale in i).

The bound (valid for EVERY engine, given H; so unconditionally).  q̂ = counts / n, τ̂ = TV(q̂, m).

1. Let A* = {m^Q > m}: H-measurable (fixed given the prefixes), so τ = m^Q(A*) − m(A*) and τ̂ ≥ q̂(A*) − m(A*),
   i.e. τ ≤ τ̂ + (m^Q(A*) − q̂(A*)): one event's deviation, no triangle inequality, no union over events.
2. Given H, n q̂(A*) = Σ_i 1{x_i ∈ A*} is a sum of n independent Bernoulli(Q(A* | h_i)) with mean n m^Q(A*), so
   by Hoeffding's inequality (Hoeffding 1963, "Probability inequalities for sums of bounded random variables",
   JASA 58, Theorem 2: independent terms in [0, 1], identical or not), P(m^Q(A*) − q̂(A*) ≥ w) ≤ exp(−2 n w²):
   with probability ≥ 1 − δ, τ ≤ τ̂ + √(ln(1/δ)/(2n)).  (The exact binomial width of
   :mod:`harness.stats.worstevent` is ~10 % narrower at δ ~ 1e-6 but needs identical terms: a Poisson-binomial's
   lower tail exceeds the binomial's when its mean is within O(ln(1/δ)/n) of 1.)

Its width pays ln(1/δ) once and nothing per cell; beyond it the bound holds τ̂ itself, whose mean under H0 is about
½ Σ_v √(m_v/n) (the √-mass of the RB law).  (Before, the bound added TV(q̂, m^Q) by the triangle inequality and
bounded it by McDiarmid plus a water-filled E|L1|: about that √-mass again on top.)  An identity-testing
(χ²-type, cross U-statistic) bound does not carry over: with non-identical laws the U-statistic's mean is
n²‖m^Q − m‖² − Σ_i ‖Q_i − p_i‖², and the second term (unknown, up to order n) brings the √(k/n) back.

The planner (:func:`rb_tv_upper_bound_planned`, :func:`rb_tv_n_for`): for a lossless engine (Q = p), with the
same RB law m at every size: E τ̂ ≤ ½ Σ_v E|Bin(n, m_v) − n m_v| / n (Hoeffding 1956, Theorem 3: the
Poisson-binomial count is below the binomial in convex order), and with ``power`` the bound falls below ε with
probability ≥ power when τ̂ ≤ that + √(ln(1/β)/(2n)) (McDiarmid: τ̂ moves by at most 1/n when one x_i changes;
β = 1 − power).
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from specimpl.errors import check_arg
from harness.stats.bounds import _binomial_mad
from harness.stats.common import _as_counts, _check_level, _check_n
from harness.stats.results import TVBound
from harness.stats.search import smallest_n
from harness.stats.worstevent import hoeffding_width

__all__ = ["RB_LAW", "rb_tv_upper_bound", "rb_tv_upper_bound_planned", "rb_tv_n_for"]

RB_LAW = ("token TV between the engine's step and one target step from the engine's own prefixes (both laws of "
       "the token averaged over the prefixes drawn)")


def _rb_law(law_sum, n: int, k: int) -> np.ndarray:
    s = np.asarray(law_sum, dtype=np.float64)
    check_arg(s.shape == (k,) and bool(np.all(np.isfinite(s))) and bool(np.all(s >= -1e-9)), "law_sum",
              f"shape {s.shape}", f"{k} finite masses >= 0 (one per cell of counts)")
    check_arg(abs(float(s.sum()) - n) <= 1e-6 * max(1, n), "law_sum", f"total {float(s.sum()):.6g}",
              f"the number of draws n = {n} (the sum of each draw's conditional law)")
    return np.clip(s, 0.0, None) / n


def rb_tv_upper_bound(counts, law_sum, delta: float = 1e-4) -> TVBound:
    """Upper confidence bound on τ = TV(m^Q, m) (module docstring): ``counts`` the engine's tokens at one
    position over n draws, ``law_sum`` Σ_i p(· | h_i), the scorer's conditional laws at the engine's prefixes
    summed (total n).  With probability ≥ 1 − δ, for every engine, τ ≤ τ̂ + W."""
    c = _as_counts("counts", counts)
    _check_level("delta", delta)
    n = int(c.sum())
    check_arg(n >= 1, "counts", "all zeros", "at least one draw")
    m = _rb_law(law_sum, n, c.size)
    tv_hat = 0.5 * float(np.abs(c / n - m).sum())
    return TVBound(tv_hat, min(1.0, tv_hat + hoeffding_width(delta, n)), delta, n, c.size,
                   "finite-sample: Rao-Blackwellised marginal + one event's deviation (Hoeffding)")


def rb_tv_upper_bound_planned(m, n, delta: float = 1e-4, power: Optional[float] = None) -> float:
    """The planning figure of :func:`rb_tv_upper_bound` at ``n`` draws of a lossless engine whose RB law is
    ``m`` (ε for n): with ``power``, a value the bound stays below with probability ≥ power (module docstring);
    without, the bound at E τ̂'s upper bound."""
    p = np.asarray(m, dtype=np.float64)
    _check_n("n", n)
    _check_level("delta", delta)
    n = int(n)
    p = np.clip(p, 0.0, None) / p.sum()
    tv_hat = 0.5 * float(_binomial_mad(n, p).sum()) / n
    if power is not None:
        _check_level("power", power)
        tv_hat += math.sqrt(math.log(1 / (1 - power)) / (2 * n))
    return min(1.0, tv_hat + hoeffding_width(delta, n))


def rb_tv_n_for(m, epsilon: float, delta: float = 1e-4, power: Optional[float] = None,
                n_max: int = 10**12) -> int:
    """The smallest n whose :func:`rb_tv_upper_bound_planned` is ≤ ``epsilon`` (n for ε; ``n_max`` + 1 if
    none up to it)."""
    check_arg(isinstance(epsilon, (int, float)) and 0 < epsilon < 1, "epsilon", epsilon, "a number in (0, 1)")
    p = np.asarray(m, dtype=np.float64)
    root = float(np.sqrt(np.clip(p, 0, None) / p.sum()).sum())
    guess = max(1, int(((0.5 * root + math.sqrt(math.log(1 / delta) / 2)) / epsilon) ** 2))
    return smallest_n(lambda k: rb_tv_upper_bound_planned(p, k, delta, power) > epsilon, guess, n_max=n_max,
                      down=True)
