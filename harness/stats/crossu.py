"""A finite-sample identity-testing (χ²-type) upper confidence bound on TV(Q, P) for a KNOWN law P: the
cross U-statistic of two independent halves of the draws, bounded by Bernstein's inequality.

Its width grows like k^{1/4}/√n in the number of cells k (the plug-in bounds of :mod:`harness.stats.bounds`
grow like √(k/n)): it pays for the *fluctuation* of the χ² statistic (√k), not for its mean (k).

Notation as in :mod:`harness.stats`; ``+`` marks the cells of P > 0 (the cells of P = 0 lumped into one,
:func:`harness.stats.bounds.lump_zero_cells`, whose mass under Q is ``q0``).

The argument (every step valid for EVERY law Q, not only near P)
--------------------------------------------------------------
Weights w_i = 1/max(p_i, τ) on the + cells, ‖x‖²_w = Σ w_i x_i², d = q₊ − p, θ = ‖d‖²_w.

1. TV(Q, P) = ½ Σ₊ |d_i| + ½ q0 ≤ ½ √(C_w θ) + ½ q0, C_w = Σ₊ 1/w_i = Σ₊ max(p_i, τ) (Cauchy–Schwarz).
2. Split the n draws at random into halves A (m draws) and B (n − m): from counts alone, X_A ~
   multivariate hypergeometric(X, m) with randomness independent of the draws; by exchangeability of iid
   draws X_A ~ Mult(m, Q) and X_B = X − X_A ~ Mult(n − m, Q), independent.
3. v = X_A₊/m − p (known once A is drawn) and U = ⟨X_B₊/(n−m) − p, v⟩_w, the mean over the draws b of B of
   g(Y_b) = ⟨e₊(Y_b) − p, v⟩_w (e₊(y): the indicator of cell y on the + cells, 0 for the lumped cell).
   Given A, the g(Y_b) are iid with mean ⟨d, v⟩_w, range R_B = range{w_i v_i (+ cells), 0 (lumped cell)}
   and E(g + ⟨p, v⟩_w)² = Σ₊ q_i w_i² v_i² ≤ S2 + √θ √S4 (S2 = Σ₊ p_i w_i² v_i², S4 = Σ₊ w_i³ v_i⁴,
   Cauchy–Schwarz).  Bernstein's inequality (Boucheron, Lugosi & Massart 2013, *Concentration Inequalities*,
   Thm 2.10 and Cor. 2.11: for independent X_i ≤ b with Σ E X_i² ≤ v, P(Σ (X_i − E X_i) ≥ √(2 v L) + b L/3)
   ≤ e^{−L}), applied to −g, gives with probability ≥ 1 − δ_B:
   ⟨d, v⟩_w ≤ U + t(σ²_B(θ), R_B, n − m, L_B),  t(σ², R, m, L) = √(2 σ² L/m) + R L/(3 m),  L_B = ln(1/δ_B).
4. ⟨d, v⟩_w = θ + ⟨d, X_A₊/m − q₊⟩_w: the second term is the mean over A of ξ(Y_a) = ⟨e₊(Y_a) − q₊, d⟩_w,
   iid with mean 0, E ξ² ≤ Σ₊ q_i w_i² d_i² ≤ θ (1 + √(θ w_max)) (q_i w_i ≤ 1 + |d_i| w_i ≤ 1 + √(θ w_i)) and
   −ξ ≤ 2 √(θ w_max) (|w_i d_i| ≤ √(θ w_i)).  Bernstein again: with probability ≥ 1 − δ_A,
   −⟨d, X_A₊/m − q₊⟩_w ≤ t(σ²_A(θ), R_A(θ), m, L_A).
5. So with probability ≥ 1 − δ_A − δ_B the true θ satisfies θ ≤ G(θ) = U + t_A(θ) + t_B(θ), with G
   non-decreasing in θ.  The largest such θ is reached from above: θ_0 = θ_max (the largest θ any law gives,
   at a vertex), θ_{j+1} = min(θ_j, max(0, G(θ_j))); every iterate is ≥ every θ ≤ G(θ) (monotone G), so
   stopping anywhere is conservative.
6. q0 ≤ the one-sided Clopper–Pearson upper bound at δ_0 (exact).  δ_A = δ_B (= δ_0) = δ/2 (δ/3 with a
   lumped cell); the bound holds with probability ≥ 1 − δ for every Q.

The split is random: a fixed seed (:data:`SPLIT_SEED`, chosen once, never tuned) makes a report
reproducible; the guarantee is over the draws and a split independent of them (a seed fixed before the
draws are seen).  The cross U-statistic idea: Kim & Ramdas (2024), "Dimension-agnostic inference using
cross U-statistics", Bernoulli 30(1).  τ (default :data:`TAU_SCALE` / k₊) caps the weights of tiny cells,
at a cost ≤ √(1 + TAU_SCALE) in step 1.

The planner (:func:`tv_upper_bound_crossu_expected`) replaces, for a lossless sampler (Q = P), U by its
mean 0 and S2, S4, R_B by their expectations (R_B: the expected range of k Gaussians, 2 √(2 ln k) sd);
``tests/stats/test_crossu.py`` checks it against the simulated bound.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
from scipy import stats

from specimpl.errors import check_arg
from harness.stats.bounds import lump_zero_cells
from harness.stats.common import _as_counts, _as_probs, _check_level, _check_n, _tv
from harness.stats.results import TVBound
from harness.stats.search import smallest_n

__all__ = ["SPLIT_SEED", "TAU_SCALE", "adversarial_laws", "tv_upper_bound_crossu", "tv_upper_bound_crossu_expected",
           "tv_upper_bound_crossu_n_for", "tv_upper_bound_crossu_exceed"]

SPLIT_SEED = 24  # the split's seed (issue 24), fixed once; the bound holds for a split independent of the draws
TAU_SCALE = 0.05  # weights capped at 1/τ, τ = TAU_SCALE / k₊: step 1 costs at most √1.05 (2.5 %)
ITERATIONS = 2000  # fixed-point steps at most (each a valid bound; they converge geometrically)


def _bernstein(var: float, rng: float, m: int, L: float) -> float:
    """t with P(mean of m iid centred terms bounded above by ``rng``, second moment ≤ ``var``, ≥ t) ≤ e^{-L}."""
    return math.sqrt(2 * var * L / m) + rng * L / (3 * m)


def _weights(p_pos: np.ndarray, tau: Optional[float]) -> np.ndarray:
    t = TAU_SCALE / p_pos.size if tau is None else float(tau)
    check_arg(t >= 0 and math.isfinite(t), "tau", tau, "a weight floor >= 0 (None: TAU_SCALE / cells)")
    return 1.0 / np.maximum(p_pos, t)


def _levels(delta: float, lumped: bool) -> tuple[float, float, float]:
    """(L_A, L_B, δ_0): the logs of 1/δ of the two Bernstein steps and the lumped cell's level."""
    share = delta / (3 if lumped else 2)
    return math.log(1 / share), math.log(1 / share), share


