"""The union-of-events Clopper–Pearson TV bound (harness.stats.events): its formula, coverage (with a mutant that
visibly misses), its planners, and the gate's rule that takes it on few cells.

False-failure rates: the coverage tests allow up to binom.isf(1e-6, reps, delta) misses of a bound that misses
with probability <= delta, so a correct bound fails each with probability <= 1e-6; the planner test compares
the figure with the mean of 400 simulated bounds within 4 standard errors plus 0.5 % (the Gaussian counts'
bias), a false failure < 1e-4; the rest is deterministic (fixed seeds, exact comparisons)."""
import itertools
import math

import numpy as np
import pytest
from scipy import stats as sps

from harness import stats as S
from harness.stats import crossu
from harness.stats import events as ev
from harness.stats.events import (MAX_CELLS, events_applicable, tv_upper_bound_events, tv_upper_bound_events_exceed,
                                  tv_upper_bound_events_expected, tv_upper_bound_events_many,
                                  tv_upper_bound_events_n_for)
from harness.verify import battery


def _by_hand(counts, probs, delta, width_scale=1.0, drop_zero_cells=False):
    """max over EVERY subset A of the cells of (u(X(A)) − P(A)), u the one-sided Clopper–Pearson upper end at
    delta / M, M the module's event count (2^k₊ − 1 with cells of P = 0, else 2^k₊ − 2); ``width_scale`` shrinks
    u − X(A)/n (a mutant), ``drop_zero_cells`` forgets the draws where P = 0 (another)."""
    c, p = np.asarray(counts), np.asarray(probs, dtype=float)
    if drop_zero_cells:
        c = np.where(p > 0, c, 0)
    n = int(np.asarray(counts).sum())
    k = int((p > 0).sum())
    M = 2 ** k - (1 if (p == 0).any() else 2)
    best = -1.0
    for r in range(1, c.size + 1):
        for A in itertools.combinations(range(c.size), r):
            x = int(c[list(A)].sum())
            u = 1.0 if x >= n else float(sps.beta.isf(delta / M, x + 1, n - x))
            u = x / n + width_scale * (u - x / n)
            best = max(best, u - float(p[list(A)].sum()))
    return min(1.0, max(0.0, best))


def test_the_bound_is_its_formula():
    rng = np.random.default_rng(1)
    for P, n in ((np.array([0.5, 0.3, 0.2]), 500), (np.array([0.4, 0.0, 0.25, 0.2, 0.15, 0.0]), 3000),
                 (np.full(7, 1 / 7), 100_000)):
        for delta in (0.05, 1e-7):
            c = rng.multinomial(n, 0.9 * P + 0.1 / P.size)
            b = tv_upper_bound_events(c, P, delta)
            assert b.upper == pytest.approx(_by_hand(c, P, delta), rel=1e-9, abs=1e-12)
            assert b.tv_hat == pytest.approx(0.5 * np.abs(c / n - P).sum()) and "Clopper-Pearson" in b.method


def _misses(P, Q, n, delta, reps, seed, **mutant):
    tv = 0.5 * np.abs(Q - P).sum()
    rng = np.random.default_rng(seed)
    if mutant:
        return sum(_by_hand(rng.multinomial(n, Q), P, delta, **mutant) < tv for _ in range(reps))
    return sum(tv_upper_bound_events(rng.multinomial(n, Q), P, delta).upper < tv for _ in range(reps))


def test_coverage_where_a_bound_half_as_wide_visibly_misses():
    """Q moves 0.02 along P's worst event (TV 0.02), 10,000 draws, delta 0.01: the bound misses in at most
    binom.isf(1e-6, 2000, 0.01) = 44 of 2000 draws (measured: 4); with its width halved it misses in 158 of 2000
    (measured), beyond that tolerance.  With mass on a cell of P = 0, forgetting those draws misses in 99 of 100."""
    delta, reps = 0.01, 2000
    tol = int(sps.binom.isf(1e-6, reps, delta))
    P = np.array([0.3, 0.2, 0.5])
    Q = np.array([0.31, 0.21, 0.48])
    assert _misses(P, Q, 10_000, delta, reps, seed=3) <= tol
    assert _misses(P, Q, 10_000, delta, 600, seed=3, width_scale=0.5) > tol * 600 / reps
    P0 = np.array([0.5, 0.3, 0.2, 0.0])
    Q0 = np.array([0.48, 0.29, 0.2, 0.03])
    assert _misses(P0, Q0, 5000, delta, reps, seed=4) <= tol
    assert _misses(P0, Q0, 5000, delta, 100, seed=4, drop_zero_cells=True) > 90


def test_coverage_on_adversarial_laws():
    """Laws far from P on every kind of event (one cell, half the cells, mass off P's support) at delta 0.05."""
    delta, reps = 0.05, 1000
    tol = int(sps.binom.isf(1e-6, reps, delta))
    P = np.array([0.3, 0.25, 0.2, 0.15, 0.1, 0.0])
    for Q in (np.array([0.33, 0.25, 0.2, 0.12, 0.1, 0.0]), np.array([0.31, 0.26, 0.21, 0.14, 0.08, 0.0]),
              np.array([0.3, 0.25, 0.2, 0.15, 0.09, 0.01])):
        assert _misses(P, Q, 4000, delta, reps, seed=5) <= tol


