"""The arguments every sampler takes, checked once: k, max_new_tokens, config, eos_token_id, prompts,
generator; and the finiteness check of the warped laws each round.

Errors follow :func:`specimpl.errors.check_arg`: they name the argument, echo the value and say
what is allowed.  The speculative sampler, the target-only baseline and the adapters around
transformers' own decoders all call these, so one bad argument gets one message everywhere.
Integer arguments may be any integer-like scalar (``np.int64(4)``, a 0-d integer tensor); they
come back as Python ints.
"""
from __future__ import annotations

import math
from typing import Optional

import torch

from specimpl.errors import as_int, check_arg
from specimpl.model import Prompts, as_prompt_list, check_prompt_tensor
from specimpl.sampling import SamplingConfig

__all__ = ["check_generate_args", "check_generator", "check_finite_laws", "law_sums", "prompt_batch",
           "NonFiniteLawError", "LogitsShapeError", "check_logits_vocab"]


class NonFiniteLawError(ValueError):
    """A warped next-token law (target p or draft q) holds NaN or inf: non-finite logits, or a warp
    that overflowed."""


class LogitsShapeError(ValueError):
    """A model returned logits whose last axis is not its ``vocab_size`` (one column per token)."""


def check_logits_vocab(who: str, model, logits: torch.Tensor, where: str) -> torch.Tensor:
    """Raise :class:`LogitsShapeError` unless ``logits`` (..., V) has ``model.vocab_size`` columns; returns ``logits``.

    A shape read only (no device sync).  Without it, V + 1 columns index past the samplers' (..., V) laws
    (a raw torch index error) or emit token id V, and V - 1 columns silently drop the last token."""
    V = model.vocab_size
    got = logits.shape[-1] if logits.dim() else None
    if got != V:
        raise LogitsShapeError(f"the {who} model {getattr(model, 'name', type(model).__name__)!r} returned logits "
                               f"with {got} columns at {where}, but its vocab_size is {V}: expected logits of shape "
                               f"(..., {V}), one column per token of the vocabulary; got shape {tuple(logits.shape)}")
    return logits


def check_generate_args(k, max_new_tokens, config, eos_token_id, vocab_size: int):
    """Validate the scalar arguments of a sampler call; returns ``(k, max_new_tokens, eos_token_id)`` as ints.

    ``k`` an integer >= 1 (``None`` for samplers without drafts); ``max_new_tokens`` an integer
    >= 1; ``config`` a :class:`specimpl.SamplingConfig`; ``eos_token_id`` ``None`` or a token id in
    [0, vocab_size).  Integer-like NumPy / torch scalars are accepted.  Raises ``ValueError`` naming
    the first bad argument.
    """
    m = as_int(max_new_tokens)
    check_arg(m is not None and m >= 1, "max_new_tokens", max_new_tokens, "an integer >= 1")
    if k is not None:
        kk = as_int(k)
        check_arg(kk is not None and kk >= 1, "k", k, "an integer >= 1")
        k = kk
    check_arg(isinstance(config, SamplingConfig), "config", config, "a specimpl.SamplingConfig")
    if eos_token_id is not None:
        e = as_int(eos_token_id)
        check_arg(e is not None and 0 <= e < vocab_size, "eos_token_id", eos_token_id,
                  f"None or a token id in [0, {vocab_size})")
        eos_token_id = e
    return k, m, eos_token_id


def check_generator(generator, device=None) -> None:
    """``generator`` must be None or a ``torch.Generator`` (on ``device``'s type when given); else TypeError."""
    check_arg(generator is None or isinstance(generator, torch.Generator), "generator",
              generator, "None or a torch.Generator (e.g. torch.Generator().manual_seed(7))", exc=TypeError)
    if generator is not None and device is not None:
        want = torch.device(device).type
        check_arg(generator.device.type == want, "generator", f"a generator on {generator.device}",
                  f"a torch.Generator on the models' device type {want!r}", exc=TypeError)


def check_finite_laws(who: str, laws: torch.Tensor, where: str, config: SamplingConfig,
                      total: Optional[float] = None) -> None:
    """Raise :class:`NonFiniteLawError` unless every entry of the warped laws (A, ..., V) is finite.

    ``who`` names the model ('target' or 'draft'), ``where`` the place in the loop ('round 3').  The
    test is one sum (a law's entries are in [0, 1], so the sum is finite iff every entry is) and one
    host read; ``total``, when given, is that sum already read (a loop reads it with the host copies
    it makes anyway, so a GPU run gains no sync).  Only on failure is the first bad row, and the
    position within the row's block, located.
    """
    if math.isfinite(float(laws.sum()) if total is None else total):
        return
    bad = ~torch.isfinite(laws)  # (A, ..., V)
    row = int(bad.flatten(1).any(1).nonzero()[0, 0]) if laws.dim() > 1 else 0
    at = f"row {row}"
    if laws.dim() == 3:  # (A, positions, V): position i is law i (1-based, as p_i / q_i)
        at += f", position {int(bad[row].any(1).nonzero()[0, 0]) + 1}"
    t = config.temperature
    hint = f"; temperature {t:g} may make logits / temperature overflow" if not config.is_greedy and t < 1e-2 else ""
    raise NonFiniteLawError(f"the {who}'s warped next-token law is not finite (NaN or inf) at {where}, {at}: the "
                            f"{who} model returned NaN or +inf logits, or a row without a finite logit{hint}; "
                            "logits must be finite or -inf, with at least one finite entry per row")


def law_sums(*laws: torch.Tensor) -> torch.Tensor:
    """0-d sum of all entries of the given laws, still on their device: finite iff every entry of every
    law is (entries are probabilities).  The loops compute it right after warping and read it with the
    host copies they make anyway; only when it is not finite do they locate the bad law
    (:func:`check_finite_laws`)."""
    total = laws[0].sum()
    for law in laws[1:]:
        total = total + law.sum()
    return total


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
