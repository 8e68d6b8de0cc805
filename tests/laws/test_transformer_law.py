"""Tests of the exact transformer-law enumerator (harness/laws/transformer.py) on the exact pairs in
specimpl/assets/exact_pair (built by experiments/build_exact_pair.py).

(a) brute force: every full sequence scored from scratch (no KV cache, no batching, a separate model copy);
(b) transformers' own float64 scoring of sampled sequences in one batched forward;
(c) normalisation and consistency of joint, marginals and pairs (and the chunked path);
(d) the Markov pair: transition-matrix law == general enumerator;
(e) Monte Carlo: specimpl's autoregressive sampler in float64 against the enumerated law (chi-square);
(f) the float32-vs-float64 numerics floor.
"""
from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
import scipy.stats
import torch

import specimpl
from specimpl.autoregressive import autoregressive_generate
from specimpl.hf import HFModel
from specimpl.sampling import SamplingConfig, warp
from harness.laws.transformer import (check_markov, entropy_per_position, enumerate_law, exact_acceptance,
                             joint_from_conditionals, load_model, marginals_from_joint, markov_initial,
                             markov_joint_at, markov_law, markov_marginal, numerics_floor, prefix_conditionals,
                             transition_matrix)

ASSETS = Path(specimpl.__file__).resolve().parent / "assets" / "exact_pair"
TARGET, DRAFT = ASSETS / "target", ASSETS / "draft"
MARKOV, MARKOV_DRAFT = ASSETS / "markov_target", ASSETS / "markov_draft"
V = 16
BOS = 13
PROMPTS = [[BOS], [BOS, 0, 1, 2], [BOS, 5, 7, 7, 3, 1, 9, 12]]
WARPED = SamplingConfig(temperature=0.8, top_k=10, top_p=0.95)

pytestmark = pytest.mark.skipif(not (TARGET / "model.safetensors").exists(),
                                reason="run experiments/build_exact_pair.py to build specimpl/assets/exact_pair")


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def target64():
    return load_model(TARGET)


@pytest.fixture(scope="module")
def target64_fresh():
    """A second, independently loaded float64 copy: the reference scorers share no state with the enumerator.
    (Not eager attention: transformers' eager path takes its softmax in float32.)"""
    return load_model(TARGET)


def tokens_of(index: np.ndarray, J: int) -> np.ndarray:
    """Flat joint indices (n,) -> token rows (n, J), x_0 the most significant base-V digit."""
    return np.stack(np.unravel_index(index, (V,) * J), axis=1)


@torch.no_grad()
def score_from_scratch(model, prompt: list, seq: tuple, config: SamplingConfig) -> float:
    """Probability of one generated sequence: one forward of prompt + seq[:-1], no cache, batch 1."""
    ids = torch.tensor([list(prompt) + list(seq[:-1])])  # (1, P + J - 1)
    logits = model(input_ids=ids, use_cache=False).logits[0, len(prompt) - 1:]  # (J, V)
    p = warp(logits, config)  # (J, V)
    return float(np.prod([float(p[t, x]) for t, x in enumerate(seq)]))


# ---------------------------------------------------------------------------------------------
# (a) brute force
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("prompt_index, J, config", [(0, 2, SamplingConfig()), (2, 2, WARPED), (1, 3, WARPED)])
def test_agrees_with_brute_force(target64, target64_fresh, prompt_index, J, config):
    prompt = PROMPTS[prompt_index]
    law = enumerate_law(target64, [prompt], J, config)
    brute = np.array([score_from_scratch(target64_fresh, prompt, seq, config)
                      for seq in itertools.product(range(V), repeat=J)])  # (V**J,) row-major
    assert np.abs(law.joint[0] - brute).max() <= 1e-12


# ---------------------------------------------------------------------------------------------
# (b) transformers' float64 scoring of sampled full sequences
# ---------------------------------------------------------------------------------------------
@torch.no_grad()
def test_agrees_with_hf_scoring_of_sampled_sequences(target64, target64_fresh):
    J, n = 4, 300
    prompt = PROMPTS[1]
    law = enumerate_law(target64, [prompt], J, WARPED)
    rng = np.random.default_rng(0)
    idx = rng.choice(V ** J, size=n, p=law.joint[0])  # (n,)
    seqs = tokens_of(idx, J)  # (n, J)
    ids = torch.cat([torch.tensor([prompt]).expand(n, -1), torch.from_numpy(seqs[:, :-1])], 1)  # (n, P + J - 1)
    logits = target64_fresh(input_ids=ids).logits[:, len(prompt) - 1:]  # (n, J, V) float64
    assert logits.dtype == torch.float64
    p = warp(logits, WARPED).gather(2, torch.from_numpy(seqs).unsqueeze(2)).squeeze(2)  # (n, J)
    prob = p.prod(1).numpy()  # (n,)
    np.testing.assert_allclose(law.joint[0, idx], prob, rtol=1e-10, atol=1e-15)


