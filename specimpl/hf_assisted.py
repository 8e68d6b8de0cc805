"""Hugging Face's own decoders under the harness's sampler call signature (peers, not our code).

    hf_assisted_generate(target, draft, prompts, *, k, max_new_tokens, config, eos_token_id, generator)
        transformers' ``target.generate(..., assistant_model=draft, do_sample=True)``: speculative
        sampling as implemented by transformers (``_speculative_sampling``), with the assistant's
        draft length fixed to k (``num_assistant_tokens=k``, schedule "constant", confidence
        threshold off so no round stops drafting early);
    hf_generate(target, prompts, *, max_new_tokens, config, eos_token_id, generator)
        plain ``target.generate(do_sample=True)``, the target-only baseline.

transformers' assisted generation supports batch 1 only, so both adapters run the prompts one by
one.  ``target`` and ``draft`` are :class:`specimpl.hf.HFModel` (or bare transformers models).
Randomness: transformers draws from torch's global generator; each prompt gets a seed drawn from
``generator`` and runs inside ``torch.random.fork_rng`` (the caller's global state is left as it
was; the same ``generator`` seed gives the same output).

Sampling controls map one to one (temperature, top_k, top_p; greedy -> ``do_sample=False``), with
transformers' implicit defaults switched off (its default ``top_k=50`` would otherwise apply).
EOS: ``eos_token_id=None`` means no stop token, also when the checkpoint's generation config names
one.  transformers fills every generation-config field left unset (None) from ``model.generation_config``
(``GenerationMixin._prepare_generation_config``), so passing ``eos_token_id=None`` alone still stops at the
checkpoint's EOS — the assistant's own ``generate`` likewise stops drafting at the assistant's.  The adapters
therefore clear ``generation_config.eos_token_id`` of the target and of the assistant for the call
(:func:`_eos_cleared`; restored after).  Output follows :class:`specimpl.speculative.GenerationResult`
(PAD = -1 after the end); a row that transformers still ends early is returned as it is (shorter, not
padded out), for the caller to record as an early stop.
"""
from __future__ import annotations

import contextlib
import time
from typing import Optional

import torch

from specimpl.inputs import check_generate_args, check_generator
from specimpl.model import Prompts, as_prompt_list
from specimpl.result import PAD, GenerationResult
from specimpl.sampling import SamplingConfig

__all__ = ["hf_assisted_generate", "hf_generate"]


def _hf_model(m):
    return getattr(m, "model", m)


def _generation_config(model, config: SamplingConfig, max_new_tokens: int, eos_token_id: Optional[int]):
    from transformers import GenerationConfig
    greedy = config.is_greedy
    kw = dict(max_new_tokens=max_new_tokens, min_new_tokens=0, do_sample=not greedy, num_beams=1,
              eos_token_id=eos_token_id, pad_token_id=eos_token_id if eos_token_id is not None else 0,
              bos_token_id=None, use_cache=True, return_dict_in_generate=False, repetition_penalty=1.0,
              top_k=0, top_p=1.0, temperature=1.0)
    if not greedy:
        kw.update(temperature=float(config.temperature), top_k=config.top_k or 0, top_p=float(config.top_p))
    return GenerationConfig(**kw)


_ASSISTANT_KEYS = ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")


def _assistant_generation_config(draft_model, k: int) -> dict:
    """Fix the draft length to k for every round; returns the previous values (restored after)."""
    gc = draft_model.generation_config
    old = {key: getattr(gc, key, None) for key in _ASSISTANT_KEYS}
    gc.num_assistant_tokens = k
    gc.num_assistant_tokens_schedule = "constant"
    gc.assistant_confidence_threshold = 0.0  # no early stop on low draft confidence
    return old


@contextlib.contextmanager
def _eos_cleared(models, eos_token_id: Optional[int]):
    """With ``eos_token_id`` None: set ``generation_config.eos_token_id`` of each model (target, assistant) to None
    inside, restored after (transformers would otherwise take the checkpoint's EOS as the stop token)."""
    saved = []
    try:
        if eos_token_id is None:
            for m in models:
                gc = getattr(m, "generation_config", None)
                if gc is not None and getattr(gc, "eos_token_id", None) is not None:
                    saved.append((gc, gc.eos_token_id))
                    gc.eos_token_id = None
        yield
    finally:
        for gc, v in saved:
            gc.eos_token_id = v


