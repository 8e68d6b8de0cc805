"""Bugs that only exist with real KV-cached models: negative controls for the real-model battery.

Each is a faithful reproduction of a root cause seen in public implementations, built by
overriding one method of :class:`specimpl.hf.HFModel` (or of the sampler), and each has the
sampler call signature so the harness can verify it like any sampler:

    no_rollback_generate      the target's KV cache is not rolled back after a rejection: the next
                              round attends to rejected drafts (mlx-lm PR #1109, state not rolled back)
    shared_position_generate  ragged batch: every row gets the batch's longest position ids, so rows
                              behind it see a gap between their cache and their new tokens
    leaky_mask_generate       ragged batch: the attention mask uses the batch's longest length, so
                              shorter rows attend to stale slots past their own end (rolled-back drafts)
    residual_softmax_generate residual normalised with a softmax instead of its sum (HF PR #28508)
    greedy_draft_generate     draft token taken by argmax while the ratio uses q = softmax (HF #32867)

and one lossless-but-different control:

    draft_no_rollback_generate  only the *draft's* cache is never rolled back: q is still exactly the
                              law each draft token was drawn from, so the output stays lossless
                              (acceptance drops); the battery must pass it.
"""
from __future__ import annotations

import torch

from specimpl.hf import HFModel, HFState
from specimpl.sampling import sample_categorical
from specimpl.speculative import SpeculativeSampler

__all__ = ["NoRollbackModel", "SharedPositionModel", "LeakyMaskModel", "no_rollback_generate",
           "shared_position_generate", "leaky_mask_generate", "residual_softmax_generate", "greedy_draft_generate",
           "draft_no_rollback_generate", "HF_BUGS", "HF_LOSSLESS_CONTROLS"]


class _Wrapped(HFModel):
    """Same weights and settings as ``base``, one behaviour changed."""

    def __init__(self, base: HFModel):  # noqa: D107  (no reload, no probe)
        self.__dict__.update(base.__dict__)


class NoRollbackModel(_Wrapped):
    """rollback() does nothing: rejected tokens stay in the cache and the length keeps growing."""

    def rollback(self, state: HFState, lengths: torch.Tensor) -> None:
        return None


class SharedPositionModel(_Wrapped):
    """Ragged rows written at their own slots but given the batch's longest position ids."""

    @torch.inference_mode()
    def forward(self, state, tokens, n_new=None, _logits=True):
        orig = state.lengths
        fake = torch.full_like(orig, state.max_len)  # every row "at" the longest length
        if state.uniform:
            return super().forward(state, tokens, n_new, _logits)
        # positions from the longest row, slots from each row's own length
        B, T = tokens.shape
        cache = state.cache
        cache.seq_length = state.max_len
        cache.kv_len = state.max_len + T
        ar = torch.arange(T, device=self.device)
        cache.offset = None
        cache.write_index = orig.unsqueeze(1) + ar  # (B, T)
        pos_true = cache.write_index
        pos_bug = fake.unsqueeze(1) + ar  # (B, T)
        mask = self._mask(pos_true, cache.kv_len)
        out = self.model(input_ids=tokens, attention_mask=mask, position_ids=pos_bug, use_cache=True,
                         **{self._cache_kw: cache})
        state.lengths = orig + (T if n_new is None else n_new)
        self._sync_host(state)
        return out.logits.to(self.dtype)


class LeakyMaskModel(_Wrapped):
    """The mask lets every row see slots up to the longest row's length (+ t), not its own."""

    def _mask(self, pos, kv_len):
        leaky = pos.amax(0, keepdim=True).expand_as(pos)  # (B, T) the longest row's positions
        return super()._mask(leaky, kv_len)


def _gen(target, draft, prompts, k, max_new_tokens, config, eos_token_id, generator, sampler_cls=SpeculativeSampler):
    return sampler_cls(target, draft, k, config).generate(prompts, max_new_tokens, eos_token_id, generator)


def no_rollback_generate(target, draft, prompts, *, k, max_new_tokens, config, eos_token_id=None, generator=None):
    return _gen(NoRollbackModel(target), draft, prompts, k, max_new_tokens, config, eos_token_id, generator)


def shared_position_generate(target, draft, prompts, *, k, max_new_tokens, config, eos_token_id=None, generator=None):
    return _gen(SharedPositionModel(target), draft, prompts, k, max_new_tokens, config, eos_token_id, generator)


def leaky_mask_generate(target, draft, prompts, *, k, max_new_tokens, config, eos_token_id=None, generator=None):
    return _gen(LeakyMaskModel(target), draft, prompts, k, max_new_tokens, config, eos_token_id, generator)


def draft_no_rollback_generate(target, draft, prompts, *, k, max_new_tokens, config, eos_token_id=None,
                               generator=None):
    return _gen(target, NoRollbackModel(draft), prompts, k, max_new_tokens, config, eos_token_id, generator)


class _ResidualSoftmax(SpeculativeSampler):
    def verify(self, p, q, x, u_accept, u_final):
        B, k, V = q.shape
        p_x = p[:, :k].gather(-1, x.unsqueeze(-1)).squeeze(-1)  # (B, k)
        q_x = q.gather(-1, x.unsqueeze(-1)).squeeze(-1)
        accept = (q_x > 0) & (u_accept * q_x < p_x)
        n = torch.cumprod(accept.to(torch.int8), dim=1).sum(dim=1)  # (B,)
        rows = torch.arange(B, device=p.device)
        p_n, q_n = p[rows, n], q[rows, n.clamp(max=k - 1)]  # (B, V)
        residual = torch.softmax((p_n - q_n).clamp(min=0), -1)  # BUG: softmax of the clipped difference
        law = torch.where((n < k).unsqueeze(-1), residual, p_n)
        return n, sample_categorical(law, u_final)


class _GreedyDraft(SpeculativeSampler):
    def draw_draft(self, q, u):
        return q.argmax(-1)  # BUG: argmax token, while verification uses q = softmax


def residual_softmax_generate(target, draft, prompts, *, k, max_new_tokens, config, eos_token_id=None,
                              generator=None):
    return _gen(target, draft, prompts, k, max_new_tokens, config, eos_token_id, generator, _ResidualSoftmax)


def greedy_draft_generate(target, draft, prompts, *, k, max_new_tokens, config, eos_token_id=None, generator=None):
    return _gen(target, draft, prompts, k, max_new_tokens, config, eos_token_id, generator, _GreedyDraft)


HF_BUGS = {
    "kv_not_rolled_back": no_rollback_generate,
    "ragged_shared_positions": shared_position_generate,
    "ragged_leaky_mask": leaky_mask_generate,
    "residual_softmax": residual_softmax_generate,
    "greedy_draft_softmax_q": greedy_draft_generate,
}
HF_LOSSLESS_CONTROLS = {
    "draft_kv_not_rolled_back": draft_no_rollback_generate,
}
