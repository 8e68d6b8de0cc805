"""What a certificate costs: the CPU seconds of each run, and two figures of them that do not depend on its size.

Counted per run (``runs.csv``; :class:`CostPart`):

    cpu_s               CPU seconds of the run's own draws: every shard's sampler call and the shard's statistics
                        (its Accumulator: counts, PIT values), summed over shards and workers; a real-model run:
                        its tiny-pair draw and scoring and every exact-pair shard; von Neumann: its proposals.
                        Measured around the same work as ``wall_s`` (:func:`harness.core.cputime.task_clock`: the
                        worker process's CPU time, the driver thread's in the driver).  Not counted: building a
                        scenario's law and models (once per process), the tests and the judgement (in the
                        command's total, ``timing.cpu_total_s``)
    cpu_baseline_s      CPU seconds of the scenario's target-only baseline (the two-sample tests' reference, drawn
                        as shards too) when this run is the one it was sized by (the first run under test on the
                        scenario drawing as many sequences, :func:`baseline_cpu`); 0 otherwise, so that the runs'
                        ``cpu_s + cpu_baseline_s`` add up to every exact-law draw of the command
    cpu_per_sequence_us c, the CPU microseconds one more sequence of the certificate costs (below)
    cert_eps_sqrt_cpu   the run's largest bound relative to its ε (``cert_worst_bound``, in TV of the level
                        ``cert_worst`` names) x sqrt(n c): c the CPU seconds per sequence of the certificate (see
                        below), n its sequences.  A TV bound shrinks as 1/sqrt(n) and its cost grows as n, so this is
                        constant in n: the bound this run reaches at one CPU-second, and bound / sqrt(T) at T
                        CPU-seconds (smaller is better)
    certify_cpu_s       the planner's ``certify_draws`` x c (+ the fixed part, below): the CPU seconds at which a
                        lossless sampler's expected bounds all meet the stated ε on this machine (fewer than half
                        of lossless runs of that size certify: the planner's figure, not the rigorous size)

c, the cost of one more sequence of the certificate: an exact-law run's ``cpu_s`` per sequence drawn plus its
baseline's ``cpu_baseline_s`` per baseline sequence; a real-model run's exact-pair CPU seconds per sequence per
prompt (its tiny-pair draw, PIT tests that certify nothing, is a fixed part added to ``certify_cpu_s`` and left
out of ``cert_eps_sqrt_cpu``).  For a lossless run both figures estimate one constant:
``cert_eps_sqrt_cpu`` ≈ ε x sqrt(``certify_cpu_s``) with ε the binding level's.  The two figures are given for
certified runs only (NaN for lossy, inconclusive and failed runs, and for runs without a certificate).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from harness.verify.runs import MUST_BE_CAUGHT, UNDER_TEST, RunSet

__all__ = ["CostPart", "COST_COLUMNS", "cost_figures", "cost_part", "baseline_cpu", "cost_section", "console_cost"]

NAN = math.nan
COST_COLUMNS = ("cpu_s", "cpu_baseline_s", "cpu_per_sequence_us", "cert_eps_sqrt_cpu", "certify_cpu_s")


@dataclass(frozen=True)
class CostPart:
    """The CPU seconds of a run and what its certificate costs (module docstring: what each counts)."""

    cpu_s: float = NAN
    cpu_baseline_s: float = 0.0
    cpu_per_sequence_us: float = NAN  # c: CPU microseconds per sequence of the certificate (with its baseline's)
    cert_eps_sqrt_cpu: float = NAN  # cert_worst_bound x sqrt(CPU-s of the certificate's draws): constant in n
    certify_cpu_s: float = NAN  # certify_draws x CPU-s per sequence (+ a real-model run's fixed tiny-pair part)


def _positive(*xs) -> bool:
    return all(isinstance(x, (int, float, np.integer, np.floating)) and math.isfinite(x) and x > 0 for x in xs)


def cost_figures(bound: float, certify_draws: float, n: float, per_sequence_s: float,
                 fixed_s: float = 0.0) -> tuple[float, float]:
    """(bound x sqrt(n x ``per_sequence_s``), ``fixed_s`` + ``certify_draws`` x ``per_sequence_s``): the bound at one
    CPU-second and the CPU seconds to certify (NaN where an input is missing, not finite or not positive; a bound of
    0, a one-hot target's, gives 0)."""
    eps = bound * math.sqrt(n * per_sequence_s) if _positive(n, per_sequence_s) and math.isfinite(bound) \
        and bound >= 0 else NAN
    need = fixed_s + certify_draws * per_sequence_s if _positive(certify_draws, per_sequence_s) else NAN
    return eps, need


def cost_part(certificate: str, cpu_s: float, bound: float, certify_draws: float, n: float,
              per_sequence_s: float, baseline_s: float = 0.0, fixed_s: float = 0.0) -> CostPart:
    """A run's :class:`CostPart`: its CPU seconds and per sequence, and the figures of :func:`cost_figures` when it
    is certified."""
    eps, need = cost_figures(bound, certify_draws, n, per_sequence_s, fixed_s) if certificate == "certified" \
        else (NAN, NAN)
    per = per_sequence_s * 1e6 if _positive(per_sequence_s) else NAN
    return CostPart(cpu_s=float(cpu_s), cpu_baseline_s=float(baseline_s), cpu_per_sequence_us=per,
                    cert_eps_sqrt_cpu=eps, certify_cpu_s=need)


def baseline_cpu(rs: RunSet) -> dict[int, tuple[float, int]]:
    """Index in ``rs.runs`` -> (CPU seconds, sequences) of the target-only baseline it owns: each scenario's baseline
    belongs to the first run under test there drawing as many sequences as the baseline (the run it was sized by,
    :func:`harness.verify.runs.baselines_for`), else to the first run of that size."""
    out = {}
    for name, base in rs.baselines.items():
        on = [(i, r) for i, r in enumerate(rs.runs) if r.scenario.name == name and r.draws == base.draws]
        owner = next((i for i, r in on if r.role in UNDER_TEST), on[0][0] if on else None)
        if owner is not None and base.error is None:
            out[owner] = (float(base.cpu_s), int(base.acc.n) if base.acc is not None else 0)
    return out


# ------------------------------------------------------------------------------------ report
def _g(x, digits: int = 3) -> str:
    return f"{x:.{digits}g}" if isinstance(x, float) and math.isfinite(x) else "—"


def _binding(v) -> str:
    """The binding level of a run's certificate: 'position[6] ≤ 0.005' from ``cert_worst`` ('position[6] 0.0036 /
    0.005')."""
    w = v.cert_worst if isinstance(v.cert_worst, str) else ""
    parts = w.split()
    return f"{parts[0]} ≤ {parts[-1]}" if len(parts) >= 4 else "—"


def cost_section(verdicts: pd.DataFrame, timing: dict) -> list[str]:
    """summary.md's *What the certificates cost*: the command's wall and CPU seconds, then per run that must be
    certified its CPU seconds and the two figures."""
    v = verdicts[(verdicts.certificate.fillna("") != "") & ~verdicts.role.isin(MUST_BE_CAUGHT)]
    L = ["## What the certificates cost", _whole(timing), ""]
    if not len(v):
        return L
    L += ["CPU s: the run's own draws (every sampler call and its shard's statistics, summed over the workers) + its "
          "scenario's target-only baseline where it is the run that baseline was sized by. Per sequence: what one more "
          "sequence of the certificate costs (the real-model runs: per exact-pair sequence per prompt). Bound × √CPU-s: "
          "the largest bound relative to its ε (the binding level) × √(CPU seconds of the certificate's draws); TV bounds "
          "shrink as 1/√n, so this is the bound one CPU-second reaches, constant in n (smaller is better). CPU s to "
          "certify ε: the planner's draws to certify × the CPU seconds per sequence (fewer than half of lossless runs "
          "of that size certify). Both on this machine, for certified runs only.", "",
          "| run | scenario | binding level: ε | sequences | CPU s (baseline) | CPU µs / sequence | bound × √CPU-s | "
          "CPU s to certify ε |", "|---|---|---|---|---|---|---|---|"]
    for _, r in v.iterrows():
        L.append(f"| {r.run} ({r.role}) | {r.scenario} | {_binding(r)} | {int(r.sequences):,} | "
                 f"{_g(float(r.cpu_s) + float(r.cpu_baseline_s))} ({_g(float(r.cpu_baseline_s))}) | "
                 f"{_g(float(r.cpu_per_sequence_us))} | {_g(float(r.cert_eps_sqrt_cpu))} | "
                 f"{_g(float(r.certify_cpu_s))} |")
    return L + [""]


def _whole(timing: dict) -> str:
    """The command's wall and CPU seconds, in words."""
    wall, cpu = timing.get("wall_total_s", NAN), timing.get("cpu_total_s", NAN)
    runs = timing.get("cpu_draws_s", NAN)
    busy = f" = {cpu / wall:.2g} cores busy on average" if _positive(cpu, wall) else ""
    return (f"The whole command: **{_g(wall)} s wall**, **{_g(cpu)} CPU-seconds** ({timing.get('cpu_scope', '')}"
            f"{busy}); {_g(runs)} CPU-s of them in the runs' draws (every run, baseline, real-model and von Neumann "
            f"task, as counted below), the rest start-up, the exact laws, the tests, the judgement.")


def console_cost(verdicts: pd.DataFrame, timing: dict, sampler: str) -> str:
    """The console's cost line: the command's wall and CPU seconds, and the CPU seconds to certify the stated ε
    (with the bound at one CPU-second) of each certified run of the sampler under test."""
    wall, cpu = timing.get("wall_total_s", NAN), timing.get("cpu_total_s", NAN)
    v = verdicts[(verdicts.run == sampler) & verdicts.certify_cpu_s.notna()]
    each = ", ".join(f"{r.scenario} {_g(r.certify_cpu_s, 2)} ({_g(r.cert_eps_sqrt_cpu, 2)})" for _, r in v.iterrows())
    return (f"cost: {_g(wall)} s wall, {_g(cpu)} CPU-s" +
            (f"; CPU-s to certify ε (bound × √CPU-s): {each}" if each else ""))
