"""Speedup of speculative decoding over (alpha_i, c, k, B, L, algorithm) with roofline forward costs.

The per-call costs are functions T(n, B, L) (a :class:`harness.speedup.roofline.model.Roofline`, or a measured table
wrapped as one): n tokens scored per sequence, batch B, context L.  One round of each algorithm
(:mod:`harness.laws.algorithms` names) costs, as in :mod:`harness.speedup.costmodel` and :mod:`harness.speedup.costmodel_tree`:

    chain, block   T_d(2) + (k - 1) T_d(1) + T_t(k + 1) + O_round       (the draft's first call of a
                                                                        round feeds 2 tokens)
    tree<n>        T_t(n k + 1) + sum_{d=1..k} T_d(m_d) + O_round        (m_d = 1 + n (d - 1): the tree
                                                                        sampler rescores, see costmodel_tree)
    target-only    T_t(1) + O_token      per token

and emits E tokens per sequence (steady state, no truncation):

    chain          E = 1 + sum_{j=1..k} prod_{i<=j} alpha_i              (the measured model's alpha_i)
    block          E >= the chain's (Sun et al. 2024: never worse); the chain's E is used unless a measured
                   E is given: a lower bound on block's speedup
    tree<n>        beta_i = 1 - (1 - alpha_i)^n per position unless a measured E is given: an optimistic
                   bound (n independent chains, one accepted if any would be)

    S = E (T_t(1) + O_token) / t_round          goodput = B E / t_round tokens/s  (target-only: B / T_ar)

Leviathan's c is T_d(1) / T_t(1) at the (B, L) in question.  :func:`speedup_table` evaluates a grid and
returns the rows the figures of :mod:`harness.speedup.report.roofline` are drawn from; :func:`crossover_batch`
interpolates the batch where S falls through 1 (in log B).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional, Sequence, Union

import numpy as np
import pandas as pd

from harness.laws.algorithms import Algorithm
from harness.speedup.costmodel_tree import draft_tokens_per_call
from specimpl.errors import check_arg

__all__ = ["PairCosts", "alphas_for", "tokens_per_round", "round_seconds", "speedup", "best_k", "crossover_batch",
           "speedup_table", "cost_frame", "COLUMNS"]

COLUMNS = ("scenario", "algorithm", "k", "batch", "context", "tokens_per_round", "c", "t_target_1_s", "t_round_s",
           "t_ar_s", "speedup", "goodput_spec", "goodput_ar", "bound", "fits")


@dataclass(frozen=True)
class PairCosts:
    """T_target(n, B, L), T_draft(n, B, L) (seconds) and the sampler's own overheads per round / per token."""

    target: Callable
    draft: Callable
    overhead_round_s: Union[float, Callable] = 0.0  # seconds, or (k, B) -> seconds
    overhead_token_s: Union[float, Callable] = 0.0  # seconds, or (B) -> seconds

    def c(self, B: int, L: float) -> float:
        return float(self.draft(1, B, L) / self.target(1, B, L))

    def round_overhead(self, k: int, B: int) -> float:
        o = self.overhead_round_s
        return float(o(k, B) if callable(o) else o)

    def token_overhead(self, B: int) -> float:
        o = self.overhead_token_s
        return float(o(B) if callable(o) else o)


def alphas_for(alpha, k: int) -> np.ndarray:
    """(k,) per-position acceptance: a scalar alpha (iid), or alpha_1..alpha_K (K >= 1; positions past K
    repeat the last)."""
    a = np.atleast_1d(np.asarray(alpha, dtype=np.float64))
    check_arg(a.ndim == 1 and a.size >= 1 and bool(np.all((a >= 0) & (a <= 1))), "alpha", alpha,
              "a probability or a list of per-position probabilities in [0, 1]")
    check_arg(isinstance(k, (int, np.integer)) and k >= 1, "k", k, "an integer >= 1")
    return np.concatenate([a[:k], np.full(max(0, k - a.size), a[-1])])


def tokens_per_round(algorithm: str, alpha, k: int) -> float:
    """E[tokens per round per sequence] of the module docstring (chain exact under alpha_i; block: the
    chain's, a lower bound; tree<n>: the optimistic independent-chains bound)."""
    algo = Algorithm.parse(algorithm, "algorithm")
    a = alphas_for(alpha, k)
    if algo.kind == "tree":
        a = 1.0 - (1.0 - a) ** algo.n
    return float(1.0 + np.cumprod(a).sum())


def round_seconds(costs: PairCosts, algorithm: str, k: int, B: int, L: float) -> float:
    """Seconds of one round at batch B, context L (the module docstring's t_round)."""
    algo = Algorithm.parse(algorithm, "algorithm")
    if algo.kind == "tree":
        m = draft_tokens_per_call(algo.n, k, "rescored")
        t = costs.target(algo.n * k + 1, B, L) + sum(costs.draft(int(x), B, L) for x in m)
    else:
        t = costs.draft(2, B, L) + (k - 1) * costs.draft(1, B, L) + costs.target(k + 1, B, L)
    return float(t + costs.round_overhead(k, B))


