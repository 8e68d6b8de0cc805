"""Target-only autoregressive sampling: the baseline every speculative run is compared against.

Same model interface, same sampling controls (:func:`specimpl.sampling.warp`), same output type
and same EOS / max_new_tokens semantics as :mod:`specimpl.speculative`.

This is the generic loop (any :class:`LanguageModel`, one ``forward`` per token).  For a plain
:class:`specimpl.ngram.NGramModel` it hands over, unless ``tabular=False``, to
:func:`specimpl.tabular.tabular_autoregressive`: lookups in the warped table that consume the same
uniforms and return the same output bit for bit (tested), so toy-model timings of the baseline and
of the speculative sampler (which does the same) compare like with like.
"""
from __future__ import annotations

import time
from typing import Optional

import torch

from specimpl.inputs import (check_finite_laws, check_generate_args, check_generator, check_logits_vocab, law_sums,
                             prompt_batch)
from specimpl.model import LanguageModel, Prompts
from specimpl.result import PAD, GenerationResult
from specimpl.sampling import SamplingConfig, sample_categorical, warp
from specimpl.tabular import is_tabular_model, tabular_autoregressive
from specimpl.timing import device_syncer

__all__ = ["autoregressive_generate"]


def autoregressive_generate(target: LanguageModel, prompts: Prompts, *, max_new_tokens: int,
                            config: SamplingConfig = SamplingConfig(), eos_token_id: Optional[int] = None,
                            generator: Optional[torch.Generator] = None, tabular: bool = True,
                            check_finite: bool = True) -> GenerationResult:
    """Draw each token x_t ~ p(. | x_<t) with one target call per token.

    ``tabular=True`` (the default) opts in to the lookup-table loop for a plain n-gram target;
    ``tabular=False`` forces the generic loop (same output).  Each step checks that the warped law is
    finite and raises a ``ValueError`` naming the step and row otherwise (``check_finite=False`` skips
    that, for benchmarks; the tabular loop checks its table once).
    """
    V = target.vocab_size
    _, max_new_tokens, eos_token_id = check_generate_args(None, max_new_tokens, config, eos_token_id, V)
    check_generator(generator, target.device)
    if tabular and is_tabular_model(target):
        return tabular_autoregressive(target, prompts, max_new_tokens, config, eos_token_id, generator)
    dev = target.device
    sync = device_syncer(dev)
    dtype = getattr(target, "dtype", torch.float32)
    clock = {"target": 0.0, "sampler": 0.0}
    tic = time.perf_counter()
    batch, pending = prompt_batch(prompts, V, dev)  # pending (B,) the last prompt token, not fed yet
    state = target.prefill(batch)
    sync()
    clock["prefill"] = time.perf_counter() - tic
    B = pending.shape[0]
    out = torch.full((B, max_new_tokens), PAD, dtype=torch.long, device=dev)
    alive = torch.ones(B, dtype=torch.bool, device=dev)
    calls = 0
    for t in range(max_new_tokens):
        tic = time.perf_counter()
        logits = check_logits_vocab("target", target, target.forward(state, pending.unsqueeze(1)), f"step {t + 1}")[:, 0]  # (B, V)
        p = warp(logits, config)  # (B, V)
        total = law_sums(p) if check_finite else None  # read after the draw, which syncs anyway
        sync()
        t1 = time.perf_counter()
        u = torch.rand(B, generator=generator, dtype=dtype, device=dev)
        x = sample_categorical(p, u)  # (B,)
        if total is not None:
            check_finite_laws("target", p, f"step {t + 1}", config, total=total.item())
        out[:, t] = torch.where(alive, x, out[:, t])
        if eos_token_id is not None:
            alive = alive & (x != eos_token_id)
        pending = x
        calls += 1
        sync()
        clock["target"] += t1 - tic
        clock["sampler"] += time.perf_counter() - t1
        if not bool(alive.any()):
            break
    lengths = (out != PAD).sum(1)
    clock["target_calls"] = calls
    return GenerationResult(tokens=out, lengths=lengths, stats=None, timings=clock)
