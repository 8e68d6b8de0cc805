"""The cost models: closed forms, acceptance metrics, the round simulation, profiled cost tables."""
import math

import numpy as np
import pandas as pd
import pytest

from harness.speedup import costmodel as cm


# -- analytic model ------------------------------------------------------------------------------
def test_expected_tokens_is_the_geometric_sum():
    for a in (0.0, 0.1, 0.5, 0.9, 0.999, 1.0):
        for k in (1, 2, 4, 8, 16):
            direct = sum(a ** j for j in range(k + 1))  # 1 + a + ... + a^k
            assert cm.expected_tokens(a, k) == pytest.approx(direct, rel=1e-12)
    assert cm.expected_tokens(0.0, 5) == 1.0
    assert cm.expected_tokens(1.0, 5) == 6.0


def test_speedup_formula_and_broadcasting():
    a, c, k = 0.8, 0.1, 4
    assert cm.analytic_speedup(a, c, k) == pytest.approx((1 - a ** 5) / ((1 - a) * (k * c + 1)))
    s = cm.analytic_speedup(np.array([0.2, 0.8])[:, None], 0.1, np.array([1, 2, 4]))
    assert s.shape == (2, 3)


def test_some_k_gains_iff_alpha_exceeds_c():
    rng = np.random.default_rng(1)
    a = rng.uniform(0, 0.99, 2000)
    c = rng.uniform(0.01, 1, 2000)
    keep = np.abs(a - c) > 1e-6
    a, c = a[keep], c[keep]
    s_opt = cm.analytic_speedup(a[:, None], c[:, None], np.arange(1, 17)).max(1)
    assert np.array_equal(s_opt > 1, a > c)  # Leviathan Cor. 3.9
    s1 = cm.analytic_speedup(a, c, 1)
    assert np.array_equal(s1 > 1, a > c)  # k = 1: (1 + a) / (1 + c)


def test_acceptance_metrics_by_hand():
    # k = 4; 20 rounds with n = 0,1,2,3,4 accepted drafts 1,2,3,4,10 times
    m = cm.acceptance_metrics([1, 2, 3, 4, 10])
    accepted = 0 * 1 + 1 * 2 + 2 * 3 + 3 * 4 + 4 * 10  # 60
    assert m.accepted == accepted and m.drafted == 80 and m.rounds == 20
    assert m.acceptance_rate == pytest.approx(60 / 80)  # accepted / drafted
    assert m.mean_acceptance_length == pytest.approx(1 + 60 / 20)  # 1 + accepted / rounds
    # position i judged in rounds with n >= i - 1, accepted in rounds with n >= i
    reached = [20, 19, 17, 14]
    acc_at = [19, 17, 14, 10]
    assert m.alpha_per_position == pytest.approx([a / r for a, r in zip(acc_at, reached)])
    assert m.alpha_hat == pytest.approx(sum(acc_at) / sum(reached))
    # E = 1 + sum_j prod_{i<=j} alpha_i from the positional alphas equals the mean tokens per round
    assert 1 + np.cumprod(m.alpha_per_position).sum() == pytest.approx(m.mean_acceptance_length)


@pytest.mark.parametrize("bad", [dict(alpha=-0.1, k=2), dict(alpha=1.2, k=2), dict(alpha=0.5, k=0),
                                 dict(alpha=float("nan"), k=1)])
def test_bad_inputs_name_the_argument(bad):
    with pytest.raises(ValueError, match=r"`(alpha|k)` must be"):
        cm.expected_tokens(**bad)
    with pytest.raises(ValueError, match=r"`c` must be"):
        cm.analytic_speedup(0.5, -1.0, 2)


# -- round simulation --------------------------------------------------------------------------------
def _exact_rounds_pmf(alphas, N):
    """Exact law of the number of rounds for one sequence (B = 1) by dynamic programming."""
    a = np.asarray(alphas)
    k = a.size
    surv = np.concatenate([[1.0], np.cumprod(a)])  # P(n >= j), j = 0..k
    p_n = surv - np.concatenate([surv[1:], [0.0]])  # P(n = j)
    pmf = {0: np.array([1.0])}
    for m in range(1, N + 1):
        out = np.zeros(m + 1)
        for n, pn in enumerate(p_n):
            sub = pmf[m - min(n + 1, m)]
            out[1:1 + sub.size] += pn * sub
        pmf[m] = out
    return pmf[N]


