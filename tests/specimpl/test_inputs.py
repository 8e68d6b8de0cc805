"""Argument checks shared by the samplers (specimpl.inputs, specimpl.model, specimpl.sampling) and the
finiteness check of the warped laws: bad input is refused with a message naming the argument, good
input of an unusual type (np.int64, uint8 tensors) gives the same draws as plain ints."""
import math
import os
import re

import numpy as np
import pytest
import torch

from specimpl import (LanguageModel, SamplingConfig, autoregressive_generate, noisy_draft, random_ngram,
                      speculative_generate, verify_block_checked)
from specimpl.block import block_generate
from specimpl.inputs import LogitsShapeError, NonFiniteLawError, check_finite_laws
from specimpl.sampling import MIN_TEMPERATURE, warp
from specimpl.speculative import SpeculativeSampler
from specimpl.tree import tree_generate

T8 = random_ngram(8, 2, seed=0)
D8 = noisy_draft(T8, 0.5)
PATHS = [True, False]
PATH_IDS = ["tabular", "generic"]


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


class Poisoned(LanguageModel):
    """``inner``'s logits with ``poison(logits, tokens)`` applied: a model on the generic path."""

    def __init__(self, inner, poison):
        self.inner, self.poison = inner, poison
        self.vocab_size, self.dtype, self.name = inner.vocab_size, inner.dtype, "poisoned"

    def prefill(self, prompts):
        return self.inner.prefill(prompts)

    def forward(self, state, tokens, n_new=None):
        return self.poison(self.inner.forward(state, tokens, n_new).clone(), tokens)

    def rollback(self, state, lengths):
        return self.inner.rollback(state, lengths)

    def select(self, state, index):
        return self.inner.select(state, index)


def _nan_after_3(logits, tokens):
    logits[tokens == 3] = float("nan")
    return logits


def _plus_inf_after_3(logits, tokens):
    logits[..., 2][tokens == 3] = float("inf")
    return logits


def _row_minus_inf_after_5(logits, tokens):
    logits[tokens == 5] = float("-inf")
    return logits


PROMPTS = [[0], [3], [5]] * 10  # 3 and 5 as the last prompt token: poisoned from the first target call on
POISONS = {"nan": _nan_after_3, "+inf": _plus_inf_after_3, "row -inf": _row_minus_inf_after_5}


# --------------------------------------------------------------------------- non-finite laws
@pytest.mark.parametrize("poison", list(POISONS))
@pytest.mark.parametrize("config", [SamplingConfig(), SamplingConfig(temperature=0.7, top_k=4), SamplingConfig(greedy=True)],
                         ids=["T1", "T0.7-topk", "greedy"])
def test_non_finite_target_logits_raise_in_both_samplers(poison, config):
    tp = Poisoned(T8, POISONS[poison])
    with pytest.raises(ValueError, match=r"the target's warped next-token law is not finite .* round \d+, row \d+, "
                                         r"position \d"):
        speculative_generate(tp, D8, PROMPTS, k=4, max_new_tokens=8, config=config, generator=gen())
    with pytest.raises(ValueError, match=r"the target's warped next-token law is not finite .* step \d+, row \d+"):
        autoregressive_generate(tp, PROMPTS, max_new_tokens=8, config=config, generator=gen())


@pytest.mark.parametrize("poison", list(POISONS))
@pytest.mark.parametrize("who", ["target", "draft"])
def test_non_finite_logits_raise_in_tree_and_block_generate(poison, who):
    """The tree sampler checks its warped laws each round as the chain sampler does (it used to emit a row of
    the last token id); block_generate shares the chain loop's check."""
    tp = Poisoned(T8, POISONS[poison]) if who == "target" else T8
    dp = Poisoned(D8, POISONS[poison]) if who == "draft" else D8
    for fn in (tree_generate, block_generate):
        with pytest.raises(NonFiniteLawError, match=rf"the {who}'s warped next-token law is not finite .* round 1, row"):
            fn(tp, dp, PROMPTS, k=2, max_new_tokens=8, generator=gen())


def _columns(delta):
    """A poison giving the logits V + delta columns (a model whose head disagrees with its vocab_size)."""
    def poison(logits, tokens):
        return torch.cat([logits, logits[..., :delta]], -1) if delta > 0 else logits[..., :delta]
    return poison


