"""`tune --confirm N`: the model's shortlist measured side by side on this machine, and the measured best picked.

The cost model ranks every (algorithm, k) from profiles; where its error is larger than the gaps between the
configurations it ranks (an overhead-bound pair, a busy machine), its pick can lose.  So, as an autotuner does,
`tune --confirm N` times, at each (batch B, context L), target-only and the N configurations the model ranks
highest, on the pair and machine the recommendation is for, and recommends the measured best:

* prompts: ceil(P / B) batches of B windows of L tokens of the acceptance prompts, P = max(B, ``prompts``)
  (:func:`confirm_prompts`): every arm on the same prompts;
* one warm-up run of each arm, then ``repeats`` passes; in a pass every arm runs once on every prompt batch, in
  an order drawn afresh for each (pass, batch) (a seeded random permutation: no arm always first or always after
  the same arm); wall time (``time.perf_counter``);
* measured S of a configuration: its tokens per second over target-only's, each the sum of tokens over the sum
  of seconds of every pass and batch (a throughput, as the sweep's ``speedup_measured``);
  95 % interval: Student t on the log of the per-unit ratios, a unit being one (pass, batch) in which every arm
  ran once (:func:`measured_speedups`).  The units are few where B >= P (one batch: units = passes); t keeps
  the interval honest there (3 units: t = 4.30), where a bootstrap over 3 units would be far too narrow;
* the pick (:func:`pick`): the configuration of highest measured S, or off where none exceeds 1.  The pick is
  the point estimate; where its interval overlaps a rival's (another configuration's, or target-only's S = 1)
  the pick is a *tie within noise* (:func:`noise_ties`): confirm.csv's ``ties_pick`` marks each rival whose
  interval overlaps the pick's (on the pick's own row: its interval holds 1, it ties target-only), and tune's
  recommendation names them ("tie within noise with ...").  Overlapping intervals are the conservative reading:
  the run cannot tell the two apart; more ``--confirm-repeats`` or ``--confirm-prompts`` may.

It measures only the shortlist: a configuration the model ranks below the N-th is never timed.
"""
from __future__ import annotations

import math
import sys
import time
from typing import Callable, Mapping, Sequence

import numpy as np
import pandas as pd
import scipy.stats
import torch

from harness.laws.algorithms import Algorithm
from specimpl.autoregressive import autoregressive_generate

__all__ = ["shortlist", "confirm_prompts", "time_arms", "measured_speedups", "pick", "noise_ties", "tie_note", "confirm",
           "arm_name", "OFF"]

OFF = "off (target-only)"


def shortlist(grid: pd.DataFrame, batches: Sequence[int], n: int) -> pd.DataFrame:
    """The ``n`` configurations of highest predicted S per (context, batch in ``batches``): rows of ``grid``."""
    g = grid[grid.fits.astype(bool)] if "fits" in grid else grid
    g = g[g.batch.isin(list(batches))]
    return (g.sort_values(["context", "batch", "speedup", "k"], ascending=[True, True, False, True])
            .groupby(["context", "batch"], as_index=False).head(n).reset_index(drop=True))


def confirm_prompts(prompts: Sequence[Sequence[int]], n: int, length: int, seed: int = 0) -> list[list[int]]:
    """``n`` prompts of exactly ``length`` tokens: windows of the prompts laid end to end (repeated as needed), at
    offsets drawn from ``seed``; each window starts with the first token of a prompt (a BOS where prompts have one)."""
    stream = [int(t) for p in prompts for t in p]
    if not stream:
        raise ValueError("`prompts` holds no tokens")
    starts = np.cumsum([0] + [len(p) for p in prompts[:-1]])
    reps = math.ceil((length + 1) / len(stream)) + 1
    stream = stream * reps
    rng = np.random.default_rng(seed)
    return [stream[s:s + length] for s in (int(x) for x in rng.choice(starts, size=n))]


def time_arms(arms: Mapping[str, Callable], prompt_batches: Sequence, repeats: int, say=None,
              clock: Callable[[], float] = time.perf_counter, seed: int = 0) -> pd.DataFrame:
    """Rows (rep, prompt, arm, seconds, tokens): one warm-up run of each arm on the first batch (discarded), then
    ``repeats`` passes, each running every arm on every batch, in an order drawn afresh (from ``seed``) for each
    (pass, batch).  ``arms``: name -> (prompts -> a result with ``lengths``)."""
    names = list(arms)
    rng = np.random.default_rng(seed)
    rows = []
    with torch.no_grad():
        for name in names:
            arms[name](prompt_batches[0])
        for rep in range(repeats):
            for j, ps in enumerate(prompt_batches):
                for i in rng.permutation(len(names)):
                    t0 = clock()
                    res = arms[names[i]](ps)
                    rows.append({"rep": rep, "prompt": j, "arm": names[i], "seconds": clock() - t0,
                                 "tokens": int(res.lengths.sum())})
            if say is not None:
                say(f"pass {rep + 1} of {repeats}")
    return pd.DataFrame(rows)


