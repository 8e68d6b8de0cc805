"""Negative and positive controls: speculative samplers that are wrong, and ones that are lossless
but differ from the reference.

Each *buggy* sampler reproduces one root cause seen in a real implementation (the list in
``shared/references.md``: HF transformers, vLLM, vllm-ascend, TensorRT-LLM, mlx-lm, Medusa) by
overriding exactly one step of :class:`specimpl.speculative.SpeculativeSampler` (or by wrapping a
model).  None opts in to the sampler's lookup-table loop (``tabular=True``), so each runs the generic
round loop, where its overridden step is called.  Each *lossless* control changes the algorithm in a way that keeps the output law equal to
the target's (it may accept less); the harness must pass it.

Every control names the scenario (a file in ``harness/configs/verify/``) on which ``make verify`` runs it:
some bugs are harmless under some controls — the draft-q/temperature mismatch only matters when the
temperature is not 1, the top-p residual only when top-p < 1 — so each runs where it matters.

Notation as in :mod:`specimpl.speculative`: p (B, k+1, V) warped target laws, q (B, k, V) draft laws,
x (B, k) drafts, n (B,) accepted drafts, y (B,) the round's final token.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Optional

import torch

from specimpl.model import LanguageModel, ModelState
from specimpl.sampling import SamplingConfig, sample_categorical, warp
from specimpl.speculative import GenerationResult, SpeculativeSampler, verify_block
from specimpl.von_neumann import SNUG_M, VonNeumannSampler, uniform_proposal

__all__ = ["Control", "CATALOGUE", "BUGGY", "LOSSLESS", "get_control", "as_sampler_function"]


# ------------------------------------------------------------------------------- small helpers
def _accept_mask(p, q, x, u_accept):
    """(B, k) bool: u_i q_i(x_i) < p_i(x_i) (the reference acceptance test)."""
    k = q.shape[1]
    p_x = p[:, :k].gather(-1, x.unsqueeze(-1)).squeeze(-1)  # (B, k)
    q_x = q.gather(-1, x.unsqueeze(-1)).squeeze(-1)  # (B, k)
    return (q_x > 0) & (u_accept * q_x < p_x)


def _prefix_len(accept):
    return torch.cumprod(accept.to(torch.int8), dim=1).sum(dim=1)  # (B,)


def _rows(p, idx):
    return p[torch.arange(p.shape[0], device=p.device), idx]  # (B, V)


def _residual(p_row, q_row):
    r = (p_row - q_row).clamp(min=0)  # (B, V)
    return torch.where(r.sum(-1, keepdim=True) <= 0, p_row, r)


# ------------------------------------------------------------------------------------ buggy
class GreedyDraftSoftmaxQ(SpeculativeSampler):
    """Draft token taken by argmax while the acceptance ratio uses the softmax q."""

    def draw_draft(self, q, u):
        return q.argmax(-1)  # (B,)


class ResidualSoftmax(SpeculativeSampler):
    """Residual max(0, p - q) normalised with a softmax instead of division by its sum."""

    def verify(self, p, q, x, u_accept, u_final):
        k = q.shape[1]
        n = _prefix_len(_accept_mask(p, q, x, u_accept))
        p_n, q_n = _rows(p, n), _rows(q, n.clamp(max=k - 1))
        resid = torch.softmax((p_n - q_n).clamp(min=0), dim=-1)  # (B, V) the bug: exp(0) = 1 everywhere
        law = torch.where((n < k).unsqueeze(-1), resid, p_n)
        return n, sample_categorical(law, u_final)


class ReusedAcceptanceUniform(SpeculativeSampler):
    """The residual draw reuses the acceptance uniform of the rejected position as its threshold."""

    def verify(self, p, q, x, u_accept, u_final):
        k = q.shape[1]
        n = _prefix_len(_accept_mask(p, q, x, u_accept))
        u_rej = u_accept.gather(1, n.clamp(max=k - 1).unsqueeze(1)).squeeze(1)  # (B,)
        return verify_block(p, q, x, u_accept, torch.where(n < k, u_rej, u_final))


class SharedRoundUniform(SpeculativeSampler):
    """One acceptance uniform shared by all k positions of a round."""

    def uniforms(self, B, generator, dtype, device):
        u_draft, u_acc, u_fin = super().uniforms(B, generator, dtype, device)
        return u_draft, u_acc[:, :1].expand(-1, self.k).contiguous(), u_fin


class KeepAfterRejection(SpeculativeSampler):
    """Accepted length counted as the number of accepted positions, so drafts after the first
    rejection are kept (the rejected one included)."""

    def verify(self, p, q, x, u_accept, u_final):
        n_ref, y = verify_block(p, q, x, u_accept, u_final)
        return _accept_mask(p, q, x, u_accept).sum(1), y  # sum, not the accepted prefix


class BonusFromDraft(SpeculativeSampler):
    """When all k drafts are accepted, the bonus token is drawn from the draft's q_k, not p_{k+1}."""

    def verify(self, p, q, x, u_accept, u_final):
        k = q.shape[1]
        n, y = verify_block(p, q, x, u_accept, u_final)
        y_bug = sample_categorical(q[:, k - 1], u_final)
        return n, torch.where(n == k, y_bug, y)


