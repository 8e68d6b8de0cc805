"""In-process producers of sample files: our samplers and transformers' ``generate``.

    reqs = make_requests(n_prompts=64, n_per_prompt=4, prompt_lengths=(8, 48), seed=0)
    with SampleWriter("spec.jsonl") as w:
        produce(reqs, speculative_sampler(k=4), target, draft, config=SamplingConfig(), max_new_tokens=32,
                eos_token_id=257, batch_size=64, seed=0, writer=w, engine={"name": "ours", ...})

A *generate function* has the harness's sampler call signature
``fn(target, draft, prompts, *, k, max_new_tokens, config, eos_token_id, generator) -> GenerationResult``
(:func:`specimpl.speculative.speculative_generate`); the producers here wrap our samplers and
transformers' decoders in it, and :mod:`harness.samples.controls` wraps them again with engine bugs.

Requests are cut into fixed batches in request order (the completions of one prompt are adjacent, as an
engine's ``n`` completions of one request are); batch ``i`` draws from ``torch.Generator`` seeded
``seed * 1_000_003 + i``, so a rerun gives the same file.  A batch whose requests are all in the file
already is skipped (resume); one partly written is drawn again and only its missing rows are written.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
import torch

from harness.samples.format import Controls, SampleRecord, SampleWriter
from specimpl.hf_assisted import hf_prompt_lookup_generate  # transformers imported lazily, inside
from specimpl.result import PAD, GenerationResult
from specimpl.sampling import SamplingConfig
from specimpl.hf import tiny_pair_prompts
from specimpl.speculative import speculative_generate
from specimpl.autoregressive import autoregressive_generate
from specimpl.hf_assisted import hf_assisted_generate, hf_generate

__all__ = ["Request", "make_requests", "random_prompts", "controls_of", "config_of", "finish_reason", "early_stop",
           "records_from_result", "produce", "speculative_sampler", "autoregressive_sampler", "hf_sampler", "hf_prompt_lookup_generate",
           "ScorerRefusal"]


@dataclass(frozen=True)
class Request:
    """One completion to produce: its ids and its prompt's token ids."""

    request_id: str
    prompt_id: str
    prompt_ids: tuple


def make_requests(n_prompts: int, n_per_prompt: int, prompt_lengths: tuple = (8, 48), seed: int = 0,
                  vocab: Optional[int] = None) -> list[Request]:
    """``n_per_prompt`` completions (``p<i>-s<j>``) of each of ``n_prompts`` prompts: held-out byte prompts of the
    tiny pair (:func:`specimpl.hf.tiny_pair_prompts`, ragged lengths in ``prompt_lengths``), or with ``vocab``
    uniform token ids in [0, vocab) (a small-vocabulary model such as the exact pair: ``vocab = 13``, its letters)."""
    lo, hi = prompt_lengths
    prompts = (tiny_pair_prompts(n_prompts, length=hi, min_length=lo, seed=seed) if vocab is None
               else random_prompts(n_prompts, vocab, prompt_lengths, seed))
    return [Request(f"p{i}-s{j}", f"p{i}", tuple(p)) for i, p in enumerate(prompts) for j in range(n_per_prompt)]


def random_prompts(n: int, vocab: int, lengths: tuple, seed: int) -> list[list[int]]:
    """``n`` prompts of token ids drawn uniformly from [0, vocab), lengths uniform in [lo, hi], seeded."""
    rng = np.random.default_rng([seed, vocab])
    lo, hi = lengths
    return [rng.integers(0, vocab, size=int(rng.integers(lo, hi + 1))).tolist() for _ in range(n)]


def controls_of(config: SamplingConfig, max_new_tokens: int, seed: Optional[int] = None, stop=()) -> Controls:
    """The sample file's controls for a :class:`SamplingConfig` (top_k None -> 0)."""
    return Controls(temperature=float(config.temperature), top_k=int(config.top_k or 0), top_p=float(config.top_p),
                    max_new_tokens=int(max_new_tokens), min_p=0.0, seed=seed, greedy=bool(config.is_greedy),
                    stop=tuple(stop))


class ScorerRefusal(ValueError):
    """Controls the scorer's warp cannot apply (it would certify a different law than the engine's)."""


def config_of(c: Controls) -> SamplingConfig:
    """The :class:`SamplingConfig` that applies ``c`` exactly (specimpl.sampling.warp: temperature, top-k,
    top-p, greedy); :class:`ScorerRefusal` for a control warp does not implement (min_p > 0, stop strings)."""
    if c.min_p > 0:
        raise ScorerRefusal(f"controls.min_p = {c.min_p!r}: the scorer's warp (specimpl.sampling.warp) has no min_p, "
                            "so it would score a different law than the engine applied; re-sample with min_p = 0")
    if c.stop:
        raise ScorerRefusal(f"controls.stop = {list(c.stop)!r}: stop strings act on decoded text, which the scorer "
                            "does not model; re-sample without stop strings")
    if c.greedy or c.temperature == 0:
        return SamplingConfig(greedy=True)
    return SamplingConfig(temperature=c.temperature, top_k=c.top_k or None, top_p=c.top_p)