class _CallCounter:
    """Counts forward calls of a module (target calls of a transformers decoder)."""

    def __init__(self, module):
        self.n = 0
        self.handle = module.register_forward_pre_hook(self._hook)

    def _hook(self, *args):
        self.n += 1

    def remove(self):
        self.handle.remove()


def _run(target, prompts, max_new_tokens, config, eos_token_id, generator, draft=None, k=None,
         lookup: bool = False) -> GenerationResult:
    tm = _hf_model(target)
    V = tm.get_output_embeddings().weight.shape[0]
    k, max_new_tokens, eos_token_id = check_generate_args(k, max_new_tokens, config, eos_token_id, V)
    check_generator(generator, "cpu")  # it draws the per-prompt seeds on the CPU
    plist = as_prompt_list(prompts, V)
    dev = next(tm.parameters()).device
    gc = _generation_config(tm, config, max_new_tokens, eos_token_id)
    if lookup:
        gc.prompt_lookup_num_tokens = int(k)  # k tokens looked up in the prompt, verified as drafts
    kwargs = {"generation_config": gc}
    dm, saved = None, {}
    if draft is not None:
        dm = _hf_model(draft)
        saved = _assistant_generation_config(dm, k)
        kwargs["assistant_model"] = dm
    B = len(plist)
    out = torch.full((B, max_new_tokens), PAD, dtype=torch.long)
    seeds = torch.randint(0, 2**62, (B,), generator=generator).tolist()
    counter = _CallCounter(tm)
    tic = time.perf_counter()
    try:
        for b, p in enumerate(plist):
            ids = torch.tensor([p], dtype=torch.long, device=dev)  # (1, P)
            with torch.random.fork_rng(devices=[dev] if dev.type == "cuda" else []), \
                    _eos_cleared([m for m in (tm, dm) if m is not None], eos_token_id):
                torch.manual_seed(seeds[b])
                seq = tm.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **kwargs)  # (1, P + m)
            new = seq[0, len(p):].cpu()
            if eos_token_id is not None:
                hit = (new == eos_token_id).nonzero()
                if len(hit):
                    new = new[:int(hit[0]) + 1]
            new = new[:max_new_tokens]
            out[b, :len(new)] = new
    finally:
        counter.remove()
        for key, v in saved.items():
            setattr(dm.generation_config, key, v)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    wall = time.perf_counter() - tic
    lengths = (out != PAD).sum(1)
    return GenerationResult(tokens=out.to(dev), lengths=lengths.to(dev), stats=None,
                            timings={"total": wall, "target_calls": counter.n})


def hf_assisted_generate(target, draft, prompts: Prompts, *, k: int, max_new_tokens: int,
                         config: SamplingConfig = SamplingConfig(), eos_token_id: Optional[int] = None,
                         generator: Optional[torch.Generator] = None) -> GenerationResult:
    """transformers' assisted generation (speculative sampling when not greedy), k drafts a round."""
    return _run(target, prompts, max_new_tokens, config, eos_token_id, generator, draft=draft, k=k)


def hf_prompt_lookup_generate(target, draft, prompts: Prompts, *, k: int, max_new_tokens: int,
                              config: SamplingConfig = SamplingConfig(), eos_token_id: Optional[int] = None,
                              generator: Optional[torch.Generator] = None) -> GenerationResult:
    """transformers' ``generate(prompt_lookup_num_tokens=k)``: drafts looked up in the prompt (``draft`` unused)."""
    return _run(target, prompts, max_new_tokens, config, eos_token_id, generator, k=k, lookup=True)


def hf_generate(target, prompts: Prompts, *, max_new_tokens: int, config: SamplingConfig = SamplingConfig(),
                eos_token_id: Optional[int] = None, generator: Optional[torch.Generator] = None) -> GenerationResult:
    """transformers' plain ``generate`` (target only), one prompt at a time."""
    return _run(target, prompts, max_new_tokens, config, eos_token_id, generator)