class BonusFromResidual(SpeculativeSampler):
    """The bonus token is drawn from a residual norm(max(0, p_{k+1} - q_k)) as if a rejection had happened."""

    def verify(self, p, q, x, u_accept, u_final):
        k = q.shape[1]
        n, y = verify_block(p, q, x, u_accept, u_final)
        y_bug = sample_categorical(_residual(p[:, k], q[:, k - 1]), u_final)
        return n, torch.where(n == k, y_bug, y)


class BonusWrongPosition(SpeculativeSampler):
    """The bonus token is taken from the wrong row: p_k (the law x_k was judged against) instead of p_{k+1}."""

    def verify(self, p, q, x, u_accept, u_final):
        k = q.shape[1]
        n, y = verify_block(p, q, x, u_accept, u_final)
        y_bug = sample_categorical(p[:, k - 1], u_final)
        return n, torch.where(n == k, y_bug, y)


class DraftControlsMissingFromQ(SpeculativeSampler):
    """The draft token is drawn with the sampling controls (temperature, top-k, top-p) but the q
    handed to the acceptance ratio is the draft's plain softmax: q is not what the draft was drawn from."""

    def warp_draft(self, logits):
        return torch.softmax(logits, dim=-1)  # (B, V) the q used in the ratio: controls missing

    def draw_draft(self, q, u):
        return sample_categorical(warp(torch.log(q), self.config), u)  # drawn with the controls


class TargetControlsMissing(SpeculativeSampler):
    """The sampling controls are applied to the draft but not to the target: p is the plain softmax."""

    def warp_target(self, logits):
        return torch.softmax(logits, dim=-1)  # (B, k+1, V)


class TopPNotOnResidual(SpeculativeSampler):
    """top-p filters the target for acceptance and bonus, but the residual at a rejection is built from
    the target without the top-p filter, so tokens outside the nucleus can be emitted."""

    def warp_target(self, logits):
        self._p_unfiltered = warp(logits, dataclasses.replace(self.config, top_p=1.0))  # (B, k+1, V)
        return warp(logits, self.config)

    def verify(self, p, q, x, u_accept, u_final):
        k = q.shape[1]
        n, y = verify_block(p, q, x, u_accept, u_final)
        raw = _rows(self._p_unfiltered, n)
        y_bug = sample_categorical(_residual(raw, _rows(q, n.clamp(max=k - 1))), u_final)
        return n, torch.where(n < k, y_bug, y)


class AcceptEverything(SpeculativeSampler):
    """The acceptance uniforms are a constant 0, so every draft with p(x) > 0 is accepted."""

    def uniforms(self, B, generator, dtype, device):
        u_draft, u_acc, u_fin = super().uniforms(B, generator, dtype, device)
        return u_draft, torch.zeros_like(u_acc), u_fin


