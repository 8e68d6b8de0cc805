"""Whole `verify` commands simulated from the exact laws: the false-inconclusive rate at the default (issue 42, item 2).

A lossless sampler's output sequences are iid draws of the scenario's exact law (:class:`harness.laws.ngram.ExactLaw`),
and the certificate of an exact-law run reads only count vectors of those sequences: the symbol at each position,
each consecutive pair, and every window of J tokens (``Accumulator.counts`` / ``pairs`` / ``joint`` / ``windows`` /
``lagged.tail_joint``).  So a lossless run's certificate can be drawn without the sampler:

1. :func:`window_counts` draws the histograms of all J-windows of ``n`` sequences **with their exact joint law**,
   by pushing counts of (last J symbols, chain state) through the chain one position at a time: the counts in
   each (cell, state) split by a multinomial over the next symbol (``law.cond_pmf[state]``).  Sequences are
   independent and each one's next symbol depends on its past only through its state, so the vector of counts
   after each step has exactly the law of the counts of n sequences drawn one by one (a sequence-level multinomial,
   never materialised: ~W^J x S rows a step instead of n x N symbols).
2. :func:`fill_accumulator` sets a :class:`harness.verify.battery.Accumulator`'s count statistics from those
   window histograms (positions and pairs are margins of a window that holds them), exactly as
   ``Accumulator.add`` fills them from the sequences (tests/verify/test_simcommand.py checks equality on real draws).
3. :func:`judge_command` runs the command's own decision on them: the gof test specs of
   :func:`harness.verify.battery.plan_tests` (χ² and finite-sample TV interval of each position, pair, window),
   evaluated by :func:`harness.verify.family._evaluate` at the default command's levels (Bonferroni α and δ per
   bound), Holm by :func:`harness.verify.family.holm_adjust` over the command's ``n_tests`` (the tests not simulated
   enter with p = 1), each run judged by :func:`harness.verify.verdicts.exact_verdict` with the command's
   :class:`Certifier`, the command by :func:`harness.verify.outcome.command_verdict`.

What a simulated command leaves out, and why: the real-model scenario (no enumerable law of the tiny pair; its
exact-pair certificate has its own planner), the buggy controls (not lossless: they must be caught, not certified),
the von Neumann runs (no certificate), the two-sample / PIT / log-likelihood / acceptance tests (they need the
sampler's randomness beyond the counts; they only add false alarms, bounded by Holm: results/calibrate/family_wise.csv)
and the sequential e-process (its false stop is bounded by Ville's inequality at ``sequential_alpha``).  None of them
can make a lossless run *inconclusive*: that verdict is read from the TV bounds alone.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd

import harness.verify.battery as battery
from harness import stats
from harness.laws.scenarios import SCENARIO_DIR, load_scenario, scenario_law
from harness.verify.battery import Accumulator, TestRow, plan_tests
from harness.verify.cli import real_model_spec
from harness.verify.epsilon import epsilons_for
from harness.verify.exactmodel import window_offsets
from harness.verify.family import FamilyLevels, PlannedTest, _evaluate, holm_adjust, judged, rows_table
from harness.verify.outcome import command_verdict
from harness.verify.runs import RunSpec, algorithm_runs, exact_runs, real_runs_for, run_sizes
from harness.verify.verdicts import RUN_COLUMNS, Certifier, exact_verdict, standing

__all__ = ["window_counts", "windows_of", "fill_accumulator", "SimRun", "CommandPlan", "default_command",
           "judge_command", "simulate_command", "memo_upper_choice", "certificate_statistic"]

CERTIFIED_ROLES = ("reference", "lossless")  # the runs of a default command that must end certified


# ------------------------------------------------------------------------------------------ the counts
def window_counts(law, J: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """(N - J + 1, W^J) histograms of the J-windows [a, a + J), a = 0..N-J, of ``n`` iid sequences of ``law``
    (an :class:`harness.laws.ngram.ExactLaw`), with their exact joint law (module docstring, step 1)."""
    N, W, S = law.N, law.n_symbols, law.C + 1
    if not 2 <= J <= N:
        raise ValueError(f"`J` must be an integer in [2, N = {N}]; got {J!r}")
    cells = W ** J
    cell = np.zeros(S, np.int64)  # the (cell, state) rows with counts: last J symbols, state before the next
    state = np.arange(S, dtype=np.int64)
    count = rng.multinomial(int(n), law.state_distributions()[0])  # (S,)
    keep = count > 0
    cell, state, count = cell[keep], state[keep], count[keep]
    out = np.zeros((N - J + 1, cells), np.int64)
    for t in range(N):
        split = rng.multinomial(count, law.cond_pmf[state])  # (R, W) counts of each next symbol
        new_cell = (cell[:, None] * W + np.arange(W)[None, :]) % cells  # (R, W) the window shifted by one
        new_state = law.step[state]  # (R, W)
        key = (new_cell * S + new_state).ravel()
        hit = split.ravel() > 0
        uniq, inv = np.unique(key[hit], return_inverse=True)
        count = np.bincount(inv, weights=split.ravel()[hit]).astype(np.int64)
        cell, state = uniq // S, uniq % S
        if t >= J - 1:
            out[t - J + 1] = np.bincount(cell, weights=count, minlength=cells).astype(np.int64)
    return out


def windows_of(law, sym: np.ndarray, J: int) -> np.ndarray:
    """(N - J + 1, W^J) the J-window histograms of symbol sequences ``sym`` (B, N), counted directly (the
    reference :func:`window_counts` and :func:`fill_accumulator` are checked against)."""
    N, W = law.N, law.n_symbols
    out = np.zeros((N - J + 1, W ** J), np.int64)
    for a in range(N - J + 1):
        code = np.zeros(sym.shape[0], np.int64)
        for t in range(a, a + J):
            code = code * W + sym[:, t]
        out[a] = np.bincount(code, minlength=W ** J)
    return out


def _margin(window: np.ndarray, W: int, J: int, keep: tuple) -> np.ndarray:
    """The counts of the positions ``keep`` (offsets inside the window) from a window histogram (W^J,)."""
    axes = tuple(i for i in range(J) if i not in keep)
    return window.reshape((W,) * J).sum(axis=axes).ravel()


def fill_accumulator(acc: Accumulator, windows: np.ndarray) -> Accumulator:
    """Set ``acc``'s count statistics (n, counts, pairs, joint, windows, lagged.tail_joint) from the J-window
    histograms ``windows`` (N - J + 1, W^J) of :func:`window_counts` / :func:`windows_of`; returns ``acc``."""
    law, J = acc.law, acc.joint_tokens
    N, W = law.N, law.n_symbols
    acc.n = int(windows[0].sum())
    for t in range(N):
        a = min(t, N - J)
        acc.counts[t] = _margin(windows[a], W, J, (t - a,))
    for t in range(N - 1):
        a = min(t, N - J)
        acc.pairs[t] = _margin(windows[a], W, J, (t - a, t - a + 1))
    acc.joint[:] = windows[0]
    for a in range(1, 1 + acc.windows.shape[0]):
        acc.windows[a - 1] = windows[a]
    lg = acc.lagged
    if lg is not None and lg.tail_tokens:
        lg.tail_joint[:] = windows[lg.tail_offset]
    return acc


# ------------------------------------------------------------------------------------ the command
@dataclass
class SimRun:
    """One run of the command to simulate: its :class:`RunSpec` (label, role, scenario, draws) and its law."""

    spec: RunSpec
    law: object


@dataclass
class CommandPlan:
    """The simulated command: its certifiable exact-law runs, the command's family levels (``levels``: the
    Bonferroni α and the δ of each TV bound of the whole default command), the Holm budget, and its
    :class:`Certifier`; ``n_bounds_exact`` / ``n_bounds_real``: where the command's TV bounds come from."""

    runs: list
    levels: FamilyLevels
    holm_alpha: float
    certifier: Certifier
    power: float
    n_bounds_exact: int
    n_bounds_real: int
    left_out: tuple


