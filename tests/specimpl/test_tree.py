"""Token-tree verification (specimpl.tree, specimpl.tree_models): tree shapes, the pure step by hand,
one chain = the token-level rule bit for bit, the n-gram tree forward against sequential scoring, and
the samplers against the exact laws of harness.laws.rounds (accepted drafts per round) and the target's
exact law (output), with and without replacement.

Statistical tests: per-test false-alarm rate 1e-6 (Bonferroni inside a test), fixed seeds.
"""
import numpy as np
import pytest
import torch

from harness.controls.tree import quick_law_check
from harness.laws.ngram import ExactLaw
from harness.laws.rounds import ExactRounds, accepted_mean_test
from harness.stats import chi2_gof
from specimpl import NGramModel, SamplingConfig, noisy_draft, random_ngram
from specimpl.speculative import SpeculativeSampler, verify_block
from specimpl.tree import (TokenTree, TreeSampler, sibling_laws, tree_generate, tree_generate_without_replacement,
                           verify_tree)
from specimpl.tree_adapters import as_tree_model
from specimpl.tree_models import NGramTreeModel, SequentialTreeModel, check_parents

ALPHA = 1e-6


# ------------------------------------------------------------------------------------- shapes
def test_tree_constructors_and_layout():
    assert TokenTree.chains(2, 3).parents == (-1, -1, 0, 1, 2, 3)
    assert TokenTree.chains(1, 3).parents == (-1, 0, 1)
    t = TokenTree.from_branching((3, 2))
    assert t.parents == (-1, -1, -1, 0, 0, 1, 1, 2, 2) and t.depth == 2 and t.n_nodes == 9
    assert t.level(1) == (0, 3) and t.level(2) == (3, 9)
    assert t.sibling_rank.tolist() == [0, 1, 2, 0, 1, 0, 1, 0, 1]
    assert t.children_table[0].tolist() == [1, 2, 3] and t.children_table[4].tolist() == [-1, -1, -1]
    # any topological order is made breadth-first, siblings keeping their order
    u = TokenTree.from_parents([-1, 0, -1, 1, 2])  # chain a-b-d, and c-e
    assert u.parents == (-1, -1, 0, 1, 2)
    assert TokenTree.chains(2, 4).truncate(2).parents == (-1, -1, 0, 1)


def test_tree_argument_errors_name_the_argument():
    with pytest.raises(ValueError, match=r"`parents\[1\]` must be -1 \(the committed prefix\) or an earlier node in \[0, 1\); got 1"):
        check_parents([-1, 1])
    with pytest.raises(ValueError, match="`parents` must be a breadth-first parent array"):
        TokenTree((-1, 0, -1))
    with pytest.raises(ValueError, match="`n_drafts` must be an integer >= 1; got 0"):
        TokenTree.chains(0, 2)
    t = random_ngram(4, 2, seed=0)
    with pytest.raises(ValueError, match="`tree` must be None, a TokenTree or a parent list"):
        tree_generate(t, t, [[0]], k=2, max_new_tokens=3, tree="chains")
    with pytest.raises(ValueError, match="`replacement` must be True or False; got 1"):
        TreeSampler(t, t, 2, replacement=1)


@pytest.mark.parametrize("conv", [np.int64, np.int32, torch.tensor], ids=["np.int64", "np.int32", "0-d tensor"])
@pytest.mark.parametrize("fn", [tree_generate, tree_generate_without_replacement])
def test_integer_like_scalars_give_the_same_draws(conv, fn):
    """Issue 26 finding 8: k=np.int64(2) was refused and an EOS given as a 0-d tensor gave a deep TypeError."""
    t = random_ngram(6, 2, seed=1)
    d = noisy_draft(t, 0.3, seed=2)
    ref = fn(t, d, [[0]] * 20, k=2, max_new_tokens=6, eos_token_id=3, generator=torch.Generator().manual_seed(5))
    got = fn(t, d, [[0]] * 20, k=conv(2), max_new_tokens=conv(6), eos_token_id=conv(3), n_drafts=conv(2),
             generator=torch.Generator().manual_seed(5))
    assert torch.equal(ref.tokens, got.tokens) and torch.equal(ref.lengths, got.lengths)
    for name, bad in (("k", 2.0), ("eos_token_id", torch.tensor([3])), ("max_new_tokens", np.float64(6))):
        kw = {**dict(k=2, max_new_tokens=6, eos_token_id=3), name: bad}
        with pytest.raises(ValueError, match=f"`{name}` must be"):
            fn(t, d, [[0]], generator=torch.Generator(), **kw)