class TypicalAcceptance(SpeculativeSampler):
    """Medusa-style typical acceptance (lossy by design): accept x_i iff
    p_i(x_i) > min(epsilon, delta exp(-H(p_i))); at the first rejection sample y ~ p_i; bonus y ~ p_{k+1}.
    Medusa's defaults: posterior threshold epsilon = 0.09, delta = sqrt(epsilon) = 0.3."""

    epsilon, delta = 0.09, 0.3

    def verify(self, p, q, x, u_accept, u_final):
        k = q.shape[1]
        pk = p[:, :k]  # (B, k, V)
        H = -(pk * torch.log(pk.clamp_min(1e-30))).sum(-1)  # (B, k) entropy
        thresh = torch.minimum(torch.full_like(H, self.epsilon), self.delta * torch.exp(-H))
        p_x = pk.gather(-1, x.unsqueeze(-1)).squeeze(-1)  # (B, k)
        n = _prefix_len(p_x > thresh)
        return n, sample_categorical(_rows(p, n), u_final)


class OffByOneAcceptedLength(SpeculativeSampler):
    """Off-by-one in the accepted length: after a rejection at position n+1 the rejected draft is kept
    and the residual token follows it."""

    def verify(self, p, q, x, u_accept, u_final):
        k = q.shape[1]
        n, y = verify_block(p, q, x, u_accept, u_final)
        return torch.where(n < k, n + 1, n), y


class WrongLogitsRow(SpeculativeSampler):
    """Verification reads the target's logits one row late: x_i is judged against p_{i+1}."""

    def verify(self, p, q, x, u_accept, u_final):
        shifted = torch.cat([p[:, 1:], p[:, -1:]], dim=1)  # (B, k+1, V)
        return verify_block(shifted, q, x, u_accept, u_final)


class _NoRollback(LanguageModel):
    """Model wrapper whose ``rollback`` does nothing (KV / context not rolled back after a rejection)."""

    def __init__(self, inner: LanguageModel):
        self.inner = inner
        self.vocab_size = inner.vocab_size
        self.device = inner.device
        self.name = f"{inner.name}~no-rollback"
        self.dtype = getattr(inner, "dtype", torch.float32)

    def prefill(self, prompts) -> ModelState:
        return self.inner.prefill(prompts)

    def forward(self, state, tokens, n_new=None):
        return self.inner.forward(state, tokens, n_new)

    def rollback(self, state, lengths) -> None:
        pass  # the bug: every fed token stays in the state, rejected drafts become context

    def select(self, state, index):
        return self.inner.select(state, index)


class TargetNotRolledBack(SpeculativeSampler):
    """The target's state (KV cache / context) is not rolled back after a rejection: rejected drafts
    stay in the context of later positions."""

    def __init__(self, target, draft, k, config=SamplingConfig()):
        super().__init__(_NoRollback(target), draft, k, config)


# ---------------------------------------------------------------------------------- lossless
class NoBonusToken(SpeculativeSampler):
    """Lossless, less efficient: when all k drafts are accepted no bonus token is drawn; x_k is the
    round's last token (reported as k - 1 accepted plus x_k)."""

    def verify(self, p, q, x, u_accept, u_final):
        k = q.shape[1]
        n, y = verify_block(p, q, x, u_accept, u_final)
        full = n == k
        return torch.where(full, n - 1, n), torch.where(full, x[:, k - 1], y)


class GreedyDraftOneHotQ(SpeculativeSampler):
    """Lossless: the draft is greedy and q is the one-hot law it is drawn from."""

    def warp_draft(self, logits):
        q = warp(logits, self.config)  # (B, V)
        return torch.zeros_like(q).scatter_(-1, q.argmax(-1, keepdim=True), 1.0)


class NeverAccept(SpeculativeSampler):
    """Lossless, maximally inefficient: every draft is rejected and the round's token is drawn from p_1."""

    def verify(self, p, q, x, u_accept, u_final):
        n = torch.zeros(x.shape[0], dtype=torch.long, device=x.device)
        return n, sample_categorical(p[:, 0], u_final)


class DraftWithoutControls(SpeculativeSampler):
    """Lossless: sampling controls applied to the target only; the draft draws from its plain softmax,
    and that softmax is the q in the ratio (draft quality changes, the output law does not)."""

    def warp_draft(self, logits):
        return torch.softmax(logits, dim=-1)


class DraftNotRolledBack(SpeculativeSampler):
    """Lossless: the *draft's* state is not rolled back; its proposals come from a stale context, but q
    is still the law they were drawn from."""

    def __init__(self, target, draft, k, config=SamplingConfig()):
        super().__init__(target, _NoRollback(draft), k, config)


