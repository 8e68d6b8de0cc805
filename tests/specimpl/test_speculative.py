"""The speculative sampler end to end on n-gram toy models: inputs, determinism, greedy equality,
EOS / max_new_tokens, instrumentation, compaction, the tabular path, and a first chi-square check
of the output law against the exact target joint (the full battery is `python -m harness verify`).
"""
import re

import numpy as np
import pytest
import torch
from scipy import optimize, stats

from specimpl.autoregressive import autoregressive_generate
from specimpl.ngram import (NGramModel, disjoint_draft, exact_acceptance, exact_joint, noisy_draft, random_ngram,
                            tempered_draft)
from specimpl.sampling import SamplingConfig
from specimpl.speculative import PAD, SpeculativeSampler, speculative_generate
from specimpl.tabular import TabularSpeculative

PATHS = [True, False]  # tabular fast path, generic path
PATH_IDS = ["tabular", "generic"]


def gen(seed):
    return torch.Generator().manual_seed(seed)


def run(target, draft, prompts, k, max_new, *, config=SamplingConfig(), eos=None, seed=0, tabular=True):
    s = SpeculativeSampler(target, draft, k, config, tabular=tabular)
    assert s.uses_tabular_path == tabular
    return s.generate(prompts, max_new, eos, gen(seed))


def check_output_shape(res, B, max_new, eos=None):
    """PAD exactly after each sequence's end; EOS only as the last token; lengths consistent."""
    tok, L = res.tokens, res.lengths
    assert tok.shape == (B, max_new) and tok.dtype == torch.int64 and L.shape == (B,)
    cols = torch.arange(max_new)
    assert torch.equal(tok != PAD, cols < L[:, None]), "PAD must start exactly at lengths"
    assert bool((L >= 1).all()) and bool((L <= max_new).all())
    if eos is None:
        assert bool((L == max_new).all())
    else:
        is_eos = tok == eos
        assert bool((is_eos.sum(1) <= 1).all())
        ended = is_eos.any(1)
        assert bool((tok[ended, :].gather(1, (L[ended] - 1)[:, None]) == eos).all()), "EOS is the last token"
        assert bool((L[~ended] == max_new).all()), "a sequence without EOS runs to max_new_tokens"


# -- bad inputs -----------------------------------------------------------------------------------
T4 = random_ngram(4, 2, seed=0)
D4 = noisy_draft(T4, 0.3)


@pytest.mark.parametrize("kwargs, name", [
    (dict(k=0), "k"), (dict(k=-2), "k"), (dict(k=1.5), "k"), (dict(k=True), "k"),
    (dict(max_new_tokens=0), "max_new_tokens"), (dict(max_new_tokens=2.0), "max_new_tokens"),
    (dict(eos_token_id=4), "eos_token_id"), (dict(eos_token_id=-1), "eos_token_id"),
    (dict(eos_token_id=True), "eos_token_id"),
    (dict(prompts=[[1, 4]]), "prompts[0]"), (dict(prompts=[[0], [2, -1]]), "prompts[1]"),
    (dict(prompts=torch.tensor([[0, 1], [5, 1]])), "prompts[1]"), (dict(prompts=[[]]), "prompts[0]"),
    (dict(prompts=[]), "prompts"), (dict(prompts=torch.zeros(2, 0, dtype=torch.long)), "prompts"),
    (dict(prompts=torch.zeros(2, 2)), "prompts"),
    (dict(config="greedy"), "config"),
    (dict(draft=random_ngram(5, 2)), "draft"),
])
@pytest.mark.parametrize("tabular", PATHS, ids=PATH_IDS)
def test_bad_inputs_name_the_argument(kwargs, name, tabular):
    args = dict(target=T4, draft=D4, prompts=[[1, 2]], k=2, max_new_tokens=3, config=SamplingConfig(),
                eos_token_id=None)
    args.update(kwargs)
    with pytest.raises(ValueError, match="`" + re.escape(name) + "`"):
        s = SpeculativeSampler(args["target"], args["draft"], args["k"], args["config"], tabular=tabular)
        s.generate(args["prompts"], args["max_new_tokens"], args["eos_token_id"], gen(0))