# ---------------------------------------------------------------------------------- pure step
def test_recursive_residual_by_hand():
    """V = 3, p = (0.5, 0.3, 0.2) at the root, q = (0.8, 0.1, 0.1); two children both token 0.
    Child 1: accept iff u q(0) < p(0), i.e. u < 0.625; rejected (u = 0.9): r = norm(max(0, p - q)) =
    (0, 0.2, 0.1)/0.3.  Child 2 (token 0 again): r(0) = 0, always rejected; r = norm(max(0, r - q)) =
    (0, 0.5667, 0.2333)/0.8: u_final = 0.7 * 0.8 = 0.56 < 0.5667 gives token 1; 0.99 gives token 2."""
    tree = TokenTree.chains(2, 1)
    p = torch.tensor([[[0.5, 0.3, 0.2], [0.2, 0.4, 0.4], [0.2, 0.4, 0.4]]], dtype=torch.float64)
    q = torch.tensor([[[0.8, 0.1, 0.1], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]], dtype=torch.float64)
    x = torch.tensor([[0, 0]])
    qc = sibling_laws(q, x, tree)
    f = torch.tensor
    n, path, y = verify_tree(p, qc, x, tree, f([[0.6, 0.0]], dtype=torch.float64), f([0.5], dtype=torch.float64))
    assert n.item() == 1 and path.tolist() == [[0]]  # 0.6 * 0.8 = 0.48 < 0.5
    for uf, expect in ((0.7, 1), (0.99, 2)):
        n, path, y = verify_tree(p, qc, x, tree, f([[0.9, 0.0]], dtype=torch.float64), f([uf], dtype=torch.float64))
        assert n.item() == 0 and path.tolist() == [[-1]] and y.item() == expect


def test_without_replacement_laws_and_rule_by_hand():
    """Without replacement the second sibling's law is q without the first token, renormalised:
    (0, 0.5, 0.5); its test uses that law."""
    tree = TokenTree.chains(2, 1)
    q = torch.tensor([[[0.8, 0.1, 0.1], [0.0] * 3, [0.0] * 3]], dtype=torch.float64)
    x = torch.tensor([[0, 2]])
    qc = sibling_laws(q, x, tree, replacement=False)
    assert torch.allclose(qc[0, 1], torch.tensor([0.0, 0.5, 0.5], dtype=torch.float64))
    p = torch.tensor([[[0.5, 0.3, 0.2], [1 / 3] * 3, [1 / 3] * 3]], dtype=torch.float64)
    # child 1 rejected: r = (0, 2/3, 1/3); child 2 = token 2: accept iff u * 0.5 < 1/3, i.e. u < 2/3
    f = torch.tensor
    for u2, acc in ((0.6, True), (0.7, False)):
        n, path, _ = verify_tree(p, qc, x, tree, f([[0.9, u2]], dtype=torch.float64), f([0.1], dtype=torch.float64))
        assert (n.item() == 1) == acc and (path.item() == 1) == acc


def test_zero_probability_child_is_never_accepted_even_at_u_zero():
    tree = TokenTree.chains(1, 1)
    p = torch.tensor([[[0.0, 1.0], [0.5, 0.5]]], dtype=torch.float64)
    qc = torch.tensor([[[1.0, 0.0]]], dtype=torch.float64)
    n, _, y = verify_tree(p, qc, torch.tensor([[0]]), tree, torch.zeros(1, 1, dtype=torch.float64),
                          torch.zeros(1, dtype=torch.float64))
    assert n.item() == 0 and y.item() == 1


@pytest.mark.parametrize("seed", range(3))
def test_one_chain_pure_step_equals_verify_block(seed):
    g = torch.Generator().manual_seed(seed)
    B, k, V = 3000, 4, 6
    p = torch.softmax(2 * torch.randn(B, k + 1, V, generator=g, dtype=torch.float64), -1)
    q = torch.softmax(2 * torch.randn(B, k, V, generator=g, dtype=torch.float64), -1)
    x = torch.multinomial(q.reshape(-1, V), 1, generator=g).view(B, k)
    u = torch.rand(B, k, generator=g, dtype=torch.float64)
    uf = torch.rand(B, generator=g, dtype=torch.float64)
    n1, y1 = verify_block(p, q, x, u, uf)
    n2, path, y2 = verify_tree(p, q, x, TokenTree.chains(1, k), u, uf)  # qc_j = q_j for one chain
    assert torch.equal(n1, n2) and torch.equal(y1, y2)
    assert torch.equal(path, torch.where(torch.arange(k) < n1.unsqueeze(1), torch.arange(k), -1))


