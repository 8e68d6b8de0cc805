"""An exact upper confidence bound on TV(Q, P) for a KNOWN law P on few cells: one-sided Clopper–Pearson bounds
on Q(A) for every event A, joined by the union bound.

Notation as in :mod:`harness.stats`; ``+`` marks the cells of P > 0 (k₊ of them), the cells of P = 0 lumped
into one (:func:`harness.stats.bounds.lump_zero_cells`).

The argument (valid for EVERY law Q; n iid draws)
------------------------------------------------
1. TV(Q, P) = max_A (Q(A) − P(A)) over events A.  The maximum is reached at A = {Q > P}, which holds every cell
   of P = 0 (Q ≥ P there), so it suffices to range over 𝒜 = {S ∪ Z : S a proper subset of the + cells}, Z the
   lumped cell (empty when P has no zero): M = 2^k₊ − 1 events with Z, 2^k₊ − 2 without (S = ∅ dropped, as
   then A = ∅; S = all + cells dropped, as then P(A) = 1 and Q(A) − P(A) ≤ 0).
2. For each A the count X(A) ~ Binomial(n, Q(A)).  The one-sided Clopper–Pearson upper end
   u(x) = Beta⁻¹(1 − δ/M; x + 1, n − x) (1 when x = n) has P(Q(A) > u(X(A))) ≤ δ/M for every Q(A)
   (Clopper & Pearson 1934, Biometrika 26: the exact binomial tail inversion).
3. Union bound over the M events: with probability ≥ 1 − δ, Q(A) ≤ u(X(A)) for every A ∈ 𝒜 at once, so
   TV(Q, P) ≤ max_A (u(X(A)) − P(A)).

Its width is the Clopper–Pearson width of the worst event at level δ/M, about z_{δ/M} √(max_A P(A)(1 − P(A))/n),
plus the fluctuation of the best event near that one: within 1.2-1.6x of the z_δ √(max var / n) that any
valid bound's median must exceed (experiments/tv_oracle_limit.py).  It pays ln M ≈ k₊ ln 2 in z² rather than
the plug-in bound's √(k/n) or the χ²-type bound's k^{1/4}/√n (:mod:`harness.stats.crossu`), so it is the
tightest of the three on few cells and is offered only up to :data:`MAX_CELLS` positive cells (2^k₊ events).

The planner (:func:`tv_upper_bound_events_expected`) is the mean of the bound over :data:`PLAN_REPS` count
vectors of a lossless sampler (Q = P) in the Gaussian approximation X = nP + √n (diag(√P) z − P (√P · z)),
z ~ N(0, I) drawn once (:data:`PLAN_SEED`): the same z at every n, so the figure is smooth in n and the
planners invert it; each vector prices exactly only the :data:`PLAN_TOP` events that the normal approximation
of Clopper–Pearson ranks highest.  ``tests/stats/test_events.py`` checks it against the simulated bound.
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from scipy import special, stats

from specimpl.errors import check_arg
from harness.stats.bounds import lump_zero_cells
from harness.stats.common import _as_probs, _check_level, _check_n, _tv
from harness.stats.results import TVBound

__all__ = ["MAX_CELLS", "PLAN_REPS", "PLAN_SEED", "PLAN_TOP", "events_applicable", "tv_upper_bound_events",
           "tv_upper_bound_events_expected", "tv_upper_bound_events_many", "tv_upper_bound_events_n_for", "tv_upper_bound_events_exceed"]

MAX_CELLS = 10  # positive cells at most: 2^10 - 1 = 1023 events
PLAN_REPS = 256  # Gaussian count vectors behind the planning figure
PLAN_SEED = 24  # their seed (issue 24), fixed once


def events_applicable(probs) -> bool:
    """Whether the bound is offered for this law: 2 to :data:`MAX_CELLS` cells of positive mass."""
    k = int((np.asarray(probs) > 0).sum())
    return 2 <= k <= MAX_CELLS


@lru_cache(maxsize=None)
def _membership(k: int, lumped: bool) -> np.ndarray:
    """(M, k + lumped) 0/1 matrix: row j is event j of 𝒜 (the module docstring, step 1)."""
    first = 0 if lumped else 1
    masks = np.arange(first, 2 ** k - 1)
    rows = ((masks[:, None] >> np.arange(k)[None, :]) & 1).astype(np.float64)  # (M, k)
    return np.hstack([rows, np.ones((rows.shape[0], 1))]) if lumped else rows


def _cp_upper(x: np.ndarray, n: int, level: float) -> np.ndarray:
    """One-sided Clopper–Pearson upper end at level ``level`` for x (may be fractional: the planner) of n."""
    x = np.clip(x, 0, n)
    return np.where(x >= n, 1.0, special.betaincinv(x + 1, np.maximum(n - x, 1e-300), 1 - level))


def _events(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(membership matrix, P(A) per event) for the lumped law p."""
    lumped = bool(p[-1] <= 0)
    E = _membership(int((p > 0).sum()), lumped)
    return E, E @ p