class ReferenceGenericPath(SpeculativeSampler):
    """The reference sampler itself, forced through the generic round loop (model calls through
    forward / rollback / select, as for HF models) instead of the n-gram lookup-table loop
    (:mod:`specimpl.tabular`) that ``speculative_generate`` opts in to in the scenarios; it must pass
    like the reference."""

    def __init__(self, target, draft, k, config=SamplingConfig()):
        super().__init__(target, draft, k, config, tabular=False)  # explicit, though False is the default


# ---------------------------------------------------------------------------------- catalogue
def as_sampler_function(cls) -> Callable[..., GenerationResult]:
    """A function with the documented sampler signature that runs ``cls`` (a SpeculativeSampler)."""

    def generate(target, draft, prompts, *, k, max_new_tokens, config=SamplingConfig(), eos_token_id=None,
                 generator=None) -> GenerationResult:
        return cls(target, draft, k, config).generate(prompts, max_new_tokens, eos_token_id, generator)

    generate.__name__ = generate.__qualname__ = f"{cls.__name__}_generate"
    generate.__doc__ = cls.__doc__
    return generate


@dataclass(frozen=True)
class Control:
    """One control: ``kind`` is 'lossy', 'lossy-by-design' or 'lossless'; ``scenario`` the scenario file
    on which make verify runs it; ``shows_when`` what a scenario needs for the bug to change the law."""

    name: str
    cls: type
    kind: str
    root_cause: str
    seen_in: str
    scenario: str
    shows_when: str
    expect_inefficient: Optional[bool] = None

    @property
    def sampler(self) -> Callable[..., GenerationResult]:
        return as_sampler_function(self.cls)

    @property
    def must_be_caught(self) -> bool:
        return self.kind != "lossless"


