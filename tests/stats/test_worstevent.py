"""The worst-event TV bound (harness.stats.worstevent): plug-in TV + the widest one-sided Clopper–Pearson deviation.
Its formula (brute force), the unimodality its search relies on, coverage where a bound half as wide visibly
misses, its planners, its inconclusive tail, and that it is never wider than the plug-in bound.

False-failure rates: the coverage tests allow up to binom.isf(1e-6, reps, delta) misses of a bound that misses with
probability <= delta, so a correct bound fails each with probability <= 1e-6; the planner test compares the figure
with the mean of 400 simulated bounds within 4 standard errors (false failure < 1e-4); the tail test uses the
simulated rate's Clopper-Pearson lower end at 1e-6; the rest is deterministic (fixed seeds, exact comparisons)."""
import math

import numpy as np
import pytest
from scipy import stats as sps

from harness import stats as S
from harness.stats.worstevent import (tv_upper_bound_worstevent, tv_upper_bound_worstevent_exceed,
                                      tv_upper_bound_worstevent_expected, tv_upper_bound_worstevent_n_for,
                                      widest_deviation)
from harness.verify import battery


def _u(x, n, delta):
    return 1.0 if x >= n else float(sps.beta.isf(delta, x + 1, n - x))


def _by_hand(counts, probs, delta, width_scale=1.0, drop_zero_cells=False, mutant_fast=False):
    """T + max over every integer x >= floor(nT) - 1 of (u(x) - x/n), T = TV(Q_hat, P) over every cell; ``width_scale``
    shrinks the deviation (a mutant), ``drop_zero_cells`` forgets the draws where P = 0 (another); ``mutant_fast``
    takes the maximum over x from :func:`widest_deviation` (checked against brute force below)."""
    c, p = np.asarray(counts, dtype=float), np.asarray(probs, dtype=float)
    n = int(c.sum())
    q = c / n
    if drop_zero_cells:
        q = np.where(p > 0, q, 0.0)
    t = 0.5 * float(np.abs(q - p).sum())
    x0 = max(0, math.floor(n * t) - 1)
    w = max(_u(x, n, delta) - x / n for x in range(x0, n + 1)) if not mutant_fast else widest_deviation(n, delta, x0)
    return min(1.0, t + width_scale * w)


def test_the_bound_is_its_formula():
    rng = np.random.default_rng(1)
    for P, n in ((np.array([0.5, 0.3, 0.2]), 500), (np.array([0.4, 0.0, 0.25, 0.2, 0.15, 0.0]), 3000),
                 (np.full(40, 1 / 40), 2000), (np.array([0.9, 0.1]), 7)):
        for delta in (0.05, 1e-7):
            c = rng.multinomial(n, 0.8 * P + 0.2 / P.size)
            b = tv_upper_bound_worstevent(c, P, delta)
            assert b.upper == pytest.approx(_by_hand(c, P, delta), rel=1e-9, abs=1e-12)
            assert b.tv_hat == pytest.approx(0.5 * np.abs(c / n - P).sum()) and "Clopper-Pearson" in b.method
    far = tv_upper_bound_worstevent([50, 10], [0.05, 0.95], 0.05)  # T = 0.78: the maximum starts past W's peak
    assert far.upper == pytest.approx(_by_hand([50, 10], [0.05, 0.95], 0.05), rel=1e-9, abs=1e-12) and far.upper < 1


