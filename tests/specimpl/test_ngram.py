"""Tabular n-gram models: the model interface and the exact quantities, checked by brute force."""
import itertools
import re

import numpy as np
import pytest
import torch

from specimpl.ngram import (NGramModel, context_of, disjoint_draft, exact_acceptance, exact_joint,
                            exact_marginals, noisy_draft, random_ngram, tempered_draft, warped_table)
from specimpl.sampling import SamplingConfig

CONFIGS = [SamplingConfig(), SamplingConfig(temperature=0.7, top_k=3), SamplingConfig(top_p=0.8),
           SamplingConfig(greedy=True)]


def brute_joint(model, prompt, N, config):
    """Joint law of N generated tokens by walking every sequence with context_of (no shortcuts)."""
    P = warped_table(model, config)
    V = model.vocab_size
    J = np.zeros((V,) * N)
    for seq in itertools.product(range(V), repeat=N):
        pr, hist = 1.0, list(prompt)
        for t in seq:
            pr *= P[context_of(model, hist), t]
            hist.append(t)
        J[seq] = pr
    return J


@pytest.mark.parametrize("order", [1, 2, 3])
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.describe())
def test_exact_joint_and_marginals(order, config):
    m = random_ngram(3, order, seed=order)
    prompt = [2, 1]
    J = exact_joint(m, prompt, 4, config)
    assert J.shape == (3,) * 4 and J.sum() == pytest.approx(1, abs=1e-12)
    np.testing.assert_allclose(J, brute_joint(m, prompt, 4, config), atol=1e-14)
    M = exact_marginals(m, prompt, 4, config)
    for t in range(4):
        axes = tuple(a for a in range(4) if a != t)
        np.testing.assert_allclose(M[t], J.sum(axis=axes), atol=1e-13)
    np.testing.assert_allclose(M.sum(1), 1, atol=1e-13)


def test_exact_joint_refuses_huge_enumeration():
    with pytest.raises(ValueError, match="`n_tokens`"):
        exact_joint(random_ngram(16, 2), [0], 8, max_cells=1000)


def brute_acceptance(target, draft, prompt, N, config):
    """alpha_t = sum over prefixes of P(prefix) * sum_x min(p_t(x), q_t(x)), from the brute joint."""
    P, Q = warped_table(target, config), warped_table(draft, config)
    V = target.vocab_size
    out = []
    for t in range(N):
        J = brute_joint(target, prompt, t, config) if t else np.ones(())
        a = 0.0
        for prefix in itertools.product(range(V), repeat=t):
            hist = list(prompt) + list(prefix)
            a += J[prefix] * np.minimum(P[context_of(target, hist)], Q[context_of(draft, hist)]).sum()
        out.append(a)
    return np.array(out)


def test_exact_acceptance_order_one_is_sum_min():
    t, d = random_ngram(5, 1, seed=3), random_ngram(5, 1, seed=4)
    expect = np.minimum(t.table64.numpy()[0], d.table64.numpy()[0]).sum()
    np.testing.assert_allclose(exact_acceptance(t, d, [0], 3), [expect] * 3, atol=1e-14)


@pytest.mark.parametrize("orders", [(2, 2), (2, 1), (3, 2), (1, 3)])
@pytest.mark.parametrize("config", CONFIGS[:3], ids=lambda c: c.describe())
def test_exact_acceptance_brute_force(orders, config):
    t = random_ngram(3, orders[0], seed=5)
    d = random_ngram(3, orders[1], seed=6)
    np.testing.assert_allclose(exact_acceptance(t, d, [1, 2], 4, config), brute_acceptance(t, d, [1, 2], 4, config),
                               atol=1e-13)


@pytest.mark.parametrize("overlap", [0.0, 0.3, 0.75, 1.0])
def test_disjoint_draft_has_alpha_equal_to_overlap(overlap):
    t = random_ngram(6, 2, support=3, seed=1)
    d = disjoint_draft(t, overlap)
    P, Q = t.table64.numpy(), d.table64.numpy()
    np.testing.assert_allclose(np.minimum(P, Q).sum(1), overlap, atol=1e-14)  # in every context
    np.testing.assert_allclose(exact_acceptance(t, d, [0], 3), overlap, atol=1e-14)
    if overlap == 0:
        assert ((P > 0) & (Q > 0)).sum() == 0


def test_disjoint_draft_needs_a_free_token():
    with pytest.raises(ValueError, match="`target`"):
        disjoint_draft(random_ngram(4, 2, seed=0))


