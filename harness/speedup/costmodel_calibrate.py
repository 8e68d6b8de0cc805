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

* prices every ``<role>.forward`` of (B, L) at n tokens a sequence by the larger of two estimates from the runs'
  step T_run(1) (one token a sequence) and prefill P_run (L - 1 tokens a sequence, from an empty cache):

      scaled   T_isolated(n) * T_run(1) / T_isolated(1)      the isolated profile's shape at the runs' level
      per-row  T_run(1) + (n - 1) (P_run - T_run(1)) / (L - 2)   each added token row at the runs' own price

  The scaled shape alone (the map before this one) assumes that the machine's state changes every call's cost
  in one proportion.  On a memory-bound target it does not: others' work on a shared machine, competing for
  memory bandwidth, inflates the calls that stream the weights for few rows and not the compute-bound ones,
  so the isolated shape flattens.  Memory-bound pair, context 48, CPU time: an isolated profile at load 7-8
  against the measured sweep's target-only runs at load 1 (results/sweep/membound): 1.45x at 1 row, 1.29x
  at 8, 1.11x at 16, 0.98x at 32, 0.90x at 144; its T(2, 16) / T(1, 16) was 1.59 where the sweep's runs paid
  1.80 (0.714 s for the 2-token verification, 0.396 s for the step).  The per-row line through the step and
  the prefill of one run is measured in one state; it gives 1.91 there (B = 4: 1.49 against 1.49).  On an
  overhead-bound target (the tiny pair: fixed per-operation costs, a prefill that amortises them) cost is
  concave in rows and the line lies below it (-7 to -17 % at n = 5-9), while the scaled shape holds (no
  weights to stream): the larger of the two is kept.  A verification from a *ragged* state (rows rolled back
  by 0-3 tokens, as speculation leaves them) costs what one from a uniform state does (paired probe, 10
  passes, results/tune/probe: R(2) / U(2) = 1.00, IQR 0.92-1.12 at B = 16; 0.99 at B = 4; and the sweep's first verification of
  each call, from the uniform prefilled state, cost what the later ragged ones did), so no term is added
  for it.  Where a run has no prefill (or the line no positive slope) the scaled shape alone is used;
* replaces ``<role>.prefill`` by the runs' prefill;
* replaces ``ar.overhead`` by the target-only run's, and adds to ``spec.overhead`` (null models) the same
  extra per model call, (k + 1) x (run - null): what a real model's call costs the sampler beyond a null
  model's.  The committed in-situ profiles bear the per-call form out (tiny pair, B = 1: extra 0.18 ms, null
  spec.overhead + 2 x 0.18 = 1.54 ms at k = 1 against 1.49 ms in situ; a ratio run / null, 2.1, would give
  2.5 ms).

No speculative call is run or used.  The factors are kept in the frame (``calibration``).

:func:`sweep_target_only` reads the same target-only figures out of a measured sweep's in-situ profiles (each
cell runs a target-only call beside its speculative one and records every model call of both): the target's
steps (``target.forward`` with n = 1: only target-only runs make them), its prefill (the target-only run's,
the first of each pass) and ``ar.overhead``, at the cells' prompt length.  Calibrated by them, ``tune`` prices
calls in the machine state of that sweep instead of this minute's; the draft's calls (made only by the
speculative runs there) stay calibrated by this machine's solo runs.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
import torch

from harness.core.provenance import read_table_csv
from harness.speedup.profiler import CallRecorder, Timer
from specimpl.autoregressive import autoregressive_generate
from specimpl.model import LanguageModel

__all__ = ["profile_solo_runs", "calibrate", "sweep_target_only", "TargetOnlyError"]


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
    runs = {key: float(np.median(xs)) for key, xs in med.items()}
    for (op, n, B, L), xs in med.items():
        role = op.split(".")[0]
        if op.endswith(".forward") and n == 1:
            prof = _map_forwards(prof, role, int(B), int(L), runs)
    for (op, n, B, L), xs in med.items():
        role = op.split(".")[0]
        if op.endswith(".prefill"):
            for i in prof.index[(prof.op == op) & (prof.batch == B) & (prof.context == L)]:
                prof.at[i, "cpu_median_s"] = float(np.median(xs))
                prof.at[i, "cpu_samples_s"] = list(xs)
                prof.at[i, "calibration"] = f"target-only run of the {role}"
        elif op == "ar.overhead":
            null = prof[(prof.op == op) & (prof.batch == B) & (prof.context == 0)].cpu_median_s
            if len(null):
                prof = _add_per_call(prof, B, float(np.median(xs)) - float(null.iloc[0]))
    return prof