def tv_upper_bound_events(counts, probs, delta: float = 1e-4) -> TVBound:
    """Upper confidence bound on TV(Q, P) from ``n`` draws of Q (``counts``): with probability ≥ 1 − δ, for every
    Q, TV(Q, P) ≤ max_A (u(X(A)) − P(A)) (the module docstring's argument)."""
    c, p = lump_zero_cells(counts, probs)
    _check_level("delta", delta)
    check_arg(events_applicable(p), "probs", f"{int((p > 0).sum())} cells of positive mass",
              f"2 to {MAX_CELLS} (2^k events)")
    n = int(c.sum())
    check_arg(n >= 1, "counts", f"{n} draws", "at least one draw")
    E, PA = _events(p)
    upper = float(np.max(_cp_upper(E @ c, n, delta / len(PA)) - PA))
    return TVBound(_tv(c / n, p), min(1.0, max(0.0, upper)), delta, n, c.size,
                   "finite-sample: exact binomial per event (Clopper-Pearson, union over events)")


PLAN_TOP = 24  # events per count vector priced exactly by the planners (the largest by the normal approximation)


PRUNE_MARGIN = 1e-6  # relative: an event is left unpriced only where its tail proves u(x) below the row's maximum
                     # by this much (tests/stats/test_events.py checks the pruned maximum against the full one)
TAIL_LEVEL = 1e-11   # below this level the tail is evaluated as such: 1 - I_u loses its relative precision (at 1e-14,
                     # a tail from I pruned events up to 6e-5 too early, relative; from 1e-9 up, never beyond 1e-8)


def _max_planned(x: np.ndarray, n: int, PA: np.ndarray, level: float) -> np.ndarray:
    """Per row of event counts ``x`` (R, M), the bound max_A (u(x_A) − P(A)) as the planners price it: u exact
    at the :data:`PLAN_TOP` events of each row that the normal approximation of u ranks highest (the others
    cannot come near the maximum; planning only, the certificate prices every event).

    The inverse incomplete beta of u costs ~8x its forward value, so the maximum is found by pruning, with the
    same result: u is priced at each row's leading event (by the approximation); another event A can beat that
    value m only if u(x_A) > m + P(A), i.e. only if the upper tail 1 − I_{m + P(A)}(x_A + 1, n − x_A) exceeds the
    level u solves for (u is the root of I_u = 1 − level, I increasing in u; the tail evaluated as such below
    :data:`TAIL_LEVEL`, to keep its relative precision); only those (with a margin, :data:`PRUNE_MARGIN`) are priced."""
    z = stats.norm.isf(level)
    f = np.clip(x / n, 0, 1)
    approx = f + z * np.sqrt(f * (1 - f) / n) - PA  # (R, M)
    if x.shape[1] <= PLAN_TOP:
        xt, pt, at = x, np.broadcast_to(PA, x.shape), approx
    else:
        top = np.argpartition(-approx, PLAN_TOP - 1, axis=1)[:, :PLAN_TOP]  # (R, T)
        xt, pt, at = np.take_along_axis(x, top, axis=1), PA[top], np.take_along_axis(approx, top, axis=1)
    return _pruned_max(xt, n, pt, at, level)


