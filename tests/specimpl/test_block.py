"""Block verification (specimpl.block): the pure step by hand and exactly, its sampler against the exact
laws of harness.laws.rounds, and the published example of Sun et al. (target (1/3, 2/3), draft (2/3, 1/3),
k = 2: 10/9 accepted drafts per block token by token, 11/9 with block verification).

Statistical tests use a per-test false-alarm rate of 1e-6 (a lossless sampler fails one with
probability <= 1e-6, fixed seeds) and state the shift they detect with 99 % power.
"""
import itertools
from fractions import Fraction

import numpy as np
import pytest
import torch

from harness.controls.tree import quick_law_check
from harness.laws.rounds import ExactRounds, accepted_mean_test
from specimpl import NGramModel, SamplingConfig, noisy_draft, random_ngram, speculative_generate
from specimpl.block import BlockSampler, block_generate, block_weights, verify_block_jointly
from specimpl.speculative import verify_block

ALPHA = 1e-6
P_TOY, Q_TOY = (1 / 3, 2 / 3), (2 / 3, 1 / 3)


def toy_pair():
    return NGramModel(np.array([P_TOY]), 1, name="p_toy"), NGramModel(np.array([Q_TOY]), 1, name="q_toy")


def toy_tensors(x, B=1, k=2):
    p = torch.tensor(P_TOY, dtype=torch.float64).expand(B, k + 1, 2)
    q = torch.tensor(Q_TOY, dtype=torch.float64).expand(B, k, 2)
    return p, q, torch.as_tensor(x, dtype=torch.long).expand(B, k)


# --------------------------------------------------------------------------------- pure step
def test_hand_example_weights_and_stops():
    # x = (a, b): w_1 = 1/2, R_1 = 0 so h_1 = 0; w_2 = min(1, 1/2 * 2) = 1 = h_2: always both accepted,
    # although the token-level rule rejects a with probability 1/2 (eta_1 = 0.99 fails its own test)
    p, q, x = toy_tensors([0, 1])
    w, _, _ = block_weights(p, q, x)
    assert torch.allclose(w, torch.tensor([[0.5, 1.0]], dtype=torch.float64))
    u = torch.tensor([[0.99, 0.999]], dtype=torch.float64)
    tau, _ = verify_block_jointly(p, q, x, u, torch.tensor([0.5], dtype=torch.float64))
    n_tok, _ = verify_block(p, q, x, u, torch.tensor([0.5], dtype=torch.float64))
    assert tau.item() == 2 and n_tok.item() == 0
    # x = (a, a): h_1 = 0, h_2 = w_2 = 1/4.  eta_2 = 0.2 < 1/4: tau = 2; eta_2 = 0.3: tau = 0 and the
    # residual max(0, p - q) = (0, 1/3) forces y = b
    p, q, x = toy_tensors([0, 0])
    tau, _ = verify_block_jointly(p, q, x, torch.tensor([[0.9, 0.2]], dtype=torch.float64), torch.tensor([0.0], dtype=torch.float64))
    assert tau.item() == 2
    tau, y = verify_block_jointly(p, q, x, torch.tensor([[0.1, 0.3]], dtype=torch.float64), torch.tensor([0.0], dtype=torch.float64))
    assert tau.item() == 0 and y.item() == 1
    # x = (b, a): w_1 = 1, R_1 = 1/3 so h_1 = 1: tau >= 1; tau = 1 when eta_2 >= w_2 = 1/2, then y ~ max(0, p - q) = b
    p, q, x = toy_tensors([1, 0])
    tau, y = verify_block_jointly(p, q, x, torch.tensor([[0.999, 0.7]], dtype=torch.float64), torch.tensor([0.0], dtype=torch.float64))
    assert tau.item() == 1 and y.item() == 1


def _exact_mean(step, thresholds_grid=64):
    """E[accepted] of one toy block, exactly: every draft block, uniforms on a midpoint grid that is exact
    because every threshold (h_i in {0, 1/4, 1/2, 1}; p/q in {1/2, 2}) is a multiple of 1/64."""
    g = (torch.arange(thresholds_grid, dtype=torch.float64) + 0.5) / thresholds_grid
    U = torch.cartesian_prod(g, g)  # (G^2, 2) every pair of uniforms, each with weight 1/G^2
    total = Fraction(0)
    for x in itertools.product(range(2), repeat=2):
        prob = Fraction(2 if x[0] == 0 else 1, 3) * Fraction(2 if x[1] == 0 else 1, 3)
        p, q, xx = toy_tensors(list(x), B=U.shape[0])
        n, _ = step(p, q, xx, U, torch.full((U.shape[0],), 0.5, dtype=torch.float64))
        total += prob * Fraction(int(n.sum()), U.shape[0])
    return total


