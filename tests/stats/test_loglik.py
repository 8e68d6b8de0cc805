"""The whole-sequence log-likelihood test (harness.stats.loglik): exact moments by DP, its level, its power,
its planners, the mergeable sums, the real-model martingale, and its rows in the battery.

False-failure rates (over seeds; deterministic at the fixed seeds), computed from the binomial law of the
rejection count: the z test's level windows over 2000 runs 1.8e-3 (at 0.05) and 9e-5 (at 0.01); the martingale's
over 600 runs 9e-3 (its window is ~2.3 sds); "conservative" checks (rate <= 0.05 at a level that is exact or
conservative) at most 0.5; power checks (``pvalue < 1e-6`` on a shifted law) fail only for lack of power."""
import itertools
import math

import numpy as np
import pytest
import torch

from harness.verify.battery import Accumulator, plan_pit_value_tests, plan_tests
from harness.controls.chain import get_control
from harness.laws.ngram import ExactLaw
from harness.stats.loglik import (MIXTURE_SCALE, LoglikSums, bernstein_min_detectable_shift, bernstein_n_for_shift,
                            edgeworth_ok, loglik_test, martingale_terms, martingale_test, min_detectable_shift,
                            mixture_min_detectable_shift, mixture_n_for_shift, mixture_pvalue, n_for_shift)
from harness.laws.scenarios import load_scenario
from specimpl.ngram import random_ngram
from specimpl.sampling import SamplingConfig
from specimpl.speculative import speculative_generate


def _small_law(eos=None, config=SamplingConfig(), N=5):
    t, d = random_ngram(4, 2, 0.7, seed=3), random_ngram(4, 2, 0.7, seed=4)
    return ExactLaw(t, d, [1], N, config, eos)


def _enumerated(law):
    """(S of every possible sequence, its probability) by enumerating all (V+1)^N sequences."""
    J = law.joint(law.N)
    paths = np.array(list(itertools.product(range(law.n_symbols), repeat=law.N)))
    keep = J > 0
    return law.logprob(paths[keep], law.states(paths[keep])), J[keep], paths[keep]


@pytest.mark.parametrize("eos,config", [(None, SamplingConfig()), (2, SamplingConfig(top_k=3)),
                                        (0, SamplingConfig(temperature=0.7, top_p=0.9))])
def test_logprob_moments_match_enumeration(eos, config):
    law = _small_law(eos, config)
    S, P, _ = _enumerated(law)
    mu = float(P @ S)
    mo = law.logprob_moments()
    assert mo.mean == pytest.approx(mu, rel=1e-12)
    assert mo.var == pytest.approx(float(P @ (S - mu) ** 2), rel=1e-10)
    assert mo.third == pytest.approx(float(P @ (S - mu) ** 3), rel=1e-9, abs=1e-12)
    assert (mo.low, mo.high) == pytest.approx((S.min(), S.max()), rel=1e-12)


def test_joint_at_is_the_marginal_of_the_whole_joint():
    law = _small_law(eos=2)
    W = law.n_symbols
    assert np.array_equal(law.joint_at(0, 3), law.joint(3))
    full = law.joint(5).reshape((W,) * 5)
    assert np.allclose(law.joint_at(2, 3), full.sum((0, 1)).ravel(), atol=1e-15)
    assert np.allclose(law.joint_at(3, 2), full.sum((0, 1, 2)).ravel(), atol=1e-15)
    with pytest.raises(ValueError, match="n_tokens"):
        law.joint_at(3, 3)
    with pytest.raises(ValueError, match="offset"):
        law.joint_at(5, 1)


def _sample_S(law, n, rng, config_law=None):
    """n sequences' S under ``law`` (the target), drawn from ``config_law`` (default: the target itself)."""
    src = law if config_law is None else config_law
    J = src.joint(src.N)
    paths = np.array(list(itertools.product(range(src.n_symbols), repeat=src.N)))
    idx = rng.choice(J.size, size=n, p=J / J.sum())
    sym = paths[idx]
    return law.logprob(sym, law.states(sym))


