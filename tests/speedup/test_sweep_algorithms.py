"""The sweep's `algorithms` suite: algorithm names, the tree cost model, timed tree models, the exact-law
shortcut for block verification on disjoint drafts, and one small sweep end to end (cells, table, report)."""
import json

import numpy as np
import pytest
import torch

from harness.speedup import costmodel as cm
from harness.speedup.costmodel_tree import TimedTreeModel, draft_tokens_per_call, round_seconds, tree_speedup
from harness.laws.rounds import ExactRounds, block_round_law, tree_round_law
from harness.speedup.synthetic import CallCost, VirtualClock, synthetic_pair
from harness.speedup.sweep.algorithms import Algorithm
from specimpl.ngram import disjoint_draft, random_ngram
from specimpl.tree import TokenTree
from specimpl.tree_models import NGramTreeModel


@pytest.mark.parametrize("name, kind, n, rep", [("chain", "chain", 1, True), ("block", "block", 1, True),
                                                ("tree4", "tree", 4, True), ("tree2-wor", "tree", 2, False)])
def test_algorithm_names(name, kind, n, rep):
    a = Algorithm.parse(name)
    assert (a.kind, a.n, a.replacement) == (kind, n, rep)


@pytest.mark.parametrize("bad", ["tree", "tree0", "blocks", "tree2-wr", 3])
def test_algorithm_bad_name(bad):
    with pytest.raises(ValueError, match="algorithms"):
        Algorithm.parse(bad)


def test_draft_tokens_per_call():
    assert draft_tokens_per_call(4, 3, "rescored").tolist() == [1, 5, 9]
    assert draft_tokens_per_call(4, 3, "cached").tolist() == [1, 4, 4]
    assert draft_tokens_per_call(1, 3, "cached").tolist() == [1, 1, 1]  # the reference sampler's chain
    assert draft_tokens_per_call(1, 3, "rescored").tolist() == [1, 2, 3]  # TreeSampler with one chain
    with pytest.raises(ValueError, match="drafting"):
        draft_tokens_per_call(2, 2, "lazy")


@pytest.mark.parametrize("alpha, c, k", [(0.6, 0.05, 4), (0.9, 0.2, 8), (0.3, 0.5, 1)])
def test_tree_speedup_of_one_chain_is_leviathans(alpha, c, k):
    """n = 1, token_slope 0: S = E(alpha, k) / (1 + k c), the analytic model."""
    t = CallCost(0.01)
    s = tree_speedup(float(cm.expected_tokens(alpha, k)), t, t.scaled(c), 1, k)
    assert s == pytest.approx(float(cm.analytic_speedup(alpha, c, k)), rel=1e-12)


def test_round_seconds_counts_the_tree():
    t, d = CallCost(1.0, token_slope=0.5), CallCost(0.1, token_slope=0.5)
    # n = 2, k = 3: the target scores n k + 1 = 7 tokens; the draft rescoring the tree scores 1, 3, 5 tokens
    assert round_seconds(t, d, 2, 3) == pytest.approx(1.0 * (1 + 0.5 * 6) + 0.1 * (1 + (1 + 0.5 * 2) + (1 + 0.5 * 4)))
    assert round_seconds(t, d, 2, 3, drafting="cached") == pytest.approx(4.0 + 0.1 * (1 + 2 * (1 + 0.5 * 1)))


def test_timed_tree_model_charges_forward_tree_and_not_commit():
    clock = VirtualClock()
    target, _, ptab, _ = synthetic_pair(0.5, 0.2, CallCost(0.01, token_slope=0.1), 16, 4, seed=0, clock=clock)
    tm = TimedTreeModel(target)
    st = tm.prefill([[1, 2, 3]] * 2)
    tree = TokenTree.chains(2, 3)
    tokens = torch.randint(0, 16, (2, 1 + tree.n_nodes), generator=torch.Generator().manual_seed(0))
    ref = NGramTreeModel(ptab).forward_tree(st, tokens, tree.parents_ext)
    t0 = clock.now()
    got = tm.forward_tree(st, tokens, tree.parents_ext)
    assert clock.now() - t0 == pytest.approx(0.01 * (1 + 0.1 * tree.n_nodes))
    assert torch.equal(got, ref)
    t1 = clock.now()
    tm.commit_path(st, tokens, torch.tensor([[0, 1, 3, 5]] * 2), torch.tensor([4, 2]))
    assert clock.now() == t1
    assert st.lengths.tolist() == [2 + 4, 2 + 2]