def _theta_max(p: np.ndarray, w: np.ndarray) -> float:
    """max over laws Q of ‖q₊ − p‖²_w: at a vertex (one + cell, or the lumped cell), the form being convex."""
    base = float((w * p * p).sum())
    return max(base, float((base + w * (1 - 2 * p)).max()))


def _solve(U: float, S2: float, S4: float, RB: float, mA: int, mB: int, LA: float, LB: float,
           w_max: float, theta_max: float) -> float:
    """The largest θ with θ ≤ U + t_A(θ) + t_B(θ), from above (module docstring, step 5)."""
    theta = theta_max
    for _ in range(ITERATIONS):
        r = math.sqrt(theta * w_max)
        tA = _bernstein(theta * min(1 + r, w_max), 2 * r, mA, LA)
        tB = _bernstein(S2 + math.sqrt(theta * S4), RB, mB, LB)
        new = min(theta, max(0.0, U + tA + tB))
        if theta - new <= 1e-12 * theta:
            return new
        theta = new
    return theta


def _q0_upper(x0: int, n: int, delta0: float) -> float:
    return 1.0 if x0 >= n else float(stats.beta.ppf(1 - delta0, x0 + 1, n - x0))


def tv_upper_bound_crossu(counts, probs, delta: float = 1e-4, *, tau: Optional[float] = None,
                          seed: int = SPLIT_SEED) -> TVBound:
    """Upper confidence bound on TV(Q, P) from ``n`` ≥ 2 draws of Q (``counts``): with probability ≥ 1 − δ,
    for every Q, TV(Q, P) ≤ ½ √(C_w θ_U) + ½ q0_U (the module docstring's argument).  ``tau``: the weight
    floor (None: TAU_SCALE / k₊); ``seed``: the split's."""
    c, p = lump_zero_cells(counts, probs)
    _check_level("delta", delta)
    n = int(c.sum())
    check_arg(n >= 2, "counts", f"{n} draws", "at least two draws (the bound splits them in halves)")
    lumped = bool(p[-1] <= 0)
    pos = p > 0
    p_pos = p[pos]
    w = _weights(p_pos, tau)
    LA, LB, delta0 = _levels(delta, lumped)
    mA = n // 2
    cA = np.random.default_rng(seed).multivariate_hypergeometric(c, mA, method="marginals")
    cB = c - cA
    v = cA[pos] / mA - p_pos
    wv = w * v
    U = float((wv * (cB[pos] / (n - mA) - p_pos)).sum())
    RB = float(max(wv.max(), 0.0 if lumped else -np.inf) - min(wv.min(), 0.0 if lumped else np.inf))
    S2, S4 = float((p_pos * wv * wv).sum()), float((w * wv ** 2 * v ** 2).sum())
    theta = _solve(U, S2, S4, RB, mA, n - mA, LA, LB, float(w.max()), _theta_max(p_pos, w))
    q0 = _q0_upper(int(c[~pos].sum()), n, delta0) if lumped else 0.0
    upper = 0.5 * math.sqrt(float((1 / w).sum()) * theta) + 0.5 * q0
    return TVBound(_tv(c / n, p), min(1.0, upper), delta, n, c.size,
                   "finite-sample: cross U-statistic + Bernstein (chi-square type)")


