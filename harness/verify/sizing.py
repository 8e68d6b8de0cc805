"""Sizing a verification: the draws at which a lossless sampler certifies at the run's ε, and their wall time.

The Python API (:func:`harness.api.verify_sampler`) sizes a run it was given no ``draws`` for in two steps:

1. a *pilot*, a small verification of the same sampler on the same scenarios, gives what the plan needs and
   nothing else: the family of tests (so the miss probability ``delta_each`` of each TV bound), each run's exact
   laws, and the wall time per sequence on this machine.  Its verdicts are thrown away: the plan below depends
   on the laws, ε and δ only, never on the pilot's counts, so the real run that follows keeps its own error
   budgets untouched;
2. :func:`plan_draws`: for every run under test and every TV bound of it (per position, per pair, per
   J-window), the planner :func:`harness.verify.battery.tv_interval_n_for` gives the draws at which a
   lossless sampler's *expected* bound reaches ε (about half of such runs certify there: ``half_certify``);
   from there the size grows in steps of 15 % until the rigorous bound on P(inconclusive | lossless sampler),
   summed over the run's bounds (:func:`harness.verify.battery.tv_interval_inconclusive`, as in ``runs.csv``'s
   ``cert_inconclusive_rate``), is at most the requested ``rate``.

:func:`estimate_seconds` extrapolates the pilot's timing: its fixed part (loading, planning) as measured,
its drawing and testing in proportion to the draws (the tests grow more slowly than that, so the estimate
errs long).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

from harness.verify.epsilon import epsilons_for
from harness.verify.runs import UNDER_TEST
from harness.verify.verdicts import _gof_law, certifier_for

__all__ = ["DrawPlan", "plan_draws", "inconclusive_rate", "estimate_seconds", "GROWTH", "MAX_GROWTH"]

GROWTH = 1.15  # step of the search above the half-certify size
MAX_GROWTH = 64.0  # the search stops at this multiple of the half-certify size (the plan then says its rate)


@dataclass(frozen=True)
class DrawPlan:
    """The draws per scenario (the ``draws`` of :func:`harness.verify.pipeline.verify`, times each scenario's
    weight) at which a lossless sampler certifies with probability ≥ 1 - ``inconclusive_rate``.

    ``half_certify``: the draws per scenario at which every expected bound reaches its ε (about half of lossless
    runs certify there); ``per_scenario``: scenario -> (sequences of its run, its rate at them);
    ``delta_each``: each TV bound's miss probability; ``target_rate``: the rate asked for."""

    draws: int
    half_certify: int
    inconclusive_rate: float
    target_rate: float
    delta_each: float
    per_scenario: dict = field(default_factory=dict)

    @property
    def reaches_target(self) -> bool:
        return self.inconclusive_rate <= self.target_rate


def _bounds_of(result, r, settings) -> list[tuple]:
    """(test, position, ε, probs thunk) of every TV bound (gof row) of run ``r`` in ``result.table``."""
    eps = epsilons_for(settings, r.scenario)
    t = result.table
    gof = t[(t.run == r.label) & (t.scenario == r.scenario.name) & (t.family == "gof")]
    law_of = _gof_law(r.acc.law, r.acc.joint_tokens)
    return [(test, int(pos), eps.for_test(test), lambda test=test, pos=int(pos): law_of(test, pos))
            for test, pos in zip(gof.test, gof.position)]


def _rate(cert, r, bounds: list, n: int) -> float:
    """Rigorous upper bound on P(inconclusive | lossless) of run ``r`` at ``n`` sequences: summed over its bounds."""
    name = r.scenario.name
    return min(1.0, float(np.sum([cert.inconclusive_for(name, t, p, e, n, probs)[0] for t, p, e, probs in bounds])))


def _run_plan(cert, r, bounds: list, rate: float) -> tuple[int, int, float]:
    """(half-certify sequences, planned sequences, rigorous P(inconclusive) there) of one run."""
    half = max(cert.draws_for(r.scenario.name, t, p, e, probs) for t, p, e, probs in bounds)
    n, r_n = half, _rate(cert, r, bounds, half)
    while r_n > rate and n < MAX_GROWTH * half:
        n = int(math.ceil(n * GROWTH))
        r_n = _rate(cert, r, bounds, n)
    return half, n, r_n


def _under_test(result, settings):
    """(run, its bounds, its weight) of every run under test of ``result`` that has TV bounds."""
    for r in result.runs:
        if r.role not in UNDER_TEST or r.acc is None or r.error is not None:
            continue
        bounds = _bounds_of(result, r, settings)
        if bounds:
            yield r, bounds, float(r.draws) / float(result.meta["config"]["draws"])  # the scenario's share


def inconclusive_rate(result, settings, draws: int) -> float:
    """The largest, over the runs under test of ``result``, rigorous bound on P(inconclusive | lossless sampler)
    at ``draws`` per scenario (x each scenario's weight)."""
    cert = certifier_for(SimpleNamespace(runs=result.runs), settings, float(result.meta["config"]["tv_delta_each"]))
    return max((_rate(cert, r, b, max(2, round(draws * w))) for r, b, w in _under_test(result, settings)), default=0.0)


def plan_draws(result, settings, rate: float = 1e-3) -> DrawPlan:
    """The :class:`DrawPlan` of the runs under test of ``result`` (a :class:`harness.verify.pipeline.VerifyResult`
    of the same scenarios, sampler and ``settings``: a pilot, or a finished run) for a lossless sampler to
    certify with probability ≥ 1 - ``rate`` (rigorous bound, summed over each run's bounds; the plan's rate is
    the largest over its scenarios)."""
    delta = float(result.meta["config"]["tv_delta_each"])
    cert = certifier_for(SimpleNamespace(runs=result.runs), settings, delta)
    per, draws, half_draws, worst = {}, 0, 0, 0.0
    for r, bounds, weight in _under_test(result, settings):
        half, n, r_n = _run_plan(cert, r, bounds, rate)
        per[r.scenario.name] = (n, r_n)
        draws = max(draws, int(math.ceil(n / weight)))
        half_draws = max(half_draws, int(math.ceil(half / weight)))
        worst = max(worst, r_n)
    return DrawPlan(draws=draws, half_certify=half_draws, inconclusive_rate=worst, target_rate=float(rate),
                    delta_each=delta, per_scenario=per)


def estimate_seconds(timing: dict, pilot_draws: int, draws: int) -> float:
    """Wall seconds of a run of ``draws`` per scenario from a pilot's ``timing`` (``meta['timing']`` of a
    :class:`harness.verify.pipeline.VerifyResult` drawn at ``pilot_draws``): the fixed part as measured, the
    drawing and the tests scaled by ``draws / pilot_draws``."""
    scaled = float(timing["wall_draw_s"]) + float(timing["wall_tests_s"])
    fixed = max(0.0, float(timing["wall_total_s"]) - scaled)
    return fixed + scaled * float(draws) / float(pilot_draws)
