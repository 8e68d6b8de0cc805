"""Negative and positive controls for block verification and token-tree verification.

Each *buggy* sampler reproduces one root cause seen in a public implementation of block, tree or
multi-draft verification by overriding one step of :class:`specimpl.block.BlockSampler` or
:class:`specimpl.tree.TreeSampler` (or by wrapping the target); ``seen_in`` names the issue or pull
request.  Each *lossless* control changes the algorithm in a way that keeps the output law the
target's; the harness must pass it.

Two facts these controls rest on (both follow from speculative sampling being valid for *any*
proposal law, as long as the law the rule is given is the one the candidate was drawn from, and the
candidates are drawn independently of the verification's uniforms):

* a candidate chosen deterministically is drawn from a point mass: judging it with q = one-hot
  (accept with probability r(x), on rejection remove x from r) is lossless — EAGLE's rule — and so is
  block verification told q_i = one-hot at the drafted tokens; both only accept less;
* judging a deterministic candidate with the draft's soft q(x), or candidates drawn without
  replacement with the parent's unrenormalised q, is not.

:func:`quick_law_check` is the small statistical check of ``tests/controls/test_bugs_tree.py``: χ² of every
position's symbol and of the joint of the first tokens against the exact target law
(:class:`harness.laws.ngram.ExactLaw`), Bonferroni over those tests.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np
import torch

from harness.laws.ngram import ExactLaw
from harness.stats import chi2_gof
from specimpl.block import BlockSampler, block_final_draw, block_passes, block_weights, verify_block_jointly
from specimpl.ngram import noisy_draft, random_ngram
from specimpl.result import GenerationResult
from specimpl.sampling import SamplingConfig, sample_categorical
from specimpl.tree import TreeSampler, sibling_laws, verify_tree
from specimpl.tree_models import SequentialTreeModel, TreeAdapter

__all__ = ["TreeControl", "CATALOGUE", "BUGGY", "LOSSLESS", "get_control", "QuickCheck", "quick_law_check",
           "control_scenario"]


# ------------------------------------------------------------------------------ block: buggy
class BlockProductOfRatios(BlockSampler):
    """Accepts the longest prefix whose product of clipped ratios prod_{j<=i} min(1, p_j/q_j) is at
    least the product of its uniforms prod_{j<=i} u_j, then resamples from the token-level residual
    norm(max(0, p - q)) at the next position (vllm-ascend's first block-verify code)."""

    def verify(self, p, q, x, u_accept, u_final):
        k = q.shape[1]
        _, p_x, q_x = block_weights(p, q, x)
        ratio = torch.where(q_x > 0, p_x / q_x.clamp(min=1e-30), torch.zeros_like(p_x)).clamp(max=1.0)  # (B, k)
        legal = (q_x > 0) & (torch.cumprod(ratio, 1) >= torch.cumprod(u_accept, 1))  # (B, k)
        n = (legal * torch.arange(1, k + 1, device=p.device)).amax(1)  # (B,) last legal position
        rows = torch.arange(q.shape[0], device=p.device)
        p_n, q_n = p[rows, n], q[rows, n.clamp(max=k - 1)]
        resid = (p_n - q_n).clamp(min=0)
        law = torch.where((n < k).unsqueeze(1) & (resid.sum(-1, keepdim=True) > 0), resid, p_n)
        return n, sample_categorical(law, u_final)


class BlockTokenResidual(BlockSampler):
    """Block acceptance (tau) as published, but the token after tau is drawn from the token-level
    residual norm(max(0, p - q)) instead of norm(max(0, w_tau p - q))."""

    def verify(self, p, q, x, u_accept, u_final):
        k = q.shape[1]
        tau, y = verify_block_jointly(p, q, x, u_accept, u_final)
        rows = torch.arange(q.shape[0], device=p.device)
        p_n, q_n = p[rows, tau], q[rows, tau.clamp(max=k - 1)]
        resid = (p_n - q_n).clamp(min=0)
        y_bug = sample_categorical(torch.where(resid.sum(-1, keepdim=True) > 0, resid, p_n), u_final)
        return tau, torch.where(tau < k, y_bug, y)


class BlockFirstFailureStop(BlockSampler):
    """Stops at the first position whose test eta_i < h_i fails (an accepted prefix) instead of taking
    the largest passing position."""

    def verify(self, p, q, x, u_accept, u_final):
        prefix = block_passes(p, q, x, u_accept).int().cumprod(1).sum(1)  # (B,) the bug: a prefix
        return prefix, block_final_draw(p, q, block_weights(p, q, x)[0], prefix, u_final)


class BlockWeightOffByOne(BlockSampler):
    """The stop probabilities use the weight before the token, w_{i-1}, where the paper has w_i: in the
    residual mass, in h_i's denominator, and h_k = w_{k-1} at the last position."""

    def verify(self, p, q, x, u_accept, u_final):
        w, _, _ = block_weights(p, q, x)
        w_prev = torch.cat([torch.ones_like(w[:, :1]), w[:, :-1]], 1)  # (B, k) the bug: w_{i-1}
        passed = block_passes(p, q, x, u_accept, w=w_prev)
        tau = (passed * torch.arange(1, q.shape[1] + 1, device=p.device)).amax(1)
        return tau, block_final_draw(p, q, w, tau, u_final)


# ------------------------------------------------------------------------------- tree: buggy
class TreeTopNSoftQ(TreeSampler):
    """The children of a node are its draft's most probable tokens (top-1, top-2, ...: deterministic),
    but the rule judges them as if drawn from q without replacement (built with replacement=False)."""

    def draw_children(self, q, u):
        return torch.where(q.sum(-1) > 0, q.argmax(-1), -1)  # (A, c) the bug: no randomness


def _subtract_at_drafted_token(R, Z, q_j, t0, rejected):
    """r <- norm(max(0, r - q_j(x) 1[x])): only the drafted token's draft mass is removed."""
    only = torch.zeros_like(q_j).scatter(1, t0, q_j.gather(1, t0))  # (B, V)
    R_new = (R - Z * only).clamp(min=0)
    Z_new = R_new.sum(-1, keepdim=True)
    ok = rejected.unsqueeze(1) & (Z_new > 0)
    return torch.where(ok, R_new, R), torch.where(ok, Z_new, Z)


class TreeResidualAtDraftedToken(TreeSampler):
    """After a rejected child the residual subtracts the draft mass at the drafted token only,
    max(0, r - q(x) 1[x]), instead of the whole draft law max(0, r - q)."""

    def verify(self, p, qc, x, u_accept, u_final):
        return verify_tree(p, qc, x, self.tree, u_accept, u_final, rejection_update=_subtract_at_drafted_token)


class TreeWithoutReplacementPlainQ(TreeSampler):
    """Children drawn without replacement (built with replacement=False) but judged with the parent's
    q, as if they were iid: the later siblings' laws are not renormalised without the earlier tokens."""

    def proposal_laws(self, q, x):
        return sibling_laws(q, x, self.tree, replacement=True)


class _TreeModelWrapper(TreeAdapter):
    """A tree model whose two tree methods go to the wrapped tree model (for model-level bugs)."""

    def forward_tree(self, state, tokens, parents):
        return self.inner.forward_tree(state, tokens, parents)

    def commit_path(self, state, tokens, path, n):
        self.inner.commit_path(state, tokens, path, n)


class _CausalMaskOverTree(_TreeModelWrapper):
    """Scores the flattened tree with a plain causal mask: node t sees every earlier node."""

    def forward_tree(self, state, tokens, parents):
        chain = torch.arange(-1, tokens.shape[1] - 1)  # (T,) each node's "parent" is the previous node
        return self.inner.forward_tree(state, tokens, chain)


class _CommitFlattenedPrefix(_TreeModelWrapper):
    """Keeps the first n + 1 tree nodes in flattened order instead of the accepted path."""

    def commit_path(self, state, tokens, path, n):
        flat = torch.arange(path.shape[1], device=path.device).expand_as(path)  # (B, P)
        self.inner.commit_path(state, tokens, flat, n)


class TreeCausalMask(TreeSampler):
    """The target scores the tree with the causal mask of the flattened node order (positions by node
    index) instead of the tree mask: a node sees its earlier siblings and cousins."""

    def __init__(self, target, draft, k, config=SamplingConfig(), **kw):
        super().__init__(target, draft, k, config, **kw)
        self.target = _CausalMaskOverTree(self.target)


class TreeCacheNotCompacted(TreeSampler):
    """After verification the target keeps the first n + 1 nodes of the flattened tree (its KV slots as
    written) instead of moving the accepted path's entries into place: rejected branches stay in the
    context of later rounds (visible from order 3 on, when the context reaches behind the pending token)."""

    def __init__(self, target, draft, k, config=SamplingConfig(), **kw):
        super().__init__(target, draft, k, config, **kw)
        self.target = _CommitFlattenedPrefix(self.target)


# -------------------------------------------------------------------------------- lossless
class BlockOneDraft(BlockSampler):
    """Block verification with k = 1 whatever k is asked: the token-level rule, decision for decision."""

    def __init__(self, target, draft, k, config=SamplingConfig(), **kw):
        super().__init__(target, draft, 1, config, **kw)


class BlockOneHotQ(BlockSampler):
    """Block verification told that each draft was drawn from a point mass at itself (q_i = one-hot x_i,
    as for a drafter that reports no probabilities): lossless, accepts less."""

    def verify(self, p, q, x, u_accept, u_final):
        return verify_block_jointly(p, torch.zeros_like(q).scatter_(-1, x.unsqueeze(-1), 1.0), x, u_accept, u_final)


class TreeOneHotRule(TreeSampler):
    """EAGLE's rule on sampled children: each child judged as drawn from a point mass at its token
    (accept with probability r(x); on rejection remove x from r): lossless, accepts less."""

    def proposal_laws(self, q, x):
        one_hot = torch.zeros(x.shape + (q.shape[-1],), dtype=q.dtype, device=q.device)
        return one_hot.scatter_(-1, x.clamp(min=0).unsqueeze(-1), (x >= 0).unsqueeze(-1).to(q.dtype))


class TreeTopNOneHot(TreeOneHotRule):
    """EAGLE-2's scheme: deterministic top-n children (built with replacement=False), each judged as a
    point mass: lossless."""

    draw_children = TreeTopNSoftQ.draw_children


class TreeSequentialFallback(TreeSampler):
    """The reference tree sampler with both models behind the sequential fallback of the tree interface
    (one forward + rollback per root-to-leaf path): the same law."""

    def __init__(self, target, draft, k, config=SamplingConfig(), **kw):
        super().__init__(SequentialTreeModel(target), SequentialTreeModel(draft), k, config, **kw)


# ------------------------------------------------------------------------------- catalogue
@dataclass(frozen=True)
class TreeControl:
    """One control.  ``kind``: 'lossy' or 'lossless'; ``family``: 'block' or 'tree'; ``kwargs`` go to the
    sampler class (tree shape, replacement); ``scenario`` the file in harness/configs/verify/ where
    ``make verify`` should run it; ``shows_when`` what a scenario needs for the bug to change the law."""

    name: str
    cls: type
    kind: str
    family: str
    root_cause: str
    seen_in: str
    scenario: str = "base"
    shows_when: str = "-"
    kwargs: dict = field(default_factory=dict)
    quick_draws: int = 60_000  # sequences at which quick_law_check detects the bug (measured over 5 seeds)

    @property
    def must_be_caught(self) -> bool:
        return self.kind != "lossless"

    def make(self, target, draft, k, config=SamplingConfig()):
        return self.cls(target, draft, k, config, **self.kwargs)

    @property
    def sampler(self) -> Callable[..., GenerationResult]:
        """A function with the sampler call signature that runs this control."""

        def generate(target, draft, prompts, *, k, max_new_tokens, config=SamplingConfig(), eos_token_id=None,
                     generator=None) -> GenerationResult:
            return self.make(target, draft, k, config).generate(prompts, max_new_tokens, eos_token_id, generator)

        generate.__name__ = generate.__qualname__ = f"{self.name}_generate"
        generate.__doc__ = self.cls.__doc__
        return generate


_WOR = {"replacement": False}
CATALOGUE: tuple[TreeControl, ...] = (
    TreeControl("block_product_of_ratios", BlockProductOfRatios, "lossy", "block",
                "block acceptance as prod min(1, p/q) >= prod u over the prefix, token-level residual",
                "vllm-ascend issue #7807 (fixed by PR #7808)", shows_when="k >= 2 and 0 < alpha < 1"),
    TreeControl("block_token_residual", BlockTokenResidual, "lossy", "block",
                "block acceptance but the recovered token drawn from the token-level residual max(0, p - q)",
                "vllm-ascend issue #7807 / PR #7808 (sample_recovered_tokens ignored block_verify)",
                shows_when="k >= 2 and rejections with w_tau < 1", quick_draws=150_000),
    TreeControl("block_first_failure_stop", BlockFirstFailureStop, "lossy", "block",
                "block verification stopped at the first failed h-test (an accepted prefix) instead of the last pass",
                "vllm-ascend PR #11985 (review comment marked critical proposing exactly this change)",
                shows_when="k >= 2"),
    TreeControl("block_weight_off_by_one", BlockWeightOffByOne, "lossy", "block",
                "h_i computed with the weight before the token, w_{i-1}, and h_k = w_{k-1}",
                "vllm-ascend PR #7808, commit 8d1a4be 'correct h_block computation and p_i indexing'",
                shows_when="k >= 1 with p != q"),
    TreeControl("tree_top_n_soft_q", TreeTopNSoftQ, "lossy", "tree",
                "deterministic candidates (top-n / beam search of the draft) judged with the draft's q(x)",
                "apple/ml-recurrent-drafter issue #6", shows_when="q not one-hot", kwargs=_WOR),
    TreeControl("tree_residual_at_drafted_token", TreeResidualAtDraftedToken, "lossy", "tree",
                "residual after a rejection subtracts the draft mass at the drafted token only",
                "xLLM-AI/xllm PR #2175", shows_when="rejections with q spread over several tokens"),
    TreeControl("tree_without_replacement_plain_q", TreeWithoutReplacementPlainQ, "lossy", "tree",
                "siblings drawn without replacement, judged with the parent's unrenormalised q",
                "ggml-org/llama.cpp PR #5625 (review check script: distinct children, with-replacement rule); "
                "SafeAILab/EAGLE issue #74", shows_when="two or more siblings", kwargs=_WOR),
    TreeControl("tree_causal_mask", TreeCausalMask, "lossy", "tree",
                "tree scored with the causal mask of the flattened node order (no tree mask inside the block)",
                "PaddlePaddle/FastDeploy PR #3514 (tree mask skipped inside the causal lower triangle)",
                shows_when="two or more siblings and a context-dependent target"),
    TreeControl("tree_cache_not_compacted", TreeCacheNotCompacted, "lossy", "tree",
                "the target keeps the flattened tree's first slots instead of the accepted path",
                "tree form of a cache not rolled back after a rejection (mlx-lm PR #1109)", scenario="eos_order3",
                shows_when="order >= 3 and an accepted path that is not the first nodes"),
    # lossless but different: must pass
    TreeControl("block_one_draft", BlockOneDraft, "lossless", "block", "block verification on k = 1",
                "(equals the token-level rule)"),
    TreeControl("block_one_hot_q", BlockOneHotQ, "lossless", "block",
                "block verification with q := one-hot at the drafted tokens",
                "vLLM PR #40819 and vllm-ascend PR #7603 (drafters without probabilities; more conservative)"),
    TreeControl("tree_one_chain", TreeSampler, "lossless", "tree", "tree sampler with n_drafts = 1",
                "(equals the token-level rule)", kwargs={"n_drafts": 1}),
    TreeControl("tree_one_hot_rule", TreeOneHotRule, "lossless", "tree",
                "sampled children judged as point masses (EAGLE's q(x) = 1 rule)",
                "SafeAILab/EAGLE issues #183, #221, #329 (questioned there; lossless, less efficient)"),
    TreeControl("tree_top_n_one_hot", TreeTopNOneHot, "lossless", "tree",
                "deterministic top-n children judged as point masses (EAGLE-2)", "SafeAILab/EAGLE issue #110",
                kwargs=_WOR),
    TreeControl("tree_without_replacement", TreeSampler, "lossless", "tree",
                "the reference without-replacement rule", "(Sequoia / recursive speculative decoding)", kwargs=_WOR),
    TreeControl("tree_sequential_fallback", TreeSequentialFallback, "lossless", "tree",
                "tree sampler through the sequential fallback of the tree interface", "(the path of any other model)"),
)

BUGGY = tuple(c for c in CATALOGUE if c.must_be_caught)
LOSSLESS = tuple(c for c in CATALOGUE if not c.must_be_caught)


def get_control(name: str) -> TreeControl:
    for c in CATALOGUE:
        if c.name == name:
            return c
    raise ValueError(f"`control` must be one of {[c.name for c in CATALOGUE]}; got {name!r}")


# ---------------------------------------------------------------------------- quick check
def control_scenario() -> dict:
    """The small scenario of the quick checks: V = 4 trigram target, poor noisy draft (eps 0.9: many
    rejections, where most of these bugs act), k = 3, 4 new tokens from prompt [1, 2], T = 1, no EOS,
    joint of the first 3 tokens."""
    target = random_ngram(4, 3, concentration=0.5, seed=0)
    return dict(target=target, draft=noisy_draft(target, 0.9), prompt=[1, 2], k=3, max_new_tokens=4,
                config=SamplingConfig(), eos_token_id=None, joint_tokens=3)


@dataclass(frozen=True)
class QuickCheck:
    """Bonferroni p-value over the χ² tests; TV(Q̂, P) of the joint; the joint test's detectable TV."""

    pvalue: float
    n_tests: int
    tv_joint: float
    min_detectable_tv_joint: float
    draws: int


def quick_law_check(sampler: Callable[..., GenerationResult], *, draws: int, seed: int, family_alpha: float = 1e-6,
                    scenario: Optional[dict] = None) -> QuickCheck:
    """χ² of each position's symbol (PAD included) and of the joint of the first tokens against the
    exact target law, for ``draws`` sequences of ``sampler``; Bonferroni at ``family_alpha``."""
    sc = control_scenario() if scenario is None else scenario
    law = ExactLaw(sc["target"], sc["draft"], sc["prompt"], sc["max_new_tokens"], sc["config"], sc["eos_token_id"])
    prompts = torch.tensor([sc["prompt"]] * draws)
    res = sampler(sc["target"], sc["draft"], prompts, k=sc["k"], max_new_tokens=sc["max_new_tokens"],
                  config=sc["config"], eos_token_id=sc["eos_token_id"], generator=torch.Generator().manual_seed(seed))
    sym = law.symbols(res.tokens)  # (draws, N)
    W, J = law.n_symbols, sc["joint_tokens"]
    cells = [(np.bincount(sym[:, t], minlength=W), law.marginals()[t]) for t in range(law.N)]
    flat = (sym[:, :J] * W ** np.arange(J - 1, -1, -1)).sum(1)
    cells.append((np.bincount(flat, minlength=W ** J), law.joint(J)))
    level = family_alpha / len(cells)
    results = [chi2_gof(c, p, alpha=level) for c, p in cells]
    p_min = min(r.pvalue for r in results)
    return QuickCheck(min(1.0, p_min * len(results)), len(results), results[-1].tv_hat,
                      results[-1].min_detectable_tv, draws)
