"""Target-only autoregressive sampling: the baseline every speculative run is compared against.

Same model interface, same sampling controls (:func:`specimpl.sampling.warp`), same output type
and same EOS / max_new_tokens semantics as :mod:`specimpl.speculative`.
"""
from __future__ import annotations

import time
from typing import Optional

import torch

from specimpl.model import LanguageModel, Prompts, as_prompt_list
from specimpl.sampling import SamplingConfig, sample_categorical, warp
from specimpl.speculative import PAD, GenerationResult, _check_common, _sync

__all__ = ["autoregressive_generate"]


def autoregressive_generate(target: LanguageModel, prompts: Prompts, *, max_new_tokens: int,
                            config: SamplingConfig = SamplingConfig(), eos_token_id: Optional[int] = None,
                            generator: Optional[torch.Generator] = None) -> GenerationResult:
    """Draw each token x_t ~ p(. | x_<t) with one target call per token."""
    V = target.vocab_size
    _check_common(None, max_new_tokens, config, eos_token_id, V)
    plist = as_prompt_list(prompts, V)
    dev = target.device
    dtype = getattr(target, "dtype", torch.float32)
    clock = {"target": 0.0, "sampler": 0.0}
    tic = time.perf_counter()
    state = target.prefill(plist)
    _sync(dev)
    clock["prefill"] = time.perf_counter() - tic
    B = len(plist)
    pending = torch.tensor([p[-1] for p in plist], dtype=torch.long, device=dev)  # (B,)
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
