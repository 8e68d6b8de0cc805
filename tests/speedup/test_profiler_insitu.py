"""In-situ profiling (harness.speedup.profiler.profile_in_situ): the calls of real runs, and the rest of each run."""
import numpy as np
import pytest
import torch

from harness.speedup.costmodel import CostTable, predict_from_counts
from harness.speedup.profiler import CallRecorder, Timer, profile_in_situ
from harness.speedup.synthetic import CallCost, VirtualClock, synthetic_pair
from specimpl.sampling import SamplingConfig
from specimpl.speculative import speculative_generate


def _pair(clock, alpha=0.6, c=0.25):
    target, draft, _, _ = synthetic_pair(alpha, c, CallCost(0.01, token_slope=0.1, batch_slope=0.5), clock=clock)
    return target, draft


def test_virtual_clock_recovers_each_set_cost_and_no_overhead():
    """On the virtual clock every call takes exactly its set cost and the sampler's logic takes no time."""
    clock = VirtualClock()
    target, draft = _pair(clock)
    prompts = [[1, 2, 3, 4, 5, 6]] * 2
    prof = profile_in_situ(target, draft, prompts, 3, 20, seed=1, clock=clock, passes=2)
    ops = {(r.op, r.n, r.batch) for r in prof.itertuples()}
    assert {("target.forward", 1, 2), ("target.forward", 4, 2), ("draft.forward", 2, 2), ("draft.forward", 1, 2),
            ("target.prefill", 5, 2), ("draft.prefill", 5, 2), ("ar.overhead", 1, 2), ("spec.overhead", 3, 2)} <= ops
    cost = target.cost
    for r in prof.itertuples():
        if r.op == "target.forward":
            assert r.samples_s == pytest.approx([cost(r.n, r.batch)] * r.count, abs=1e-12)
        elif r.op == "draft.forward":
            assert r.samples_s == pytest.approx([0.25 * cost(r.n, r.batch)] * r.count, abs=1e-12)
        elif r.op.endswith(".overhead"):
            assert r.count == 2 and np.allclose(r.samples_s, 0.0, atol=1e-12)
    assert (prof.loc[prof.op == "target.forward", "count"].sum()
            >= 2 * 20 // 2)  # every AR step (20 per pass) and every round was recorded


def test_in_situ_costs_account_for_a_run_exactly_on_the_virtual_clock():
    """The cost accounting of a run from its in-situ profile reproduces that run's virtual time."""
    clock = VirtualClock()
    target, draft = _pair(clock)
    prompts = [[3, 1, 4, 1, 5]]
    prof = profile_in_situ(target, draft, prompts, 2, 16, seed=2, clock=clock)
    costs = CostTable(prof, "mean_s")
    g = torch.Generator().manual_seed(9)
    t0 = clock.now()
    res = speculative_generate(target, draft, prompts, k=2, max_new_tokens=16, generator=g)
    spent = clock.now() - t0
    pred = predict_from_counts(costs, 2, res.stats.frame()["batch"].tolist(), 1, 16, 5)
    assert pred.t_spec_s == pytest.approx(spent, rel=1e-9)


def test_wall_clock_overhead_is_the_rest_of_the_run():
    """Wall clock: calls + overhead * rounds is the run's own time, to the timer's resolution."""
    target, draft = _pair(None, c=0.5)
    prof = profile_in_situ(target, draft, [[1, 2, 3, 4]], 2, 12, seed=0)
    assert set(prof.timer) == {"perf_counter"}
    over = prof[prof.op.str.endswith(".overhead")]
    assert len(over) == 2 and np.isfinite(over.median_s).all() and (over.cpu_median_s > -1e-3).all()


def test_recorder_passes_calls_through_unchanged():
    clock = VirtualClock()
    target, draft = _pair(clock)
    log = []
    rec_t, rec_d = CallRecorder(target, "target", Timer("cpu", clock), log), CallRecorder(draft, "draft",
                                                                                         Timer("cpu", clock), log)
    a = speculative_generate(rec_t, rec_d, [[1, 2, 3]], k=2, max_new_tokens=10, config=SamplingConfig(),
                             generator=torch.Generator().manual_seed(5))
    b = speculative_generate(target, draft, [[1, 2, 3]], k=2, max_new_tokens=10, config=SamplingConfig(),
                             generator=torch.Generator().manual_seed(5))
    assert torch.equal(a.tokens, b.tokens)
    assert {op for op, *_ in log} == {"target.prefill", "draft.prefill", "target.forward", "draft.forward"}
