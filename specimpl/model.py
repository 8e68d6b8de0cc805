"""The one model interface that toy tables and Hugging Face causal LMs both implement.

A model turns a batch of token sequences into next-token logits.  It keeps per-sequence state
(an n-gram context buffer, a KV cache) that grows as tokens are fed and can be rolled back, per
sequence, after a rejection.  Sequences in a batch may have different lengths (ragged prompts,
ragged accepted lengths).

Protocol used by the samplers
-----------------------------
    state = model.prefill(prompts)              # consumes every prompt token but the last
    logits = model.forward(state, tokens, n)    # tokens (B, T); row b feeds tokens[b, :n[b]]
    model.rollback(state, lengths)              # keep the first lengths[b] tokens of sequence b
    state = model.select(state, index)          # keep only the sequences in index (compaction)

``logits[b, t]`` (B, T, V) is the next-token distribution after ``tokens[b, :t+1]`` has been
appended; entries with ``t >= n[b]`` are undefined.  The last prompt token is held back by
``prefill`` so that every round of speculative sampling feeds the target the same shape:
the pending token plus k drafts, k + 1 tokens scored in one call.

``state.lengths`` (B,) counts the tokens consumed so far, prompt included.  Tokens emitted but
not yet fed (the last prompt token, a resampled or bonus token) are the sampler's business.
"""
from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Optional, Sequence, Union

import torch

from specimpl.errors import as_int, check_arg

__all__ = ["ModelState", "LanguageModel", "as_prompt_list", "check_prompt_tensor", "check_same_vocab"]

Prompts = Union[torch.Tensor, Sequence[Sequence[int]]]


@dataclass
class ModelState:
    """Per-sequence state; subclasses add what their model needs (cache, token buffer)."""

    lengths: torch.Tensor  # (B,) int64 tokens consumed


class LanguageModel(ABC):
    """Batched next-token model with roll-back-able per-sequence state."""

    vocab_size: int
    device: torch.device = torch.device("cpu")
    name: str = "model"

    @abstractmethod
    def prefill(self, prompts: Prompts) -> ModelState:
        """Validate prompts (see :func:`as_prompt_list`) and consume all their tokens but the last."""

    @abstractmethod
    def forward(self, state: ModelState, tokens: torch.Tensor,
                n_new: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Append ``tokens[b, :n_new[b]]`` (default: all T) and return logits (B, T, V)."""

    @abstractmethod
    def rollback(self, state: ModelState, lengths: torch.Tensor) -> None:
        """Truncate sequence b to its first ``lengths[b]`` consumed tokens (lengths <= state.lengths)."""

    @abstractmethod
    def select(self, state: ModelState, index: torch.Tensor) -> ModelState:
        """A state holding only the sequences ``index`` (in that order)."""


def as_prompt_list(prompts: Prompts, vocab_size: int) -> list[list[int]]:
    """Validate prompts: a (B, P) integer tensor or a list of B non-empty token lists.

    Token ids must be integer-like (int, NumPy integer, 0-d integer tensor): a float such as 0.7 is
    refused, never truncated.  Returns lists of Python ints.
    """
    if torch.is_tensor(prompts):
        return check_prompt_tensor(prompts, vocab_size).tolist()
    check_arg(isinstance(prompts, (list, tuple)) and len(prompts) > 0, "prompts", type(prompts).__name__,
              "an integer tensor of shape (B, P) or a non-empty list of token lists")
    fast = _int_lists(prompts, vocab_size)
    if fast is not None:
        return fast
    out = []
    for i, p in enumerate(prompts):
        row = _token_row(p, i)
        check_arg(len(row) >= 1, f"prompts[{i}]", row, "a non-empty list of token ids")
        if not (0 <= min(row) and max(row) < vocab_size):
            bad = [t for t in row if not 0 <= t < vocab_size]
            check_arg(False, f"prompts[{i}]", bad[:5], f"token ids in [0, {vocab_size})")
        out.append(row)
    return out


def _int_lists(prompts, vocab_size: int) -> Optional[list[list[int]]]:
    """The common case of :func:`as_prompt_list` checked for the whole batch at once (C-level passes, no Python
    loop per token): every prompt a non-empty list of Python ints (no bools) in [0, vocab_size).  Copies of
    them, or None when any of that fails (then the row-by-row checks find and name the culprit)."""
    if set(map(type, prompts)) != {list} or not all(prompts):
        return None
    flat = list(itertools.chain.from_iterable(prompts))
    if set(map(type, flat)) != {int} or min(flat) < 0 or max(flat) >= vocab_size:
        return None
    return [p.copy() for p in prompts]


def _token_row(p, i: int) -> list[int]:
    """One prompt as a list of Python ints; non-integer tokens (0.7, '3', True) raise naming prompts[i]."""
    if torch.is_tensor(p):
        check_arg(p.dim() == 1 and _is_int_dtype(p.dtype), f"prompts[{i}]",
                  f"tensor of shape {tuple(p.shape)} and dtype {p.dtype}", "a 1-D integer tensor of token ids")
        return p.tolist()
    check_arg(not isinstance(p, (str, bytes)) and hasattr(p, "__iter__"), f"prompts[{i}]", p,
              "a list of integer token ids")
    if type(p) is list and all(type(t) is int for t in p):  # the common case: already Python ints (no bools)
        return list(p)
    row = []
    for j, t in enumerate(p):
        v = as_int(t)
        check_arg(v is not None, f"prompts[{i}][{j}]", t, "an integer token id (a float is not truncated)")
        row.append(v)
    return row


def _is_int_dtype(dtype: torch.dtype) -> bool:
    return not dtype.is_floating_point and not dtype.is_complex and dtype != torch.bool


def check_prompt_tensor(prompts: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Vectorised :func:`as_prompt_list` for a (B, P) tensor (no Python loop over B): returns int64 (B, P).

    Any integer dtype (uint8, int16, ...) is accepted; ids are compared as int64, so a small dtype
    cannot wrap the vocabulary bound around."""
    check_arg(prompts.dim() == 2 and prompts.shape[0] >= 1 and prompts.shape[1] >= 1 and _is_int_dtype(prompts.dtype),
              "prompts", f"tensor of shape {tuple(prompts.shape)} and dtype {prompts.dtype}",
              "an integer tensor of shape (B, P) with B, P >= 1, or a list of non-empty token lists")
    pl = prompts.long()  # no copy for int64; uint8 etc. widened before the comparison with vocab_size
    bad = (pl < 0) | (pl >= vocab_size)
    if bool(bad.any()):
        i = int(bad.any(1).nonzero()[0, 0])
        check_arg(False, f"prompts[{i}]", pl[i][bad[i]][:5].tolist(), f"token ids in [0, {vocab_size})")
    return pl


def check_same_vocab(target: LanguageModel, draft: LanguageModel) -> None:
    if target.vocab_size != draft.vocab_size:
        raise ValueError(f"`draft` has vocabulary size {draft.vocab_size} but `target` has {target.vocab_size}; "
                         "speculative sampling needs one shared vocabulary (same tokenizer)")