# ------------------------------------------------------------------------- one chain = chain
@pytest.mark.parametrize("tabular", [True, False], ids=["tabular-reference", "generic-reference"])
@pytest.mark.parametrize("replacement", [True, False])
def test_one_chain_sampler_equals_reference_bit_for_bit(tabular, replacement):
    t = random_ngram(6, 3, seed=2)
    d = noisy_draft(t, 0.5)
    prompts = torch.tensor([[1, 2]] * 3000)
    kw = dict(max_new_tokens=9, eos_token_id=4)
    for config in (SamplingConfig(), SamplingConfig(temperature=0.7, top_k=4)):
        ref = SpeculativeSampler(t, d, 3, config, tabular=tabular).generate(
            prompts, generator=torch.Generator().manual_seed(1), **kw)
        out = tree_generate(t, d, prompts, k=3, config=config, n_drafts=1, replacement=replacement,
                            generator=torch.Generator().manual_seed(1), **kw)
        assert torch.equal(ref.tokens, out.tokens) and torch.equal(ref.lengths, out.lengths)
        assert np.array_equal(ref.stats.accepted_hist, out.stats.accepted_hist)


# ------------------------------------------------------------------------ tree model interface
@pytest.mark.parametrize("order", [1, 2, 4])
def test_ngram_forward_tree_equals_sequential_scoring(order):
    m = random_ngram(5, order, seed=order)
    tm = as_tree_model(m)
    assert isinstance(tm, NGramTreeModel)
    prompts = [[1, 2, 3, 4], [0], [2, 2]]  # ragged
    par = torch.tensor([-1, 0, 0, 1, 1, 2, 3, 5])
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 5, (3, par.numel()), generator=g)
    st = tm.prefill(prompts)
    before = st.lengths.clone()
    logits = tm.forward_tree(st, tokens, par)  # (B, T, V)
    assert torch.equal(st.lengths, before)  # nothing committed
    seq = SequentialTreeModel(m)
    st2 = seq.prefill(prompts)
    assert torch.equal(seq.forward_tree(st2, tokens, par), logits)
    for b, pr in enumerate(prompts):  # against a fresh run on prompt[:-1] + path
        for node in range(par.numel()):
            path, a = [], node
            while a >= 0:
                path.insert(0, int(tokens[b, a]))
                a = int(par[a])
            s = m.prefill([pr[:-1] + path[:1]])  # commits the prompt but its last token
            ref = m.forward(s, torch.tensor([path]))  # (1, L, V) sequential scoring of the path
            assert torch.equal(logits[b, node], ref[0, -1])


def test_commit_path_gives_the_state_of_a_fresh_run():
    m = random_ngram(5, 3, seed=7)
    tm = as_tree_model(m)
    prompts = [[1, 2, 3], [4]]
    par = torch.tensor([-1, 0, 0, 1, 2])
    tokens = torch.tensor([[3, 1, 2, 4, 0], [2, 2, 3, 1, 4]])
    st = tm.prefill(prompts)
    tm.forward_tree(st, tokens, par)
    tm.commit_path(st, tokens, torch.tensor([[0, 2, 4], [0, 1, 3]]), torch.tensor([3, 2]))
    nxt = torch.tensor([[1], [0]])
    got = tm.forward(st, nxt)
    for b, path in enumerate(([3, 2, 0], [2, 2])):
        s = m.prefill([prompts[b][:-1] + path + [0]])
        assert torch.equal(got[b, 0], m.forward(s, nxt[b:b + 1])[0, 0])


# ------------------------------------------------------------------------- exact round laws
def test_one_chain_round_law_equals_harness_exact():
    t = random_ngram(5, 2, seed=0)
    d = noisy_draft(t, 0.5)
    ex = ExactRounds(t, d, [0], 8, eos_token_id=3)
    out, _, _ = ExactLaw(t, d, [0], 8, eos_token_id=3).round_kernel(3)
    assert np.abs(ex.chain(3).out - out).max() < 1e-12
    assert np.abs(ex.tree(3, n_drafts=1, replacement=False).out - out).max() < 1e-12


def test_context_free_tree_laws_by_hand():
    """p = (1/3, 2/3), q = (2/3, 1/3), one level with two iid children: accept at child 1 with
    sum min(p, q) = 2/3; else r = (0, 1), child 2 accepted iff it is b: 1/3 -> 2/3 + 1/3 * 1/3 = 7/9.
    Without replacement the two children are {a, b}: always one accepted."""
    t, d = NGramModel(np.array([[1 / 3, 2 / 3]]), 1), NGramModel(np.array([[2 / 3, 1 / 3]]), 1)
    ex = ExactRounds(t, d, [0], 2)
    assert ex.tree(1, n_drafts=2).mean_accepted(0) == pytest.approx(7 / 9, abs=1e-12)
    assert ex.tree(1, n_drafts=2, replacement=False).mean_accepted(0) == pytest.approx(1.0, abs=1e-12)


