"""Target-only autoregressive sampling: the baseline every speculative run is compared against.

Same model interface, same sampling controls (:func:`specimpl.sampling.warp`), same output type
and same EOS / max_new_tokens semantics as :mod:`specimpl.speculative`.

Like the speculative sampler it has a generic path (any :class:`LanguageModel`, one ``forward``
per token) and a tabular path for a plain :class:`specimpl.ngram.NGramModel` (lookups in the
warped table, O(1) draws with :class:`specimpl.sampling.TableSampler`) that consumes the same
uniforms and returns the same output bit for bit (tested), so toy-model timings compare like
with like.
"""
from __future__ import annotations

import time
from typing import Optional

import torch

from specimpl.model import LanguageModel, Prompts
from specimpl.sampling import SamplingConfig, TableSampler, sample_categorical, warp
from specimpl.speculative import PAD, GenerationResult, _check_common, _prompt_batch, _sync

__all__ = ["autoregressive_generate"]

_CHUNK = 32000  # tabular path: sequences per chunk (intermediates stay in cache)


def autoregressive_generate(target: LanguageModel, prompts: Prompts, *, max_new_tokens: int,
                            config: SamplingConfig = SamplingConfig(), eos_token_id: Optional[int] = None,
                            generator: Optional[torch.Generator] = None, tabular: bool = True) -> GenerationResult:
    """Draw each token x_t ~ p(. | x_<t) with one target call per token.

    ``tabular=False`` forces the generic path for an n-gram target (same output).
    """
    from specimpl.ngram import NGramModel

    V = target.vocab_size
    _check_common(None, max_new_tokens, config, eos_token_id, V)
    if tabular and type(target) is NGramModel:
        return _generate_tabular(target, prompts, max_new_tokens, config, eos_token_id, generator)
    dev = target.device
    dtype = getattr(target, "dtype", torch.float32)
    clock = {"target": 0.0, "sampler": 0.0}
    tic = time.perf_counter()
    batch, pending = _prompt_batch(prompts, V, dev)  # pending (B,) the last prompt token, not fed yet
    state = target.prefill(batch)
    _sync(dev)
    clock["prefill"] = time.perf_counter() - tic
    B = pending.shape[0]
    out = torch.full((B, max_new_tokens), PAD, dtype=torch.long, device=dev)
    alive = torch.ones(B, dtype=torch.bool, device=dev)
    calls = 0
    for t in range(max_new_tokens):
        tic = time.perf_counter()
        logits = target.forward(state, pending.unsqueeze(1))[:, 0]  # (B, V)
        p = warp(logits, config)  # (B, V)
        _sync(dev)
        t1 = time.perf_counter()
        u = torch.rand(B, generator=generator, dtype=dtype, device=dev)
        x = sample_categorical(p, u)  # (B,)
        out[:, t] = torch.where(alive, x, out[:, t])
        if eos_token_id is not None:
            alive = alive & (x != eos_token_id)
        pending = x
        calls += 1
        _sync(dev)
        clock["target"] += t1 - tic
        clock["sampler"] += time.perf_counter() - t1
        if not bool(alive.any()):
            break
    lengths = (out != PAD).sum(1)
    clock["target_calls"] = calls
    return GenerationResult(tokens=out, lengths=lengths, stats=None, timings=clock)


def _generate_tabular(target, prompts, max_new_tokens, config, eos_token_id, generator) -> GenerationResult:
    """The loop above on the warped table: x_t = draw(context, u_t), the same u_t = rand(B)[b] per step."""
    from specimpl.ngram import start_contexts

    V, C = target.vocab_size, target.n_contexts
    clock = {"target": 0.0, "sampler": 0.0}
    tic = time.perf_counter()
    sampler = TableSampler(warp(target.logtable, config))  # rows: contexts
    J = start_contexts(prompts, V, C)  # (B,) context after each prompt
    B = J.shape[0]
    out = torch.full((max_new_tokens, B), PAD, dtype=torch.long)  # (T, B): each step writes one contiguous row
    alive = torch.ones(B, dtype=torch.bool)
    clock["prefill"] = time.perf_counter() - tic
    calls = 0
    for t in range(max_new_tokens):
        tic = time.perf_counter()
        for c0 in range(0, B, _CHUNK):
            c1 = min(B, c0 + _CHUNK)
            u = torch.rand(c1 - c0, generator=generator, dtype=target.dtype)  # consecutive slices of rand(B)
            x = sampler.draw(J[c0:c1], u)  # (a,)
            al = alive[c0:c1]
            out[t, c0:c1] = torch.where(al, x, PAD)  # a finished sequence stays PAD
            if eos_token_id is not None:
                alive[c0:c1] = al & (x != eos_token_id)
            if C > 1:
                f = J[c0:c1] * V + x
                J[c0:c1] = f & (C - 1) if C & (C - 1) == 0 else f % C
        calls += 1
        clock["sampler"] += time.perf_counter() - tic
        if eos_token_id is not None and not bool(alive.any()):
            break
    tokens = out.t().contiguous()  # (B, T)
    lengths = (tokens != PAD).sum(1)
    clock["target_calls"] = calls
    return GenerationResult(tokens=tokens, lengths=lengths, stats=None, timings=clock)