def finish_reason(out: list[int], max_new_tokens: int, eos_token_id: Optional[int]) -> str:
    """How a completion ended, as drawn: 'eos' when the last token is the requested EOS, 'length' when it has
    all ``max_new_tokens`` tokens, else 'stop' — the engine ended it early on its own (an EOS it applied
    although ``eos_token_id`` asked for another or none: see :func:`early_stop`)."""
    if out and eos_token_id is not None and out[-1] == eos_token_id:
        return "eos"
    return "length" if len(out) >= max_new_tokens else "stop"


def early_stop(out: list[int], max_new_tokens: int, eos_token_id: Optional[int]) -> Optional[dict]:
    """The sample file's ``early_stop`` of a completion that ended before ``max_new_tokens`` without the
    requested EOS (None otherwise): the token it stopped at and why that is a finding, not a crash."""
    if finish_reason(out, max_new_tokens, eos_token_id) != "stop":
        return None
    asked = "no EOS stop" if eos_token_id is None else f"EOS {eos_token_id} only"
    tok = out[-1] if out else None
    return {"token_id": tok, "reason": f"the engine ended the completion after {len(out)} of {max_new_tokens} tokens "
                                       f"at token {tok} although the request asked for {asked} (an EOS the engine "
                                       "applied on its own, e.g. the checkpoint's generation config)"}


def records_from_result(requests: list[Request], result: GenerationResult, controls: Controls, engine: dict,
                        eos_token_id: Optional[int]) -> list[SampleRecord]:
    """One record per request from a generate call's tokens (PAD after each row's end); a row the engine ended
    early against the request is recorded as drawn, with finish_reason 'stop' and ``early_stop``."""
    toks = result.tokens.detach().cpu()
    out = []
    for b, req in enumerate(requests):
        row = [int(x) for x in toks[b].tolist() if x != PAD]
        T = controls.max_new_tokens
        out.append(SampleRecord(req.request_id, req.prompt_id, req.prompt_ids, tuple(row),
                                finish_reason(row, T, eos_token_id), controls, dict(engine),
                                early_stop=early_stop(row, T, eos_token_id)))
    return out


def produce(requests: list[Request], fn: Callable, target, draft, *, config: SamplingConfig, max_new_tokens: int,
            eos_token_id: Optional[int], batch_size: int, seed: int, writer: SampleWriter, engine: dict, k: int = 4,
            progress: bool = True, postprocess: Optional[Callable] = None) -> int:
    """Run ``fn`` (a generate function) on the requests not yet in ``writer``'s file and append their
    records; ``postprocess(records) -> records`` (engine controls) may alter them first.  Returns the
    number of records written."""
    from tqdm import tqdm
    controls = controls_of(config, max_new_tokens)
    batches = [requests[s:s + batch_size] for s in range(0, len(requests), batch_size)]
    written = 0
    bar = tqdm(total=len(requests), desc=f"sample {engine.get('name')}", disable=not progress, file=sys.stderr)
    bar.update(sum(r.request_id in writer.done for r in requests))
    for i, batch in enumerate(batches):
        if all(r.request_id in writer.done for r in batch):
            continue
        gen = torch.Generator().manual_seed(seed * 1_000_003 + i)
        res = fn(target, draft, [list(r.prompt_ids) for r in batch], k=k, max_new_tokens=max_new_tokens,
                 config=config, eos_token_id=eos_token_id, generator=gen)
        recs = records_from_result(batch, res, controls, engine, eos_token_id)
        if postprocess is not None:
            recs = postprocess(recs)
        n = writer.write_all(recs)
        written += n
        bar.update(n)
    bar.close()
    return written


def speculative_sampler(target, draft, prompts, *, k, max_new_tokens, config, eos_token_id, generator):
    """Our speculative sampler (:func:`specimpl.speculative.speculative_generate`)."""
    return speculative_generate(target, draft, prompts, k=k, max_new_tokens=max_new_tokens, config=config,
                                eos_token_id=eos_token_id, generator=generator)


def autoregressive_sampler(target, draft, prompts, *, k, max_new_tokens, config, eos_token_id, generator):
    """Our target-only sampler (:func:`specimpl.autoregressive.autoregressive_generate`); draft, k unused."""
    return autoregressive_generate(target, prompts, max_new_tokens=max_new_tokens, config=config,
                                   eos_token_id=eos_token_id, generator=generator)


def hf_sampler(mode: str) -> Callable:
    """transformers' decoders as generate functions: 'plain' (target only), 'assistant' (assisted
    generation with the draft, k drafts a round), 'prompt_lookup' (k tokens looked up in the prompt)."""
    if mode == "plain":
        def plain(target, draft, prompts, *, k, max_new_tokens, config, eos_token_id, generator):
            return hf_generate(target, prompts, max_new_tokens=max_new_tokens, config=config,
                               eos_token_id=eos_token_id, generator=generator)
        return plain
    if mode == "assistant":
        return hf_assisted_generate
    if mode == "prompt_lookup":
        return hf_prompt_lookup_generate
    raise ValueError(f"`mode` must be 'plain', 'assistant' or 'prompt_lookup'; got {mode!r}")
