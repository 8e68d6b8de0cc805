"""Scored mode: the target scores every output token of a sample file.

    scores = score_records(target, records, config, seed=0)
    scores.u          # (N, T) randomized PIT of every output token under the target's warped law
    scores.present    # (N, T) which entries are real tokens (False after a completion's end)

Each row is scored in one batched forward of prompt + output[:-1] through the target's ragged KV cache
(:class:`specimpl.hf.HFModel`: prefill the prompt, then one call over the output; rows of different
lengths share the batch), the logits warped in float64 with the recorded controls
(:func:`specimpl.sampling.warp`; :func:`harness.samples.producers.config_of` refuses controls it cannot
apply).  Under H0 (the engine samples the target's law with those controls) the sequential randomized
PIT values of a row are iid U(0, 1) (:mod:`harness.verify.realmodel`); after a row's end the entry is filled
with a fresh uniform (U = V), so the tests of :func:`harness.verify.battery.plan_pit_value_tests` apply as they
are.  The same pass yields what the other checks need: log p_t(x_t) (engine-logprob agreement, sequence
probabilities for the duplicate test), the entropy and variance of log p_t (the log-likelihood
martingale), and per position the sum of the warped conditional laws over the rows that reach it (the
Rao–Blackwellised marginal of the token-TV certificate, :mod:`harness.stats.rbtv`).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np
import torch

from harness import stats
from harness.samples.format import SampleRecord
from specimpl.result import PAD
from specimpl.sampling import SamplingConfig, warp

__all__ = ["Scores", "score_records", "padded_outputs"]


@dataclass(frozen=True)
class Scores:
    """What the target's scoring pass gives, (N, T) each (T: the longest output).

    u         randomized PIT (U = V after a row's end)
    present   True where the row has a token
    logp      log p_t(x_t) under the warped target law (-inf: a token the law cannot draw; NaN: absent)
    entropy   H(p_t) (NaN: absent)
    var_logp  Var_{x ~ p_t}(log p_t(x)) (NaN: absent)
    impossible  (N, T) bool: tokens of probability 0 under the warped law
    law_sum   (T, V) Σ over the rows present at t of the warped target law p_t(· | the row's prefix)
    """

    u: np.ndarray
    present: np.ndarray
    logp: np.ndarray
    entropy: np.ndarray
    var_logp: np.ndarray
    impossible: np.ndarray
    law_sum: np.ndarray

    @property
    def n_tokens(self) -> int:
        return int(self.present.sum())


def padded_outputs(records: list[SampleRecord]) -> torch.Tensor:
    """The output ids (N, T) with PAD after each row's end, T the longest output (>= 1)."""
    T = max(1, max(len(r.output_ids) for r in records))
    out = torch.full((len(records), T), PAD, dtype=torch.long)
    for i, r in enumerate(records):
        out[i, :len(r.output_ids)] = torch.tensor(r.output_ids, dtype=torch.long)
    return out


@torch.no_grad()
def _score_chunk(target, records, x, config: SamplingConfig, generator: torch.Generator):
    pad = x == PAD  # (n, T)
    xin = torch.cat([torch.tensor([[r.prompt_ids[-1]] for r in records]), x[:, :-1]], 1)  # (n, T)
    st = target.prefill([list(r.prompt_ids) for r in records])
    logits = target.forward(st, xin.masked_fill(xin == PAD, 0).to(target.device))  # (n, T, V)
    p = warp(logits.double(), config).cpu()  # (n, T, V)
    xs = x.masked_fill(pad, 0)  # (n, T)
    u = stats.pit_from_probs(p, xs, generator=generator, pad_mask=pad)  # (n, T)
    px = p.gather(-1, xs.unsqueeze(-1)).squeeze(-1)  # (n, T)
    logp_all = torch.log(p)  # (n, T, V), -inf where p = 0
    plogp = torch.where(p > 0, p * logp_all, torch.zeros_like(p))  # (n, T, V)
    ent = -plogp.sum(-1)  # (n, T)
    second = torch.where(p > 0, p * logp_all ** 2, torch.zeros_like(p)).sum(-1)  # (n, T)
    nan = torch.full_like(ent, float("nan"))
    law = p.masked_fill(pad.unsqueeze(-1), 0.0).sum(0).numpy()  # (T, V) over the rows present at t
    return (law, u, torch.where(pad, nan, torch.log(px)).numpy(), torch.where(pad, nan, ent).numpy(),
            torch.where(pad, nan, (second - ent ** 2).clamp_min(0)).numpy(), ((px == 0) & ~pad).numpy())


def score_records(target, records: list[SampleRecord], config: SamplingConfig, *, seed: int = 0, chunk: int = 64,
                  progress: bool = True) -> Scores:
    """Score every output token of ``records`` with ``target`` (:class:`specimpl.hf.HFModel`) under ``config``;
    ``seed`` drives the PIT's uniforms V.  ValueError when a token id is outside the target's vocabulary."""
    from tqdm import tqdm
    V = target.vocab_size
    for r in records:
        bad = [t for t in r.prompt_ids + r.output_ids if t >= V]
        if bad:
            raise ValueError(f"request {r.request_id!r} holds token id {bad[0]}, outside the target's vocabulary "
                             f"[0, {V})")
    x = padded_outputs(records)
    gen = torch.Generator().manual_seed(seed)
    parts = []
    for s in tqdm(range(0, len(records), chunk), desc="score", disable=not progress, file=sys.stderr, leave=False):
        parts.append(_score_chunk(target, records[s:s + chunk], x[s:s + chunk], config, gen))
    u, logp, ent, var, imp = (np.concatenate([p[i] for p in parts], 0) for i in range(1, 6))
    return Scores(u=u, present=(x != PAD).numpy(), logp=logp, entropy=ent, var_logp=var, impossible=imp,
                  law_sum=np.sum([p[0] for p in parts], axis=0))
