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

1. τ ≤ τ̂ + TV(q̂, m^Q) (triangle inequality).
2. Cells are split, from m alone (H-measurable), into S = {m_v < 1/(4n)} and B (the rest).  On S,
   ½ Σ_S |q̂_v − m^Q_v| ≤ ½ (q̂(S) + m^Q(S)), and m^Q(S) ≤ U_S, the one-sided Clopper–Pearson upper bound of the
   count in S at level δ_S: the count is Poisson-binomial with mean n m^Q(S), and its lower tail is at most the
   binomial's at the same mean (Hoeffding 1956, "On the distribution of the number of successes in independent
   trials", Ann. Math. Statist. 27, Theorem 4: P(S ≤ b) ≤ P(Bin(n, p̄) ≤ b) for b ≤ n p̄ − 1, which holds at
   the bound's edge for δ_S < 0.36).
3. f = ½ Σ_B |q̂_v − m^Q_v| changes by at most 1/n when one x_i changes, so by McDiarmid's bounded-differences
   inequality (McDiarmid 1989, "On the method of bounded differences", Surveys in Combinatorics, Lemma 1.2),
   with probability ≥ 1 − δ_M, f ≤ E f + √(ln(1/δ_M) / (2n)).
4. E f ≤ ½ Σ_B h(m^Q_v), h(x) = min(√(x(1 − x)/n), 2x) for x ≤ ½ and h(½) beyond (E|X − EX| ≤ √Var X ≤ 2 EX;
   Var of the Poisson-binomial count ≤ n x (1 − x) by Jensen; h is the concave nondecreasing majorant).
5. m^Q_v ≤ m_v + a_v with a_v = (m^Q_v − m_v)_+ and Σ a_v = τ; so Σ_B h(m^Q_v) ≤ Σ_B h(m_v) + G(τ), G(τ) the
   most that mass τ added to the cells of B can raise Σ_B h (water-filling: the cells below a common level c
   are raised to c; h concave) — concave and nondecreasing in τ.
6. On the event of 2–3 (probability ≥ 1 − δ, δ = δ_M + δ_S), τ ≤ F(τ) = τ̂ + ½ (q̂(S) + U_S) + ½ Σ_B h(m_v)
   + ½ G(τ) + √(ln(1/δ_M)/(2n)).  F is concave, so {τ ≤ F(τ)} is an interval [0, τ*]; the bound is τ* (bisection
   from above, the upper end kept).

Its width grows like Σ_v √(m_v) / √n — the √-mass of the RB law (≤ √(k/n) at worst, far less for a peaked
law) — and pays ln(1/δ) once, not per cell: a per-cell Freedman/Bernstein bound with a union over the k cells
would pay √(2 ln(2k/δ)) on every cell's √(m_v/n), several times more here.  An identity-testing (χ²-type,
cross U-statistic) bound does not carry over: with non-identical laws the U-statistic's mean is
n²‖m^Q − m‖² − Σ_i ‖Q_i − p_i‖², and the second term (unknown, up to order n) brings the √(k/n) back.

