"""The speedup of one finite call — prompt of L tokens, max_new_tokens new ones — over a (algorithm, k, B, L) grid,
with S's interval from the profiling noise and the acceptance estimate.

The steady-state model (:mod:`harness.speedup.roofline.speedup`) prices one round against E target-only steps.
A measured call differs from it in four ways, each visible in the committed measurements of the memory-bound
pair (results/sweep/membound, in-situ profiles) and each added here:

* prefill: both calls prefill the prompts with the target, the speculative call with the draft too.  At
  B = 16, L = 32 the target's prefill (8.7 s in situ) is 0.6 of the 32 target-only steps (14.5 s), so S is
  pulled towards 1 — and the draft's prefill is paid on one side only;
* the last round cut at max_new_tokens: a sequence 2 tokens short still pays a whole round of k drafts and
  a (k + 1)-token verification; and in a batch the call runs until its slowest sequence is done (finished
  rows ride along until fewer than half are alive, then the batch is compacted): at B = 16 the rounds are
  the maximum over 16 sequences', not the mean (:func:`harness.speedup.costmodel.simulate_rounds`);
* batch-dependent verification: T_target(k + 1, B) / T_target(1, B) is profiled at each B, not scaled
  from B = 1 (memory-bound pair, isolated profile: 1.11 at B = 1 for k = 1, 1.63 at B = 16);
* per-step overheads: the sampler's own work per round (spec.overhead, k and B dependent) and per
  target-only step (ar.overhead), plus both models' roll-backs per round.

The costs are a :class:`RunCosts`: forwards T(n, B, L') at the context a call sees half-way, L' = L +
max_new_tokens // 2, and prefill(role, B, L).  They come from target-only / draft-only profiling (or a
roofline), never from the speculative measurements they are checked against.

Interval: ``replicates`` bootstrap replicates, each resampling (a) every profiled operation's samples
(``resample_costs(rng)``: the median of a resample of the profiler's passes) and (b) each (algorithm, k)'s
histogram of accepted drafts (multinomial, rounds treated as independent); the 2.5 / 97.5 % quantiles of
S over the replicates, each simulated with the point estimate's random numbers (widened to hold the
point estimate should it fall outside).  It covers those two sources only, not the drift between the profile and the run.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Optional, Sequence

import numpy as np
import pandas as pd

from harness.speedup.costmodel import conditional_alphas, predict_run, simulate_rounds
from harness.speedup.roofline.speedup import COLUMNS, PairCosts, round_seconds
from specimpl.errors import check_arg

__all__ = ["RunCosts", "run_speedup", "run_grid", "run_interval", "RUN_COLUMNS"]

RUN_COLUMNS = COLUMNS + ("speedup_steady", "t_spec_run_s", "t_ar_run_s", "rounds", "max_new_tokens")


@dataclass(frozen=True)
class RunCosts:
    """Forwards and overheads (:class:`PairCosts`) and ``prefill(role, B, L)``: seconds of prefilling B prompts
    of L tokens with the 'target' or the 'draft'."""

    pair: PairCosts
    prefill: Callable[[str, int, int], float]


def _rounds(hists: Mapping, batches: Sequence[int], max_new_tokens: int, n_sim: int, seed: int) -> dict:
    """{(algorithm, k, B): expected rounds at each active batch} of the histograms' round laws."""
    out = {}
    for (algo, k), h in hists.items():
        a = conditional_alphas(h)
        for B in batches:  # n_sim runs of B sequences: fewer runs at large B hold as many sequences
            n = max(8, n_sim // int(B))
            out[(algo, k, B)] = simulate_rounds(a, int(B), max_new_tokens, n, np.random.default_rng(seed))
    return out


def _mean_tokens(h) -> float:
    """E = 1 + mean accepted drafts of a histogram of n."""
    h = np.asarray(h, dtype=np.float64)
    return float(1.0 + (h * np.arange(h.size)).sum() / h.sum())


def run_speedup(costs: RunCosts, algorithm: str, k: int, B: int, L: int, rounds_at: np.ndarray,
                max_new_tokens: int, tokens: float) -> dict:
    """One grid row (:data:`RUN_COLUMNS` less scenario, bound, fits): the finite call's S beside the steady
    state's (``tokens`` = E per round, the histogram's)."""
    Lm = L + max_new_tokens // 2
    pc = costs.pair
    t1 = float(pc.target(1, B, Lm))
    ar_step = t1 + pc.token_overhead(B)
    t_round = round_seconds(pc, algorithm, k, B, Lm)
    pred = predict_run(lambda A: round_seconds(pc, algorithm, k, A, Lm), ar_step,
                       (costs.prefill("target", B, L), costs.prefill("draft", B, L)), rounds_at, max_new_tokens)
    return {"algorithm": algorithm, "k": k, "batch": B, "context": L, "tokens_per_round": tokens,
            "c": pc.c(B, Lm), "t_target_1_s": t1, "t_round_s": t_round, "t_ar_s": ar_step,
            "speedup": pred.speedup, "goodput_spec": B * max_new_tokens / pred.t_spec_s,
            "goodput_ar": B * max_new_tokens / pred.t_ar_s, "speedup_steady": tokens * ar_step / t_round,
            "t_spec_run_s": pred.t_spec_s, "t_ar_run_s": pred.t_ar_s, "rounds": pred.rounds,
            "max_new_tokens": max_new_tokens}


def _check_hists(hists: Mapping) -> None:
    check_arg(isinstance(hists, Mapping) and len(hists) > 0 and all(
        len(np.asarray(h)) == int(k) + 1 and np.asarray(h).sum() > 0 for (_, k), h in hists.items()),
        "hists", hists, "{(algorithm, k): counts of rounds with n = 0..k accepted drafts}, non-empty")


def run_grid(scenario: str, costs: RunCosts, hists: Mapping, batches: Sequence[int], contexts: Sequence[int],
             max_new_tokens: int, n_sim: int = 400, seed: int = 0, bound: Optional[Callable] = None,
             fits: Optional[Callable] = None, rounds: Optional[dict] = None) -> pd.DataFrame:
    """Rows of :data:`RUN_COLUMNS` over hists' (algorithm, k) x B x L: S of the finite call (``speedup``)."""
    _check_hists(hists)
    rounds = _rounds(hists, batches, max_new_tokens, n_sim, seed) if rounds is None else rounds
    rows = []
    for (algo, k), h in hists.items():
        e = _mean_tokens(h)
        for B in batches:
            for L in contexts:
                r = run_speedup(costs, algo, int(k), int(B), int(L), rounds[(algo, k, B)], max_new_tokens, e)
                r.update(scenario=scenario, bound=bound(k, B, L) if bound else "",
                         fits=bool(fits(k, B, L)) if fits else True)
                rows.append(r)
    return pd.DataFrame(rows, columns=list(RUN_COLUMNS))


def run_interval(grid: pd.DataFrame, resample_costs: Callable, hists: Mapping, max_new_tokens: int,
                 replicates: int = 100, n_sim: int = 400, seed: int = 0, level: float = 0.95) -> pd.DataFrame:
    """``grid`` with speedup_lo / speedup_hi: S's bootstrap interval (module docstring) at ``level``.  Every
    replicate simulates its round process with the point estimate's random numbers (``seed``, ``n_sim``), so
    the interval holds the resampled inputs' spread, not the simulation's."""
    check_arg(isinstance(replicates, int) and replicates >= 10, "replicates", replicates, "an integer >= 10")
    rng = np.random.default_rng(seed)
    batches, contexts = sorted(grid.batch.unique()), sorted(grid.context.unique())
    reps = []
    for _ in range(replicates):
        hb = {key: rng.multinomial(int(np.sum(h)), np.asarray(h, dtype=np.float64) / np.sum(h)) for key, h in
              hists.items()}
        g = run_grid("", resample_costs(rng), hb, batches, contexts, max_new_tokens, n_sim, seed)
        reps.append(g.speedup.to_numpy())
    q = np.quantile(np.vstack(reps), [(1 - level) / 2, (1 + level) / 2], axis=0)
    key = ["algorithm", "k", "batch", "context"]
    order = g[key].assign(speedup_lo=q[0], speedup_hi=q[1])
    out = grid.drop(columns=[c for c in ("speedup_lo", "speedup_hi") if c in grid]).merge(order, on=key, how="left")
    # widened to hold the point estimate where the percentile interval misses it (the replicates' simulation noise)
    out["speedup_lo"] = np.minimum(out.speedup_lo, out.speedup)
    out["speedup_hi"] = np.maximum(out.speedup_hi, out.speedup)
    return out