@pytest.mark.parametrize("delta", [1, -1], ids=["V+1", "V-1"])
@pytest.mark.parametrize("who", ["target", "draft"])
@pytest.mark.parametrize("fn", ["autoregressive", "speculative", "block", "tree"])
def test_logits_of_the_wrong_width_are_one_clear_error(fn, who, delta):
    if fn == "autoregressive" and who == "draft":
        pytest.skip("no draft")
    tp = Poisoned(T8, _columns(delta)) if who == "target" else T8
    dp = Poisoned(D8, _columns(delta)) if who == "draft" else D8
    kw = dict(max_new_tokens=8, generator=gen())
    call = {"autoregressive": lambda: autoregressive_generate(tp, PROMPTS, **kw),
            "speculative": lambda: speculative_generate(tp, dp, PROMPTS, k=2, **kw),
            "block": lambda: block_generate(tp, dp, PROMPTS, k=2, **kw),
            "tree": lambda: tree_generate(tp, dp, PROMPTS, k=2, **kw)}[fn]
    with pytest.raises(LogitsShapeError, match=rf"the {who} model 'poisoned' returned logits with {8 + delta} columns "
                                               r"at (step|round|depth) 1, but its vocab_size is 8"):
        call()


def test_non_finite_draft_logits_name_the_draft():
    dp = Poisoned(D8, _nan_after_3)
    with pytest.raises(NonFiniteLawError, match="the draft's warped"):
        speculative_generate(T8, dp, PROMPTS, k=4, max_new_tokens=8, generator=gen())


def test_the_error_names_the_first_bad_row_and_position():
    laws = torch.full((3, 5, 4), 0.25)
    laws[2, 3, 1] = float("nan")
    with pytest.raises(NonFiniteLawError, match="at round 7, row 2, position 4:"):
        check_finite_laws("target", laws, "round 7", SamplingConfig())
    check_finite_laws("target", torch.full((3, 4), 0.25), "step 1", SamplingConfig())  # finite: no error


@pytest.mark.parametrize("tabular", PATHS, ids=PATH_IDS)
def test_non_finite_table_raises_on_the_tabular_and_the_generic_path(tabular):
    t = random_ngram(8, 2, seed=0)
    t.logtable[3] = float("nan")  # the tabular loops check their warped tables once, up front
    with pytest.raises(NonFiniteLawError, match="the target's warped"):
        SpeculativeSampler(t, D8, 4, tabular=tabular).generate([[3]] * 10, 8, None, gen())
    with pytest.raises(NonFiniteLawError, match="the target's warped"):
        autoregressive_generate(t, [[3]] * 10, max_new_tokens=8, generator=gen(), tabular=tabular)


def test_greedy_warp_of_a_bad_row_is_nan_and_of_a_good_row_one_hot():
    logits = torch.tensor([[0.0, 2.0, 1.0], [0.0, float("nan"), 1.0], [float("-inf")] * 3, [0.0, float("inf"), 1.0]])
    p = warp(logits, SamplingConfig(greedy=True))
    assert p[0].tolist() == [0.0, 1.0, 0.0]
    assert not bool(torch.isfinite(p[1:]).all(1).any())


@pytest.mark.parametrize("tabular", PATHS, ids=PATH_IDS)
def test_the_check_consumes_no_randomness(tabular):
    on = SpeculativeSampler(T8, D8, 3, tabular=tabular)
    off = SpeculativeSampler(T8, D8, 3, tabular=tabular)
    off.check_finite = False
    a, b = on.generate([[0]] * 64, 12, None, gen(5)), off.generate([[0]] * 64, 12, None, gen(5))
    assert torch.equal(a.tokens, b.tokens)
    r1 = autoregressive_generate(T8, [[0]] * 64, max_new_tokens=12, generator=gen(5), tabular=False)
    r2 = autoregressive_generate(T8, [[0]] * 64, max_new_tokens=12, generator=gen(5), tabular=False, check_finite=False)
    assert torch.equal(r1.tokens, r2.tokens)


# --------------------------------------------------------------------------- temperature
@pytest.mark.parametrize("t", [1e-39, 1e-7, -0.1, float("nan"), float("inf"), True])
def test_temperature_below_the_bound_is_refused(t):
    with pytest.raises(ValueError, match="`temperature` must be 0 .greedy. or a finite number >= 1e-06"):
        SamplingConfig(temperature=t)


@pytest.mark.parametrize("tabular", PATHS, ids=PATH_IDS)
def test_smallest_temperature_gives_the_greedy_output(tabular):
    cold = SpeculativeSampler(T8, D8, 4, SamplingConfig(temperature=MIN_TEMPERATURE), tabular=tabular)
    greedy = SpeculativeSampler(T8, D8, 4, SamplingConfig(greedy=True), tabular=tabular)
    a, b = cold.generate([[0]] * 20, 8, None, gen(1)), greedy.generate([[0]] * 20, 8, None, gen(2))
    assert torch.equal(a.tokens, b.tokens)