def test_more_drafts_never_accept_less_and_without_replacement_accepts_more_here():
    t = random_ngram(5, 2, concentration=0.6, seed=0)
    d = noisy_draft(t, 0.5)
    ex = ExactRounds(t, d, [0], 4)
    for c in range(ex.P.shape[0]):
        m = [ex.tree(3, n_drafts=n).mean_accepted(c) for n in (1, 2, 4)]
        w = [ex.tree(3, n_drafts=n, replacement=False).mean_accepted(c) for n in (1, 2, 4)]
        assert m[0] <= m[1] + 1e-12 <= m[2] + 2e-12 and w[1] >= m[1] - 1e-12 and w[2] >= m[2] - 1e-12


# ------------------------------------------------------------------- samplers vs exact laws
TREES = [dict(n_drafts=2), dict(n_drafts=4), dict(n_drafts=2, replacement=False), dict(n_drafts=4, replacement=False),
         dict(tree=TokenTree.from_branching((3, 2, 1))), dict(tree=TokenTree.from_branching((3, 2, 1)), replacement=False)]
IDS = ["iid2", "iid4", "wor2", "wor4", "branch321", "branch321-wor"]


@pytest.mark.parametrize("kw", TREES, ids=IDS)
def test_accepted_per_round_matches_the_exact_law(kw):
    """100,000 iid first rounds (one per sequence) of a V = 5 bigram pair, k = 3: the mean accepted
    drafts (z test) and their histogram (χ²) against the exact round law, each at 1e-6 / 2."""
    t = random_ngram(5, 2, concentration=0.5, seed=0)
    d = noisy_draft(t, 0.5)
    B = 100_000
    out = tree_generate(t, d, torch.zeros(B, 1, dtype=torch.long), k=3, max_new_tokens=1,
                        generator=torch.Generator().manual_seed(17), **kw)
    ex = ExactRounds(t, d, [0], 1)
    law = ex.tree(3, **kw)
    hist = out.stats.accepted_hist
    assert hist.sum() == B
    r = accepted_mean_test(hist, law.hist(ex.start), alpha=ALPHA / 2)
    assert r.pvalue > ALPHA / 2, r
    assert r.min_detectable < 0.03
    assert chi2_gof(hist, law.hist(ex.start), alpha=ALPHA / 2).pvalue > ALPHA / 2


@pytest.mark.parametrize("kw", TREES[:4], ids=IDS[:4])
def test_output_law_chi2(kw):
    """Every position and the joint of 3 tokens against the exact target law (quick_law_check's
    trigram scenario, 40,000 sequences, Bonferroni at 1e-6)."""
    fn = tree_generate_without_replacement if kw.get("replacement") is False else tree_generate
    n = kw["n_drafts"]

    def sampler(*a, **k):
        return fn(*a, n_drafts=n, **k)

    assert quick_law_check(sampler, draws=40_000, seed=23).pvalue > ALPHA


def test_output_law_with_eos_topk_and_ragged_prompts():
    t = random_ngram(5, 3, concentration=0.7, seed=4)
    d = noisy_draft(t, 0.7, seed=5)
    sc = dict(target=t, draft=d, prompt=[1, 2], k=3, max_new_tokens=7, config=SamplingConfig(temperature=0.8, top_k=4),
              eos_token_id=4, joint_tokens=3)
    assert quick_law_check(tree_generate, draws=40_000, seed=29, scenario=sc).pvalue > ALPHA
    out = tree_generate(t, d, [[1, 2], [3], [0, 1, 2, 3]], k=3, max_new_tokens=10, eos_token_id=4, n_drafts=3,
                        generator=torch.Generator().manual_seed(0))
    for row, n in zip(out.tokens.tolist(), out.lengths.tolist()):
        assert all(x == -1 for x in row[n:]) and all(x >= 0 for x in row[:n])
        assert 4 not in row[:n - 1] and (n == 10 or row[n - 1] == 4)


def test_acceptance_statistics_over_a_generation_match_the_exact_law():
    t = random_ngram(5, 2, concentration=0.6, seed=2)
    d = noisy_draft(t, 0.5)
    B, N, k = 40_000, 9, 3
    out = tree_generate(t, d, torch.zeros(B, 1, dtype=torch.long), k=k, max_new_tokens=N, eos_token_id=3, n_drafts=3,
                        generator=torch.Generator().manual_seed(5))
    ex = ExactRounds(t, d, [0], N, eos_token_id=3)
    law = ex.acceptance(ex.tree(k, n_drafts=3))
    per_seq = out.stats.accepted_hist / B
    assert np.all(np.abs(per_seq - law.hist) < 6 * np.sqrt(law.hist * N / B) + 1e-9), (per_seq, law.hist)
    totals = out.stats.totals()
    assert totals["target_calls"] == totals["rounds"] and totals["draft_calls"] == k * totals["rounds"]
    assert totals["drafted"] == 9 * totals["sequence_rounds"]