def test_published_example_exactly_by_enumeration():
    assert _exact_mean(verify_block) == Fraction(10, 9)
    assert _exact_mean(verify_block_jointly) == Fraction(11, 9)


def test_published_example_exactly_by_the_round_law():
    t, d = toy_pair()
    ex = ExactRounds(t, d, [0], 3)
    assert ex.chain(2).mean_accepted(ex.start) == pytest.approx(10 / 9, abs=1e-12)
    assert ex.block(2).mean_accepted(ex.start) == pytest.approx(11 / 9, abs=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_k1_is_the_token_level_rule_bit_for_bit(seed):
    g = torch.Generator().manual_seed(seed)
    B, V = 4000, 7
    p = torch.softmax(3 * torch.randn(B, 2, V, generator=g, dtype=torch.float64), -1)
    q = torch.softmax(3 * torch.randn(B, 1, V, generator=g, dtype=torch.float64), -1)
    x = torch.multinomial(q[:, 0], 1, generator=g)
    u = torch.rand(B, 1, generator=g, dtype=torch.float64)
    uf = torch.rand(B, generator=g, dtype=torch.float64)
    n1, y1 = verify_block(p, q, x, u, uf)
    n2, y2 = verify_block_jointly(p, q, x, u, uf)
    assert torch.equal(n1, n2) and torch.equal(y1, y2)


def test_zero_probability_draft_is_never_accepted_even_at_u_zero():
    # SGLang #35771: an inclusive test (eta <= h) accepted a token of target probability 0 when eta = 0
    p = torch.tensor([[[0.0, 1.0], [0.5, 0.5]]], dtype=torch.float64)
    q = torch.tensor([[[1.0, 0.0]]], dtype=torch.float64)
    tau, y = verify_block_jointly(p, q, torch.tensor([[0]]), torch.zeros(1, 1, dtype=torch.float64),
                                  torch.zeros(1, dtype=torch.float64))
    assert tau.item() == 0 and y.item() == 1


def test_block_never_accepts_less_than_token_level_exactly():
    for seed, eps, k in [(0, 0.5, 3), (1, 0.8, 2), (2, 0.3, 4)]:
        t = random_ngram(4, 2, concentration=0.6, seed=seed)
        d = noisy_draft(t, eps, seed=seed + 10)
        for config in (SamplingConfig(), SamplingConfig(temperature=0.7, top_k=3)):
            ex = ExactRounds(t, d, [0], 4, config)
            for c in range(ex.P.shape[0]):
                assert ex.block(k).mean_accepted(c) >= ex.chain(k).mean_accepted(c) - 1e-12


# ------------------------------------------------------------------------------------ sampler
def _one_round_hist(fn, k, B, seed):
    t, d = toy_pair()
    out = fn(t, d, torch.zeros(B, 1, dtype=torch.long), k=k, max_new_tokens=1,
             generator=torch.Generator().manual_seed(seed))
    assert out.stats.totals()["rounds"] == 1  # one round per sequence: iid rounds
    return out.stats.accepted_hist


@pytest.mark.parametrize("fn, mine, other", [(block_generate, Fraction(11, 9), Fraction(10, 9)),
                                             (speculative_generate, Fraction(10, 9), Fraction(11, 9))],
                         ids=["block", "token-level"])
def test_published_example_statistically(fn, mine, other):
    """200,000 iid rounds: the mean accepted drafts equals the exact value (z test at 1e-6), differs from
    the other rule's (same test rejects), and the test has the power for it (99 % power at a shift
    below half the gap 1/9)."""
    t, d = toy_pair()
    ex = ExactRounds(t, d, [0], 1)
    law = ex.block(2) if fn is block_generate else ex.chain(2)
    hist = _one_round_hist(fn, 2, 200_000, seed=11)
    r = accepted_mean_test(hist, law.hist(ex.start), alpha=ALPHA)
    assert r.expected == pytest.approx(float(mine), abs=1e-12)
    assert r.pvalue > ALPHA
    assert r.min_detectable < float(Fraction(1, 18))
    shifted = law.hist(ex.start) + (float(other - mine)) * np.array([0.0, 0.0, 1.0]) - (float(other - mine)) * np.array([0.0, 1.0, 0.0])
    assert accepted_mean_test(hist, shifted, alpha=ALPHA).pvalue < ALPHA  # the other rule's mean is rejected
    from harness.stats import chi2_gof
    assert chi2_gof(hist, law.hist(ex.start), alpha=ALPHA).pvalue > ALPHA


def test_published_example_output_law_chi2():
    """χ² of every position and of the joint of 5 tokens against the target's exact law (iid p), 100,000
    sequences, Bonferroni family level 1e-6."""
    t, d = toy_pair()
    sc = dict(target=t, draft=d, prompt=[0], k=2, max_new_tokens=6, config=SamplingConfig(), eos_token_id=None,
              joint_tokens=5)
    r = quick_law_check(block_generate, draws=100_000, seed=3, scenario=sc)
    assert r.pvalue > ALPHA
    assert r.min_detectable_tv_joint < 0.02


def test_law_with_eos_topk_ragged_blocks():
    """A trigram with EOS (PAD after it), top-k and temperature, k = 3 and 7 new tokens (EOS inside a block,
    max_new_tokens cutting a block): every position and the joint of 3 tokens against the exact law."""
    t = random_ngram(5, 3, concentration=0.7, seed=4)
    d = noisy_draft(t, 0.7, seed=5)
    sc = dict(target=t, draft=d, prompt=[1, 2], k=3, max_new_tokens=7, config=SamplingConfig(temperature=0.8, top_k=4),
              eos_token_id=4, joint_tokens=3)
    r = quick_law_check(block_generate, draws=60_000, seed=7, scenario=sc)
    assert r.pvalue > ALPHA


def test_acceptance_statistics_match_the_exact_law_over_a_generation():
    """SpecStats of a whole generation (EOS, truncation) against harness.laws.rounds.acceptance_law: the
    per-sequence histogram of accepted drafts, within 6 standard errors of its exact expectation (normal
    approximation, two-sided 2e-9 per cell; the variance bounded by E[count^2] <= N E[count])."""
    t = random_ngram(5, 2, concentration=0.6, seed=2)
    d = noisy_draft(t, 0.5)
    B, N, k = 40_000, 9, 3
    out = block_generate(t, d, torch.zeros(B, 1, dtype=torch.long), k=k, max_new_tokens=N, eos_token_id=3,
                         generator=torch.Generator().manual_seed(5))
    ex = ExactRounds(t, d, [0], N, eos_token_id=3)
    law = ex.acceptance(ex.block(k))
    per_seq = out.stats.accepted_hist / B
    sd = np.sqrt(law.hist * N / B)  # a sequence has at most N rounds
    assert np.all(np.abs(per_seq - law.hist) < 6 * sd + 1e-9), (per_seq, law.hist)


def test_k1_sampler_equals_reference_sampler():
    t = random_ngram(6, 3, seed=1)
    d = noisy_draft(t, 0.4)
    prompts = [[1, 2, 3], [4], [0, 5]]
    kw = dict(k=1, max_new_tokens=11, config=SamplingConfig(temperature=0.9, top_p=0.9), eos_token_id=2)
    a = speculative_generate(t, d, prompts, generator=torch.Generator().manual_seed(3), **kw)
    b = block_generate(t, d, prompts, generator=torch.Generator().manual_seed(3), **kw)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.lengths, b.lengths)


