"""Isolated profiles calibrated by target-only and draft-only runs: the costs `tune` prices a call with.

:func:`harness.speedup.profiler.profile_model` times each model's calls on their own, at a fixed context, in a
loop of nothing but that model's calls.  A real call runs them in another state (context growing from the
prompt, the sampler's tensors between calls), and the memory-bound pair's committed in-situ profiles
(results/sweep/membound/profiles.csv, CPU time) differ from an isolated profile of the same calls by more
than their noise: at B = 16 the isolated target.forward(1) was 0.353 s against 0.396 s in the target-only
runs, the prefill of 31 tokens 8.24 s against 10.84 s, and the null-model sampler overhead a third of the
target-only run's (0.11-0.21 ms against 0.36-0.47 ms per token).

:func:`profile_solo_runs` times target-only calls of each model alone (``autoregressive_generate`` of B prompts
of L tokens, max_new_tokens new ones: the baseline call itself, for the target; the draft run the same way),
every model call recorded (:class:`harness.speedup.profiler.CallRecorder`), the rest of the run being the
per-token overhead.  :func:`calibrate` then, per model, batch and context:

* scales every ``<role>.forward`` of the isolated profile by r = T_run(1) / T_isolated(1) (the runs score one
  token a call; the isolated profile gives the shape in n, the runs its level);
* replaces ``<role>.prefill`` by the runs' prefill;
* replaces ``ar.overhead`` by the target-only run's, and adds to ``spec.overhead`` (null models) the same
  extra per model call, (k + 1) x (run - null): what a real model's call costs the sampler beyond a null
  model's.  The committed in-situ profiles bear the per-call form out (tiny pair, B = 1: extra 0.18 ms, null
  spec.overhead + 2 x 0.18 = 1.54 ms at k = 1 against 1.49 ms in situ; a ratio run / null, 2.1, would give
  2.5 ms).

No speculative call is run or used.  The factors are kept in the frame (``calibration``).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd
import torch

from harness.speedup.profiler import CallRecorder, Timer
from specimpl.autoregressive import autoregressive_generate
from specimpl.model import LanguageModel

__all__ = ["profile_solo_runs", "calibrate"]


@torch.no_grad()
def _one_run(model: LanguageModel, role: str, prompts, max_new_tokens: int, seed: int) -> list:
    log: list = []
    rec = CallRecorder(model, role, Timer(getattr(model, "device", "cpu")), log)
    g = torch.Generator(device=getattr(model, "device", "cpu")).manual_seed(seed)
    _, *t = Timer(getattr(model, "device", "cpu"))(
        lambda: autoregressive_generate(rec, prompts, max_new_tokens=max_new_tokens, generator=g))
    calls = np.asarray([row[3:] for row in log], dtype=np.float64).sum(0)
    steps = sum(r[0] == f"{role}.forward" for r in log)
    return log + ([("ar.overhead", 1, len(prompts), *((np.asarray(t) - calls) / steps))] if role == "target" else [])


def profile_solo_runs(models: dict, prompts_for, batches: Sequence[int], contexts: Sequence[int],
                      max_new_tokens: int, repeats: int = 3, seed: int = 0) -> pd.DataFrame:
    """Rows (op, n, batch, context, cpu_s, wall_s) of every recorded call of ``repeats`` target-only runs of each
    model in ``models`` ({role: model}) per batch B and context L; ``prompts_for(B, L)`` gives the prompts.
    One discarded warm-up run per (role, B, L)."""
    rows = []
    for L in contexts:
        for B in batches:
            prompts = prompts_for(int(B), int(L))
            for role, m in models.items():
                _one_run(m, role, prompts, 2, seed)  # warm-up
                for rep in range(repeats):
                    for op, n, b, _, w, c in _one_run(m, role, prompts, max_new_tokens, seed + rep):
                        rows.append({"op": op, "n": int(n), "batch": int(b), "context": int(L), "cpu_s": c, "wall_s": w})
    return pd.DataFrame(rows)


def _scale(prof: pd.DataFrame, mask, r: float, how: str) -> pd.DataFrame:
    for i in prof.index[mask]:
        prof.at[i, "cpu_median_s"] *= r
        prof.at[i, "cpu_samples_s"] = [x * r for x in prof.at[i, "cpu_samples_s"]]
        prof.at[i, "calibration"] = how
    return prof


def calibrate(prof: pd.DataFrame, solo: pd.DataFrame) -> pd.DataFrame:
    """The isolated profile (``context`` L rows; overheads at context 0) calibrated by the solo runs (module
    docstring).  Rows the runs did not cover are left as profiled."""
    prof = prof.copy()
    prof["calibration"] = "isolated"
    med = solo.groupby(["op", "n", "batch", "context"]).cpu_s.agg(lambda x: list(x))
    for (op, n, B, L), xs in med.items():
        role = op.split(".")[0]
        if op.endswith(".forward") and n == 1:
            iso = prof[(prof.op == op) & (prof.n == 1) & (prof.batch == B) & (prof.context == L)].cpu_median_s
            if len(iso):
                r = float(np.median(xs)) / float(iso.iloc[0])
                mask = (prof.op == op) & (prof.batch == B) & (prof.context == L)
                prof = _scale(prof, mask, r, f"x{r:.3f} (target-only run of the {role})")
        elif op.endswith(".prefill"):
            for i in prof.index[(prof.op == op) & (prof.batch == B) & (prof.context == L)]:
                prof.at[i, "cpu_median_s"] = float(np.median(xs))
                prof.at[i, "cpu_samples_s"] = list(xs)
                prof.at[i, "calibration"] = f"target-only run of the {role}"
        elif op == "ar.overhead":
            null = prof[(prof.op == op) & (prof.batch == B) & (prof.context == 0)].cpu_median_s
            if len(null):
                prof = _add_per_call(prof, B, float(np.median(xs)) - float(null.iloc[0]))
    return prof


def _add_per_call(prof: pd.DataFrame, B: int, extra: float) -> pd.DataFrame:
    """ar.overhead + extra (one model call per step), spec.overhead + (k + 1) extra (k draft calls, one target
    call per round)."""
    for o in ("ar.overhead", "spec.overhead"):
        mask = (prof.op == o) & (prof.batch == B) & (prof.context == 0)
        for i in prof.index[mask]:
            add = (int(prof.at[i, "n"]) + 1 if o == "spec.overhead" else 1) * extra
            prof.at[i, "cpu_median_s"] += add
            prof.at[i, "cpu_samples_s"] = [x + add for x in prof.at[i, "cpu_samples_s"]]
            prof.at[i, "calibration"] = f"+{extra * 1e3:.3f} ms per model call (target-only run's overhead - null models')"
    return prof