CATALOGUE: tuple[Control, ...] = (
    Control("greedy_draft_softmax_q", GreedyDraftSoftmaxQ, "lossy",
            "draft taken greedily (argmax) while the acceptance ratio uses q = softmax",
            "HF transformers #32867; jaymody/speculative-sampling #3", "base",
            "any sampled (non-greedy) scenario where q is not one-hot"),
    Control("residual_softmax", ResidualSoftmax, "lossy",
            "residual max(0, p - q) normalised with a softmax instead of its sum",
            "HF transformers PR #28508", "base", "any scenario with rejections (alpha < 1)"),
    Control("reused_acceptance_uniform", ReusedAcceptanceUniform, "lossy",
            "acceptance uniform reused as the threshold of the residual draw",
            "vllm-ascend PR #16370", "base", "any scenario with rejections of drafts with p/q > 0"),
    Control("shared_round_uniform", SharedRoundUniform, "lossy",
            "one acceptance uniform shared by all positions of a round", "(class of per-round noise bugs)",
            "base", "k >= 2 and 0 < alpha < 1"),
    Control("keep_after_rejection", KeepAfterRejection, "lossy",
            "accepted length counted as accepted positions, so drafts after the first rejection are kept",
            "vLLM counters (accepted after a rejection, PR #7244)", "base", "k >= 2 and 0 < alpha < 1"),
    Control("bonus_from_draft", BonusFromDraft, "lossy",
            "bonus token drawn from the draft's q instead of the target's p_{k+1}",
            "(bonus-token handling; vLLM MRV2 tests bonus positions for this reason)", "alpha_one",
            "rounds where all k drafts are accepted"),
    Control("bonus_from_residual", BonusFromResidual, "lossy",
            "bonus token drawn from a residual as if a rejection had happened",
            "(bonus-token handling)", "alpha_one", "rounds where all k drafts are accepted"),
    Control("bonus_wrong_position", BonusWrongPosition, "lossy",
            "bonus token taken from the wrong logits row (p_k instead of p_{k+1})",
            "(bonus-token handling; cf. TensorRT-LLM PR #15098)", "alpha_one",
            "rounds where all k drafts are accepted and p_k != p_{k+1}"),
    Control("draft_controls_missing_from_q", DraftControlsMissingFromQ, "lossy",
            "draft drawn with temperature/top-k while the ratio's q lacks them (draft and target given "
            "different logits processors)", "HF transformers PR #28166", "temperature_topk",
            "temperature != 1 or top-k/top-p active; harmless at T = 1 without filters"),
    Control("target_controls_missing", TargetControlsMissing, "lossy",
            "temperature/top-k applied to the draft but not to the target", "HF transformers PR #28166",
            "temperature_topk", "temperature != 1 or top-k/top-p active"),
    Control("top_p_not_on_residual", TopPNotOnResidual, "lossy",
            "top-p applied to the target but not to the residual", "(logits-processor placement)", "top_p",
            "top_p < 1 with rejections"),
    Control("accept_everything", AcceptEverything, "lossy",
            "kernel used a constant u = 0, so every draft was accepted", "vllm-ascend PR #13766", "base",
            "any scenario with q != p"),
    Control("typical_acceptance", TypicalAcceptance, "lossy-by-design",
            "Medusa / vLLM typical acceptance (threshold on p(x), entropy-adaptive)",
            "Medusa; vLLM TypicalAcceptanceSampler", "base", "always (lossy by design: its TV is reported)"),
    Control("off_by_one_accepted_length", OffByOneAcceptedLength, "lossy",
            "off-by-one in the accepted length: the rejected draft is emitted", "(accounting bugs, SGLang PR #11572)",
            "base", "any scenario with rejections"),
    Control("wrong_logits_row", WrongLogitsRow, "lossy",
            "wrong logits row used for verification (x_i judged against p_{i+1})", "TensorRT-LLM PR #15098",
            "base", "any scenario with context-dependent p"),
    Control("target_not_rolled_back", TargetNotRolledBack, "lossy",
            "target KV / recurrent state not rolled back after a rejection", "mlx-lm PR #1109", "eos_order3",
            "order >= 3 (a bigram's context is the last token only, so stale history is invisible) and rejections"),
    # lossless but different: must pass
    Control("no_bonus_token", NoBonusToken, "lossless", "no bonus token after a fully accepted round",
            "(valid simplification)", "base", "-", expect_inefficient=True),
    Control("greedy_draft_one_hot_q", GreedyDraftOneHotQ, "lossless", "greedy draft with one-hot q",
            "(valid: q is the law the draft was drawn from)", "base", "-"),
    Control("never_accept", NeverAccept, "lossless", "every draft rejected, token drawn from p_1",
            "(valid: plain target sampling)", "base", "-", expect_inefficient=True),
    Control("draft_without_controls", DraftWithoutControls, "lossless",
            "controls on the target only, draft draws from and reports its plain softmax",
            "(valid counterpart of draft_controls_missing_from_q)", "temperature_topk", "-"),
    Control("draft_not_rolled_back", DraftNotRolledBack, "lossless",
            "draft state not rolled back (stale proposals, correct q)",
            "(valid counterpart of target_not_rolled_back)", "eos_order3", "-", expect_inefficient=True),
    Control("reference_generic_path", ReferenceGenericPath, "lossless",
            "the reference sampler through the generic model-call loop (EOS, compaction, order 3)",
            "(the code path HF models take)", "eos_order3", "-"),
)

BUGGY = tuple(c for c in CATALOGUE if c.must_be_caught)
LOSSLESS = tuple(c for c in CATALOGUE if not c.must_be_caught)


def get_control(name: str) -> Control:
    for c in CATALOGUE:
        if c.name == name:
            return c
    raise ValueError(f"`control` must be one of {[c.name for c in CATALOGUE]}; got {name!r}")


# ---------------------------------------------------------------------------- von Neumann controls
def _vn_envelope_too_small(density):
    """Envelope M = 2.8 declared (and checked on the grid) but the acceptance uses M' = 2 < sup p/q,
    clipped to 1: the peaks are under-sampled and the acceptance is not 1/M."""

    class EnvelopeTooSmall(VonNeumannSampler):
        def accept_probability(self, px, qx):
            return (px / (2.0 * qx)).clamp(max=1.0)

    q, draw = uniform_proposal()
    return EnvelopeTooSmall(density.pdf, q, draw, SNUG_M)


VN_CONTROLS = (("vn_envelope_too_small", 2.8, _vn_envelope_too_small),)