def test_level_of_the_z_test_over_many_runs():
    """2000 runs of 500 sequences drawn from the exact law: the rejection rate at 0.05 is 0.05 within
    +-0.015 (3.1 binomial sds), and at 0.01 within [0.003, 0.02] -- a wrong variance would move it."""
    law = _small_law()
    mo = law.logprob_moments()
    rng = np.random.default_rng(5)
    S = _sample_S(law, 2000 * 500, rng).reshape(2000, 500)
    p = []
    for row in S:
        s = LoglikSums()
        s.add(row)
        r = loglik_test(s, mo, alpha=0.05, power=0.9)
        assert r.method.startswith("z test")
        p.append(r.pvalue)
    p = np.array(p)
    assert 0.035 <= (p <= 0.05).mean() <= 0.065
    assert 0.003 <= (p <= 0.01).mean() <= 0.02


def test_bernstein_is_conservative_and_used_where_the_normal_tail_is_not_trusted():
    law = _small_law()
    mo = law.logprob_moments()
    rng = np.random.default_rng(6)
    S = _sample_S(law, 1000 * 50, rng).reshape(1000, 50)
    alpha = 1e-6  # at n = 50 the Edgeworth check fails at this level
    skew = mo.third / mo.var ** 1.5
    assert not edgeworth_ok(50, skew, alpha)
    ps = []
    for row in S:
        s = LoglikSums()
        s.add(row)
        r = loglik_test(s, mo, alpha=alpha, power=0.9)
        assert r.method.startswith("Bernstein")
        ps.append(r.pvalue)
    assert (np.array(ps) <= 0.05).mean() <= 0.05  # conservative at every level


def test_tempered_sampler_is_rejected_and_planner_size_suffices():
    """Output drawn at temperature 1.25 instead of 1: the planner's n for the true shift rejects."""
    law = _small_law()
    hot = ExactLaw(law.target, None, [1], law.N, SamplingConfig(temperature=1.25))
    S, P, paths = _enumerated(hot)
    S_target = law.logprob(paths, law.states(paths))
    shift = float(hot.joint(hot.N)[hot.joint(hot.N) > 0] @ S_target) - law.logprob_moments().mean
    mo = law.logprob_moments()
    alpha, power = 1e-6, 0.99
    n = n_for_shift(abs(shift), math.sqrt(mo.var), alpha, power)
    assert min_detectable_shift(n, math.sqrt(mo.var), alpha, power) <= abs(shift)
    rng = np.random.default_rng(7)
    s = LoglikSums()
    s.add(_sample_S(law, max(n, 20_000), rng, config_law=hot))  # enough for the Edgeworth check too
    r = loglik_test(s, mo, alpha=alpha, power=power)
    assert r.pvalue < alpha and r.shift < 0  # flatter output: lower log-likelihood under the target


@pytest.mark.parametrize("sd,alpha,power", [(1.0, 1e-4, 0.99), (3.2, 5.9e-8, 0.9), (0.4, 0.05, 0.5)])
def test_planners_invert_each_other(sd, alpha, power):
    for shift in (0.01, 0.1, 0.7):
        n = n_for_shift(shift, sd, alpha, power)
        assert min_detectable_shift(n, sd, alpha, power) <= shift < min_detectable_shift(max(n - 1, 1), sd, alpha,
                                                                                            power) or n == 1
        nb = bernstein_n_for_shift(shift, sd, 12.0, alpha, power)
        assert bernstein_min_detectable_shift(nb, sd, 12.0, alpha, power) <= shift
        assert nb == 1 or bernstein_min_detectable_shift(nb - 1, sd, 12.0, alpha, power) > shift
        assert nb >= n  # Bernstein pays for validity at every n


