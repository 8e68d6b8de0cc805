"""Lagged dependence (harness.stats.lagged, stats.pit_pair_tables' lag): PIT pairs k + 1 apart and the joint at
a later offset, from the accumulator's own PIT uniforms, in the run's family.

False-failure rates (over seeds; deterministic at the fixed seeds): a lossless run's ``p > 1e-6`` checks 1e-6 each;
the lossy controls' ``p < 1e-6`` / ``< 1e-12`` fail only for lack of power (their bugs are large: TV ~ 0.1-0.5)."""
import numpy as np
import pytest
import torch

from harness import stats
from harness.verify.battery import Accumulator, plan_tests
from harness.controls.chain import get_control
from harness.laws.ngram import ExactLaw
from harness.stats.lagged import LaggedTables
from harness.laws.scenarios import load_scenario
from specimpl.speculative import speculative_generate


def test_lag_one_tables_are_the_even_and_odd_offsets():
    """lag 1 keeps today's tables exactly (even offsets, odd offsets)."""
    rng = np.random.default_rng(0)
    u = rng.random((50, 7))
    m, tables = stats.pit_pair_tables(u, 4)
    g = np.minimum((u * 4).astype(int), 3)
    for start, table in zip((0, 1), tables):
        ts = np.arange(start, 6, 2)
        assert np.array_equal(table, np.bincount((g[:, ts] * 4 + g[:, ts + 1]).ravel(), minlength=16))
    assert np.array_equal(stats.pit_pair_tables(u, 4, lag=1)[1][1], tables[1])


@pytest.mark.parametrize("T,lag", [(8, 1), (8, 2), (9, 3), (12, 5), (6, 5)])
def test_phases_use_each_position_at_most_once(T, lag):
    phases = stats.pit_pair_phases(T, lag)
    assert sum(ts.size for ts in phases) == T - lag  # every pair (t, t + lag) in exactly one table
    for ts in phases:
        used = np.concatenate([ts, ts + lag])
        assert np.unique(used).size == used.size and used.max() < T


def test_lag_tables_catch_a_coupling_two_apart_that_lag_one_misses():
    rng = np.random.default_rng(1)
    u = rng.random((20_000, 8))
    u[:, 2:] = np.where(rng.random((20_000, 6)) < 0.3, u[:, :-2], u[:, 2:])  # U_t+2 = U_t 30 % of the time
    p = {}
    for lag in (1, 2):
        m, tables = stats.pit_pair_tables(u, 8, lag=lag)
        p[lag] = min(stats.chi2_gof(t, np.full(64, 1 / 64), alpha=1e-6, power=0.9).pvalue for t in tables)
    assert p[2] < 1e-12 and p[1] > 1e-6


def test_bad_lag_is_refused():
    with pytest.raises(ValueError, match="`lag`"):
        stats.pit_pair_tables(np.full((3, 4), 0.5), 4, lag=0)
    with pytest.raises(ValueError, match="T >= lag"):
        stats.pit_pair_tables(np.full((3, 4), 0.5), 4, lag=4)


def _acc(name, sampler, draws, seed=2, max_lag=None):
    sc = load_scenario(name)
    t, d = sc.build()
    law = ExactLaw(t, d, list(sc.prompt), sc.max_new_tokens, sc.config, sc.eos_token_id)
    acc = Accumulator(law, sc.joint_tokens, 1024, 8, 0, np.random.default_rng(seed),
                      pit_max_lag=sc.k + 1 if max_lag is None else max_lag)
    prompts = torch.tensor([list(sc.prompt)] * draws)
    res = sampler(t, d, prompts, k=sc.k, max_new_tokens=sc.max_new_tokens, config=sc.config,
                  eos_token_id=sc.eos_token_id, generator=torch.Generator().manual_seed(seed))
    return sc, law, acc, res


def test_new_statistics_draw_no_randomness_and_keep_the_old_ones():
    """The lag tables reuse the accumulator's PIT uniforms: same rng state and same lag-1 tables with
    lags 2..k+1 on as with lag 1 only."""
    sc, law, a, res = _acc("base", speculative_generate, 500, max_lag=1)
    _, _, b, _ = _acc("base", speculative_generate, 500)
    a.add(res.tokens, res.stats)
    b.add(res.tokens, res.stats)
    assert a.rng.bit_generator.state == b.rng.bit_generator.state
    assert np.array_equal(a.pit_pairs, b.pit_pairs) and np.array_equal(a.pit_hist, b.pit_hist)
    assert a.lagged.lags == () and b.lagged.lags == tuple(range(2, sc.k + 2))
    # and the lag tables are those of the same uniforms
    fresh = np.random.default_rng(2)
    sym = law.symbols(res.tokens)
    u = law.pit(sym, law.states(sym), fresh.random(sym.shape, dtype=np.float32))
    assert np.array_equal(b.lagged.pit_pairs[1, 0], stats.pit_pair_tables(u, 8, lag=3)[1][0])


def test_tail_joint_counts_and_merge():
    sc, law, acc, res = _acc("base", speculative_generate, 400)
    N, J, W = law.N, sc.joint_tokens, law.n_symbols
    lg = acc.lagged
    assert (lg.tail_offset, lg.tail_tokens) == (N - J, J)
    sym = law.symbols(res.tokens)
    half = [LaggedTables.for_law(law, sc.k + 1, 8, J) for _ in range(2)]
    whole = LaggedTables.for_law(law, sc.k + 1, 8, J)
    u = np.random.default_rng(3).random(sym.shape)
    half[0].add(sym[:150], u[:150])
    half[1].add(sym[150:], u[150:])
    whole.add(sym, u)
    merged = half[0].merge(half[1])
    assert np.array_equal(merged.pit_pairs, whole.pit_pairs) and np.array_equal(merged.tail_joint, whole.tail_joint)
    idx = ((sym[:, N - 3] * W) + sym[:, N - 2]) * W + sym[:, N - 1]
    assert np.array_equal(whole.tail_joint, np.bincount(idx, minlength=W ** 3))
    with pytest.raises(ValueError, match="`other` has layout"):
        whole.merge(LaggedTables.for_law(law, 2, 8, J))


def test_no_tail_joint_when_it_would_repeat_the_first():
    law = _acc("base", speculative_generate, 10)[1]
    assert LaggedTables.for_law(law, 5, 8, law.N).tail_tokens == 0


def test_reference_passes_and_a_round_bug_is_caught_by_the_lagged_rows():
    """The reference: no lag or tail row below 1e-6; keep_after_rejection (a round-structured bug):
    the lag k+1 tables and the tail joint reject."""
    for name, sampler, caught in (("base", speculative_generate, False),
                                  ("base", get_control("keep_after_rejection").sampler, True)):
        sc, law, acc, res = _acc(name, sampler, 4000)
        acc.add(res.tokens, res.stats)
        specs = {s.test: s for s in plan_tests(acc, None, sc.k)}
        lag = f"pairs_lag{sc.k + 1}_even"
        tail = f"joint[{law.N - sc.joint_tokens}:{law.N}]"
        assert lag in specs and tail in specs
        p = [specs[n].evaluate(1e-6, 0.99, 1e-3).pvalue for n in (lag, tail)]
        assert (max(p) < 1e-6) if caught else (min(p) > 1e-6), (name, p)