def tv_upper_bound_crossu_expected(probs, n, delta: float = 1e-4, *, tau: Optional[float] = None) -> float:
    """The planning figure of :func:`tv_upper_bound_crossu` for ``n`` draws of a lossless sampler (Q = P):
    the fixed point at U = 0 with S2, S4 and R_B at their expectations under P (module docstring)."""
    p_all = _as_probs("probs", probs)
    _check_n("n", n)
    _check_level("delta", delta)
    n = int(n)
    check_arg(n >= 2, "n", n, "at least two draws")
    pl = _plan(p_all, n, delta, tau)
    theta = _solve(0.0, pl["S2"], pl["S4"], pl["RB"], pl["mA"], pl["mB"], pl["LA"], pl["LB"], pl["w_max"], pl["theta_max"])
    return min(1.0, 0.5 * math.sqrt(pl["C"] * theta) + 0.5 * pl["q0"])


def _plan(p_all: np.ndarray, n: int, delta: float, tau: Optional[float]) -> dict:
    """The bound's pieces for a lossless sampler at n draws: S2, S4 and R_B at their expectations under P."""
    lumped = bool((p_all <= 0).any())
    p = p_all[p_all > 0]
    w = _weights(p, tau)
    LA, LB, delta0 = _levels(delta, lumped)
    mA, mB = n // 2, n - n // 2
    var = p * (1 - p) / mA  # Var v_i
    m4 = p * (1 - p) * (1 + 3 * (mA - 2) * p * (1 - p)) / mA ** 3  # E (v_i)^4, binomial fourth central moment
    RB = 2 * math.sqrt(2 * math.log(2 * p.size)) * float((w * np.sqrt(var)).max())
    return dict(S2=float((p * w * w * var).sum()), S4=float((w ** 3 * m4).sum()), RB=RB, mA=mA, mB=mB, LA=LA,
                LB=LB, w_max=float(w.max()), theta_max=_theta_max(p, w), C=float((1 / w).sum()), k=p.size,
                q0=_q0_upper(0, n, delta0) if lumped else 0.0)  # a lossless sampler never hits the lumped cell