def _pruned_max(xt: np.ndarray, n: int, pt: np.ndarray, at: np.ndarray, level: float) -> np.ndarray:
    """Per row, max_A (u(x_A) − P(A)) over the columns of ``xt`` (R, T), priced in rounds: each round prices every
    row's leading open event (by the approximation ``at``), then closes the events its maximum so far rules out
    (:func:`_ruled_out`); a row is done when none is open."""
    c = np.clip(xt, 0, n)
    open_ = np.ones(xt.shape, dtype=bool)
    best = np.full(xt.shape[0], -np.inf)
    rows = np.arange(xt.shape[0])
    while True:
        live = rows[open_.any(axis=1)]
        if not live.size:
            return best
        lead = np.argmax(np.where(open_[live], at[live], -np.inf), axis=1)  # (L,)
        best[live] = np.maximum(best[live], _cp_upper(xt[live, lead], n, level) - pt[live, lead])
        open_[live, lead] = False
        o = open_[live]
        out = np.zeros(o.shape, dtype=bool)
        out[o] = _ruled_out(c[live][o], n, pt[live][o], np.broadcast_to(best[live, None], o.shape)[o], level)
        open_[live] &= ~out


def _ruled_out(c: np.ndarray, n: int, p: np.ndarray, best: np.ndarray, level: float) -> np.ndarray:
    """Whether u(c) − p ≤ ``best`` is proved by one forward evaluation (elementwise; ``c`` clipped to [0, n])."""
    reach = (best + p) * (1 - PRUNE_MARGIN)  # u(c) <= reach  =>  the event does not beat best
    inside = (c < n) & (reach < 1)
    out = (c < n) & (reach >= 1)  # u <= 1 <= reach
    a, b, r = c[inside] + 1, np.maximum(n - c[inside], 1e-300), np.maximum(reach[inside], 0.0)
    if level >= TAIL_LEVEL:  # I near 1 is precise enough to compare (its absolute error ~1e-16)
        out[inside] = special.betainc(a, b, r) >= 1 - level
    else:  # the tail itself (8x the cost): the tail betaincinv(., ., 1 - level) solves for, 1 - level rounded
        out[inside] = special.betaincc(a, b, r) <= 1.0 - (1.0 - level)
    return out


@lru_cache(maxsize=256)
def _gaussian_events(p_bytes: bytes) -> tuple[np.ndarray, np.ndarray]:
    """(P(A) per event, the planner's Gaussian event deviations (R, M)) of the lumped law p: the same at every n
    (the planners' searches evaluate one law at many n)."""
    p = np.frombuffer(p_bytes, dtype=np.float64)
    E, PA = _events(p)
    z = np.random.default_rng(PLAN_SEED).standard_normal((PLAN_REPS, p.size))  # (R, k)
    s = np.sqrt(p)
    g = z * s - np.outer(z @ s, p)  # (R, k): covariance diag(p) - p p^T
    return PA, g @ E.T  # (M,), (R, M)


@lru_cache(maxsize=4096)
def _expected(p_bytes: bytes, n: int, delta: float) -> float:
    PA, G = _gaussian_events(p_bytes)
    x = n * PA + math.sqrt(n) * G  # (R, M) event counts
    return float(np.clip(_max_planned(x, n, PA, delta / len(PA)), 0, 1).mean())