def test_numpy_scalars_in_the_config_become_python_numbers():
    c = SamplingConfig(temperature=np.float32(0.5), top_k=np.int64(3), top_p=np.float64(0.9), greedy=np.bool_(False))
    assert c == SamplingConfig(temperature=0.5, top_k=3, top_p=0.9)
    assert type(c.top_k) is int and type(c.temperature) is float and type(c.greedy) is bool
    for bad in (dict(top_k=3.0), dict(top_k=True), dict(top_p="0.5")):
        with pytest.raises(ValueError, match=f"`{next(iter(bad))}`"):
            SamplingConfig(**bad)


# --------------------------------------------------------------------------- integer-like scalars
@pytest.mark.parametrize("tabular", PATHS, ids=PATH_IDS)
@pytest.mark.parametrize("conv", [np.int64, np.int32, np.uint8, torch.tensor], ids=["np.int64", "np.int32", "np.uint8",
                                                                                  "0-d tensor"])
def test_integer_like_scalars_give_the_same_draws(conv, tabular):
    ref = SpeculativeSampler(T8, D8, 4, tabular=tabular).generate([[0]] * 30, 9, 2, gen(3))
    got = SpeculativeSampler(T8, D8, conv(4), tabular=tabular).generate([[0]] * 30, conv(9), conv(2), gen(3))
    assert torch.equal(ref.tokens, got.tokens) and torch.equal(ref.lengths, got.lengths)
    ar = autoregressive_generate(T8, [[0]] * 30, max_new_tokens=conv(9), eos_token_id=conv(2), generator=gen(3),
                                 tabular=tabular)
    assert ar.tokens.shape == (30, 9)


@pytest.mark.parametrize("name,value", [("k", 4.0), ("k", True), ("k", np.float64(4)), ("max_new_tokens", 2.5),
                                        ("max_new_tokens", torch.tensor([4])), ("eos_token_id", 1.0)])
def test_non_integer_scalars_are_refused(name, value):
    kw = dict(k=4, max_new_tokens=4, eos_token_id=None)
    kw[name] = value
    with pytest.raises(ValueError, match=f"`{name}` must be"):
        speculative_generate(T8, D8, [[0]], generator=gen(), **kw)


@pytest.mark.parametrize("bad", [7, "seed", np.random.default_rng(0)])
def test_generator_must_be_a_torch_generator(bad):
    with pytest.raises(TypeError, match="`generator` must be None or a torch.Generator"):
        speculative_generate(T8, D8, [[0]], k=4, max_new_tokens=4, generator=bad)
    with pytest.raises(TypeError, match="`generator` must be None or a torch.Generator"):
        autoregressive_generate(T8, [[0]], max_new_tokens=4, generator=bad)


# --------------------------------------------------------------------------- prompts
@pytest.mark.parametrize("prompts", [[[0.7]], [[1, 2.0]], [[np.float64(1)]], [["3"]], [[True]], [torch.tensor([0.5])],
                                     torch.tensor([[0.5]]), torch.tensor([[True]])])
@pytest.mark.parametrize("tabular", PATHS, ids=PATH_IDS)
def test_non_integer_prompt_tokens_are_refused(prompts, tabular):
    with pytest.raises(ValueError, match="`prompts"):
        SpeculativeSampler(T8, D8, 4, tabular=tabular).generate(prompts, 4, None, gen())


@pytest.mark.parametrize("tabular", PATHS, ids=PATH_IDS)
def test_integer_like_prompt_tokens_give_the_same_draws(tabular):
    s = SpeculativeSampler(T8, D8, 3, tabular=tabular)
    ref = s.generate([[1, 2], [3]], 6, None, gen(4)).tokens
    for prompts in ([[np.int64(1), np.int8(2)], [torch.tensor(3)]], [torch.tensor([1, 2]), np.array([3])],
                    ((1, 2), (3,))):
        assert torch.equal(s.generate(prompts, 6, None, gen(4)).tokens, ref)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32])