def test_noisy_and_tempered_drafts_dial_alpha():
    t = random_ngram(8, 2, seed=2)
    np.testing.assert_allclose(exact_acceptance(t, noisy_draft(t, 0.0), [0], 3), 1, atol=1e-14)
    np.testing.assert_allclose(exact_acceptance(t, tempered_draft(t, 1.0), [0], 3), 1, atol=1e-12)
    a = [exact_acceptance(t, noisy_draft(t, e), [0], 2)[1] for e in (0.1, 0.4, 0.8)]
    assert 1 > a[0] > a[1] > a[2] > 0
    # mixing: sum min(p, (1-e) p + e r) >= 1 - e in every context
    assert a[2] >= 0.2 - 1e-12
    b = [exact_acceptance(t, tempered_draft(t, tau), [0], 2)[1] for tau in (1.2, 2.0, 5.0)]
    assert 1 > b[0] > b[1] > b[2] > 0


@pytest.mark.parametrize("kwargs, name", [
    (dict(vocab_size=1, order=2), "vocab_size"), (dict(vocab_size=4, order=0), "order"),
    (dict(vocab_size=4, order=2, concentration=0), "concentration"),
    (dict(vocab_size=4, order=2, support=5), "support"),
])
def test_random_ngram_validation(kwargs, name):
    with pytest.raises(ValueError, match=f"`{name}`"):
        random_ngram(**kwargs)


@pytest.mark.parametrize("table, order, name", [
    (np.full((3, 3), 1 / 3), 3, "table"),  # wrong shape for order 3
    (np.array([[0.5, 0.6]]), 1, "table"),  # unnormalised
    (np.array([[1.5, -0.5]]), 1, "table"),  # negative
    (np.array([[np.nan, 1.0]]), 1, "table"),
    (np.array([[0.5, 0.5]]), 0, "order"),
])
def test_table_validation(table, order, name):
    with pytest.raises(ValueError, match=f"`{name}`"):
        NGramModel(table, order)


def test_draft_constructor_validation():
    t = random_ngram(4, 2, support=2)
    for f, arg, name in [(noisy_draft, 1.5, "eps"), (tempered_draft, 0.0, "tau"), (disjoint_draft, -0.1, "overlap")]:
        with pytest.raises(ValueError, match=f"`{name}`"):
            f(t, arg)


# -- the model interface ---------------------------------------------------------------------------
@pytest.mark.parametrize("order", [1, 2, 3])
def test_forward_rollback_select_follow_the_context(order):
    V = 5
    m = random_ngram(V, order, seed=7)
    prompts = [[1], [2, 3, 4], [0, 4]]
    state = m.prefill(prompts)
    assert state.lengths.tolist() == [0, 2, 1]  # the last prompt token is held back
    history = [list(p[:-1]) for p in prompts]
    g = torch.Generator().manual_seed(0)
    for step in range(6):
        T = 1 + step % 3
        tokens = torch.randint(0, V, (3, T), generator=g)
        n_new = torch.tensor([T, max(T - 1, 1), T])
        logits = m.forward(state, tokens, n_new)
        assert logits.shape == (3, T, V) and logits.dtype == m.dtype
        for b in range(3):
            for t in range(int(n_new[b])):
                ctx = context_of(m, history[b] + tokens[b, :t + 1].tolist())
                torch.testing.assert_close(logits[b, t], m.logtable[ctx])
            history[b] += tokens[b, :int(n_new[b])].tolist()
        assert state.lengths.tolist() == [len(h) for h in history]
        keep = torch.tensor([max(len(h) - 1, 0) for h in history])  # roll back one token
        m.rollback(state, keep)
        history = [h[:max(len(h) - 1, 0)] for h in history]
    sub = m.select(state, torch.tensor([2, 0]))
    logits = m.forward(sub, torch.tensor([[3], [1]]))
    for row, b, tok in [(0, 2, 3), (1, 0, 1)]:
        torch.testing.assert_close(logits[row, 0], m.logtable[context_of(m, history[b] + [tok])])


def test_prefill_accepts_tensor_prompts_and_rejects_bad_ones():
    m = random_ngram(4, 2)
    s = m.prefill(torch.tensor([[1, 2], [3, 0]]))
    assert s.lengths.tolist() == [1, 1]
    for bad, name in [([[1, 4]], "prompts[0]"), ([[]], "prompts[0]"), ([], "prompts"),
                      (torch.tensor([[1, -1]]), "prompts"), (torch.tensor([[0.5]]), "prompts")]:
        with pytest.raises(ValueError, match="`" + re.escape(name)):
            m.prefill(bad)


def test_forward_refuses_to_grow_past_max_length():
    m = NGramModel(np.full((2, 2), 0.5), 2, max_length=10)
    s = m.prefill([[0]])
    m.forward(s, torch.zeros(1, 10, dtype=torch.long))
    with pytest.raises(ValueError, match="`tokens`"):
        m.forward(s, torch.zeros(1, 1, dtype=torch.long))


def test_as_order_is_the_same_model():
    m = random_ngram(3, 2, seed=9)
    m3 = m.as_order(3)
    for hist in itertools.product(range(3), repeat=3):
        np.testing.assert_array_equal(m.table64[context_of(m, hist)], m3.table64[context_of(m3, hist)])
    np.testing.assert_allclose(exact_joint(m, [1], 3), exact_joint(m3, [1], 3), atol=1e-15)