def measured_speedups(timings: pd.DataFrame, baseline: str = "ar", level: float = 0.95) -> pd.DataFrame:
    """Per arm other than ``baseline``: measured S (its sum of tokens over sum of seconds, over the baseline's) and
    a ``level`` interval: Student t on log(S_u), S_u the arm's rate over the baseline's within one (rep, prompt)
    unit (paired: they ran on the same prompts in the same pass); NaN with one unit."""
    per = timings.groupby(["rep", "prompt", "arm"])[["seconds", "tokens"]].sum().unstack("arm")
    rate = per["tokens"] / per["seconds"]  # (units, arms)
    n = len(per)
    out = []
    for arm in [a for a in rate.columns if a != baseline]:
        S = float(per["tokens"][arm].sum() / per["seconds"][arm].sum()
                  / (per["tokens"][baseline].sum() / per["seconds"][baseline].sum()))
        lr = np.log(rate[arm] / rate[baseline]).to_numpy()
        half = (scipy.stats.t.ppf((1 + level) / 2, n - 1) * lr.std(ddof=1) / math.sqrt(n)) if n > 1 else np.nan
        mid = float(lr.mean())
        out.append({"arm": arm, "measured_speedup": S, "measured_lo": float(np.exp(mid - half)),
                    "measured_hi": float(np.exp(mid + half)), "units": n})
    return pd.DataFrame(out)


def pick(measured: pd.DataFrame) -> str:
    """The arm of highest measured S, or :data:`OFF` where no arm's measured S exceeds 1."""
    if measured.empty or not (measured.measured_speedup > 1.0).any():
        return OFF
    return str(measured.sort_values("measured_speedup", ascending=False, kind="stable").arm.iloc[0])


def noise_ties(measured: pd.DataFrame, chosen: str) -> dict:
    """Per arm of ``measured``: whether it ties the pick ``chosen`` within the run's noise.  A rival arm ties where
    its interval overlaps the pick's; the pick's own entry says whether its interval holds 1 (it ties target-only);
    where :data:`OFF` is the pick, an arm ties where its interval holds 1.  An arm without an interval (one unit)
    cannot be told apart: it ties."""
    lo, hi = measured.set_index("arm").measured_lo, measured.set_index("arm").measured_hi
    unknown = lambda a: not (np.isfinite(lo[a]) and np.isfinite(hi[a]))  # noqa: E731
    holds_one = {a: unknown(a) or lo[a] <= 1.0 <= hi[a] for a in lo.index}
    if chosen == OFF:
        return holds_one
    return {a: holds_one[a] if a == chosen else
            (unknown(a) or unknown(chosen) or (lo[a] <= hi[chosen] and hi[a] >= lo[chosen])) for a in lo.index}


def tie_note(conf: pd.DataFrame) -> str:
    """'' or 'tie within noise with <rivals>' for one (context, batch) of confirm.csv (its ``ties_pick`` column;
    '' for a table without one, as those committed before it)."""
    if "ties_pick" not in conf:
        return ""
    pick_rows = conf[conf.chosen]
    rivals = [arm_name(r.algorithm, r.k) for r in conf.itertuples() if r.ties_pick and not r.chosen]
    if len(pick_rows) and bool(pick_rows.ties_pick.iloc[0]):
        rivals.append(OFF)
    return f"tie within noise with {', '.join(rivals)}" if rivals else ""


def arm_name(algorithm: str, k: int) -> str:
    """A configuration's name in tune's tables ('chain, k = 2')."""
    return f"{algorithm}, k = {int(k)}"


def confirm(target, draft, short: pd.DataFrame, prompts, *, max_new_tokens: int, repeats: int, n_prompts: int,
            seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per arm and (context, batch): measured S and interval, predicted S, chosen; every timed run).  ``short``:
    the shortlist (:func:`shortlist`)."""
    rows, timings = [], []
    g = torch.Generator().manual_seed(seed)
    N = max_new_tokens
    for (L, B), cands in short.groupby(["context", "batch"], sort=True):
        B, L = int(B), int(L)
        P = max(B, n_prompts)
        ps = confirm_prompts(prompts, math.ceil(P / B) * B, L, seed=seed + 7919 * B + L)
        batches = [ps[i:i + B] for i in range(0, len(ps), B)]
        arms = {"ar": lambda p: autoregressive_generate(target, p, max_new_tokens=N, generator=g)}
        for c in cands.itertuples():
            algo = Algorithm.parse(c.algorithm)
            arms[arm_name(c.algorithm, c.k)] = (lambda p, algo=algo, k=int(c.k): algo.generate(
                target, draft, p, k=k, max_new_tokens=N, generator=g))
        print(f"tune: confirm at batch {B}, context {L}: target-only and {list(arms)[1:]} on {len(batches)} batch(es) "
              f"of {B}, {repeats} passes", file=sys.stderr)
        t = time_arms(arms, batches, repeats, say=lambda m: print(f"tune: confirm B {B}, L {L}: {m}", file=sys.stderr),
                      seed=seed + B)
        m = measured_speedups(t)
        chosen = pick(m)
        ties = noise_ties(m, chosen) if len(m) else {}
        pred = {arm_name(c.algorithm, c.k): (c.algorithm, int(c.k), float(c.speedup), float(c.speedup_lo),
                                              float(c.speedup_hi)) for c in cands.itertuples()}
        for r in m.itertuples():
            a, k, s, lo, hi = pred[r.arm]
            rows.append({"context": L, "batch": B, "algorithm": a, "k": k, "predicted_speedup": s, "predicted_lo": lo,
                         "predicted_hi": hi, "measured_speedup": r.measured_speedup, "measured_lo": r.measured_lo,
                         "measured_hi": r.measured_hi, "units": r.units, "prompts": len(ps), "repeats": repeats,
                         "chosen": r.arm == chosen, "ties_pick": bool(ties[r.arm])})
        timings.append(t.assign(context=L, batch=B))
    return pd.DataFrame(rows), pd.concat(timings, ignore_index=True)
