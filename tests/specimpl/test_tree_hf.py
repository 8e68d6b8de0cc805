"""Tree attention for Hugging Face models (specimpl.hf_tree): one forward over a token tree gives, for
every node, the logits of a sequential forward along that node's path; committing a path leaves the
cache of a fresh run over it; greedy tree sampling equals greedy target-only decoding.  Nothing is
downloaded (the shipped tiny pair, random tiny models)."""
from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from specimpl import SamplingConfig  # noqa: E402
from specimpl.autoregressive import autoregressive_generate  # noqa: E402
from specimpl.hf import HFModel, load_tiny_pair, tiny_pair_prompts  # noqa: E402
from specimpl.hf_tree import HFTreeModel  # noqa: E402
from specimpl.tree import TokenTree, tree_generate  # noqa: E402
from specimpl.tree_adapters import as_tree_model  # noqa: E402
from specimpl.tree_models import tree_structure  # noqa: E402

# float32 weights; logits compared in the wrapper's float64.  One tree forward and the sequential path forwards
# sum in different orders: measured worst |difference| 1.14e-5 on an AVX-512 (avx512_fp16) CPU, under 1e-5 on the
# AVX2 machines this was first written on.  Attending to one wrong token moves the logits by ~1 (measured: a path
# differing in one ancestor, max |Δlogit| 0.99), four orders above this tolerance.
ATOL = 5e-5


@pytest.fixture(scope="module")
def pair():
    return load_tiny_pair()


def _random_model(kind: str):
    torch.manual_seed(0)
    if kind == "gpt2":  # learned absolute positions: position_ids must be prefix length + depth
        from transformers import GPT2Config, GPT2LMHeadModel
        m = GPT2LMHeadModel(GPT2Config(vocab_size=40, n_embd=32, n_layer=2, n_head=4, n_positions=128))
    else:  # a sliding window shorter than prompt + tree: the window is applied by position
        from transformers import MistralConfig, MistralForCausalLM
        m = MistralForCausalLM(MistralConfig(vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                             num_attention_heads=4, num_key_value_heads=2, sliding_window=4,
                                             max_position_embeddings=128))
    return HFModel(m.eval(), name=kind)


def _check_tree_logits(model: HFModel, prompts, parents, seed=0):
    tm = as_tree_model(model)
    assert isinstance(tm, HFTreeModel)
    par = torch.as_tensor(parents)
    T = par.numel()
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, min(model.vocab_size, 256), (len(prompts), T), generator=g)
    st = tm.prefill(prompts)
    before = st.lengths.clone()
    got = tm.forward_tree(st, tokens, par)  # (B, T, V)
    assert torch.equal(st.lengths, before)
    _, anc = tree_structure(par)
    worst = 0.0
    for b, pr in enumerate(prompts):
        for t in range(T):
            s = model.prefill([pr])
            ref = model.forward(s, tokens[b:b + 1, anc[t].nonzero().squeeze(1)])  # the path, sequentially
            worst = max(worst, float((got[b, t] - ref[0, -1]).abs().max()))
    assert worst < ATOL, worst
    return tm, st, tokens


@pytest.mark.parametrize("batch", [1, 3])
def test_tiny_pair_tree_logits_equal_sequential_paths(pair, batch):
    target, _ = pair
    prompts = tiny_pair_prompts(batch, 20, seed=1, min_length=6)  # ragged when batch > 1
    parents = TokenTree.from_branching((3, 2, 1)).parents_ext  # root = pending token + 15 nodes
    _check_tree_logits(target, [p[:-1] for p in prompts], parents)


@pytest.mark.parametrize("kind", ["gpt2", "mistral-sliding-window"])
def test_random_models_tree_logits(kind):
    m = _random_model(kind)
    _check_tree_logits(m, [[1, 2, 3, 4, 5, 6, 7], [8, 9]], [-1, 0, 0, 1, 2, 2, 3, 4, 6])


def test_commit_path_equals_a_fresh_run(pair):
    target, _ = pair
    prompts = [p[:-1] for p in tiny_pair_prompts(2, 16, seed=2, min_length=8)]
    par = [-1, 0, 0, 1, 2, 4]
    tm, st, tokens = _check_tree_logits(target, prompts, par)
    path = torch.tensor([[0, 2, 4, 5], [0, 1, 3, 3]])
    n = torch.tensor([4, 3])
    tm.commit_path(st, tokens, path, n)
    nxt = torch.tensor([[65], [66]])
    got = tm.forward(st, nxt)
    for b in range(2):
        s = target.prefill([prompts[b]])
        ref = target.forward(s, torch.cat([tokens[b, path[b, :n[b]]], nxt[b]]).unsqueeze(0))
        assert float((got[b, 0] - ref[0, -1]).abs().max()) < ATOL


@pytest.mark.parametrize("kw", [dict(n_drafts=3), dict(tree=TokenTree.from_branching((2, 2, 1)), replacement=False)],
                         ids=["iid3", "branch221-wor"])
def test_greedy_tree_sampling_equals_greedy_decoding(pair, kw):
    target, draft = pair
    prompts = tiny_pair_prompts(3, 24, seed=3, min_length=10)
    greedy = SamplingConfig(greedy=True)
    eos = target.config.eos_token_id  # the tiny pair's config names one id
    ref = autoregressive_generate(target, prompts, max_new_tokens=20, config=greedy, eos_token_id=eos)
    out = tree_generate(target, draft, prompts, k=3, max_new_tokens=20, config=greedy,
                        eos_token_id=eos, generator=torch.Generator().manual_seed(0), **kw)
    assert torch.equal(out.tokens, ref.tokens)
    assert out.stats.totals()["target_calls"] < 20  # several tokens per target call