The planner (:func:`rb_tv_upper_bound_planned`, :func:`rb_tv_n_for`): for a lossless engine (Q = p), with the
same RB law m at every size: E τ̂ ≤ ½ Σ_v E|Bin(n, m_v) − n m_v| / n (Hoeffding 1956, Theorem 3: the
Poisson-binomial count is below the binomial in convex order), and with ``power`` the bound falls below ε with
probability ≥ power when τ̂ ≤ that + √(ln(2/β)/(2n)) (McDiarmid, β = 1 − power, half of it) and the count in S
≤ its binomial 1 − β/2 quantile (Hoeffding's Theorem 4 for the upper tail; the other half).
"""
from __future__ import annotations

import bisect
import math
from typing import Optional

import numpy as np
from scipy import stats

from specimpl.errors import check_arg
from harness.stats.bounds import _binomial_mad
from harness.stats.common import _as_counts, _check_level, _check_n
from harness.stats.results import TVBound
from harness.stats.search import smallest_n

__all__ = ["RB_LAW", "SHARE_S", "rb_tv_upper_bound", "rb_tv_upper_bound_planned", "rb_tv_n_for", "rb_tv_fixed_point"]

RB_LAW = ("token TV between the engine's step and one target step from the engine's own prefixes (both laws of "
       "the token averaged over the prefixes drawn)")
SHARE_S = 0.1  # share of δ given to the small cells' Clopper–Pearson bound (δ_S); McDiarmid gets the rest
BISECTIONS = 44  # the interval [0, 1] to 6e-14; the upper end is returned (conservative)


def _h(x: np.ndarray, n: int) -> np.ndarray:
    """Step 4's per-cell bound on E|q̂_v − m^Q_v| at m^Q_v = x: concave, nondecreasing."""
    y = np.minimum(np.asarray(x, dtype=np.float64), 0.5)
    return np.minimum(np.sqrt(y * (1 - y) / n), 2 * y)


def _h1(x: float, n: int) -> float:
    """:func:`_h` of one value (the water level, evaluated in the bisection's inner loop)."""
    y = min(x, 0.5)
    return min(math.sqrt(y * (1 - y) / n), 2 * y)


class _Fill:
    """G(τ) of step 5 for the B cells' RB masses ``mb`` at n rows (sorted once; each G is a search)."""

    def __init__(self, mb: np.ndarray, n: int):
        self.m = np.sort(mb)
        self.n = n
        self.cm = np.concatenate([[0.0], np.cumsum(self.m)])
        self.ch = np.concatenate([[0.0], np.cumsum(_h(self.m, n))])
        j = np.arange(self.m.size)
        self.knots = (j * self.m - self.cm[:-1]).tolist()  # mass raising the j lowest cells to the (j+1)-th's level
        self.cm, self.ch = self.cm.tolist(), self.ch.tolist()

    def __call__(self, tau: float) -> float:
        if self.m.size == 0 or tau <= 0:
            return 0.0
        j = bisect.bisect_right(self.knots, tau)  # cells 0..j-1 lie below the level
        level = min(1.0, (tau + self.cm[j]) / j)
        return j * _h1(level, self.n) - self.ch[j]


def rb_tv_fixed_point(base: float, mb, n: int) -> float:
    """The largest τ in [0, 1] with τ ≤ base + ½ Σ_B h(m_v) + ½ G(τ) (step 6; ``base`` holds every other
    term).  1 when no τ < 1 satisfies it."""
    mb = np.asarray(mb, dtype=np.float64)
    fill = _Fill(mb, n)
    a = base + 0.5 * float(_h(mb, n).sum())
    short = lambda tau: tau <= a + 0.5 * fill(tau)  # noqa: E731 -- True on [0, τ*] (F concave)
    if short(1.0):
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(BISECTIONS):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if short(mid) else (lo, mid)
    return hi


def _levels(delta: float, has_small: bool) -> tuple[float, float]:
    return (delta * (1 - SHARE_S), delta * SHARE_S) if has_small else (delta, 0.0)


def _cp_upper(c: float, n: int, level: float) -> float:
    return 1.0 if c >= n else float(stats.beta.ppf(1 - level, c + 1, n - c))


def _bound(tv_hat: float, qs: float, m: np.ndarray, small: np.ndarray, n: int, delta: float) -> float:
    """Step 6's τ* from τ̂, the observed share ``qs`` in the small cells S and the RB law ``m``."""
    d_m, d_s = _levels(delta, bool(small.any()))
    s_part = 0.5 * (qs + _cp_upper(round(qs * n), n, d_s)) if small.any() else 0.0
    return rb_tv_fixed_point(tv_hat + s_part + math.sqrt(math.log(1 / d_m) / (2 * n)), m[~small], n)


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
    summed (total n).  With probability ≥ 1 − δ, for every engine, τ ≤ ``upper``."""
    c = _as_counts("counts", counts)
    _check_level("delta", delta)
    n = int(c.sum())
    check_arg(n >= 1, "counts", "all zeros", "at least one draw")
    m = _rb_law(law_sum, n, c.size)
    q = c / n
    tv_hat = 0.5 * float(np.abs(q - m).sum())
    small = m < 1 / (4 * n)
    up = _bound(tv_hat, float(q[small].sum()), m, small, n, delta)
    return TVBound(tv_hat, min(1.0, up), delta, n, c.size,
                   "finite-sample: Rao-Blackwellised marginal + McDiarmid (water-filled E|L1|)")


def rb_tv_upper_bound_planned(m, n, delta: float = 1e-4, power: Optional[float] = None) -> float:
    """The planning figure of :func:`rb_tv_upper_bound` at ``n`` draws of a lossless engine whose RB law is
    ``m`` (ε for n): with ``power``, a value the bound stays below with probability ≥ power (module docstring);
    without, the bound at E τ̂'s upper bound and the expected count in S."""
    p = np.asarray(m, dtype=np.float64)
    _check_n("n", n)
    _check_level("delta", delta)
    n = int(n)
    p = np.clip(p, 0.0, None) / p.sum()
    tv_hat = 0.5 * float(_binomial_mad(n, p).sum()) / n
    small = p < 1 / (4 * n)
    ms = float(p[small].sum())
    if power is None:
        cs = n * ms
    else:
        _check_level("power", power)
        beta = 1 - power
        tv_hat += math.sqrt(math.log(2 / beta) / (2 * n))
        cs = float(stats.binom.ppf(1 - beta / 2, n, ms)) if ms > 0 else 0.0
    return min(1.0, _bound(tv_hat, cs / n, p, small, n, delta))


def rb_tv_n_for(m, epsilon: float, delta: float = 1e-4, power: Optional[float] = None,
                n_max: int = 10**12) -> int:
    """The smallest n whose :func:`rb_tv_upper_bound_planned` is ≤ ``epsilon`` (n for ε; ``n_max`` + 1 if
    none up to it)."""
    check_arg(isinstance(epsilon, (int, float)) and 0 < epsilon < 1, "epsilon", epsilon, "a number in (0, 1)")
    p = np.asarray(m, dtype=np.float64)
    root = float(np.sqrt(np.clip(p, 0, None) / p.sum()).sum())
    guess = max(1, int(((root + math.sqrt(math.log(1 / delta) / 2)) / epsilon) ** 2))
    return smallest_n(lambda k: rb_tv_upper_bound_planned(p, k, delta, power) > epsilon, guess, n_max=n_max,
                      down=True)