def _empty_acc(law, sc) -> Accumulator:
    return Accumulator(law, sc.joint_tokens, 2, 2, 0, None, with_pit=False, pit_max_lag=sc.k + 1)


def _gof_bounds(law, sc) -> int:
    """The TV bounds one run on scenario ``sc`` contributes (its gof specs), counted on simulated counts."""
    acc = fill_accumulator(_empty_acc(law, sc), window_counts(law, sc.joint_tokens, 10, np.random.default_rng(0)))
    return sum(1 for s in plan_tests(acc, None, sc.k, False) if s.wants_tv_bound)


def _real_bounds(scenario_dir: Path, seed: int) -> int:
    """The real-model scenario's TV bounds in the default command: per run drawn on the exact pair, per prompt,
    J positions, J - 1 pairs and the W-windows (:func:`harness.verify.exactmodel.plan_exact_model_tests`)."""
    spec = real_model_spec(Path(scenario_dir) / "default.toml")
    if not spec.enabled or spec.exact is None:
        return 0
    ex = spec.exact
    runs = real_runs_for(spec, None, "reference", "reference", spec.n_sequences, seed, True, exact_n=ex.n_sequences)
    J, W = ex.n_tokens, ex.window
    per_run = len(ex.prompts) * (J + (J - 1) + len(window_offsets(J, W)))
    return per_run * sum(1 for rr in runs if rr.exact_n > 0)