def test_planner_matches_the_simulated_bound_and_inverts():
    P = np.array([0.3, 0.2, 0.15, 0.12, 0.1, 0.08, 0.05, 0.0])
    delta, n = 1e-6, 200_000
    rng = np.random.default_rng(6)
    C = rng.multinomial(n, P, size=400)
    ups = np.array([tv_upper_bound_events(c, P, delta).upper for c in C])
    assert np.array_equal(tv_upper_bound_events_many(C, P, delta), ups)  # the planners' pricing, row by row
    fig = tv_upper_bound_events_expected(P, n, delta)
    assert abs(ups.mean() - fig) < 4 * ups.std(ddof=1) / math.sqrt(ups.size) + 0.005 * fig
    eps = 0.01
    m = tv_upper_bound_events_n_for(P, eps, delta)
    assert tv_upper_bound_events_expected(P, m, delta) <= eps < tv_upper_bound_events_expected(P, int(m * 0.99), delta)


@pytest.mark.parametrize("level", [5e-5, 1e-9, 1e-15])  # I near 1 (>= TAIL_LEVEL) and the tail itself (below)
def test_the_pruned_maximum_is_the_maximum_over_every_planned_event(level):
    """The planners' pricing finds max_A (u(x_A) − P(A)) over the PLAN_TOP events by pruning (events.
    _pruned_max); pricing every one of them gives the same numbers, bit for bit, fractional and integer counts,
    laws with and without a zero cell."""
    rng = np.random.default_rng(11)
    for k, n, zero in [(3, 700, False), (7, 5_000, True), (10, 250_000, False), (10, 3_000_000, True),
                       (9, 612, False), (10, 3_037, True)]:
        p = rng.dirichlet(np.full(k, 0.7))
        p = np.append(p, 0.0) if zero else p
        E, PA = ev._events(p)
        g = rng.standard_normal((200, p.size)) * np.sqrt(p)
        x = n * PA + math.sqrt(n) * (g - np.outer(g.sum(1), p)) @ E.T  # (R, M) fractional event counts
        for xs in (x, np.floor(np.clip(x, 0, n))):
            f = np.clip(xs / n, 0, 1)
            approx = f + sps.norm.isf(level) * np.sqrt(f * (1 - f) / n) - PA
            top = np.argsort(-approx, axis=1)[:, :ev.PLAN_TOP]
            every = np.max(ev._cp_upper(np.take_along_axis(xs, top, 1), n, level) - PA[top], axis=1)
            assert np.array_equal(ev._max_planned(xs, n, PA, level), every)


def test_exceed_bounds_the_simulated_inconclusive_rate():
    """The rigorous tail is at least the simulated rate (its Clopper-Pearson lower end, 1e-6 one-sided)."""
    P = np.array([0.4, 0.3, 0.2, 0.1])
    delta, n = 1e-4, 20_000
    rng = np.random.default_rng(7)
    ups = tv_upper_bound_events_many(rng.multinomial(n, P, size=2000), P, delta)
    for eps in (np.quantile(ups, 0.5), np.quantile(ups, 0.9)):
        hits = int((ups >= eps).sum())
        lower = float(sps.beta.ppf(1e-6, hits, 2000 - hits + 1))
        assert tv_upper_bound_events_exceed(P, n, delta, float(eps)) >= lower
    assert tv_upper_bound_events_exceed(P, n, delta, 0.9) == 0.0  # P(A) + eps > 1 for every event


def test_offered_on_few_cells_only_with_one_line_errors():
    assert events_applicable([0.5, 0.5]) and not events_applicable([1.0, 0.0])
    assert not events_applicable(np.full(MAX_CELLS + 1, 1 / (MAX_CELLS + 1)))
    assert math.isinf(tv_upper_bound_events_expected(np.full(12, 1 / 12), 1000, 1e-3))
    with pytest.raises(ValueError, match="probs"):
        tv_upper_bound_events(np.ones(12, dtype=int), np.full(12, 1 / 12), 1e-3)
    with pytest.raises(ValueError, match="delta"):
        tv_upper_bound_events([3, 4], [0.5, 0.5], 1.5)


def test_the_gate_takes_the_bound_whose_figure_is_the_smallest():
    """On random laws of 2..MAX_CELLS positive cells, sizes 1e3..1e8 and levels 1e-3..1e-9 the events bound's
    planning figure lies below the plug-in and cross U-statistic bounds' (measured: <= 0.965 of the smaller), and
    battery._upper_choice takes, from the law and size alone, whichever offered bound (events, worst-event, cross U)
    has the smallest figure."""
    rng = np.random.default_rng(8)
    for k in (2, 3, 5, 8, MAX_CELLS):
        for conc in (0.3, 2.0):
            P = rng.dirichlet(np.full(k, conc))
            P = np.maximum(P, 1e-4) / np.maximum(P, 1e-4).sum()
            for n, delta in ((1000, 1e-3), (10**6, 1e-9), (10**8, 1e-6)):
                ours = tv_upper_bound_events_expected(P, n, delta)
                others = min(S.tv_upper_bound_expected(P, n, delta), crossu.tv_upper_bound_crossu_expected(P, n, delta))
                assert ours < others, (k, conc, n, delta, ours, others)
                figures = battery._planned_uppers(P, n, delta)
                assert figures["events"] == ours
                assert battery._upper_choice(P, n, delta) == min(figures, key=figures.get)
    assert battery._upper_choice(np.full(16, 1 / 16), 10**6, 1e-6) in ("worstevent", "crossu")
