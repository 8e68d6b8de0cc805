"""Engine-level controls for ``verify-samples``: thin wrappers around a correct engine path.

Bugs (must be caught: verdict *lossy*), each modelled on a losslessness bug reported against a serving
engine, none visible to a unit test of the accept/resample step:

    temperature_ignored   prompts longer than 24 tokens (a "long-prompt path") are sampled at temperature 1
                          whatever the request asked; the file records the requested temperature
    shared_stream         the rows of a batch share one random stream (every row draws the uniforms of the
                          first), so completions of one prompt in one batch coincide
    stop_truncation       completions are cut before the first newline byte (an engine-side stop sequence
                          the baseline does not apply), finish_reason "stop", controls.stop left empty

Lossless controls (must never be judged lossy; *certified* once the sample reaches the planner's size):

    speculative           our speculative sampler (:func:`specimpl.speculative.speculative_generate`)
    hf_assisted           transformers' assisted generation (:func:`specimpl.hf_assisted.hf_assisted_generate`)

:data:`CONTROLS` maps name -> :class:`EngineControl` (role, generate function, record postprocess, the
temperature it runs at: the temperature bug is only visible at T != 1).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Optional

import torch

from harness.samples.producers import autoregressive_sampler, hf_sampler, speculative_sampler
from specimpl.result import PAD, GenerationResult
from specimpl.sampling import SamplingConfig

__all__ = ["EngineControl", "CONTROLS", "LONG_PROMPT", "NEWLINE"]

LONG_PROMPT = 24  # prompts longer than this take the buggy path of temperature_ignored
NEWLINE = 10  # the byte-level vocabulary's "\n"


def temperature_ignored(target, draft, prompts, *, k, max_new_tokens, config, eos_token_id, generator):
    """Long prompts sampled at temperature 1 (the requested temperature dropped on that path)."""
    long_rows = [i for i, p in enumerate(prompts) if len(p) > LONG_PROMPT]
    out = autoregressive_sampler(target, draft, prompts, k=k, max_new_tokens=max_new_tokens, config=config,
                                 eos_token_id=eos_token_id, generator=generator)
    if long_rows:
        hot = autoregressive_sampler(target, draft, [prompts[i] for i in long_rows], k=k,
                                     max_new_tokens=max_new_tokens, config=replace(config, temperature=1.0),
                                     eos_token_id=eos_token_id, generator=generator)
        tokens, idx = out.tokens.clone(), torch.tensor(long_rows)
        tokens[idx] = hot.tokens
        out = GenerationResult(tokens=tokens, lengths=(tokens != PAD).sum(1), stats=None, timings={})
    return out


def shared_stream(target, draft, prompts, *, k, max_new_tokens, config, eos_token_id, generator):
    """Every row of the batch drawn from a copy of the same generator state (one shared random stream)."""
    state = generator.get_state()
    rows = []
    for p in prompts:
        g = torch.Generator().set_state(state)
        rows.append(autoregressive_sampler(target, draft, [p], k=k, max_new_tokens=max_new_tokens, config=config,
                                           eos_token_id=eos_token_id, generator=g).tokens[0])
    generator.manual_seed(int(torch.randint(0, 2 ** 62, (1,), generator=generator)))
    tokens = torch.stack(rows)  # (B, T)
    return GenerationResult(tokens=tokens, lengths=(tokens != PAD).sum(1), stats=None, timings={})


def truncate_at_newline(records):
    """Cut each completion before its first newline byte, finish_reason 'stop' (controls.stop stays [])."""
    out = []
    for r in records:
        if NEWLINE in r.output_ids:
            cut = r.output_ids.index(NEWLINE)
            out.append(replace(r, output_ids=r.output_ids[:cut], finish_reason="stop",
                               logprobs=None if r.logprobs is None else r.logprobs[:cut]))
        else:
            out.append(r)
    return out


@dataclass(frozen=True)
class EngineControl:
    name: str
    role: str  # "lossy" (must be caught) or "lossless" (must not be judged lossy)
    fn: Callable
    postprocess: Optional[Callable] = None
    temperature: float = 1.0
    engine: str = "ours"

    def config(self) -> SamplingConfig:
        return SamplingConfig(temperature=self.temperature)


CONTROLS = {
    "temperature_ignored": EngineControl("temperature_ignored", "lossy", temperature_ignored, temperature=0.5),
    "shared_stream": EngineControl("shared_stream", "lossy", shared_stream),
    "stop_truncation": EngineControl("stop_truncation", "lossy", autoregressive_sampler, truncate_at_newline),
    "speculative": EngineControl("speculative", "lossless", speculative_sampler),
    "hf_assisted": EngineControl("hf_assisted", "lossless", hf_sampler("assistant"), engine="transformers"),
}