def default_command(settings, scenario_dir: Path = SCENARIO_DIR, n_tests: Optional[int] = None,
                    with_controls: bool = True) -> CommandPlan:
    """The default `verify` command (reference sampler, default.toml's scenarios and sizes, controls, the block /
    tree runs of ``[algorithms]``, the real-model scenario) as a :class:`CommandPlan`: every run that must be
    certified and has an exact law, and the levels the command judges them at.  δ per bound is computed from the
    command's bounds (every exact-law run's gof specs, lossy controls included, and the real model's); Holm's m
    (``n_tests``: every test of the command, most of them not count tests) is passed in (None: the bounds' count,
    a smaller m, so more false alarms).  ``with_controls`` False: the reference runs of the scenarios alone."""
    sizes = run_sizes(settings, False, None, None)
    scenarios = [load_scenario(n, scenario_dir) for n in settings.scenarios]
    runs = exact_runs(None, "reference", "reference", scenarios, sizes, full=False, controls=True,
                      scenario_dir=scenario_dir, algorithm="chain", algorithms=algorithm_runs(scenario_dir))
    laws, bounds, sims = {}, {}, []
    for r in runs:
        name = r.scenario.name
        if name not in laws:
            laws[name] = scenario_law(r.scenario)[0]
            bounds[name] = _gof_bounds(laws[name], r.scenario)
        if r.role in CERTIFIED_ROLES and (with_controls or r.role == "reference" and r.algorithm == "chain"):
            sims.append(SimRun(r, laws[name]))
    n_exact = sum(bounds[r.scenario.name] for r in runs)
    n_real = _real_bounds(scenario_dir, settings.seed)
    n_bounds = n_exact + n_real
    m = int(n_tests) if n_tests is not None else n_bounds
    seq = float(getattr(settings, "sequential_alpha", 0.0))
    holm = settings.family_alpha - seq
    levels = FamilyLevels(m, n_bounds, holm / m, (1 - settings.tv_confidence) / n_bounds)
    eps = {r.scenario.name: epsilons_for(settings, r.scenario) for r in runs}
    cert = Certifier(eps, epsilons_for(settings), levels.delta_each, float(settings.tv_confidence),
                     float(getattr(settings, "control_epsilon_scale", 1.0)))
    left = ("real_model (no enumerable law of the tiny pair)", "buggy controls (must be caught, not certified)",
            "von Neumann runs (no certificate)", "two-sample, PIT, log-likelihood and acceptance tests (p = 1 in Holm)",
            "the sequential e-process (Ville: false stop <= sequential_alpha)")
    return CommandPlan(sims, levels, holm, cert, float(settings.power), n_exact, n_real, left)