# ---------------------------------------------------------------------------------------------
# (c) normalisation, marginals, pairs, chunking
# ---------------------------------------------------------------------------------------------
def test_joint_marginals_pairs_consistent(target64):
    J = 4
    law = enumerate_law(target64, PROMPTS, J, WARPED)
    assert law.joint.shape == (len(PROMPTS), V ** J) and law.joint.dtype == np.float64
    assert (law.joint >= 0).all()
    np.testing.assert_allclose(law.joint.sum(1), 1.0, rtol=0, atol=1e-12)
    for i in range(len(PROMPTS)):
        np.testing.assert_allclose(law.marginals[i], marginals_from_joint(law.joint[i], V, J), atol=1e-15)
        levels = prefix_conditionals(target64, PROMPTS[i], 1, WARPED)
        np.testing.assert_allclose(law.marginals[i, 0], levels[0][0], atol=1e-15)
        for t in range(J - 1):
            pair = law.pairs[i, t].reshape(V, V)
            np.testing.assert_allclose(pair.sum(1), law.marginals[i, t], atol=1e-14)
            np.testing.assert_allclose(pair.sum(0), law.marginals[i, t + 1], atol=1e-14)
    np.testing.assert_allclose(law.marginals.sum(2), 1.0, atol=1e-12)


def test_chunked_levels_equal_one_batch(target64):
    prompt = PROMPTS[2]
    whole = joint_from_conditionals(prefix_conditionals(target64, prompt, 4, WARPED))
    chunked = joint_from_conditionals(prefix_conditionals(target64, prompt, 4, WARPED, max_batch=48))
    assert np.abs(whole - chunked).max() <= 1e-15


def test_accepts_paths_hfmodels_and_leaves_a_float32_model_alone():
    hf = HFModel.from_pretrained(TARGET, dtype=torch.float32, load_tokenizer=False)
    a = enumerate_law(hf, [PROMPTS[1]], 2)
    b = enumerate_law(TARGET, [PROMPTS[1]], 2)
    assert next(hf.model.parameters()).dtype == torch.float32  # copied, not cast in place
    assert np.abs(a.joint - b.joint).max() <= 1e-15


def test_arguments_are_checked(target64):
    with pytest.raises(ValueError, match="`n_tokens`.*got 0"):
        enumerate_law(target64, PROMPTS, 0)
    with pytest.raises(ValueError, match="`n_tokens`.*max_cells"):
        enumerate_law(target64, PROMPTS, 6)
    with pytest.raises(ValueError, match="`config`"):
        enumerate_law(target64, PROMPTS, 2, config={"temperature": 1})
    with pytest.raises(ValueError, match=r"`prompts\[0\]`.*\[16\]"):
        enumerate_law(target64, [[13, 16]], 2)
    with pytest.raises(ValueError, match="`model`"):
        enumerate_law(3.5, PROMPTS, 2)
    with pytest.raises(ValueError, match="`attn_implementation`.*'eager'"):
        load_model(TARGET, attn_implementation="eager")


# ---------------------------------------------------------------------------------------------
# (d) the Markov pair
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("config", [SamplingConfig(), WARPED])
def test_markov_law_equals_enumerated_law(config):
    J = 3
    general = enumerate_law(MARKOV, PROMPTS, J, config)
    chain = markov_law(MARKOV, PROMPTS, J, config)
    assert np.abs(general.joint - chain.joint).max() <= 1e-12
    P = transition_matrix(MARKOV, config)
    np.testing.assert_allclose(P.sum(1), 1.0, atol=1e-12)
    np.testing.assert_allclose(markov_initial(P, PROMPTS), general.marginals[:, 0], atol=1e-12)
    for t in range(J):
        np.testing.assert_allclose(markov_marginal(P, PROMPTS, t), general.marginals[:, t], atol=1e-12)


def test_markov_joint_at_an_offset_equals_the_enumerated_pairs():
    general = enumerate_law(MARKOV, PROMPTS, 3, WARPED)
    P = transition_matrix(MARKOV, WARPED)
    np.testing.assert_allclose(markov_joint_at(P, PROMPTS, 1, 2), general.pairs[:, 1], atol=1e-12)
    late = markov_law(MARKOV, PROMPTS, 2, WARPED, offset=40)
    np.testing.assert_allclose(late.marginals[:, 0], markov_marginal(P, PROMPTS, 40), atol=1e-12)
    np.testing.assert_allclose(late.marginals[:, 1], markov_marginal(P, PROMPTS, 41), atol=1e-12)