def test_block_equals_token_level_on_disjoint_drafts():
    """On a disjoint-support draft w_i is 0 or 1, so block verification makes the token-level decisions:
    the exact round laws agree (the suite uses the token-level law where blocks are too many to enumerate)."""
    p = random_ngram(8, 2, 0.5, support=3, seed=4)
    q = disjoint_draft(p, 0.6, seed=5)
    ex = ExactRounds(p, q, [0], 12)
    for k in (1, 2, 3):
        blk = block_round_law(ex.P, ex.Q, ex.nxt, k)
        chain = tree_round_law(ex.P, ex.Q, ex.nxt, TokenTree.chains(1, k))
        assert np.abs(blk.out - chain.out).max() < 1e-12


def test_block_differs_from_token_level_off_disjoint_drafts():
    """The shortcut is only taken for disjoint drafts: on a noisy draft the laws differ (block accepts more)."""
    from specimpl.ngram import noisy_draft
    p = random_ngram(6, 2, 0.5, seed=4)
    ex = ExactRounds(p, noisy_draft(p, 0.5, seed=5), [0], 12)
    assert ex.block(3).mean_accepted(ex.start) > ex.chain(3).mean_accepted(ex.start) + 1e-3
    assert Algorithm.parse("block").exact_law(ex, 9)[0] is None  # C V^k too large: no law, said why


SMALL = {"suites": ["algorithms"], "algorithms": {
    "algorithms": ["chain", "block", "tree2"], "k": [1, 3], "scenarios": ["base"], "sequences": 400, "chunks": 4,
    "alpha": [0.7], "c": [0.1], "target_ms": 0.2, "count_sequences": 300, "drafts": [], "repeats": 1,
    "max_new_tokens": 12, "prompt_len": 4}}


def test_small_sweep_end_to_end(tmp_path):
    from harness.speedup.report.cli import make_report
    from harness.speedup.sweep.cli import finalize, load_config, plan, run_cell, store_cell
    from harness.speedup.sweep.algorithms import algorithms_table
    cfg = load_config(None, SMALL)
    cells = plan(cfg)
    assert [c.params.kind for c in cells] == ["scenario", "synthetic"]
    for cell in cells:
        store_cell(tmp_path, cell, run_cell(cell, cfg))
    finalize(tmp_path, cfg, cells)
    t = algorithms_table(tmp_path, json.loads((tmp_path / "meta.json").read_text()))
    assert len(t) == 3 + 3 * 2  # scenario: one row per algorithm at its k; synthetic: algorithms x k
    syn = t[t.kind == "synthetic"]
    assert (syn.speedup > 0).all() and syn.exact_method.notna().all()
    # the untimed count run against the exact law (deterministic: seeded); tree2 above chain
    assert np.allclose(syn.count_tokens_per_call, syn.exact_tokens_per_call, atol=0.15)
    e = syn.set_index(["algorithm", "k"]).exact_tokens_per_call
    assert e["tree2", 3] > e["chain", 3] and e["block", 3] == pytest.approx(e["chain", 3])
    written = make_report(tmp_path, formats=("png",))
    assert {"algorithms_tokens_per_call", "algorithms_speedup", "algorithms"} <= set(written)
    md = (tmp_path / "figures" / "algorithms.md").read_text()
    assert "| base | 4 | block |" in md


def test_default_plan_has_the_suite():
    from harness.speedup.sweep.cli import load_config, plan
    from harness.speedup.sweep.suites import SUITES
    assert "algorithms" in SUITES
    cfg = load_config()
    cells = [c for c in plan(cfg) if c.suite == "algorithms"]
    t = cfg["algorithms"]
    assert len(cells) == len(t["scenarios"]) + len(t["alpha"]) * len(t["c"]) + len(t["drafts"])
    assert len({c.id for c in cells}) == len(cells)


def test_bad_table_is_one_clear_error():
    from harness.speedup.sweep.cli import load_config
    with pytest.raises(ValueError, match="algorithms"):
        load_config(None, {"algorithms": {"algorithms": ["chain", "trees"]}})
