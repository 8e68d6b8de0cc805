"""The anytime-valid union over looks (harness.stats.anytime): the grid and its spending, the two planners against
each other, and coverage at a data-dependent stopping time by simulation, where the fixed-n bound read at every look
(the mutant: no δ spent per look) visibly misses.

False-failure rates: the coverage test allows up to binom.isf(1e-6, reps, δ) misses of a bound that misses with
probability ≤ δ (so a correct construction fails it with probability ≤ 1e-6); the mutant must miss more than
binom.isf(1e-6, reps, δ) too (at the fixed seed 1,062 of 6,000 against 383 allowed; the spent bound misses 196); the rest is exact."""
import math

import numpy as np
import pytest
from scipy import special, stats as sps

from harness.stats import anytime
from harness.stats.binomial import clopper_pearson
from harness.stats.worstevent import tv_upper_bound_worstevent_expected, tv_upper_bound_worstevent_n_for


def test_look_sizes_grid_ends_at_the_cap():
    sizes = anytime.look_sizes(100, 1000, 1.1)
    assert sizes[0] == 100 and sizes[-1] == 1000
    assert all(b > a for a, b in zip(sizes, sizes[1:]))
    ratios = np.diff(np.log(sizes[:-1]))
    assert np.allclose(ratios, math.log(1.1), atol=0.01)
    assert sizes[-1] / sizes[-2] >= math.sqrt(1.1) * 0.999  # a look too near the cap is dropped
    assert anytime.look_sizes(1000, 1000) == (1000,) and anytime.look_sizes(5000, 1000) == (1000,)


def test_look_deltas_spend_delta():
    d = anytime.look_deltas(1e-6, 10, 0.5)
    assert math.isclose(sum(d), 1e-6) and d[-1] == 5e-7 and all(math.isclose(x, 5e-7 / 9) for x in d[:-1])
    assert anytime.look_deltas(1e-6, 1) == (1e-6,)
    with pytest.raises(ValueError, match="cap_share"):
        anytime.look_deltas(1e-6, 3, 1.0)
    with pytest.raises(ValueError, match="n_looks"):
        anytime.look_deltas(1e-6, 0)


def test_delta_at_only_on_a_look():
    looks = anytime.looks_for(100, 400, 0.01, 1.5)
    assert looks.delta_at(looks.sizes[0]) == looks.deltas[0]
    assert math.isclose(anytime.miss_rate_bound(looks), 0.01)
    with pytest.raises(ValueError, match="one of the looks"):
        looks.delta_at(101)


@pytest.mark.parametrize("eps", [0.02, 0.005])
def test_planners_agree(eps):
    """n_for is the first look whose epsilon_at is <= ε (and the look before it is above ε)."""
    P = np.array([0.4, 0.3, 0.2, 0.1])
    fixed = tv_upper_bound_worstevent_n_for(P, eps, 1e-7)
    looks = anytime.looks_for(fixed // 2, 4 * fixed, 1e-7, 1.1)

    def expected(n, d):
        return tv_upper_bound_worstevent_expected(P, n, d)

    n = anytime.n_for(expected, looks, eps)
    i = looks.sizes.index(n)
    assert anytime.epsilon_at(expected, looks, n) <= eps
    assert i == 0 or anytime.epsilon_at(expected, looks, looks.sizes[i - 1]) > eps
    assert n >= fixed  # each look spends less than δ: never earlier than the fixed-n planner
    assert anytime.n_for(expected, looks, 1e-4) == looks.cap + 1  # the cap does not reach it
    p = anytime.price(lambda e, d: tv_upper_bound_worstevent_n_for(P, e, d), eps, 1e-7, looks)
    assert 1.0 < p < 1.5


def _first_miss(u: np.ndarray, sizes, deltas, p: float) -> np.ndarray:
    """Per stream: whether the Clopper–Pearson upper end misses p at SOME look (the adversarial stopping time:
    stop at the first look where it misses, so the miss at the stopping time is this event)."""
    miss = np.zeros(u.shape[0], bool)
    for n, d in zip(sizes, deltas):
        k = (u[:, :n] < p).sum(axis=1)  # (reps,) successes among the first n draws
        upper = np.where(k >= n, 1.0, special.betainccinv(k + 1.0, np.maximum(n - k, 1.0), d))  # one-sided CP
        miss |= upper < p
    return miss


def test_coverage_at_a_stopping_time_and_the_mutant_misses():
    """At the stopping time "the first look where the bound is below the truth" (the worst any stopping rule can
    do), the bound with δ spent per look misses with probability ≤ δ; the fixed-n bound at every look does not."""
    rng = np.random.default_rng(42)
    reps, delta, p = 6000, 0.05, 0.3
    looks = anytime.looks_for(50, 800, delta, 1.25)
    u = rng.random((reps, looks.cap))
    allowed = sps.binom.isf(1e-6, reps, delta)
    valid = _first_miss(u, looks.sizes, looks.deltas, p).sum()
    naive = _first_miss(u, looks.sizes, (delta,) * len(looks.sizes), p).sum()
    assert valid <= allowed, (valid, allowed)
    assert naive > allowed, (naive, allowed)  # the test can fail: reading the fixed-n bound at every look misses


def test_one_sided_clopper_pearson_matches_the_floor():
    """The vectorised upper end the coverage test uses is the floor's one-sided Clopper–Pearson end."""
    for k, n, d in [(0, 50, 0.01), (17, 50, 0.004), (49, 50, 0.02)]:
        mine = float(special.betainccinv(k + 1.0, n - k, d))
        assert math.isclose(mine, clopper_pearson(k, n, 2 * d)[1], rel_tol=1e-9)  # the test can fail: reading the fixed-n bound at every look misses
