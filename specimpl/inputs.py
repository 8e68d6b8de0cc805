"""The arguments every sampler takes, checked once: k, max_new_tokens, config, eos_token_id, prompts.

Errors follow :func:`specimpl.errors.check_arg`: they name the argument, echo the value and say
what is allowed.  The speculative sampler, the target-only baseline and the adapters around
transformers' own decoders all call these, so one bad argument gets one message everywhere.
"""
from __future__ import annotations

import torch

from specimpl.errors import check_arg
from specimpl.model import Prompts, as_prompt_list, check_prompt_tensor
from specimpl.sampling import SamplingConfig

__all__ = ["check_generate_args", "prompt_batch"]


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_generate_args(k, max_new_tokens, config, eos_token_id, vocab_size: int) -> None:
    """Validate the scalar arguments of a sampler call.

    ``k`` an integer >= 1 (``None`` for samplers without drafts); ``max_new_tokens`` an integer
    >= 1; ``config`` a :class:`specimpl.SamplingConfig`; ``eos_token_id`` ``None`` or a token id in
    [0, vocab_size).  Raises ``ValueError`` naming the first bad argument.
    """
    check_arg(_is_int(max_new_tokens) and max_new_tokens >= 1, "max_new_tokens", max_new_tokens, "an integer >= 1")
    if k is not None:
        check_arg(_is_int(k) and k >= 1, "k", k, "an integer >= 1")
    check_arg(isinstance(config, SamplingConfig), "config", config, "a specimpl.SamplingConfig")
    if eos_token_id is not None:
        check_arg(_is_int(eos_token_id) and 0 <= eos_token_id < vocab_size, "eos_token_id", eos_token_id,
                  f"None or a token id in [0, {vocab_size})")


def prompt_batch(prompts: Prompts, vocab_size: int, device):
    """Validated prompts for a model's ``prefill``, and the last token of each, (B,) int64 on ``device``.

    A (B, P) tensor stays a tensor (vectorised checks, no Python loop over a million prompts);
    a list of token lists may be ragged and comes back as a list of lists.
    """
    if torch.is_tensor(prompts):
        pt = check_prompt_tensor(prompts, vocab_size)
        return pt, pt[:, -1].to(device)
    plist = as_prompt_list(prompts, vocab_size)
    return plist, torch.tensor([p[-1] for p in plist], dtype=torch.long, device=device)