def test_sums_merge_and_impossible_sequences():
    x = np.array([-3.0, -1.5, -np.inf, -2.25, -7.0])
    a, b, whole = LoglikSums(), LoglikSums(), LoglikSums()
    a.add(x[:2])
    b.add(x[2:])
    whole.add(x)
    assert a.merge(b) == whole
    assert (whole.n, whole.impossible, whole.total) == (5, 1, -13.75)
    r = loglik_test(whole, _small_law().logprob_moments(), alpha=1e-3, power=0.9)
    assert r.pvalue == 0.0 and "cannot produce" in r.method


def test_deterministic_law_is_an_exact_check():
    law = _small_law(config=SamplingConfig(greedy=True))
    mo = law.logprob_moments()
    assert mo.var == pytest.approx(0.0, abs=1e-20) and mo.mean == 0.0
    s = LoglikSums()
    s.add(np.zeros(10))
    assert loglik_test(s, mo, alpha=1e-3, power=0.9).pvalue == 1.0


# --------------------------------------------------------------------------------- real-model martingale
def test_martingale_terms_by_hand():
    P = np.array([[[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]], [[1.0, 0.0, 0.0], [0.1, 0.0, 0.9]]])  # (N=2, T=2, V=3)
    X = np.array([[1, 2], [0, 1]])
    pad = np.array([[False, False], [False, True]])
    m, v, q = martingale_terms(torch.tensor(P), torch.tensor(X), torch.tensor(pad))

    def H(p):
        q = p[p > 0]
        return -(q * np.log(q)).sum()

    def Var(p):
        q = p[p > 0]
        return (q * (np.log(q) + H(p)) ** 2).sum()
    assert m[0] == pytest.approx(math.log(0.5) + H(P[0, 0]) + math.log(0.5) + H(P[0, 1]))
    assert v[0] == pytest.approx(Var(P[0, 0]) + Var(P[0, 1]))
    assert q[0] == pytest.approx((math.log(0.5) + H(P[0, 0])) ** 2 + (math.log(0.5) + H(P[0, 1])) ** 2)
    assert m[1] == pytest.approx(0.0) and v[1] == pytest.approx(0.0)  # one-hot then PAD
    m2, _, _ = martingale_terms(torch.tensor(P), torch.tensor([[1, 2], [0, 1]]))  # token 1 at p = 0, unmasked
    assert m2[1] == -math.inf
    assert martingale_test(m2, np.ones(2), np.ones(2), tokens=4, alpha=1e-3, power=0.9).pvalue == 0.0


def _martingale_run(rng, n, T=16, V=6, temperature=1.0):
    """n sequences of T tokens: conditionals depend on the previous token (random rows); drawn from the
    rows at ``temperature``, scored against the rows at 1."""
    rows = rng.dirichlet(np.full(V, 0.6), size=V)  # (V, V) target conditional given the previous token
    warm = rows ** (1 / temperature)
    warm /= warm.sum(1, keepdims=True)
    x = np.zeros((n, T), np.int64)
    prev = np.zeros(n, np.int64)
    cum = warm.cumsum(1)
    for t in range(T):
        x[:, t] = np.minimum((rng.random(n)[:, None] > cum[prev]).sum(1), V - 1)
        prev = x[:, t]
    probs = rows[np.concatenate([np.zeros((n, 1), np.int64), x[:, :-1]], 1)]  # (n, T, V)
    return martingale_terms(torch.tensor(probs), torch.tensor(x))


def test_martingale_level_and_power():
    rng = np.random.default_rng(11)
    p = np.array([martingale_test(*_martingale_run(rng, 200), tokens=200 * 16, alpha=0.05, power=0.9).pvalue
                  for _ in range(600)])
    assert 0.03 <= (p <= 0.05).mean() <= 0.075  # 600 runs: +-0.02 is ~2.3 binomial sds
    r = martingale_test(*_martingale_run(np.random.default_rng(12), 2000, temperature=0.8), tokens=2000 * 16,
                        alpha=1e-6, power=0.9)
    assert r.pvalue < 1e-6 and r.shift > 0  # sharper output: M above 0
    assert r.method.startswith("Bercu-Touati")  # skewed M at n = 2000: the exact bound, and it still rejects
    hot = martingale_test(*_martingale_run(np.random.default_rng(13), 2000, temperature=1.3), tokens=2000 * 16,
                          alpha=1e-6, power=0.9)
    assert hot.pvalue < 1e-6 and hot.shift < 0  # flatter output: M below 0