def tv_upper_bound_crossu_n_for(probs, epsilon: float, delta: float = 1e-4, *, tau: Optional[float] = None,
                                n_max: int = 10**13) -> int:
    """The smallest n whose :func:`tv_upper_bound_crossu_expected` is ≤ ``epsilon`` (``n_max`` + 1 if none)."""
    check_arg(isinstance(epsilon, (int, float)) and 0 < epsilon <= 1, "epsilon", epsilon, "a number in (0, 1]")
    p = _as_probs("probs", probs)
    k = max(2, int((p > 0).sum()))
    guess = max(2, int(math.sqrt(8 * k * math.log(1 / delta)) / (4 * epsilon ** 2)))
    return smallest_n(lambda m: tv_upper_bound_crossu_expected(p, max(m, 2), delta, tau=tau) > epsilon, guess,
                      n_max=n_max, down=True)


def tv_upper_bound_crossu_exceed(probs, n, delta: float, epsilon: float, *, tau: Optional[float] = None) -> float:
    """P(:func:`tv_upper_bound_crossu` ≥ ``epsilon``) for ``n`` draws of a lossless sampler (Q = P): the rate at
    which that sampler's certificate at ε is *inconclusive* on this bound.

    The bound reaches ε only if U ≥ U* = θ_ε − t_A(θ_ε) − t_B(θ_ε), θ_ε = (2ε − q0_U)²/C_w (θ − G(θ) increases
    past the fixed point).  Given the first half, U is a mean of n − m iid terms of mean 0 (d = 0) bounded
    above by R_B with second moment S2, so Bernstein (the module's reference) gives P(U ≥ U*) ≤ e^{−L*},
    √(2 S2 L*/(n−m)) + R_B L*/(3(n−m)) = U*.  S2, S4 and R_B are taken at (1 + 3√(2/k)) × their expectations
    (their spread from the first half: S2 is about (k/m) χ²_k/k); ``tests/stats/test_crossu.py`` checks the rate
    against simulation where it is measurable."""
    _check_level("delta", delta)
    check_arg(isinstance(epsilon, (int, float)) and 0 < epsilon <= 1, "epsilon", epsilon, "a number in (0, 1]")
    pl = _plan(_as_probs("probs", probs), int(n), delta, tau)
    room = 2 * epsilon - pl["q0"]
    if room <= 0:
        return 1.0
    infl = 1 + 3 * math.sqrt(2 / max(pl["k"], 1))
    S2, S4, RB = pl["S2"] * infl, pl["S4"] * infl, pl["RB"] * infl
    th = min(room * room / pl["C"], pl["theta_max"])
    r = math.sqrt(th * pl["w_max"])
    u_star = th - _bernstein(th * min(1 + r, pl["w_max"]), 2 * r, pl["mA"], pl["LA"]) \
        - _bernstein(S2 + math.sqrt(th * S4), RB, pl["mB"], pl["LB"])
    if u_star <= 0:
        return 1.0
    a, b = math.sqrt(2 * S2 / pl["mB"]), RB / (3 * pl["mB"])  # a √L + b L = u*
    root = (-a + math.sqrt(a * a + 4 * b * u_star)) / (2 * b) if b > 0 else u_star / a
    return float(min(1.0, math.exp(-root * root)))


def adversarial_laws(k: int = 40, seed: int = 0) -> dict:
    """Pairs (P, Q) on ``k`` cells where a TV bound is easiest to get wrong, for coverage checks (the tests and
    experiments/crossu_coverage.py): mass moved onto P's tiniest cells, many tiny cells doubled, cells of
    P = 0 hit, all mass on two cells; P a peaked Dirichlet(0.3) law."""
    rng = np.random.default_rng(seed)
    peaked = rng.dirichlet(np.full(k, 0.3))
    onto = peaked * 0.97
    onto[np.argsort(peaked)[:8]] += 0.03 / 8
    tiny = np.r_[np.full(4, 0.24), np.full(k - 4, 0.04 / (k - 4))]
    doubled = np.r_[np.full(4, 0.23), np.full(k - 4, 0.08 / (k - 4))]
    zeros = np.r_[peaked[:-6] / peaked[:-6].sum(), np.zeros(6)]
    hit = 0.99 * zeros
    hit[-6:] += 0.01 / 6
    two = np.zeros(k)
    two[:2] = 0.5
    return {"mass onto the 8 tiniest cells": (peaked, onto), "many tiny cells doubled": (tiny, doubled),
            "cells of P = 0 hit": (zeros, hit), "all mass on two cells": (peaked, two)}
