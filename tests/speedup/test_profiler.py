"""The profiler: exact on a virtual clock, sound on the wall clock, any LanguageModel (HF included), CUDA path."""
import math

import numpy as np
import pytest
import torch

from harness.speedup.profiler import NullModel, Timer, profile_model, profile_pair, profile_sampler_overhead
from harness.speedup.synthetic import CallCost, TimedModel, VirtualClock, WallClock, synthetic_pair
from specimpl.ngram import random_ngram
from specimpl.speculative import SpeculativeSampler


def _timed(cost, clock):
    return TimedModel(random_ngram(16, 2, seed=0), cost, clock)


def test_virtual_clock_profile_recovers_the_set_costs_exactly():
    clock = VirtualClock()
    cost = CallCost(0.010, token_slope=0.5, batch_slope=0.25)
    prof = profile_model(_timed(cost, clock), "target", [1, 3, 5], [1, 4], context_len=10, prompt_len=6,
                         repeats=4, warmup=1, clock=clock)
    for r in prof.itertuples():
        assert r.count == 4 and len(r.samples_s) == 4
        assert r.median_s == pytest.approx(np.median(r.samples_s))
        if r.op == "target.forward":
            assert r.samples_s == pytest.approx([cost(r.n, r.batch)] * 4, abs=1e-12)
        elif r.op == "target.prefill":
            assert r.n == 5 and r.median_s == pytest.approx(cost(5, r.batch))
        else:
            assert r.op == "target.rollback" and r.max_s == 0.0
    assert set(prof.timer) == {"virtual"}


def test_wall_clock_samples_never_undercut_a_sleep():
    """time.sleep(t) returns after at least t (a guarantee of the OS, not a performance claim)."""
    cost = CallCost(0.002)
    prof = profile_model(_timed(cost, WallClock()), "draft", [1, 2], [1], context_len=4, repeats=3, warmup=0)
    fw = prof[prof.op == "draft.forward"]
    assert all(min(s) >= 0.002 for s in fw.samples_s)
    assert set(prof.timer) == {"perf_counter"}
    assert all(len(c) == 3 for c in prof.cpu_samples_s)


def test_null_model_accepts_every_draft():
    null = NullModel(32)
    res = SpeculativeSampler(null, null, 3).generate([[1, 2, 3]], 20, None, torch.Generator().manual_seed(0))
    assert len(res.stats.rounds) == math.ceil(20 / 4)
    assert res.stats.accepted_hist.tolist() == [0, 0, 0, len(res.stats.rounds)]


def test_sampler_overhead_is_zero_on_the_virtual_clock_and_finite_on_the_wall():
    prof = profile_sampler_overhead(32, [1, 4], [1, 2], rounds=3, repeats=2, warmup=0, clock=VirtualClock())
    assert set(prof.op) == {"spec.overhead", "ar.overhead"}
    assert np.allclose(prof.median_s, 0.0, atol=1e-12)
    prof = profile_sampler_overhead(32, [2], [1], rounds=3, repeats=2, warmup=0)
    assert len(prof) == 2 and np.isfinite(prof.median_s).all() and (prof["count"] == 2).all()


def test_profile_pair_gives_every_operation_the_cost_model_needs():
    from harness.speedup.costmodel import CostTable
    clock = VirtualClock()
    target, draft, _, _ = synthetic_pair(0.5, 0.25, CallCost(0.01, 0.1), clock=clock)
    prof = profile_pair(target, draft, [2, 4], [1], prompt_len=6, max_new_tokens=16, repeats=2, warmup=0,
                        clock=clock)
    t = CostTable(prof)
    assert t.c(1) == pytest.approx(0.25)
    assert t("target.forward", 5, 1) == pytest.approx(0.01 * 1.4)
    assert t.round_cost(4, 1) == pytest.approx(0.0025 * 1.1 + 3 * 0.0025 + 0.014)


def test_any_language_model_including_hf():
    """The shipped tiny HF target and a random-weight Llama of another shape, at two batch sizes."""
    from transformers import LlamaConfig, LlamaForCausalLM
    from specimpl.hf import HFModel, load_tiny_pair
    target, _ = load_tiny_pair()
    torch.manual_seed(0)
    rand = HFModel(LlamaForCausalLM(LlamaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                                                intermediate_size=128, vocab_size=300)).eval(), name="random")
    for m in (target, rand):
        prof = profile_model(m, "target", [1, 3], [1, 2], context_len=8, repeats=2, warmup=1)
        assert len(prof) == 2 * 2 * 2 + 2  # forward and rollback per (n, B), prefill per B
        assert (prof.median_s > 0).all()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_path_uses_events():
    from specimpl.hf import load_tiny_pair
    target, _ = load_tiny_pair(device="cuda")
    prof = profile_model(target, "target", [1, 5], [1, 8], context_len=16, repeats=3, warmup=2)
    assert set(prof.timer) == {"cuda_events"} and (prof.median_s > 0).all()
    assert Timer("cuda").cuda


@pytest.mark.parametrize("kwargs, name", [(dict(n_tokens=[0]), "n_tokens"), (dict(batch_sizes=[]), "batch_sizes"),
                                          (dict(repeats=0), "repeats"), (dict(role="a b"), "role")])
def test_bad_arguments_are_named(kwargs, name):
    args = dict(role="target", n_tokens=[1], batch_sizes=[1], repeats=1)
    args.update(kwargs)
    with pytest.raises(ValueError, match=f"`{name}` must be"):
        profile_model(_timed(CallCost(0.0), VirtualClock()), **args)