@pytest.mark.parametrize("alphas", [[0.7] * 4, [0.9, 0.5, 0.3], [0.2]])
def test_simulated_rounds_match_the_exact_law(alphas):
    """Mean rounds of the simulation against the exact mean: |z| < 5 (false alarm 5.7e-7, two-sided normal).

    Power: with 20 000 runs a bias of the mean of 6 standard errors (0.06 to 0.09 rounds here, out of
    15 to 33) is flagged with probability 0.84; the errors it guards against (a round miscounted,
    the last round not cut at max_new_tokens) shift the mean by about one round.
    """
    N, n_sim = 40, 20_000
    pmf = _exact_rounds_pmf(alphas, N)
    r = np.arange(pmf.size)
    mean, var = (pmf * r).sum(), (pmf * r ** 2).sum() - (pmf * r).sum() ** 2
    sim = cm.simulate_rounds(alphas, 1, N, n_sim=n_sim, rng=np.random.default_rng(7))
    z = (sim[1] - mean) / math.sqrt(var / n_sim)
    assert abs(z) < 5, (sim[1], mean)


def test_simulated_rounds_deterministic_cases_and_compaction():
    assert cm.simulate_rounds([1.0] * 3, 1, 10, n_sim=5)[1] == 3  # ceil(10 / 4)
    assert cm.simulate_rounds([0.0] * 3, 1, 10, n_sim=5)[1] == 10
    # B = 4, all accepted: every row finishes together; no compaction
    r = cm.simulate_rounds([1.0, 1.0], 4, 9, n_sim=3)
    assert r[4] == 3 and r[:4].sum() == 0


# -- profiled costs -----------------------------------------------------------------------------------
def _table(rows):
    return cm.CostTable(pd.DataFrame(rows, columns=["op", "n", "batch", "median_s"]))


def test_cost_table_lookup_and_interpolation():
    t = _table([("target.forward", 1, 1, 1.0), ("target.forward", 5, 1, 3.0), ("target.forward", 1, 4, 2.0),
                ("target.forward", 5, 4, 6.0)])
    assert t("target.forward", 1, 1) == 1.0
    assert t("target.forward", 3, 1) == pytest.approx(2.0)  # linear in n
    assert t("target.forward", 9, 1) == pytest.approx(5.0)  # extrapolated linearly
    assert t("target.forward", 1, 2) == pytest.approx(1.5)  # half-way in log B between 1 and 4
    with pytest.raises(KeyError, match="draft.forward"):
        t("draft.forward", 1, 1)


def test_measured_prediction_on_known_costs():
    rows = [("target.forward", n, 1, 0.010 + 0.001 * (n - 1)) for n in (1, 3, 5)]
    rows += [("draft.forward", n, 1, 0.002) for n in (1, 2)]
    rows += [("target.prefill", 7, 1, 0.02), ("draft.prefill", 7, 1, 0.004), ("spec.overhead", 2, 1, 0.001),
             ("spec.overhead", 4, 1, 0.001), ("ar.overhead", 1, 1, 0.0005)]
    t = _table(rows)
    # all drafts accepted, k = 2: 3 tokens a round, 12 tokens in exactly 4 rounds
    p = cm.predict_measured(t, [1.0, 1.0], 1, 12, 8)
    round_cost = 0.002 + 0.002 + 0.012 + 0.001
    assert p.t_spec_s == pytest.approx(0.02 + 0.004 + 4 * round_cost)
    assert p.t_ar_s == pytest.approx(0.02 + 12 * 0.0105)
    assert p.speedup == pytest.approx(p.t_ar_s / p.t_spec_s)
    acc = cm.predict_from_counts(t, 2, [1, 1, 1, 1], 1, 12, 8)
    assert acc.t_spec_s == pytest.approx(p.t_spec_s)
    assert t.c(1) == pytest.approx(0.2)