def test_speculative_generate_validates_too():
    with pytest.raises(ValueError, match="`k`"):
        speculative_generate(T4, D4, [[1]], k=0, max_new_tokens=2)
    with pytest.raises(ValueError, match="`draft`"):
        speculative_generate(T4, random_ngram(3, 1), [[1]], k=1, max_new_tokens=2)
    # a draft of another dtype runs on the generic path, opted in or not
    s = SpeculativeSampler(T4, NGramModel(D4.table64.numpy(), 2, dtype=torch.float64), 2, tabular=True)
    assert not s.uses_tabular_path
    check_output_shape(s.generate([[1]] * 5, 4, generator=gen(0)), 5, 4)


class NaNTarget(NGramModel):
    """A broken model whose logits are NaN (a subclass, so the generic path runs)."""

    def forward(self, state, tokens, n_new=None):
        return super().forward(state, tokens, n_new) * float("nan")


def test_validate_flag_rejects_nan_probabilities():
    bad = NaNTarget(T4.table64.numpy(), 2)
    s = SpeculativeSampler(bad, D4, 2, validate=True)
    s.check_finite = False  # the finiteness check (on by default) would raise first; this tests validate's own
    with pytest.raises(ValueError, match="`p`.*NaN"):
        s.generate([[1]], 3, generator=gen(0))
    with pytest.raises(ValueError, match="the target's warped next-token law is not finite"):
        SpeculativeSampler(bad, D4, 2).generate([[1]], 3, generator=gen(0))  # the default, without validate


# -- determinism and the two paths ------------------------------------------------------------------
PAIRS = [  # (target, draft, k, config, eos)
    (random_ngram(5, 2, seed=1), "noisy", 3, SamplingConfig(), None),
    (random_ngram(4, 3, seed=2), 1, 2, SamplingConfig(temperature=0.7, top_k=3), 2),
    (random_ngram(6, 1, seed=3), "tempered", 1, SamplingConfig(top_p=0.8), None),
    (random_ngram(5, 2, seed=4, support=3), "disjoint", 4, SamplingConfig(), 0),
    (random_ngram(4, 2, seed=5), 3, 5, SamplingConfig(greedy=True), 3),
]


def make_draft(target, how):
    if how == "noisy":
        return noisy_draft(target, 0.4)
    if how == "tempered":
        return tempered_draft(target, 1.5)
    if how == "disjoint":
        return disjoint_draft(target, 0.3)
    return random_ngram(target.vocab_size, how, seed=9)


@pytest.mark.parametrize("case", range(len(PAIRS)))
def test_tabular_path_reproduces_generic_path_bit_for_bit(case):
    t, how, k, cfg, eos = PAIRS[case]
    d = make_draft(t, how)
    prompts = torch.randint(0, t.vocab_size, (3000, 2), generator=gen(case))
    a = run(t, d, prompts, k, 9, config=cfg, eos=eos, seed=5, tabular=True)
    b = run(t, d, prompts, k, 9, config=cfg, eos=eos, seed=5, tabular=False)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.lengths, b.lengths)
    np.testing.assert_array_equal(a.stats.accepted_hist, b.stats.accepted_hist)
    assert [r["batch"] for r in a.stats.rounds] == [r["batch"] for r in b.stats.rounds]
    check_output_shape(a, 3000, 9, eos)
    # ragged list prompts on both paths
    ragged = [[1], [0, 2, 3], [3, 3]] * 50
    a = run(t, d, ragged, k, 6, config=cfg, eos=eos, seed=6, tabular=True)
    b = run(t, d, ragged, k, 6, config=cfg, eos=eos, seed=6, tabular=False)
    assert torch.equal(a.tokens, b.tokens)


