"""Sizing a verification: the draws at which a lossless sampler certifies at the run's ε, and their wall time.

The Python API (:func:`harness.api.verify_sampler`) sizes a run it was given no ``draws`` for in two steps:

1. two *pilots*, small verifications of the same sampler on the same scenarios, give what the plan needs and
   nothing else: the family of tests (so the miss probability ``delta_each`` of each TV bound), each run's exact
   laws, and the wall time of the drawing at two sizes on this machine.  Their verdicts are thrown away: the plan below depends
   on the laws, ε and δ only, never on the pilot's counts, so the real run that follows keeps its own error
   budgets untouched;
2. :func:`plan_draws`: for every run under test, :func:`harness.verify.verdicts.plan_run` (the planner of the
   command's inconclusive advice too): for every TV bound of it (per position, per pair, per J-window), the
   planner :func:`harness.verify.battery.tv_interval_n_for` gives the draws at which a lossless sampler's
   *expected* bound reaches ε (about half of such runs certify there: ``half_certify``); from there the size
   grows in steps of 15 % until the rigorous bound on P(inconclusive | lossless sampler), summed over the run's
   bounds (:func:`harness.verify.battery.tv_interval_inconclusive`, as in ``runs.csv``'s
   ``cert_inconclusive_rate``), is at most the requested ``rate``.

:func:`estimate_seconds` extrapolates the pilots' timing: the drawing fitted as a cost per sampler call plus a
cost per sequence, the larger pilot's fixed part and tests as measured, with a safety margin.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import SimpleNamespace

from harness.verify.battery import plan_chunks
from harness.verify.runs import UNDER_TEST
from harness.verify.verdicts import GROWTH, MAX_GROWTH, Certifier, certifier_for, inconclusive_bound, plan_run

__all__ = ["DrawPlan", "plan_draws", "inconclusive_rate", "estimate_seconds", "GROWTH", "MAX_GROWTH", "MARGIN"]

MARGIN = 1.25  # the time estimate's safety factor


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


def _certifier(result, settings) -> Certifier:
    """The certifier of ``result``'s runs (their ε and the bounds' miss probability), as the pipeline judged them."""
    return certifier_for(SimpleNamespace(runs=result.runs), settings, float(result.meta["config"]["tv_delta_each"]))


def _under_test(result):
    """(run, its weight: the scenario's share of ``draws``) of every run under test of ``result`` with TV bounds."""
    t = result.table
    for r in result.runs:
        if r.role not in UNDER_TEST or r.acc is None or r.error is not None:
            continue
        if ((t.run == r.label) & (t.scenario == r.scenario.name) & (t.family == "gof")).any():
            yield r, float(r.draws) / float(result.meta["config"]["draws"])


def inconclusive_rate(result, settings, draws: int) -> float:
    """The largest, over the runs under test of ``result``, rigorous bound on P(inconclusive | lossless sampler)
    at ``draws`` per scenario (x each scenario's weight): :func:`harness.verify.verdicts.inconclusive_bound`."""
    cert = _certifier(result, settings)
    return max((inconclusive_bound(r, result.table, cert, max(2, round(draws * w))) for r, w in _under_test(result)),
               default=0.0)


def plan_draws(result, settings, rate: float = 1e-3) -> DrawPlan:
    """The :class:`DrawPlan` of the runs under test of ``result`` (a :class:`harness.verify.pipeline.VerifyResult`
    of the same scenarios, sampler and ``settings``: a pilot, or a finished run) for a lossless sampler to
    certify with probability ≥ 1 - ``rate``: each run's :func:`harness.verify.verdicts.plan_run` (the planner the
    command's advice uses), the plan's rate the largest over its scenarios."""
    cert = _certifier(result, settings)
    per, draws, half_draws, worst = {}, 0, 0, 0.0
    for r, weight in _under_test(result):
        half, n, r_n = plan_run(r, result.table, cert, rate)
        per[r.scenario.name] = (int(n), r_n)
        draws = max(draws, int(math.ceil(n / weight)))
        half_draws = max(half_draws, int(math.ceil(half / weight)))
        worst = max(worst, r_n)
    return DrawPlan(draws=draws, half_certify=half_draws, inconclusive_rate=worst, target_rate=float(rate),
                    delta_each=cert.delta, per_scenario=per)


def _work(result, settings, draws: int) -> tuple[int, int]:
    """(sampler calls, sequences) of the runs under test of ``result`` at ``draws`` per scenario (x each
    scenario's weight), the calls as :func:`harness.verify.draw` makes them (:func:`battery.plan_chunks`)."""
    calls = seqs = 0
    for r in result.runs:
        if r.role in UNDER_TEST:
            n = max(2, round(draws * float(r.draws) / float(result.meta["config"]["draws"])))
            calls += len(plan_chunks(n, settings.min_chunks, settings.max_chunk))
            seqs += n
    return calls, seqs


def estimate_seconds(small, large, settings, draws: int) -> float:
    """Wall seconds of a run of ``draws`` per scenario from two pilots (:class:`harness.verify.pipeline.VerifyResult`,
    ``small`` and ``large``, drawn at sizes whose calls hold different numbers of sequences): the drawing is
    fitted as c x (sampler calls) + b x (sequences) (a call has its own overhead: at small sizes the calls grow
    with the draws, at large sizes they stop at ``min_chunks``), the larger pilot's fixed part and tests are
    taken as measured (the tests work on counts, whose size does not grow with the draws), all x
    :data:`MARGIN`.  Where the fit gives a negative term (timing noise), the drawing is taken proportional to
    the sequences at the larger pilot's rate, which errs long."""
    (k1, n1), (k2, n2) = (_work(p, settings, int(p.meta["config"]["draws"])) for p in (small, large))
    d1, d2 = float(small.meta["timing"]["wall_draw_s"]), float(large.meta["timing"]["wall_draw_s"])
    det = k1 * n2 - k2 * n1
    c, b = ((d1 * n2 - d2 * n1) / det, (k1 * d2 - k2 * d1) / det) if det else (-1.0, 0.0)
    if c < 0 or b < 0:
        c, b = 0.0, d2 / float(n2)
    calls, seqs = _work(large, settings, draws)
    fixed = max(0.0, float(large.meta["timing"]["wall_total_s"]) - d2)  # loading, planning, the tests
    return MARGIN * (fixed + c * calls + b * seqs)
