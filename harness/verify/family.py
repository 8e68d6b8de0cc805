"""The test family of a verification and its Holm adjustment.

Every test of the whole command — each exact-law run (:func:`harness.verify.battery.plan_tests`), each
real-model run (:func:`harness.verify.battery.plan_pit_value_tests` on the tiny pair,
:func:`harness.verify.exactmodel.plan_exact_model_tests` on the exact pair), each von Neumann run
(:func:`harness.verify.battery.plan_von_neumann_tests`) — forms ONE family.  The tests are listed first
(:func:`plan_family`), so their number m is known before any is evaluated; each is then evaluated at
the Bonferroni level ``family_alpha / m`` (the level its planner states a detectable deviation at),
each TV or Kolmogorov bound at confidence ``1 - (1 - tv_confidence) / (number of bounds)``, and all
p-values are adjusted by Holm, which keeps the family-wise false-alarm rate at ``family_alpha``
(:func:`evaluate_family`).  The result is the table of :class:`harness.verify.battery.TestRow`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Optional

import numpy as np
import pandas as pd

from harness import stats
from harness.stats.anytime import METHOD as ANYTIME_METHOD
from harness.laws.algorithms import acceptance_for
from harness.verify.battery import (TEST_COLUMNS, TestRow, TestSpec, acceptance_notes, plan_pit_value_tests, plan_tests,
                             plan_von_neumann_tests)
from harness.core.forkmap import fork_map
from harness.verify.exactmodel import exact_model_law, plan_exact_model_tests
from harness.verify.realmodel import REAL_MODEL_SCENARIO
from harness.verify.runs import RunSet
from harness.verify.sequential import sequential_spec

__all__ = ["PlannedTest", "FamilyPlan", "FamilyLevels", "plan_family", "run_acceptance", "family_levels",
           "evaluate_family", "holm_adjust",
           "rows_table", "family_config"]


@dataclass(frozen=True)
class PlannedTest:
    """One test of the family: which run on which scenario, and the test."""

    run: str
    role: str
    scenario: str
    spec: TestSpec
    seq_level: float = 0.0  # a sequential row (harness.verify.sequential): the level it is judged at, apart from Holm
    stopped: bool = False  # a fixed-n row of a run that stopped early: shown, not judged (left out of Holm)
    looks: int = 1  # --stop-at-need (harness.verify.stopping): the run's looks L; its p-value is read as L x p
    delta_share: float = 1.0  # ... and its TV bound at δ per bound x the share of the look it stopped at


class FamilyPlan(list):
    """The planned tests (a list of :class:`PlannedTest`) and ``notes``: the tests left out of the family
    by the plan alone (sizes, reachable positions), with the reason, e.g. ``dropped: acceptance at draft
    positions 8..31 ...`` (see :func:`harness.verify.battery.acceptance_notes`)."""

    def __init__(self, tests=(), notes=()):
        super().__init__(tests)
        self.notes = tuple(notes)


@dataclass(frozen=True)
class FamilyLevels:
    """``n_tests`` tests: each planned at ``alpha_each`` = family_alpha / n_tests; ``n_bounds`` confidence
    bounds, each at miss probability ``delta_each`` = (1 - tv_confidence) / n_bounds; ``notes``: what the
    plan left out, and why."""

    n_tests: int
    n_bounds: int
    alpha_each: float
    delta_each: float
    notes: tuple = ()
    n_sequential: int = 0  # sequential rows (harness.verify.sequential), judged apart from the n_tests of Holm


def plan_family(rs: RunSet) -> FamilyPlan:
    """Every test of every run of ``rs`` that drew without error, in report order."""
    plan, notes, laws = [], [], {}
    for r in rs.runs:
        if r.error is None:
            base = rs.baselines[r.scenario.name]
            acceptance = run_acceptance(r, r.acc.law, laws, notes)
            seq = r.sequential
            stopped = seq is not None and seq.stopped_at is not None
            stop = getattr(r, "stop", None)  # --stop-at-need: read at a data-dependent look
            looks, share = (len(stop.looks.sizes), stop.share_at(r.acc.n)) if stop is not None else (1, 1.0)
            plan += [PlannedTest(r.label, r.role, r.scenario.name, ts, stopped=stopped, looks=looks, delta_share=share)
                     for ts in plan_tests(r.acc, base.acc if base.error is None else None, r.scenario.k, acceptance)]
            if seq is not None:
                plan.append(PlannedTest(r.label, r.role, r.scenario.name, sequential_spec(seq), seq_level=seq.level))
            if r.scenario.exact:
                notes += [f"{r.label} on {r.scenario.name}: {n}"
                          for n in acceptance_notes(r.scenario.k, r.scenario.max_new_tokens)]
    for rr in rs.real_runs:
        if rr.error is None:
            plan += [PlannedTest(rr.label, rr.role, REAL_MODEL_SCENARIO, ts) for ts in plan_pit_value_tests(
                rr.draw.u, max_lag=rs.real_model.k + 1, loglik=_loglik_of(rr.draw))]
            if rr.exact is not None:  # the certificate: χ² + token-TV bounds on the exact pair
                law = exact_model_law(rs.real_model.exact, rs.real_model.config)
                stop = rr.stop  # stop at the need on the exact pair: read at a data-dependent look
                looks, share = (stop.n_looks, stop.share_at(rr.exact_drawn)) if stop is not None else (1, 1.0)
                plan += [PlannedTest(rr.label, rr.role, REAL_MODEL_SCENARIO, ts, looks=looks, delta_share=share)
                         for ts in plan_exact_model_tests(rr.exact, law)]
    for v in rs.vn:
        specs = plan_von_neumann_tests(v.draw.samples.numpy(), v.cdf, v.draw.proposed, v.draw.accepted, v.M)
        plan += [PlannedTest(v.label, v.role, v.scenario, ts) for ts in specs]
    return FamilyPlan(plan, notes)


def _loglik_of(draw):
    """(M, V, Q) of a real-model draw for the martingale test; None for a draw made without them."""
    return None if getattr(draw, "loglik_m", None) is None else (draw.loglik_m, draw.loglik_v, draw.loglik_q)


def run_acceptance(r, law, cache: Optional[dict] = None, notes: Optional[list] = None):
    """The exact acceptance law a run is judged against (:func:`harness.verify.battery.plan_tests`'s
    ``acceptance``): None for the chain rule (the scenario law's own), else its algorithm's law
    (:func:`harness.laws.algorithms.acceptance_for`, cached per scenario, algorithm and k in ``cache``), or
    False, with a note, where the algorithm has no exact law there."""
    if r.algorithm == "chain":
        return None
    key = (r.scenario.name, r.algorithm, r.scenario.k)
    cache = {} if cache is None else cache
    if key not in cache:
        try:
            cache[key] = acceptance_for(r.algorithm, law, r.scenario.k)
        except ValueError as e:
            cache[key] = False
            if notes is not None:
                notes.append(f"{r.label} on {r.scenario.name}: no acceptance tests ({e})")
    return cache[key]


def holm_alpha(plan: list[PlannedTest], settings) -> float:
    """The Holm family's budget: ``family_alpha``, less ``sequential_alpha`` when the plan has sequential rows."""
    sequential = any(p.seq_level > 0 for p in plan)
    return settings.family_alpha - (float(getattr(settings, "sequential_alpha", 0.0)) if sequential else 0.0)


def family_levels(plan: list[PlannedTest], settings) -> FamilyLevels:
    m = sum(1 for p in plan if p.seq_level <= 0)  # the fixed-n tests (a sequential row is judged apart)
    n_bounds = sum(1 for p in plan if p.spec.wants_tv_bound)
    return FamilyLevels(m, n_bounds, holm_alpha(plan, settings) / max(m, 1),
                        (1 - settings.tv_confidence) / max(n_bounds, 1), tuple(getattr(plan, "notes", ())),
                        len(plan) - m)


def _evaluate(p: PlannedTest, levels: FamilyLevels, power: float) -> TestRow:
    ts = p.spec
    alpha = levels.alpha_each / p.looks  # a run of --stop-at-need: L x p is a p-value at its stopping look
    row = ts.evaluate(alpha, power, levels.delta_each * p.delta_share)
    if p.looks > 1:
        note = f"read at one of {p.looks} looks (stop at the need): p x {p.looks}"
        tv = (f"{row.tv_method}; {ANYTIME_METHOD}: at δ x {p.delta_share:.3g}" if row.tv_method else row.tv_method)
        row = replace(row, pvalue=float(min(1.0, row.pvalue * p.looks)), tv_method=tv,
                      method=f"{row.method}; {note}" if row.method else note)
    return replace(row, scenario=p.scenario, run=p.run, role=p.role, family=ts.family, test=ts.test,
                   position=-1 if ts.position is None else ts.position, loss_test=ts.loss,
                   alpha_bonferroni=p.seq_level if p.seq_level > 0 else alpha)


def _judge_apart(row: TestRow, p: PlannedTest, family_alpha: float) -> TestRow:
    """A row outside Holm.  A sequential row rejects at its own level; its ``p_adjusted`` is put on the scale
    the table is read at (p x family_alpha / level, so it rejects when ``p_adjusted <= family_alpha``, as a
    Holm row does).  A fixed-n row of a run that stopped early is shown but not judged."""
    if p.stopped:
        return replace(row, p_adjusted=math.nan, reject=False, verdict="not judged (run stopped early)")
    reject = bool(row.pvalue <= p.seq_level)
    return replace(row, p_adjusted=float(min(1.0, row.pvalue * family_alpha / p.seq_level)), reject=reject,
                   verdict="REJECT (lossy, sequential)" if reject else "pass")


def holm_adjust(rows: list[TestRow], family_alpha: float) -> list[TestRow]:
    """``rows`` with p-values clipped to [0, 1], Holm-adjusted over all of them, and judged at
    ``family_alpha``: a rejected loss test means *lossy*, a rejected acceptance test a different
    acceptance law."""
    if not rows:
        return []
    p = np.clip(np.array([r.pvalue for r in rows], dtype=np.float64), 0.0, 1.0)
    return judged(rows, p, stats.holm(p), family_alpha)


def judged(rows: list[TestRow], p: np.ndarray, adjusted: np.ndarray, family_alpha: float) -> list[TestRow]:
    """``rows`` with their clipped p-values ``p`` and Holm-adjusted ``adjusted``, judged at ``family_alpha``."""
    out = []
    for r, pv, pa in zip(rows, p, adjusted):
        reject = bool(pa <= family_alpha)
        verdict = ("REJECT (lossy)" if r.loss_test else "REJECT (acceptance law)") if reject else "pass"
        out.append(replace(r, pvalue=float(pv), p_adjusted=float(pa), reject=reject, verdict=verdict))
    return out


def rows_table(rows: list[TestRow]) -> pd.DataFrame:
    """The rows as a DataFrame with the columns of ``tests.csv`` (:data:`harness.verify.battery.TEST_COLUMNS`)."""
    return pd.DataFrame([vars(r) for r in rows], columns=list(TEST_COLUMNS))


def evaluate_family(plan: list[PlannedTest], settings, workers: int = 1) -> tuple[pd.DataFrame, FamilyLevels]:
    """Evaluate every planned test at the family's levels (on ``workers`` processes,
    :func:`harness.core.forkmap.fork_map`) and adjust by Holm; the table of tests."""
    levels = family_levels(plan, settings)
    rows = fork_map(lambda i: _evaluate(plan[i], levels, settings.power), len(plan), workers)
    holm = [i for i, p in enumerate(plan) if p.seq_level <= 0 and not p.stopped]
    judged = dict(zip(holm, holm_adjust([rows[i] for i in holm], holm_alpha(plan, settings))))
    out = [judged[i] if i in judged else _judge_apart(r, p, settings.family_alpha) for i, (r, p) in enumerate(zip(rows, plan))]
    return rows_table(out), levels


def family_config(settings, levels: FamilyLevels) -> dict:
    """The family's settings, as recorded in a report's provenance."""
    stated = getattr(settings, "stated_confidence", None)  # a round of --until-certified: the command's confidence
    return {"family_alpha": settings.family_alpha, "power": settings.power,
            "tv_confidence": stated or settings.tv_confidence,
            **({"tv_confidence_this_round": settings.tv_confidence} if stated else {}),
            "n_tests": levels.n_tests, "alpha_bonferroni": levels.alpha_each, "tv_delta_each": levels.delta_each,
            "sequential_alpha": float(getattr(settings, "sequential_alpha", 0.0)), "n_sequential": levels.n_sequential,
            "stop_at_need": bool(getattr(settings, "stop_at_need", False)),
            "settings": settings.raw, **({"plan_notes": list(levels.notes)} if levels.notes else {})}