@pytest.mark.parametrize("case", [0, 1, 3])
def test_worker_threads_and_chunks_do_not_change_the_output(case):
    t, how, k, cfg, eos = PAIRS[case]
    d = make_draft(t, how)
    prompts = torch.randint(0, t.vocab_size, (5000, 2), generator=gen(case))
    ref = run(t, d, prompts, k, 9, config=cfg, eos=eos, seed=5, tabular=False)
    s = TabularSpeculative(t, d, k, cfg, workers=2, chunk_size=700)  # several chunks per round, two threads
    res = s.generate(prompts, 9, eos, gen(5))
    assert torch.equal(res.tokens, ref.tokens) and torch.equal(res.lengths, ref.lengths)
    np.testing.assert_array_equal(res.stats.accepted_hist, ref.stats.accepted_hist)


def test_tabular_path_float64_models():
    t64 = NGramModel(random_ngram(5, 3, seed=3).table64.numpy(), 3, dtype=torch.float64)
    d64 = NGramModel(noisy_draft(random_ngram(5, 3, seed=3), 0.5).table64.numpy(), 3, dtype=torch.float64)
    prompts = torch.randint(0, 5, (3000, 4), generator=gen(3))
    for cfg in (SamplingConfig(), SamplingConfig(temperature=1.3, top_p=0.9)):
        a = run(t64, d64, prompts, 3, 8, config=cfg, eos=1, seed=2, tabular=True)
        b = run(t64, d64, prompts, 3, 8, config=cfg, eos=1, seed=2, tabular=False)
        assert torch.equal(a.tokens, b.tokens)
        a = autoregressive_generate(t64, prompts, max_new_tokens=8, config=cfg, eos_token_id=1, generator=gen(4))
        b = autoregressive_generate(t64, prompts, max_new_tokens=8, config=cfg, eos_token_id=1, generator=gen(4),
                                    tabular=False)
        assert torch.equal(a.tokens, b.tokens)


@pytest.mark.parametrize("case", [0, 1])
def test_autoregressive_tabular_path_reproduces_generic(case):
    t, _, _, cfg, eos = PAIRS[case]
    prompts = torch.randint(0, t.vocab_size, (2000, 2), generator=gen(case))
    a = autoregressive_generate(t, prompts, max_new_tokens=7, config=cfg, eos_token_id=eos, generator=gen(1))
    b = autoregressive_generate(t, prompts, max_new_tokens=7, config=cfg, eos_token_id=eos, generator=gen(1),
                                tabular=False)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.lengths, b.lengths)
    check_output_shape(a, 2000, 7, eos)


@pytest.mark.parametrize("tabular", PATHS, ids=PATH_IDS)
def test_same_seed_same_output(tabular):
    t, d = random_ngram(6, 2, seed=7), noisy_draft(random_ngram(6, 2, seed=7), 0.5)
    prompts = [[1, 2], [3], [0, 0, 5]] * 100
    a = run(t, d, prompts, 3, 8, seed=11, tabular=tabular)
    b = run(t, d, prompts, 3, 8, seed=11, tabular=tabular)
    c = run(t, d, prompts, 3, 8, seed=12, tabular=tabular)
    assert torch.equal(a.tokens, b.tokens) and not torch.equal(a.tokens, c.tokens)


def test_tabular_path_is_opt_in():
    class AcceptAll(SpeculativeSampler):
        def verify(self, p, q, x, u_accept, u_final):
            return super().verify(p, q, x, torch.zeros_like(u_accept), u_final)

    assert not SpeculativeSampler(T4, D4, 2).uses_tabular_path  # the default: the generic loop
    assert SpeculativeSampler(T4, D4, 2, tabular=True).uses_tabular_path
    assert not SpeculativeSampler(T4, D4, 2, validate=True, tabular=True).uses_tabular_path
    assert not AcceptAll(T4, D4, 2).uses_tabular_path  # a variant runs its own steps
    assert AcceptAll(T4, D4, 2, tabular=True).uses_tabular_path  # unless it opts in (then they are skipped)
    assert not SpeculativeSampler(T4, NaNTarget(T4.table64.numpy(), 2), 2, tabular=True).uses_tabular_path
    # speculative_generate is the reference: it opts in, and its output is the generic loop's
    a = speculative_generate(T4, D4, [[1, 2]] * 300, k=2, max_new_tokens=7, generator=gen(3))
    b = SpeculativeSampler(T4, D4, 2).generate([[1, 2]] * 300, 7, None, gen(3))
    assert torch.equal(a.tokens, b.tokens)