def test_output_format_eos_pad_and_lengths():
    t = random_ngram(5, 2, seed=0)
    d = noisy_draft(t, 0.5)
    out = block_generate(t, d, [[0, 1], [2]], k=4, max_new_tokens=12, eos_token_id=3,
                         generator=torch.Generator().manual_seed(0))
    assert out.tokens.shape == (2, 12)
    for row, n in zip(out.tokens.tolist(), out.lengths.tolist()):
        assert all(x == -1 for x in row[n:]) and all(x >= 0 for x in row[:n])
        assert 3 not in row[:n - 1] and (n == 12 or row[n - 1] == 3)
    totals = out.stats.totals()
    assert totals["target_calls"] == totals["rounds"] and out.stats.accepted_hist.size == 5


def test_same_seed_same_output_and_argument_errors():
    t = random_ngram(4, 2, seed=0)
    d = noisy_draft(t, 0.5)
    a = block_generate(t, d, [[0]], k=3, max_new_tokens=8, generator=torch.Generator().manual_seed(9))
    b = block_generate(t, d, [[0]], k=3, max_new_tokens=8, generator=torch.Generator().manual_seed(9))
    assert torch.equal(a.tokens, b.tokens)
    with pytest.raises(ValueError, match="`k` must be an integer >= 1; got 0"):
        block_generate(t, d, [[0]], k=0, max_new_tokens=8)
    with pytest.raises(ValueError, match="`max_new_tokens`"):
        BlockSampler(t, d, 2).generate([[0]], 0)
