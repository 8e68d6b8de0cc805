"""The lookup tables of the tabular loops: the acceptance threshold is the rule exactly, the tables are
the warped model rows, start contexts agree with ``ngram.context_of``, and which models qualify.
(That the tabular loops reproduce the generic ones bit for bit is tested in tests/specimpl/test_speculative.py.)
"""
import pytest
import torch

from specimpl.ngram import NGramModel, context_of, random_ngram
from specimpl.sampling import SamplingConfig, warp
from specimpl.tabular import is_tabular_model, is_tabular_pair, pair_tables, start_contexts

CONFIGS = [SamplingConfig(), SamplingConfig(temperature=0.7, top_k=3), SamplingConfig(top_p=0.8),
           SamplingConfig(greedy=True)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.describe())
def test_pair_tables_accept_threshold_is_the_rule_exactly(dtype, config):
    """u < accept_thr[J V + x]  <=>  q(x) > 0 and u q(x) < p(x), in the tables' float arithmetic."""
    t = NGramModel(random_ngram(5, 2, seed=1, support=4).table64.numpy(), 2, dtype=dtype)
    d = NGramModel(random_ngram(5, 3, seed=2, support=3).table64.numpy(), 3, dtype=dtype)
    tab = pair_tables(t, d, config)
    assert tab.C == 25 and tab.p.shape == (25, 5) and tab.p.dtype == dtype
    p, q, thr = tab.p.reshape(-1), tab.q.reshape(-1), tab.accept_thr
    zero = torch.zeros((), dtype=dtype)
    for u in [zero.expand_as(thr), thr, torch.nextafter(thr, zero), torch.nextafter(thr, zero + 1),
              torch.rand(thr.shape, generator=torch.Generator().manual_seed(0), dtype=dtype)]:
        u = u.clamp(max=float(torch.nextafter(torch.ones((), dtype=dtype), zero)))
        assert torch.equal(u < thr, (q > 0) & (u * q < p))
    # the tables are the warped model rows at the joint context (target order 2 reads J mod 5)
    J = torch.arange(25)
    assert torch.equal(tab.p, warp(t.logtable, config)[J % 5])
    assert torch.equal(tab.q, warp(d.logtable, config))


def test_start_contexts_match_context_of():
    m = random_ngram(4, 3)
    prompts = [[1], [2, 3], [0, 1, 2, 3]]
    expect = [context_of(m, p) for p in prompts]
    assert start_contexts(prompts, 4, 16).tolist() == expect
    assert start_contexts(torch.tensor([[3, 0, 1, 2]]), 4, 16).tolist() == [context_of(m, [3, 0, 1, 2])]
    assert start_contexts(torch.tensor([[3, 2]]), 4, 1).tolist() == [0]


def test_which_models_are_tabular():
    m = random_ngram(4, 2)

    class Sub(NGramModel):
        pass

    sub = Sub(m.table64.numpy(), 2)
    m64 = NGramModel(m.table64.numpy(), 2, dtype=torch.float64)
    assert is_tabular_model(m) and not is_tabular_model(sub)
    assert is_tabular_pair(m, m) and not is_tabular_pair(m, sub) and not is_tabular_pair(m, m64)
