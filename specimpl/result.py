"""What a sampler returns: the tokens, their lengths, and per-round statistics.

Every sampler in :mod:`specimpl` (speculative, target-only, transformers' own decoders behind the
same call signature) returns a :class:`GenerationResult`: tokens (B, max_new_tokens) with
:data:`PAD` after each sequence's end.  Speculative samplers also fill a :class:`SpecStats`, one
row per round, whose :meth:`SpecStats.totals` gives the acceptance figures the reports use.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import pandas as pd
import torch

__all__ = ["PAD", "GenerationResult", "SpecStats", "emit_round"]

PAD = -1  # fill value of the output after a sequence ends


@dataclass
class SpecStats:
    """Per-round instrumentation (rows) of one speculative run; totals via :meth:`totals`."""

    k: int
    rounds: list = field(default_factory=list)
    accepted_hist: Optional[np.ndarray] = None  # (k+1,) rounds with n = 0..k accepted (pre-truncation)
    reached: Optional[np.ndarray] = None  # (k,) rounds in which draft position i was judged
    accepted_at: Optional[np.ndarray] = None  # (k,) rounds in which draft position i was accepted

    def __post_init__(self):
        if self.accepted_hist is None:
            self.accepted_hist = np.zeros(self.k + 1, dtype=np.int64)
            self.reached = np.zeros(self.k, dtype=np.int64)
            self.accepted_at = np.zeros(self.k, dtype=np.int64)

    def add_round(self, batch: int, hist: np.ndarray, emitted: int, t_draft: float, t_target: float,
                  t_sampler: float) -> None:
        """Record one round: ``batch`` rows in the batch, ``hist`` (k+1,) counts of n over the live
        sequences (acceptance before EOS / max_new_tokens truncation), ``emitted`` tokens written,
        and the round's seconds in each phase."""
        k = self.k
        self.accepted_hist += hist
        tail = np.cumsum(hist[::-1])[::-1]  # (k+1,) tail[i] = rounds with n >= i
        self.reached += tail[:k]  # x_{i+1} judged iff n >= i
        self.accepted_at += tail[1:]  # x_{i+1} accepted iff n >= i + 1
        live = int(tail[0])
        self.rounds.append({
            "round": len(self.rounds), "batch": batch, "sequence_rounds": live, "drafted": live * k,
            "accepted": int(tail[1:].sum()), "emitted": emitted, "target_calls": 1, "draft_calls": k,
            "t_draft": t_draft, "t_target": t_target, "t_sampler": t_sampler,
        })

    def frame(self) -> pd.DataFrame:
        """One row per round: batch, sequence_rounds, drafted, accepted, emitted, calls, phase times."""
        return pd.DataFrame(self.rounds)

    def totals(self) -> dict:
        """Column sums of :meth:`frame` plus rounds, alpha_per_position, acceptance_rate,
        mean_acceptance_length and tokens_per_target_call ({} before the first round)."""
        f = self.frame()
        if f.empty:
            return {}
        out = {c: f[c].sum() for c in f.columns if c != "round"}
        out["rounds"] = len(f)
        out["alpha_per_position"] = (self.accepted_at / np.maximum(self.reached, 1)).tolist()
        out["acceptance_rate"] = float(out["accepted"] / max(out["drafted"], 1))  # accepted / drafted
        # vLLM V1's "mean acceptance length": 1 + accepted / rounds (bonus or resample included)
        out["mean_acceptance_length"] = float(1 + out["accepted"] / max(out["sequence_rounds"], 1))
        # emitted tokens per target call per sequence (after EOS / max_new_tokens truncation)
        out["tokens_per_target_call"] = float(out["emitted"] / max(out["sequence_rounds"], 1))
        return out


@dataclass
class GenerationResult:
    """tokens (B, max_new_tokens) int64, PAD after each sequence's end; lengths (B,); stats; timings
    (seconds per phase: prefill, draft, target, sampler; some samplers add target_calls or total)."""

    tokens: torch.Tensor
    lengths: torch.Tensor
    stats: Optional[SpecStats] = None
    timings: dict = field(default_factory=dict)


def emit_round(x, n, y, remaining, alive, eos_token_id):
    """Tokens a round writes (every round-based sampler: chain, block, tree): x_1..x_n, y, cut at max_new_tokens and just after an EOS.

    Host (numpy) arrays: x (A, k) (any number of columns for a tree path), n (A,), y (A,), remaining (A,) tokens still allowed, alive (A,)
    bool.  Returns emit (A, k+1) with PAD from position m on, m (A,) tokens written (0 for finished
    sequences) and done (A,) bool (the sequence ends in this round).
    """
    A, k = x.shape
    j = np.arange(k + 1)  # (k+1,)
    emit = np.concatenate([x, np.zeros((A, 1), x.dtype)], 1)  # (A, k+1)
    emit[np.arange(A), n] = y  # x_1..x_n, y
    m = np.minimum(n + 1, remaining) * alive  # (A,) tokens written this round
    done = m == remaining
    if eos_token_id is not None:
        is_eos = (emit == eos_token_id) & (j < m[:, None])  # (A, k+1)
        has_eos = is_eos.any(1)
        m = np.where(has_eos, is_eos.argmax(1) + 1, m)
        done = done | has_eos
    emit[j >= m[:, None]] = PAD
    return emit, m, done