def tv_upper_bound_events_many(counts, probs, delta: float) -> np.ndarray:
    """The bound for each row of ``counts`` (R, cells) as the planners price it (:func:`_max_planned`): the
    simulations behind a planning figure of the inconclusive rate, not a certificate."""
    c = np.asarray(counts)
    p = np.asarray(probs, dtype=np.float64)
    zero = p <= 0
    if zero.any():
        c = np.hstack([c[:, ~zero], c[:, zero].sum(axis=1, keepdims=True)])
        p = np.append(p[~zero], 0.0)
    E, PA = _events(p)
    return np.clip(_max_planned(c @ E.T, int(c[0].sum()), PA, delta / len(PA)), 0, 1)


def tv_upper_bound_events_expected(probs, n, delta: float = 1e-4) -> float:
    """The planning figure of :func:`tv_upper_bound_events` for ``n`` draws of a lossless sampler (Q = P): its mean
    over :data:`PLAN_REPS` Gaussian count vectors (module docstring); inf where the bound is not offered."""
    p_all = _as_probs("probs", probs)
    _check_n("n", n)
    _check_level("delta", delta)
    if not events_applicable(p_all):
        return math.inf
    _, p = lump_zero_cells(np.zeros(p_all.size, dtype=np.int64), p_all)
    return _expected(p.tobytes(), int(n), float(delta))


def tv_upper_bound_events_n_for(probs, epsilon: float, delta: float = 1e-4, *, n_max: int = 10**13) -> int:
    """The smallest n (to 0.5 %) whose :func:`tv_upper_bound_events_expected` is ≤ ``epsilon`` (``n_max`` + 1 if
    none; inf-free laws only): Newton steps on √n × figure (nearly constant in n), then a 0.5 % bracket."""
    check_arg(isinstance(epsilon, (int, float)) and 0 < epsilon <= 1, "epsilon", epsilon, "a number in (0, 1]")
    p = _as_probs("probs", probs)
    if not events_applicable(p):
        return n_max + 1
    f = lambda m: tv_upper_bound_events_expected(p, m, delta)  # noqa: E731
    n = max(2, int(math.log(1 / delta) / (2 * epsilon ** 2)))
    for _ in range(4):  # the figure is ~ a / sqrt(n): n <- n (f(n) / eps)^2
        n = max(2, int(math.ceil(n * (f(n) / epsilon) ** 2)))
        if n > n_max:
            return n_max + 1
    while f(n) > epsilon:
        n = int(math.ceil(n * 1.005)) + 1
    while n > 2 and f(int(n / 1.005)) <= epsilon:
        n = int(n / 1.005)
    return n


def tv_upper_bound_events_exceed(probs, n, delta: float, epsilon: float) -> float:
    """An upper bound on P(:func:`tv_upper_bound_events` ≥ ``epsilon``) for ``n`` draws of a lossless sampler
    (Q = P): the bound reaches ε only if some event's count X(A) reaches t_A, the smallest x with
    u(x) ≥ P(A) + ε; the union over events of the exact binomial tails P(Bin(n, P(A)) ≥ t_A)."""
    _check_level("delta", delta)
    check_arg(isinstance(epsilon, (int, float)) and 0 < epsilon <= 1, "epsilon", epsilon, "a number in (0, 1]")
    p_all = _as_probs("probs", probs)
    if not events_applicable(p_all):
        return 1.0
    n = int(n)
    _, p = lump_zero_cells(np.zeros(p_all.size, dtype=np.int64), p_all)
    E, PA = _events(p)
    level = delta / len(PA)
    lo, hi = np.full(PA.size, -1.0), np.full(PA.size, float(n))  # u(lo) < P(A) + eps <= u(hi)
    reach = PA + epsilon
    while np.any(hi - lo > 1):  # integer bisection, every event at once
        mid = np.floor((lo + hi) / 2)
        ok = _cp_upper(mid, n, level) >= reach
        hi, lo = np.where(ok, mid, hi), np.where(ok, lo, mid)
    tails = np.where(reach <= 1, stats.binom.sf(hi - 1, n, PA), 0.0)  # P(A) + eps > 1: out of reach
    return float(min(1.0, tails.sum()))
