"""The cross U-statistic TV bound (harness.stats.crossu): its formula, coverage (also on adversarial laws),
its k^(1/4)/sqrt(n) scaling and its planner.

False-failure rates: the coverage tests allow up to binom.isf(1e-6, reps, delta) misses of a bound that misses
with probability <= delta, so a correct bound fails each with probability <= 1e-6; the other tests are
deterministic (fixed seeds, exact comparisons) or compare a mean of 40 simulated bounds with the planner
within 5 % (the bound's sd is ~6 % of its mean: the mean's ~1 %, a 5-sd margin)."""
import math

import numpy as np
import pytest
from scipy import stats as sps

from harness.stats.bounds import lump_zero_cells, tv_upper_bound_expected
from harness.stats.crossu import (SPLIT_SEED, TAU_SCALE, adversarial_laws, tv_upper_bound_crossu,
                                  tv_upper_bound_crossu_expected, tv_upper_bound_crossu_n_for)


def _by_hand(counts, probs, delta, seed=SPLIT_SEED):
    """The module docstring's bound written out again, its largest root found by a fine scan (not the iteration)."""
    c, p = lump_zero_cells(counts, probs)
    n, lumped, pos = int(c.sum()), p[-1] == 0, p > 0
    pp = p[pos]
    w = 1 / np.maximum(pp, TAU_SCALE / pp.size)
    share = delta / (3 if lumped else 2)
    L = math.log(1 / share)
    m = n // 2
    cA = np.random.default_rng(seed).multivariate_hypergeometric(c, m, method="marginals")
    v = cA[pos] / m - pp
    U = float((w * v * ((c - cA)[pos] / (n - m) - pp)).sum())
    wv = np.append(w * v, 0.0) if lumped else w * v
    R = wv.max() - wv.min()

    def G(th):
        r = math.sqrt(th * w.max())
        vA, vB = th * min(1 + r, w.max()), (pp * (w * v) ** 2).sum() + math.sqrt(th * (w ** 3 * v ** 4).sum())
        return U + math.sqrt(2 * vA * L / m) + 2 * r * L / (3 * m) + math.sqrt(2 * vB * L / (n - m)) + R * L / (3 * (n - m))

    grid = np.geomspace(1e-12, 10, 200_001)
    ok = [th for th in grid if th <= G(th)]
    theta = max(ok) if ok else 0.0
    q0 = float(sps.beta.ppf(1 - share, c[~pos].sum() + 1, n - c[~pos].sum())) if lumped else 0.0
    return 0.5 * math.sqrt(np.maximum(pp, TAU_SCALE / pp.size).sum() * theta) + 0.5 * q0


@pytest.mark.parametrize("zero", [False, True])
def test_bound_is_its_formula(zero):
    P = np.array([0.5, 0.2, 0.15, 0.1, 0.05] + ([0.0, 0.0] if zero else []))
    Q = np.array([0.48, 0.21, 0.15, 0.1, 0.05] + ([0.01, 0.0] if zero else []))
    Q = Q / Q.sum()
    c = np.random.default_rng(3).multinomial(40_000, Q)
    b = tv_upper_bound_crossu(c, P, 1e-3)
    assert b.upper == pytest.approx(_by_hand(c, P, 1e-3), rel=2e-4)  # the scan's grid step: 1e-4 in theta
    assert b.n == 40_000 and b.n_cells == 5 + zero and "cross U-statistic" in b.method


def _reps_cover(P, Q, n, delta, reps, seed, scale=1.0):
    tv = 0.5 * np.abs(P - Q).sum()
    rng = np.random.default_rng(seed)
    return sum(scale * tv_upper_bound_crossu(rng.multinomial(n, Q), P, delta, seed=int(s)).upper < tv
               for s in rng.integers(0, 2 ** 31, reps))


@pytest.mark.parametrize("name", list(adversarial_laws()))
def test_covers_adversarial_laws(name):
    P, Q = adversarial_laws()[name]
    reps, delta = 400, 0.05
    assert _reps_cover(P, Q, 3000, delta, reps, seed=7) <= sps.binom.isf(1e-6, reps, delta)


def test_covers_near_the_null_and_half_the_bound_does_not():
    """Q at TV 0.6 x the bound a lossless sampler gets: the bound covers in >= 1 - delta of the draws; the
    bound halved misses in over 4 x delta of them (measured: 87 of 200), a coverage test a bound half as wide fails."""
    k, n, delta = 200, 200_000, 0.05
    P = np.full(k, 1 / k)
    tv = 0.6 * tv_upper_bound_crossu_expected(P, n, delta)
    Q = P + np.where(np.arange(k) % 2 == 0, 2 * tv / k, -2 * tv / k)
    reps = 200
    assert _reps_cover(P, Q, n, delta, reps, seed=8) <= sps.binom.isf(1e-6, reps, delta)
    assert _reps_cover(P, Q, n, delta, reps, seed=8, scale=0.5) > 4 * delta * reps


def test_width_grows_like_the_fourth_root_of_the_cells():
    """At n = 1e6 and the gate's delta, 16 -> 1000 cells: the cross bound grows by at most (1000/16)^(1/4) = 2.8
    (measured 2.15: its linear term does not grow with k), the plug-in bound by sqrt(1000/16) / 1.3 ~ 6."""
    n, delta = 10 ** 6, 5.7e-7
    ratio = lambda f: f(np.full(1000, 1e-3), n, delta) / f(np.full(16, 1 / 16), n, delta)  # noqa: E731
    assert 1.8 < ratio(tv_upper_bound_crossu_expected) < (1000 / 16) ** 0.25
    assert ratio(tv_upper_bound_expected) > 5.5


def test_planner_matches_the_simulated_bound_and_inverts():
    P = np.random.default_rng(4).dirichlet(np.full(300, 0.7))
    n, delta = 400_000, 1e-6
    rng = np.random.default_rng(5)
    sim = np.mean([tv_upper_bound_crossu(rng.multinomial(n, P), P, delta).upper for _ in range(40)])
    planned = tv_upper_bound_crossu_expected(P, n, delta)
    assert sim == pytest.approx(planned, rel=0.05)
    m = tv_upper_bound_crossu_n_for(P, planned, delta)
    assert tv_upper_bound_crossu_expected(P, m, delta) <= planned < tv_upper_bound_crossu_expected(P, m - 1, delta)
    assert abs(m - n) <= 0.01 * n


def test_bad_input():
    with pytest.raises(ValueError, match="`counts` must be at least two draws"):
        tv_upper_bound_crossu([1, 0], [0.5, 0.5])
    with pytest.raises(ValueError, match="`tau`"):
        tv_upper_bound_crossu([5, 5], [0.5, 0.5], tau=-1.0)
    with pytest.raises(ValueError, match="`epsilon`"):
        tv_upper_bound_crossu_n_for([0.5, 0.5], 0.0)