# --------------------------------------------------------------------------------------- judging
@contextlib.contextmanager
def memo_upper_choice():
    """Within the block, :func:`harness.verify.battery._upper_choice` (which bound a TV interval takes its upper end
    from: a function of the law, n and δ alone, ~80 % of a bound's time) is computed once per (law, n, δ) and
    reused: the same choice, so every interval is the one the command computes (a simulated command repeats the
    same laws, sizes and δ thousands of times)."""
    original, cache = battery._upper_choice, {}

    def cached(P, n, delta):
        key = (np.asarray(P, np.float64).tobytes(), int(n), float(delta))
        if key not in cache:
            cache[key] = original(P, n, delta)
        return cache[key]

    battery._upper_choice = cached
    try:
        yield
    finally:
        battery._upper_choice = original


def _gof_rows(run: SimRun, acc: Accumulator, plan: CommandPlan) -> list[TestRow]:
    """The run's gof rows as the command evaluates them (:func:`harness.verify.family._evaluate` at its levels)."""
    r = run.spec
    specs = [ts for ts in plan_tests(acc, None, r.scenario.k, False) if ts.family == "gof"]  # no baseline: no 2-sample
    return [_evaluate(PlannedTest(r.label, r.role, r.scenario.name, ts), plan.levels, plan.power) for ts in specs]


def holm_padded(rows: list[TestRow], m: int, family_alpha: float) -> list[TestRow]:
    """What :func:`harness.verify.family.holm_adjust` makes of ``rows`` when m - len(rows) rows of p = 1 follow them
    (the command's tests not simulated), the padding left out: the same adjusted p-values, rejections and verdicts
    (tests/verify/test_simcommand.py checks equality), without building thousands of padding rows per command."""
    k = len(rows)
    if m <= k:
        return holm_adjust(rows, family_alpha)
    p = np.clip(np.array([r.pvalue for r in rows], dtype=np.float64), 0.0, 1.0)
    cut = p < 1.0  # a p-value of 1 adjusts to 1 wherever it sorts: only the others need Holm's step-down
    adjusted = np.ones(k)
    adjusted[cut] = stats.holm(np.concatenate([p[cut], np.ones(m - int(cut.sum()))]))[:int(cut.sum())]
    return judged(rows, p, adjusted, family_alpha)


def judge_command(plan: CommandPlan, accs: list) -> tuple[pd.DataFrame, str]:
    """(the ``runs.csv`` rows of the simulated runs, the command's verdict) from one accumulator per run of
    ``plan.runs``: gof rows, Holm over the command's m (tests not simulated at p = 1, :func:`holm_padded`),
    :func:`exact_verdict`."""
    rows = [row for run, acc in zip(plan.runs, accs) for row in _gof_rows(run, acc, plan)]
    table = rows_table(holm_padded(rows, plan.levels.n_tests, plan.holm_alpha))
    verdicts = []
    for run, acc in zip(plan.runs, accs):
        spec = replace(run.spec, acc=acc, error=None)
        verdicts.append(exact_verdict(spec, table, plan.certifier).to_row())
    v = pd.DataFrame(verdicts, columns=list(RUN_COLUMNS))
    return v, command_verdict(v)


def simulate_command(plan: CommandPlan, rng: np.random.Generator, sampling: Optional[dict] = None
                     ) -> tuple[pd.DataFrame, str]:
    """One simulated command: each run's counts drawn from its law (``sampling``: scenario name -> another law to
    draw that scenario's runs from, e.g. a lossy one; judged against the scenario's own), then :func:`judge_command`."""
    accs = []
    for run in plan.runs:
        sc = run.spec.scenario
        law = (sampling or {}).get(sc.name, run.law)
        accs.append(fill_accumulator(_empty_acc(run.law, sc), window_counts(law, sc.joint_tokens, run.spec.draws, rng)))
    return judge_command(plan, accs)


def certificate_statistic(v) -> float:
    """The certificate's statistic of a ``runs.csv`` row: the largest TV upper bound over its ε (``cert_worst_ratio``;
    certified when < 1 and nothing rejects)."""
    return float(v.cert_worst_ratio)

