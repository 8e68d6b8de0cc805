"""The lattice-corrected χ² p-value and the null calibration without the sampler (harness.verify.calibrate_null)."""
import numpy as np
import pytest
from scipy import stats as sps

from harness import stats
from harness.verify.calibrate_null import GATE_LEVEL, NullCase, _rate_row, exact_size, null_cases, simulate
from harness.laws.scenarios import SCENARIO_DIR, load_scenario, load_settings


def _binomial_chi2_size(n, e, alpha, pvalue):
    """Exact size of a two-cell χ² test whose p-value function is ``pvalue(stat)``: enumerate k ~ Bin(n, e/n)."""
    k = np.arange(n + 1)
    x = (k - e) ** 2 / (e * (1 - e / n))
    return float(sps.binom.pmf(k, n, e / n)[pvalue(x) <= alpha].sum())


def test_asymptotic_tail_too_light_exactly_where_the_issue_says():
    # df = 1, expected count 100 at n = 10^4: the χ² tail is several times too light at the gate level
    n, e = 10_000, 100.0
    size = _binomial_chi2_size(n, e, GATE_LEVEL, lambda x: sps.chi2.sf(x, 1))
    assert size / GATE_LEVEL > 3.0


@pytest.mark.parametrize("n,e", [(10_000, 100.0), (100_000, 100.0), (10_000, 300.0), (2_000, 100.0),
                                 (10_000, 5_000.0)])
@pytest.mark.parametrize("alpha", [1e-2, 1e-4, 1e-6, GATE_LEVEL])
def test_corrected_two_cell_size_at_most_nominal(n, e, alpha):
    size = _binomial_chi2_size(n, e, alpha, lambda x: stats.chi2_pvalue(x, 1, n, e))
    assert size <= alpha


@pytest.mark.parametrize("n,expected", [(10_000, (100.0, 100.0)), (10_000, (100.0, 150.0)),
                                        (100_000, (100.0, 100.0)), (10_000, (100.0, 1000.0))])
@pytest.mark.parametrize("alpha", [1e-3, 1e-5, GATE_LEVEL])
def test_corrected_three_cell_size_at_most_nominal_exactly(n, expected, alpha):
    asym, corr, left = exact_size(expected, n, alpha)
    assert left < 1e-9 * alpha
    assert corr + left <= alpha
    if alpha == GATE_LEVEL:  # and the correction was needed there
        assert asym > alpha


def test_correction_only_raises_pvalues_and_vanishes_with_large_counts():
    x = np.linspace(0.1, 60, 200)
    asym = sps.chi2.sf(x, 5)
    corrected = stats.chi2_pvalue(x, 5, 10_000, 100.0)
    assert np.all(corrected >= asym)
    big = stats.chi2_pvalue(30.0, 5, 10**9, 10**8)  # huge expected counts: the lattice tail is the χ²₁ tail
    assert big == pytest.approx(sps.chi2.sf(30.0, 5), rel=0.05)


def test_chi2_gof_uses_the_corrected_pvalue():
    probs = np.array([0.01, 0.99])
    counts = np.array([150, 9850])
    r = stats.chi2_gof(counts, probs)
    assert r.pvalue == pytest.approx(float(stats.chi2_pvalue(r.statistic, 1, 10_000, 100.0)))
    assert r.pvalue > sps.chi2.sf(r.statistic, 1)
    assert "lattice" in r.method


def test_homogeneity_batch_matches_single():
    rng = np.random.default_rng(3)
    A, B = rng.multinomial(5000, [0.1, 0.3, 0.6], size=4), rng.multinomial(5000, [0.1, 0.3, 0.6], size=4)
    st, p, _ = stats.chi2_homogeneity_pvalues(A, B)
    for i in range(4):
        r = stats.chi2_homogeneity(A[i], B[i], [0.1, 0.3, 0.6])
        assert (r.statistic, r.pvalue) == pytest.approx((st[i], p[i]))


def test_null_cases_cover_the_count_based_tests_of_a_scenario():
    settings = load_settings(SCENARIO_DIR)
    sc = load_scenario("base", SCENARIO_DIR)
    cases = null_cases([sc], settings, 5_000)
    kinds = {c.kind for c in cases}
    assert kinds == {"gof.position", "gof.pair", "gof.joint", "two_sample.position", "two_sample.joint", "pit.pairs"}
    p = cases[0].pvalues(np.random.default_rng(0), 1000)
    assert p.shape == (1000,) and np.all((p >= 0) & (p <= 1))


def test_simulate_detects_an_anticonservative_test():
    # a "test" whose p-values are U(0, 1) / 3: three times too many alarms at every level must show
    bad = NullCase("bad", "none", "x", lambda rng, R: rng.random(R) / 3)
    good = NullCase("good", "none", "x", lambda rng, R: rng.random(R))
    df = simulate([bad, good], 300_000, seed=1).set_index("kind")
    assert df.loc["bad", "ci_low@0.001"] > 0.001
    assert df.loc["good", "ci_low@0.001"] <= 0.001 <= df.loc["good", "ci_high@0.001"]


def test_rate_row_intervals():
    row = _rate_row("k", 1, 1000, np.array([10, 1, 0, 0, 0]), 0.0)
    assert row["rate@0.01"] == 0.01 and row["ci_low@0.01"] < 0.01 < row["ci_high@0.01"]


@pytest.mark.slow
def test_null_rates_of_the_base_scenario_consistent_with_nominal():
    settings = load_settings(SCENARIO_DIR)
    cases = null_cases([load_scenario("base", SCENARIO_DIR)], settings, 10_000)
    df = simulate(cases, 400_000, seed=7)
    for a in (1e-2, 1e-3, 1e-4):
        assert (df[f"ci_low@{a:g}"] <= a).all(), df[["kind", f"rate@{a:g}", f"ci_low@{a:g}"]]