def test_mixture_bound_is_conservative_at_small_n():
    """The exact bound on 20 sequences (where the normal is not trusted): rejection rate at 0.05 <= 0.05."""
    rng = np.random.default_rng(14)
    p = []
    for _ in range(400):
        m, v, q = _martingale_run(rng, 20)
        p.append(mixture_pvalue(float(m.sum()), float(v.sum() + q.sum()), MIXTURE_SCALE * 20 * 16))
    assert np.mean(np.array(p) <= 0.05) <= 0.05


@pytest.mark.parametrize("shift", [0.5, 2.0, 9.0])
def test_mixture_planners_invert_each_other(shift):
    n = mixture_n_for_shift(shift, 4.0 * 64, 2.0 * 64, MIXTURE_SCALE * 64, 5.9e-8, 0.99)
    mde = [mixture_min_detectable_shift(k, k * 256.0, k * 128.0, k * MIXTURE_SCALE * 64, 5.9e-8, 0.99)
           for k in (n - 1, n)]
    assert mde[1] <= shift < mde[0]
    assert n > n_for_shift(shift, math.sqrt(128.0), 5.9e-8, 0.99)  # the exact bound costs sequences


def test_martingale_row_in_the_real_model_battery():
    rng = np.random.default_rng(0)
    u = rng.random((64, 8))
    specs = plan_pit_value_tests(u, max_lag=5, loglik=_martingale_run(rng, 64, T=8))
    names = [s.test for s in specs]
    assert names.count("martingale") == 1 and specs[-1].family == "loglik"
    assert {"pairs_even", "pairs_odd", "pairs_lag3_odd", "pairs_lag5_even"} <= set(names)
    assert not any("lag6" in n or n == "pairs_lag5_odd" for n in names)  # T = 8: lag 5 has one phase only
    assert "martingale" not in [s.test for s in plan_pit_value_tests(u)]
    row = specs[-1].evaluate(1e-3, 0.9, 1e-3)
    assert 0 < row.pvalue <= 1 and row.n == 64


# ------------------------------------------------------------------------------------------ the battery
def _run(sampler, draws, seed=1, name="base"):
    sc = load_scenario(name)
    t, d = sc.build()
    law = ExactLaw(t, d, list(sc.prompt), sc.max_new_tokens, sc.config, sc.eos_token_id)
    acc = Accumulator(law, sc.joint_tokens, 1024, 8, 0, np.random.default_rng(seed), pit_max_lag=sc.k + 1)
    prompts = torch.tensor([list(sc.prompt)] * draws)
    res = sampler(t, d, prompts, k=sc.k, max_new_tokens=sc.max_new_tokens, config=sc.config,
                  eos_token_id=sc.eos_token_id, generator=torch.Generator().manual_seed(seed))
    acc.add(res.tokens, res.stats)
    return sc, acc, {s.test: s for s in plan_tests(acc, None, sc.k)}


def test_reference_passes_and_a_softmax_bug_is_caught_by_the_loglik_row():
    sc, acc, specs = _run(speculative_generate, 6000)
    assert acc.loglik.n == 6000
    row = specs["sequence"].evaluate(1e-6, 0.99, 1e-3)
    assert row.pvalue > 1e-6
    _, _, bad = _run(get_control("residual_softmax").sampler, 6000)
    row = bad["sequence"].evaluate(1e-6, 0.99, 1e-3)
    assert row.pvalue < 1e-6 and row.observed < row.expected