def _only(frame: pd.DataFrame, what: str):
    """The one value of ``what`` in ``frame``, or None."""
    return float(frame[what].iloc[0]) if len(frame) else None


def _map_forwards(prof: pd.DataFrame, role: str, B: int, L: int, runs: dict) -> pd.DataFrame:
    """``<role>.forward`` at (B, L): the larger of the scaled isolated shape and the runs' per-row line (module
    docstring), every sample mapped as its median."""
    op = f"{role}.forward"
    at = (prof.batch == B) & (prof.context == L) & (prof.op == op)
    t_iso = _only(prof[at & (prof.n == 1)], "cpu_median_s")
    if t_iso is None:
        return prof
    t_run = runs[(op, 1, B, L)]
    r = t_run / t_iso
    p_run = runs.get((f"{role}.prefill", L - 1, B, L))
    per_row = (p_run - t_run) / (L - 2) if p_run is not None and L > 2 and p_run > t_run else None
    for i in prof.index[at]:
        n, med = int(prof.at[i, "n"]), float(prof.at[i, "cpu_median_s"])
        line = t_run + (n - 1) * per_row if per_row is not None else -np.inf
        if line > med * r:
            shift = line - med * r
            prof.at[i, "cpu_median_s"] = line
            prof.at[i, "cpu_samples_s"] = [x * r + shift for x in prof.at[i, "cpu_samples_s"]]
            prof.at[i, "calibration"] = (f"target-only run of the {role}: step {t_run * 1e3:.4g} ms + {n - 1} x "
                                         f"{per_row * 1e3:.4g} ms per added token a sequence (its prefill's)")
        else:
            prof.at[i, "cpu_median_s"] = med * r
            prof.at[i, "cpu_samples_s"] = [x * r for x in prof.at[i, "cpu_samples_s"]]
            prof.at[i, "calibration"] = f"x{r:.3f} (target-only run of the {role})"
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


class TargetOnlyError(ValueError):
    """A sweep folder that cannot give target-only figures for this target (the message names the file)."""


def sweep_target_only(folder: Path, target_name: str, max_new_tokens: int) -> pd.DataFrame:
    """Rows (op, n, batch, context, cpu_s) of the target-only runs in ``folder`` (a sweep's results: measured.csv,
    profiles.csv) for the target called ``target_name`` (module docstring); TargetOnlyError when the folder
    lacks them, holds another target or another max_new_tokens."""
    folder = Path(folder)
    for name in ("measured.csv", "profiles.csv"):
        if not (folder / name).is_file():
            raise TargetOnlyError(f"`--target-only` {str(folder)!r} has no {name} (a sweep results folder with its "
                                  f"in-situ profiles is needed)")
    meas = read_table_csv(folder / "measured.csv")
    prof = read_table_csv(folder / "profiles.csv")
    names = prof.model.astype(str).str.removeprefix("in situ: ").str.split(" / ").str[0]
    same = names.map(lambda x: x == target_name or target_name.endswith("/" + x) or x.endswith("/" + target_name))
    prof = prof[prof.model.astype(str).str.startswith("in situ: ") & same]
    cells = meas[meas.cell.isin(set(prof.cell))]
    if cells.empty:
        found = sorted(set(names))
        raise TargetOnlyError(f"`--target-only` {str(folder / 'profiles.csv')!r} holds no in-situ runs of target "
                              f"{target_name!r}; it holds {found}")
    if set(cells.max_new_tokens) != {int(max_new_tokens)}:
        raise TargetOnlyError(f"`--target-only` {str(folder / 'measured.csv')!r} ran max_new_tokens "
                              f"{sorted(set(cells.max_new_tokens))}; `--max-new-tokens` is {max_new_tokens}: the "
                              f"target-only steps must span the same contexts")
    context = dict(zip(cells.cell, cells.prompt_len.astype(int)))
    rows = []
    for r in prof[prof.cell.isin(set(context))].itertuples():
        xs = json.loads(r.cpu_samples_s) if isinstance(r.cpu_samples_s, str) else list(r.cpu_samples_s)
        if r.op == "target.prefill":
            xs = xs[0::2]  # each pass: the target-only run, then the speculative one
        elif not ((r.op == "target.forward" and int(r.n) == 1) or r.op == "ar.overhead"):
            continue
        rows += [{"op": r.op, "n": int(r.n), "batch": int(r.batch), "context": context[r.cell], "cpu_s": float(x)}
                 for x in xs]
    return pd.DataFrame(rows, columns=["op", "n", "batch", "context", "cpu_s"])