def test_tabular_loop_rejects_models_it_cannot_run():
    with pytest.raises(ValueError, match="`draft`"):
        TabularSpeculative(T4, NaNTarget(D4.table64.numpy(), 2), 2)
    with pytest.raises(ValueError, match="`workers`"):
        TabularSpeculative(T4, D4, 2, workers=0)


# -- greedy ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("t_order, d_order", [(1, 1), (2, 1), (2, 2), (3, 2), (1, 3), (3, 3)])
@pytest.mark.parametrize("k", [1, 2, 3, 5])
@pytest.mark.parametrize("tabular", PATHS, ids=PATH_IDS)
def test_greedy_speculative_equals_greedy_target(t_order, d_order, k, tabular):
    t = random_ngram(5, t_order, seed=10 + t_order)
    d = random_ngram(5, d_order, seed=20 + d_order)  # an unrelated draft: many rejections
    prompts = [[p % 5 for p in range(i, i + 1 + i % 4)] for i in range(40)]  # ragged, lengths 1..4
    for cfg in (SamplingConfig(greedy=True), SamplingConfig(temperature=0)):
        for eos in (None, 4):
            spec = run(t, d, prompts, k, 11, config=cfg, eos=eos, seed=k, tabular=tabular)
            ar = autoregressive_generate(t, prompts, max_new_tokens=11, config=cfg, eos_token_id=eos, generator=gen(99))
            assert torch.equal(spec.tokens, ar.tokens), (t_order, d_order, k, eos)
            assert torch.equal(spec.lengths, ar.lengths)


# -- EOS, max_new_tokens, instrumentation, compaction --------------------------------------------------
@pytest.mark.parametrize("tabular", PATHS, ids=PATH_IDS)
def test_eos_inside_an_accepted_block(tabular):
    t = random_ngram(4, 2, concentration=1.0, seed=3)
    d = noisy_draft(t, 0.0)  # q == p: every draft is accepted, so EOS falls inside accepted blocks
    k, N = 4, 12
    res = run(t, d, torch.ones(5000, 1, dtype=torch.long), k, N, eos=0, seed=1, tabular=tabular)
    check_output_shape(res, 5000, N, eos=0)
    L = res.lengths
    inside = (L < N) & (L % (k + 1) != 0)  # EOS not at the last cell of a k+1 block
    assert int(inside.sum()) > 100
    assert res.stats.accepted_hist[:k].sum() == 0  # every round accepted all k drafts