def speedup(costs: PairCosts, algorithm: str, alpha, k: int, B: int, L: float,
            tokens: Optional[float] = None) -> float:
    """S at (alpha_i, k, B, L): E T_ar / t_round.  ``tokens`` overrides E (a measured value)."""
    e = tokens_per_round(algorithm, alpha, k) if tokens is None else float(tokens)
    t_ar = costs.target(1, B, L) + costs.token_overhead(B)
    return float(e * t_ar / round_seconds(costs, algorithm, k, B, L))


def best_k(costs: PairCosts, algorithm: str, alpha, B: int, L: float, ks: Sequence[int] = range(1, 17),
           tokens: Optional[dict] = None) -> tuple[int, float]:
    """(k, S) with the largest S over ``ks``; ``tokens`` {k: measured E} overrides E per k."""
    tokens = tokens or {}
    s = [(speedup(costs, algorithm, alpha, k, B, L, tokens.get(k)), k) for k in ks]
    sbest, kbest = max(s)
    return kbest, sbest


def crossover_batch(batches: Sequence[float], speedups: Sequence[float]) -> float:
    """The batch where S crosses 1 from above, interpolated in log B between grid points; nan if S stays on
    one side of 1 (inf-like answers are not invented)."""
    b, s = np.asarray(batches, dtype=np.float64), np.asarray(speedups, dtype=np.float64)
    for i in range(1, len(b)):
        if s[i - 1] >= 1.0 > s[i]:
            w = (s[i - 1] - 1.0) / (s[i - 1] - s[i])
            return float(math.exp(math.log(b[i - 1]) + w * (math.log(b[i]) - math.log(b[i - 1]))))
    return float("nan")


def _row(scenario, costs, algorithm, alpha, k, B, L, tokens, bound, fits) -> dict:
    e = tokens_per_round(algorithm, alpha, k) if tokens is None else float(tokens)
    t1 = float(costs.target(1, B, L))
    t_ar = t1 + costs.token_overhead(B)
    tr = round_seconds(costs, algorithm, k, B, L)
    return {"scenario": scenario, "algorithm": algorithm, "k": k, "batch": B, "context": L, "tokens_per_round": e,
            "c": costs.c(B, L), "t_target_1_s": t1, "t_round_s": tr, "t_ar_s": t_ar, "speedup": e * t_ar / tr,
            "goodput_spec": B * e / tr, "goodput_ar": B / t_ar, "bound": bound(k, B, L) if bound else "",
            "fits": bool(fits(k, B, L)) if fits else True}


def speedup_table(scenario: str, costs: PairCosts, alpha, algorithms: Sequence[str], ks: Sequence[int],
                  batches: Sequence[int], contexts: Sequence[float], tokens: Optional[dict] = None,
                  bound: Optional[Callable] = None, fits: Optional[Callable] = None) -> pd.DataFrame:
    """Rows of :data:`COLUMNS` over algorithm x k x B x L.  ``tokens`` {(algorithm, k): measured E}
    overrides E; ``bound(k, B, L)`` labels the target's verification call ('memory' / 'compute');
    ``fits(k, B, L)``: both models' weights and KV caches fit in the machine's memory."""
    tokens = tokens or {}
    rows = [_row(scenario, costs, a, alpha, k, B, L, tokens.get((a, k)), bound, fits)
            for a in algorithms for k in ks for B in batches for L in contexts]
    return pd.DataFrame(rows, columns=list(COLUMNS))


def cost_frame(costs: PairCosts, ks: Sequence[int], batches: Sequence[int], L: float,
               prompt_len: int = 16) -> pd.DataFrame:
    """The rows :class:`harness.speedup.costmodel.CostTable` reads (op, n, batch, median_s) at context L, from T:
    so the measured model (:func:`harness.speedup.costmodel.predict_measured`: per-position alpha_i, ragged batches,
    the last round cut at max_new_tokens) runs on roofline costs.  Prefill is T(prompt_len - 1, B, 0);
    roll-backs are free; the sampler's overheads come from ``costs``."""
    rows = []
    for B in batches:
        for n in sorted({1} | {k + 1 for k in ks}):
            rows.append(("target.forward", n, B, costs.target(n, B, L)))
        rows += [("draft.forward", n, B, costs.draft(n, B, L)) for n in (1, 2)]
        rows += [("target.prefill", prompt_len - 1, B, costs.target(prompt_len - 1, B, 0)),
                 ("draft.prefill", prompt_len - 1, B, costs.draft(prompt_len - 1, B, 0)),
                 ("ar.overhead", 1, B, costs.token_overhead(B))]
        rows += [("spec.overhead", k, B, costs.round_overhead(k, B)) for k in ks]
    return pd.DataFrame(rows, columns=["op", "n", "batch", "median_s"]).astype({"median_s": float})