def test_the_deviation_is_unimodal_so_the_search_is_exact():
    """u(x) - x/n changes direction once in x (the ternary search's premise), and the search returns the brute-force
    maximum from every starting x0."""
    for n in (1, 2, 3, 10, 57, 1000, 20_000):
        for delta in (0.4, 0.05, 1e-3, 4e-7, 1e-12):
            f = np.array([_u(x, n, delta) - x / n for x in range(n + 1)]) if n <= 1000 else \
                S.worstevent._dev(np.arange(n + 1), n, delta)
            s = np.sign(np.diff(f))
            s = s[s != 0]
            assert int((np.diff(s) != 0).sum()) <= 1, (n, delta)
            for x0 in sorted({0, n // 3, n // 2, (3 * n) // 4, n}):
                assert widest_deviation(n, delta, x0) == pytest.approx(float(f[x0:].max()), rel=1e-9, abs=1e-12)


def _misses(P, Q, n, delta, reps, seed, **mutant):
    tv = 0.5 * np.abs(Q - P).sum()
    rng = np.random.default_rng(seed)
    if mutant:
        return sum(_by_hand(rng.multinomial(n, Q), P, delta, mutant_fast=True, **mutant) < tv for _ in range(reps))
    return sum(tv_upper_bound_worstevent(rng.multinomial(n, Q), P, delta).upper < tv for _ in range(reps))


def test_coverage_where_a_bound_half_as_wide_visibly_misses():
    """Two cells, Q = P moved by 0.02 (TV 0.02), 2,000 draws, delta 0.05: the bound is nearly exact there (miss
    rate ~0.05 by the normal approximation; measured 28 of 2000, Clopper-Pearson's discreteness), so it misses in at
    most binom.isf(1e-6, 2000, 0.05) = 149 of 2000; with its width halved it misses in ~20 % (measured 397 of
    2000), and on a law with mass where P = 0,
    forgetting those draws misses in 99 of 100 (measured)."""
    delta, reps = 0.05, 2000
    tol = int(sps.binom.isf(1e-6, reps, delta))
    P, Q = np.array([0.5, 0.5]), np.array([0.52, 0.48])
    assert _misses(P, Q, 2000, delta, reps, seed=3) <= tol
    assert _misses(P, Q, 2000, delta, reps, seed=3, width_scale=0.5) > 2 * tol
    P0, Q0 = np.array([0.5, 0.3, 0.2, 0.0]), np.array([0.47, 0.28, 0.2, 0.05])
    assert _misses(P0, Q0, 5000, delta, reps, seed=4) <= tol
    assert _misses(P0, Q0, 5000, delta, 100, seed=4, drop_zero_cells=True) > 90


def _exact_two_cell_miss(a: float, n: int, delta: float, shift: int = -1) -> float:
    """The largest exact miss probability over Q = (q, 1 - q), q on a grid of [0.5, 1], of the bound on two cells
    P = (a, 1 - a): Σ_x P(Bin(n, q) = x) 1{bound(x) < TV}.  ``shift``: where the maximum over x starts, relative to
    ⌊nT⌋ (the code's −1; a mutant starts it later)."""
    x = np.arange(n + 1)
    T = np.abs(x / n - a)
    up = np.minimum(1.0, T + np.array([widest_deviation(n, delta, max(0, math.floor(n * t) + shift)) for t in T]))
    return max(float(sps.binom.pmf(x, n, q)[up < q - a].sum()) for q in np.linspace(0.5, 1.0, 201))


def test_exact_coverage_far_from_p_and_a_later_start_misses():
    """Q far from P (TV 0.45-0.95, T past W's peak near ½, where the maximum over x starts at ⌊nT⌋ − 1): the
    exact miss probability over every count stays ≤ δ (computed, not simulated: deterministic; measured 0.0497);
    starting the maximum at ⌊nT⌋ + 4 instead (past the count of A* when n P(A*) = 2) misses with probability 0.64
    (measured)."""
    n, delta = 40, 0.05
    assert _exact_two_cell_miss(0.05, n, delta) <= delta
    assert _exact_two_cell_miss(0.05, n, delta, shift=4) > 5 * delta


@pytest.mark.parametrize("Q", [np.array([0.33, 0.25, 0.2, 0.12, 0.1, 0.0]),   # one cell up, one down
                               np.array([0.31, 0.26, 0.21, 0.14, 0.08, 0.0]),  # half the cells
                               np.array([0.3, 0.25, 0.2, 0.15, 0.09, 0.01]),   # mass off P's support
                               np.array([0.4, 0.2, 0.2, 0.1, 0.1, 0.0])])
def test_coverage_on_adversarial_laws(Q):
    delta, reps = 0.05, 1000
    P = np.array([0.3, 0.25, 0.2, 0.15, 0.1, 0.0])
    assert _misses(P, Q, 4000, delta, reps, seed=5) <= int(sps.binom.isf(1e-6, reps, delta))


def test_never_wider_than_the_plug_in_bound():
    rng = np.random.default_rng(9)
    for k, n, delta in ((3, 300, 0.05), (16, 10**5, 1e-6), (200, 10**6, 1e-9)):
        P = rng.dirichlet(np.ones(k))
        for _ in range(5):
            c = rng.multinomial(n, P)
            assert tv_upper_bound_worstevent(c, P, delta).upper <= S.tv_upper_bound(c, P, delta).upper


def test_planner_matches_the_simulated_bound_and_inverts():
    P = np.array([0.3, 0.2, 0.15, 0.12, 0.1, 0.08, 0.05, 0.0])
    delta, n = 1e-6, 200_000
    rng = np.random.default_rng(6)
    ups = np.array([tv_upper_bound_worstevent(c, P, delta).upper for c in rng.multinomial(n, P, size=400)])
    fig = tv_upper_bound_worstevent_expected(P, n, delta)
    assert abs(ups.mean() - fig) < 4 * ups.std(ddof=1) / math.sqrt(ups.size)
    eps = 0.01
    m = tv_upper_bound_worstevent_n_for(P, eps, delta)
    assert tv_upper_bound_worstevent_expected(P, m, delta) <= eps < tv_upper_bound_worstevent_expected(P, m - 1, delta)


@pytest.mark.parametrize("P", [np.array([0.4, 0.3, 0.2, 0.1]),  # the union over events' binomial tails
                               np.full(20, 0.05)])  # past MAX_UNION_CELLS: McDiarmid alone
def test_exceed_bounds_the_simulated_inconclusive_rate(P):
    """The rigorous tail is at least the simulated rate (its Clopper-Pearson lower end, 1e-6 one-sided)."""
    delta, n = 1e-4, 20_000
    rng = np.random.default_rng(7)
    ups = np.array([tv_upper_bound_worstevent(c, P, delta).upper for c in rng.multinomial(n, P, size=2000)])
    for eps in (np.quantile(ups, 0.5), np.quantile(ups, 0.9)):
        hits = int((ups >= eps).sum())
        lower = float(sps.beta.ppf(1e-6, hits, 2000 - hits + 1))
        assert tv_upper_bound_worstevent_exceed(P, n, delta, float(eps)) >= lower


def test_exceed_bounds_the_exact_tail():
    """On three cells at n = 80 the rigorous tail is at least the exact P(T ≥ ε − W), every count vector summed, at
    thresholds down to the far tail (deterministic); McDiarmid alone with its exponent made 4x larger (a mutant)
    falls below the exact tail there."""
    P, n, delta = np.array([0.5, 0.3, 0.2]), 80, 1e-3
    xs = [(a, b, n - a - b) for a in range(n + 1) for b in range(n + 1 - a)]
    C = np.array(xs)
    T = 0.5 * np.abs(C / n - P).sum(axis=1)
    pmf = sps.multinomial.pmf(C, n, P)
    W = widest_deviation(n, delta)
    below = 0
    for t in (0.15, 0.2, 0.25, 0.3):
        exact = float(pmf[T >= t - 1e-12].sum())
        assert tv_upper_bound_worstevent_exceed(P, n, delta, t + W) >= exact
        s = t - 0.5 * float(S.bounds._binomial_mad(n, P).sum()) / n
        below += math.exp(-8 * n * s * s) < exact
    assert below >= 1


def test_the_gate_takes_it_on_the_pairs_and_windows_of_base():
    """On many cells (base's consecutive pairs, 81 cells; its 3-token windows, 729) its figure is the smallest."""
    from harness.laws.scenarios import load_scenario, scenario_law
    law, _ = scenario_law(load_scenario("base"))
    for P in (np.asarray(law.pair_marginals()[1], float).ravel(), np.asarray(law.joint_at(0, 3), float).ravel()):
        assert battery._upper_choice(P, 1_300_000, 4e-7) == "worstevent"


def test_bad_input():
    with pytest.raises(ValueError, match="delta"):
        tv_upper_bound_worstevent([3, 4], [0.5, 0.5], 1.5)
    with pytest.raises(ValueError, match="counts"):
        tv_upper_bound_worstevent([0, 0], [0.5, 0.5], 0.05)
    with pytest.raises(ValueError, match="epsilon"):
        tv_upper_bound_worstevent_n_for([0.5, 0.5], 0.0, 0.05)


def test_hoeffding_width_is_its_formula():
    """One sample of n: √(ln(1/δ)/(2n)); two samples' difference: √(ln(1/δ)(1/n_a + 1/n_b)/2) (deterministic)."""
    from harness.stats.worstevent import hoeffding_width
    assert hoeffding_width(1e-6, 400) == pytest.approx(math.sqrt(math.log(1e6) / 800), rel=1e-15)
    assert hoeffding_width(1e-3, 100, 300) == pytest.approx(math.sqrt(math.log(1e3) * (1 / 100 + 1 / 300) / 2))
    with pytest.raises(ValueError, match="delta"):
        hoeffding_width(0.0, 10)


def test_the_scalar_deviation_is_the_array_ones_bit_for_bit():
    """The ternary search's scalar u_δ(x) − x/n (worstevent._dev1) is the array version's, bit for bit, from x = 0 to
    x = n, n from 1 to 10^12 and δ from 1e-15 to 0.4 (so the search's maximum is the one it always was)."""
    from harness.stats.worstevent import _dev, _dev1
    rng = np.random.default_rng(3)
    for _ in range(2000):
        n = int(10 ** rng.uniform(0, 12))
        d = float(10 ** rng.uniform(-15, -0.4))
        for x in {0, n, int(rng.integers(0, n + 1)), n // 2}:
            assert float(_dev(x, n, d)) == float(_dev1(x, n, d)), (x, n, d)