def test_markov_marginal_far_out_matches_the_chain():
    P = transition_matrix(MARKOV)
    m = markov_marginal(P, PROMPTS, 50)  # (n, V)
    np.testing.assert_allclose(m.sum(1), 1.0, atol=1e-12)
    stationary = markov_marginal(P, [[0]], 5000)[0]
    np.testing.assert_allclose(stationary @ P, stationary, atol=1e-12)


def test_check_markov_refuses_the_general_target(target64):
    with pytest.raises(ValueError, match="`model`.*o_proj"):
        check_markov(target64)
    check_markov(load_model(MARKOV))
    check_markov(load_model(MARKOV_DRAFT))


# ---------------------------------------------------------------------------------------------
# (e) Monte Carlo with specimpl's autoregressive sampler in float64
# ---------------------------------------------------------------------------------------------
def pooled_chisquare(counts: np.ndarray, probs: np.ndarray, min_expected: float = 5.0,
                     check_support: bool = True) -> float:
    """Chi-square goodness-of-fit p-value, cells with expected count < min_expected pooled into one."""
    n = counts.sum()
    exp = probs * n
    small = exp < min_expected
    obs_c = np.append(counts[~small], counts[small].sum())
    exp_c = np.append(exp[~small], exp[small].sum())
    keep = exp_c > 0
    if check_support:
        assert counts[exp == 0].sum() == 0, "a sequence of probability 0 was drawn"
    return float(scipy.stats.chisquare(obs_c[keep], exp_c[keep] * obs_c.sum() / exp_c[keep].sum()).pvalue)


def test_monte_carlo_autoregressive_sampler_follows_the_law():
    # Two chi-square tests at threshold 1e-6: under a correct law each fails with probability ~1e-6
    # (asymptotic chi-square, every pooled cell expected >= 5), so the false-failure rate is <= 2e-6.
    # The generator is seeded, so the outcome is fixed for a given software stack.
    J, n, chunk = 3, 20_000, 1_000
    prompt = PROMPTS[1]
    law = enumerate_law(TARGET, [prompt], J, WARPED)
    model = HFModel.from_pretrained(TARGET, dtype=torch.float64, load_tokenizer=False)
    gen = torch.Generator().manual_seed(20260401)
    rows = []
    for _ in range(n // chunk):  # chunks: the ragged KV cache preallocates 128 slots per row here (~260 MB)
        out = autoregressive_generate(model, torch.tensor([prompt]).expand(chunk, -1), max_new_tokens=J,
                                      config=WARPED, generator=gen)
        rows.append(out.tokens.numpy())  # (chunk, J)
    x = np.concatenate(rows)  # (n, J)
    assert (x >= 0).all()
    flat = np.ravel_multi_index(tuple(x.T), (V,) * J)  # (n,)
    p_first = pooled_chisquare(np.bincount(x[:, 0], minlength=V), law.marginals[0, 0])
    p_joint = pooled_chisquare(np.bincount(flat, minlength=V ** J), law.joint[0])
    # the same samples against the draft's law: the test has power (a lossy sampler is caught)
    wrong = enumerate_law(DRAFT, [prompt], J, WARPED)
    p_wrong = pooled_chisquare(np.bincount(flat, minlength=V ** J), wrong.joint[0], check_support=False)
    assert p_wrong < 1e-6, p_wrong
    print(f"Monte Carlo chi-square p-values: first token {p_first:.3g}, joint of 3 {p_joint:.3g}; "
          f"against the draft's law {p_wrong:.3g}")
    assert p_first > 1e-6 and p_joint > 1e-6, (p_first, p_joint)


# ---------------------------------------------------------------------------------------------
# (f) numerics floor, acceptance, entropy
# ---------------------------------------------------------------------------------------------
def test_numerics_floor_is_small_and_positive():
    floor = numerics_floor(TARGET, PROMPTS, 3, WARPED)
    print(f"numerics floor (float32 vs float64 joint TV, J=3): {floor:.3g}")
    assert 0 < floor < 1e-5


def test_pair_is_nontrivial():
    """The built pair's design targets: entropy 1-2.1 nats per token, acceptance 0.5-0.8 on average."""
    H = entropy_per_position(TARGET, PROMPTS, 3)
    alpha = exact_acceptance(TARGET, DRAFT, PROMPTS, 3)
    alpha_m = exact_acceptance(MARKOV, MARKOV_DRAFT, PROMPTS, 3)
    assert 1.0 < H.mean() < 2.1, H
    assert 0.5 < alpha.mean() < 0.8 and 0.5 < alpha_m.mean() < 0.8, (alpha, alpha_m)