@pytest.mark.parametrize("tabular", PATHS, ids=PATH_IDS)
def test_small_integer_dtypes_are_accepted(dtype, tabular):
    t, d = random_ngram(300, 1, seed=0), random_ngram(300, 1, seed=1)
    ids = [[127, 5], [0, 100]] if dtype == torch.int8 else [[255, 5], [0, 200]]
    ref = SpeculativeSampler(t, d, 2, tabular=tabular).generate(torch.tensor(ids), 4, None, gen(6))
    got = SpeculativeSampler(t, d, 2, tabular=tabular).generate(torch.tensor(ids, dtype=dtype), 4, None, gen(6))
    assert torch.equal(ref.tokens, got.tokens)


def test_negative_ids_of_a_small_dtype_are_quoted_as_they_are():
    with pytest.raises(ValueError, match=r"`prompts\[1\]` must be token ids in \[0, 8\); got \[-1\]"):
        speculative_generate(T8, D8, torch.tensor([[1], [-1]], dtype=torch.int8), k=2, max_new_tokens=2,
                             generator=gen())


# --------------------------------------------------------------------------- verify_block_checked
def test_verify_block_checked_names_p_when_its_columns_differ_from_q():
    B, k, V = 2, 4, 8
    p = torch.softmax(torch.randn(B, k + 1, V - 1, generator=gen()), -1)
    q = torch.softmax(torch.randn(B, k, V, generator=gen()), -1)
    x = torch.randint(0, V, (B, k), generator=gen())
    with pytest.raises(ValueError, match=r"`p` and `q` must have the same number of columns .*\(V = 7\).*\(V = 8\)"):
        verify_block_checked(p, q, x, torch.rand(B, k), torch.rand(B))


# --------------------------------------------------------------------------- model loading
def test_empty_model_directory_names_the_path_and_config_json(tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    from specimpl.hf import HFModel, load_pair
    monkeypatch.chdir(tmp_path)
    os.mkdir("empty_model")
    for call in (lambda: load_pair("empty_model", "empty_model"), lambda: HFModel.from_pretrained("empty_model")):
        with pytest.raises(FileNotFoundError, match="'empty_model' is a directory without config.json"):
            call()


@pytest.mark.parametrize("path", ["./no_such_dir/model", "models/targt", "../nope/x", "~/no/such/model"])
def test_local_path_typos_are_not_tried_on_the_hub(path, tmp_path, monkeypatch):
    transformers = pytest.importorskip("transformers")
    from specimpl.hf import load_pair

    def hub(*args, **kwargs):
        raise AssertionError(f"{args[0]!r} was looked up as a hub id")

    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", hub)
    monkeypatch.chdir(tmp_path)
    os.mkdir("models")
    with pytest.raises(FileNotFoundError, match=f"got {path!r}: no such directory"):
        load_pair(path, path)


def test_model_names_carry_no_absolute_directory(monkeypatch, tmp_path):
    pytest.importorskip("transformers")
    from specimpl.hf import load_tiny_pair, portable_name
    assert portable_name("HuggingFaceTB/SmolLM2-135M") == "HuggingFaceTB/SmolLM2-135M"
    assert portable_name("/ckpt/runs/big") == "runs/big"
    monkeypatch.chdir(tmp_path)
    os.mkdir("models")
    assert portable_name("./models/../models/big") == "models/big"
    target, draft = load_tiny_pair()
    assert (target.name, draft.name) == ("tiny_pair/target", "tiny_pair/draft")
    assert not math.isnan(float(target.vocab_size))


def test_the_whole_batch_prompt_check_equals_the_row_by_row_one():
    """A batch of int lists is checked in one pass (:func:`specimpl.model._int_lists`); it returns what the
    row-by-row checks return, and anything else falls to them (the same error, naming the same row)."""
    from specimpl.model import _int_lists, _token_row, as_prompt_list
    g = np.random.default_rng(0)
    for _ in range(5):
        prompts = [g.integers(0, 50, g.integers(1, 9)).tolist() for _ in range(int(g.integers(1, 40)))]
        fast = as_prompt_list(prompts, 50)
        assert fast == [_token_row(p, i) for i, p in enumerate(prompts)]
        assert all(a is not b for a, b in zip(fast, prompts))  # copies, as before
    for bad, where in (([[1, 2], [3, True]], "prompts[1][1]"), ([[1], [2.0]], "prompts[1][0]"),
                       ([[1], []], "prompts[1]"), ([[1, 50]], "prompts[0]"), ([[-1]], "prompts[0]")):
        assert _int_lists(bad, 50) is None
        with pytest.raises(ValueError, match=re.escape(f"`{where}`")):
            as_prompt_list(bad, 50)
    assert _int_lists([(1, 2)], 50) is None and as_prompt_list([(1, 2)], 50) == [[1, 2]]  # tuples: row by row