@pytest.mark.parametrize("tabular", PATHS, ids=PATH_IDS)
@pytest.mark.parametrize("N", [1, 3, 7])
def test_max_new_tokens_inside_a_block(N, tabular):
    t = random_ngram(4, 3, seed=4)
    res = run(t, noisy_draft(t, 0.0), [[1, 2], [3]] * 20, 4, N, seed=2, tabular=tabular)
    check_output_shape(res, 40, N)
    tot = res.stats.totals()
    assert tot["emitted"] == 40 * N
    assert tot["rounds"] == -(-N // 5)  # ceil(N / (k + 1)): each round emits k + 1 until the cut


@pytest.mark.parametrize("tabular", PATHS, ids=PATH_IDS)
def test_instrumentation_is_consistent(tabular):
    t = random_ngram(6, 2, seed=8)
    d = noisy_draft(t, 0.5)
    k = 3
    res = run(t, d, torch.randint(0, 6, (4000, 3), generator=gen(0)), k, 10, eos=5, seed=3, tabular=tabular)
    s = res.stats
    tot = s.totals()
    f = s.frame()
    assert tot["emitted"] == int(res.lengths.sum())
    assert s.accepted_hist.sum() == tot["sequence_rounds"] == s.reached[0]
    assert tot["drafted"] == k * tot["sequence_rounds"]
    assert tot["accepted"] == int((s.accepted_hist * np.arange(k + 1)).sum()) == s.accepted_at.sum()
    np.testing.assert_array_equal(s.accepted_at[:-1], s.reached[1:])  # x_{i+1} judged iff x_i accepted
    assert tot["target_calls"] == tot["rounds"] == len(f) and tot["draft_calls"] == k * len(f)
    assert (f["sequence_rounds"] <= f["batch"]).all() and (np.diff(f["batch"]) <= 0).all()
    assert tot["emitted"] <= tot["sequence_rounds"] * (k + 1)
    assert tot["mean_acceptance_length"] == pytest.approx(1 + tot["accepted"] / tot["sequence_rounds"])
    assert set(res.timings) >= {"draft", "target", "sampler", "prefill"}
    assert all(v >= 0 for v in res.timings.values())


@pytest.mark.parametrize("tabular", PATHS, ids=PATH_IDS)
def test_compaction_when_most_sequences_end_early(tabular):
    # EOS (token 0) has probability >= 0.6 in every context: most sequences end in the first rounds
    P = np.full((5, 5), 0.1)
    P[:, 0] = 0.6
    t = NGramModel(P, 2)
    d = noisy_draft(t, 0.3)
    res = run(t, d, torch.ones(20000, 1, dtype=torch.long), 2, 30, eos=0, seed=4, tabular=tabular)
    check_output_shape(res, 20000, 30, eos=0)
    batches = [r["batch"] for r in res.stats.rounds]
    assert batches[0] == 20000 and batches[-1] < 2000 and len(set(batches)) > 3  # compacted several times
    # the length law is geometric: P(L = l) = 0.6 * 0.4^(l-1) under the target; sanity on the mean
    assert float(res.lengths.double().mean()) == pytest.approx(1 / 0.6, rel=0.03)


def test_acceptance_is_one_when_draft_equals_target():
    # catches a draft fed the wrong context: with q == p every position must be accepted
    for order in (2, 3):
        t = random_ngram(5, order, seed=order)
        for tabular in PATHS:
            res = run(t, noisy_draft(t, 0.0), [[1], [2, 3], [4, 0, 1]] * 30, 3, 9, seed=0, tabular=tabular)
            assert res.stats.totals()["alpha_per_position"] == [1.0, 1.0, 1.0]


@pytest.mark.parametrize("tabular", PATHS, ids=PATH_IDS)
def test_first_position_acceptance_matches_exact_alpha(tabular):
    """Binomial test of the first draft position's acceptance against sum_x min(p_1, q_1).

    False alarm 1e-6 (two-sided exact binomial).  Power: n = 40,000 rounds detects a shift of
    |delta| >= 0.013 around alpha ~ 0.7 with probability >= 0.99 (normal approximation:
    (z_{1-5e-7} + z_{0.99}) * sqrt(alpha (1 - alpha) / n) = (4.89 + 2.33) * 0.0023 = 0.0165 at worst,
    alpha = 0.5).
    """
    t = random_ngram(8, 3, seed=6)
    d = noisy_draft(t, 0.6, seed=7)
    prompt = [3, 5]
    alpha = exact_acceptance(t, d, prompt, 1)[0]
    n = 40_000
    res = run(t, d, torch.tensor([prompt] * n), 2, 1, seed=8, tabular=tabular)  # one round each
    s = res.stats
    assert s.reached[0] == n
    p = stats.binomtest(int(s.accepted_at[0]), n, alpha).pvalue
    assert p > 1e-6, (s.accepted_at[0] / n, alpha)


@pytest.mark.parametrize("tabular", PATHS, ids=PATH_IDS)
def test_disjoint_draft_always_rejects_yet_follows_target(tabular):
    t = random_ngram(6, 2, support=3, seed=3)
    res = run(t, disjoint_draft(t, 0.0), torch.ones(3000, 1, dtype=torch.long), 2, 4, seed=0, tabular=tabular)
    assert res.stats.accepted_hist[1:].sum() == 0
    P = t.table64.numpy()
    tok = res.tokens.numpy()
    prev = np.concatenate([np.ones((3000, 1), int), tok[:, :-1]], 1)
    assert (P[prev, tok] > 0).all()  # never a token the target gives probability 0


# -- a first chi-square check of the output law --------------------------------------------------------
ALPHA = 1e-6  # false-alarm rate of each chi-square test below
POWER = 0.99


def chi2_noncentrality(df: int, alpha: float = ALPHA, power: float = POWER) -> float:
    """lambda* with P(ncx2(df, lambda*) > chi2_{1-alpha}(df)) = power."""
    crit = stats.chi2.isf(alpha, df)
    return optimize.brentq(lambda lam: stats.ncx2.sf(crit, df, lam) - power, 1e-9, 1e7)


def detectable_tv(n: int, df: int, alpha: float = ALPHA, power: float = POWER) -> float:
    """Smallest TV detected with the given power: lambda = n w^2 >= 4 n TV^2 (w^2 = sum (q-p)^2/p)."""
    return 0.5 * np.sqrt(chi2_noncentrality(df, alpha, power) / n)


def n_for_tv(tv: float, df: int, alpha: float = ALPHA, power: float = POWER) -> int:
    return int(np.ceil(chi2_noncentrality(df, alpha, power) / (4 * tv ** 2)))


def pooled_cells(expected: np.ndarray, min_expected: float = 50.0) -> np.ndarray:
    """Cell -> group map: the smallest cells (by expected count, never by observed) pooled to >= min_expected."""
    order = np.argsort(expected, kind="stable")
    group = np.arange(len(expected))
    acc, pool = 0.0, []
    for c in order:
        if acc >= min_expected and expected[c] >= min_expected:
            break
        acc += expected[c]
        pool.append(c)
    if len(pool) > 1:
        group[pool] = pool[0]
    _, group = np.unique(group, return_inverse=True)
    return group


def chi2_gof(counts: np.ndarray, probs: np.ndarray):
    """Pearson chi-square of counts against probs after pooling; returns (statistic, pvalue, df)."""
    n = counts.sum()
    g = pooled_cells(probs * n)
    obs = np.bincount(g, weights=counts)
    exp = np.bincount(g, weights=probs * n)
    stat = ((obs - exp) ** 2 / exp).sum()
    df = len(obs) - 1
    return stat, stats.chi2.sf(stat, df), df


def test_planning_functions_invert_each_other():
    for df in (10, 63):
        for n in (10_000, 200_000):
            tv = detectable_tv(n, df)
            assert n_for_tv(tv, df) == pytest.approx(n, rel=1e-6, abs=1)
    # the figures quoted in the comments below
    assert detectable_tv(200_000, 60) == pytest.approx(0.0122, abs=5e-4)


TARGET = random_ngram(4, 2, concentration=1.0, seed=11)
DRAFT = noisy_draft(TARGET, 0.5, seed=12)  # alpha ~ 0.78-0.83 per position
PROMPT = [1]
N_DRAWS = 200_000
N_TOK = 3  # joint over the first 3 tokens: 4^3 = 64 cells


def joint_counts(tokens: np.ndarray, V: int) -> np.ndarray:
    """Counts of the N-token sequences; PAD is coded as an extra symbol V."""
    t = np.where(tokens < 0, V, tokens)
    code = np.zeros(len(t), dtype=np.int64)
    for j in range(t.shape[1]):
        code = code * (V + 1) + t[:, j]
    return np.bincount(code, minlength=(V + 1) ** t.shape[1])


def truncated_joint(J: np.ndarray, eos: int) -> np.ndarray:
    """Law of the output cells (tokens after the first EOS become PAD) from the exact joint J."""
    V, N = J.shape[0], J.ndim
    out = np.zeros((V + 1) ** N)
    for seq in np.ndindex(*J.shape):
        s, ended = [], False
        for x in seq:
            s.append(V if ended else x)
            ended = ended or x == eos
        code = 0
        for x in s:
            code = code * (V + 1) + x
        out[code] += J[seq]
    return out


class AcceptEverything(SpeculativeSampler):
    """A deliberately wrong sampler: every draft accepted (the u = 0 kernel bug)."""

    def uniforms(self, B, generator, dtype, device):
        u_draft, u_acc, u_fin = super().uniforms(B, generator, dtype, device)
        return u_draft, torch.zeros_like(u_acc), u_fin


def sample_joint(sampler_cls, tabular=True, eos=None, draws=N_DRAWS, k=2):
    s = sampler_cls(TARGET, DRAFT, k, tabular=tabular)
    res = s.generate(torch.tensor([PROMPT] * draws), N_TOK, eos, gen(2024))
    return joint_counts(res.tokens.numpy(), 4)


@pytest.mark.parametrize("sampler", ["tabular", "generic", "autoregressive"])
@pytest.mark.parametrize("eos", [None, 0])
def test_chi_square_of_the_joint_law(sampler, eos):
    """Counts of the first 3 tokens from 200,000 draws against the exact target joint (64 cells).

    False alarm: ALPHA = 1e-6 (asymptotic chi-square; cells pooled to expected counts >= 50, where
    the asymptotic tail is accurate to ~25 % of the nominal rate).  Power: with df ~ 60 a joint TV
    of 0.0122 or more is detected with probability >= 0.99 (noncentral chi-square, lambda = n w^2
    >= 4 n TV^2); see test_planning_functions_invert_each_other.  With eos = 0 the outputs are
    truncated after EOS and compared with the correspondingly truncated exact law.
    """
    J = exact_joint(TARGET, PROMPT, N_TOK)
    law = truncated_joint(J, eos if eos is not None else -1)
    if sampler == "autoregressive":
        res = autoregressive_generate(TARGET, torch.tensor([PROMPT] * N_DRAWS), max_new_tokens=N_TOK,
                                      eos_token_id=eos, generator=gen(2024))
        counts = joint_counts(res.tokens.numpy(), 4)
    else:
        counts = sample_joint(SpeculativeSampler, tabular=sampler == "tabular", eos=eos)
    support = law > 0
    assert counts[~support].sum() == 0, "a sequence of target probability 0 was emitted"
    stat, p, df = chi2_gof(counts[support], law[support])
    assert p > ALPHA, (stat, df)


def test_chi_square_can_fail():
    """The same check rejects an accept-every-draft sampler (joint TV to the target ~ 0.3)."""
    J = exact_joint(TARGET, PROMPT, N_TOK)
    law = truncated_joint(J, -1)
    counts = sample_joint(AcceptEverything, tabular=False)
    support = law > 0
    assert counts[~support].sum() == 0
    stat, p, df = chi2_gof(counts[support], law[support])
    assert p < ALPHA


# -- the per-sequence loop of the benchmark samples the target too ---------------------------------------
def test_loop_reference_samples_the_target():
    """benchmarks/loop_reference.py: joint of 3 tokens vs the exact target, chi-square, ALPHA = 1e-6.

    40,000 draws, ~60 cells: detects a joint TV >= 0.027 with probability 0.99.
    """
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "loop_reference.py"
    spec = importlib.util.spec_from_file_location("loop_reference", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    n = 40_000
    outs = mod.loop_speculative(mod.LoopTables(TARGET, DRAFT), [PROMPT] * n, 2, N_TOK, np.random.default_rng(3))
    counts = joint_counts(np.array(outs), 4)
    law = truncated_joint(exact_joint(TARGET, PROMPT, N_TOK), -1)
    support = law > 0
    stat, p, df = chi2_gof(counts[support], law[support])
    assert p > ALPHA and detectable_tv(n, df) < 0.03
    # and with EOS: nothing after it, same law as the truncated target
    outs = mod.loop_speculative(mod.LoopTables(TARGET, DRAFT), [PROMPT] * n, 2, N_TOK, np.random.default_rng(4),
                                eos_token_id=0)
    padded = np.array([o + [PAD] * (N_TOK - len(o)) for o in outs])
    counts = joint_counts(padded, 4)
    law = truncated_joint(exact_joint(TARGET, PROMPT, N_TOK), 0)
    support = law > 0
    assert counts[~support].sum() == 0
    assert chi2_gof(counts[support], law[support])[1] > ALPHA
