""":func:`verify_sampler`: is my sampler lossless?  The ``verify`` battery on a callable, from Python.

It runs :func:`harness.verify.pipeline.verify` on the sampler (the signature of
:func:`specimpl.speculative_generate`), on exact-law scenarios only (``harness/configs/verify/*.toml``; the
real-model scenario is the command's: ``python -m harness verify --sampler ... --scenario real_model``), with
no bug controls unless asked, and returns a :class:`harness.api.result.Verification`.  Without ``draws`` it
sizes the run itself (:mod:`harness.verify.sizing`): two pilots of a few thousand draws, the planner's draws at
which a lossless sampler certifies with probability ≥ 1 - ``inconclusive_rate``, and a time estimate checked
against ``budget_s`` *before* the run (ValueError naming ``budget_s`` when it cannot fit).
"""
from __future__ import annotations

import inspect
import math
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence, Union

import numpy as np
import pandas as pd

from harness.api.result import Loss, Verification
from harness.core.backends import make_backend
from harness.core.config import derive_seed
from harness.core.limits import EPSILON_WHY, MIN_EPSILON
from harness.core.options import check_option, check_out
from harness.core.threads import with_threads
from harness.laws.scenarios import SCENARIO_DIR, list_scenarios, load_scenario, load_settings
from harness.verify.outcome import top_cells, unexpected_losses
from harness.verify.pipeline import VerifyResult, verify
from harness.verify.runs import UNDER_TEST
from harness.verify.sampler import SIGNATURE, guard_sampler, sampler_failure
from harness.verify.sizing import DrawPlan, estimate_seconds, plan_draws

__all__ = ["verify_sampler", "PILOT_DRAWS", "DEFAULT_BUDGET_S", "DEFAULT_INCONCLUSIVE_RATE"]

PILOT_DRAWS = (2000, 32000)  # draws per scenario of the two sizing pilots (their verdicts are not used): 4 calls
                             # of 500 and 32 of 1000, so the time per call and per sequence can be told apart
DEFAULT_BUDGET_S = 300.0
DEFAULT_INCONCLUSIVE_RATE = 1e-3  # P(inconclusive | lossless sampler) the planner sizes for (rigorous bound)
EPSILON_KEYS = ("position", "pair", "joint")

Epsilon = Union[float, Mapping[str, float], None]


def verify_sampler(fn: Callable, *, scenarios: Sequence[str] = ("base",), epsilon: Epsilon = None,
                   budget_s: Optional[float] = DEFAULT_BUDGET_S, draws: Optional[int] = None, controls: bool = False,
                   seed: Optional[int] = None, workers: int = 1, out: Optional[Union[str, Path]] = None,
                   confidence: Optional[float] = None, inconclusive_rate: float = DEFAULT_INCONCLUSIVE_RATE,
                   label: Optional[str] = None, progress: bool = False) -> Verification:
    """Verify that sampler ``fn`` draws from the target's law; return a :class:`Verification`.

    fn                 ``fn(target, draft, prompts, *, k, max_new_tokens, config, eos_token_id, generator)
                       -> GenerationResult`` (the signature of :func:`specimpl.speculative_generate`; a
                       function attribute ``algorithm`` names a block / tree rule, as for ``--sampler``)
    scenarios          names of exact-law scenario files in ``harness/configs/verify`` (default: ``base``)
    epsilon            the tolerance of the certificate: a number is the per-position TV ε, the pair and
                       window tolerances keeping default.toml's ratios to it (position 5e-3 : pair 1e-2 :
                       joint 0.02, so 0.02 -> 0.02, 0.04, 0.08); a mapping sets {"position", "pair",
                       "joint"} (those left out keep the scenario's); None: the scenario files'
    budget_s           wall seconds the call may take (None: no limit); checked before the run when the
                       planner sizes it: ValueError naming ``budget_s`` and the estimate when it cannot fit (the
                       run itself is not interrupted)
    draws              sequences per scenario (x the scenario's weight); None: sized by the planner
                       (ignores ``budget_s`` when given: the run may then end inconclusive)
    controls           also run the harness's bug controls at default.toml's ``control_draws`` (the battery then
                       shows it catches known bugs; ~1,300 tests more, their verdicts in ``runs``; the budget check
                       does not cover them); off by default
    seed               base seed (default: default.toml's); the pilots use seeds derived from it
    workers            processes drawing the shards (1: in this process); the result does not depend on it.  More
                       than 1 spawns processes: ``fn`` must be picklable (a module-level function) and a script
                       needs the ``if __name__ == "__main__":`` guard
    out                report folder (``tests.csv``, ``runs.csv``, summary.md, figures); None: nothing written
    confidence         simultaneous confidence 1 - δ of the TV bounds (default: default.toml's 0.999)
    inconclusive_rate  the planner sizes the run so that a lossless sampler ends inconclusive with at most this
                       probability (rigorous bound; default 1e-3)
    label              the sampler's name in the tables (default: its qualified name)
    progress           show the progress bar

    Raises ValueError (naming the argument) for bad arguments or a budget the planned run cannot fit,
    :class:`harness.core.errors.SamplerError` when the sampler raised or returned malformed output.
    """
    t0 = time.perf_counter()
    _check_args(fn, scenarios, budget_s, draws, seed, workers, inconclusive_rate, confidence, out)
    settings = _settings(epsilon, confidence)
    chosen = [load_scenario(n) for n in scenarios]
    sampler = guard_sampler(fn)
    name = label or getattr(fn, "__qualname__", None) or repr(fn)
    seed = settings.seed if seed is None else int(seed)
    algorithm = getattr(inspect.unwrap(fn), "algorithm", None)

    def run(n: int, run_seed: int, where: Optional[Path], with_controls: bool) -> VerifyResult:
        """One verification at ``n`` draws per scenario; the controls (if any) at default.toml's control size."""
        with make_backend("local", workers) as backend:
            res = with_threads(1, lambda: verify(
                sampler=sampler, sampler_label=name, scenarios=chosen, settings=settings, draws=n, seed=run_seed,
                control_draws=settings.control_draws if with_controls else None, controls=with_controls, out=where,
                figures=where is not None, progress=progress, algorithm=algorithm, backend=backend))
        failure = sampler_failure(res.verdicts, sampler)
        if failure is not None:
            raise failure
        return res

    plan = estimate = None
    if draws is None:
        pilot = run(PILOT_DRAWS[1], derive_seed(seed, "api-pilot", 1), None, False)  # first: it pays the warm-up,
        small = run(PILOT_DRAWS[0], derive_seed(seed, "api-pilot", 0), None, False)  # so the slope errs long
        plan = plan_draws(pilot, settings, inconclusive_rate)
        estimate = estimate_seconds(small, pilot, settings, plan.draws)
        _check_budget(plan, pilot, budget_s, time.perf_counter() - t0, estimate, scenarios)
        draws = max(2, plan.draws)
    res = run(int(draws), seed, None if out is None else Path(out), controls)
    result = _verification(res, settings, name, tuple(scenarios), int(draws), plan is not None, seed,
                         time.perf_counter() - t0, inconclusive_rate)
    return replace(result, estimate_s=estimate)


def _check_args(fn, scenarios, budget_s, draws, seed, workers, rate, confidence, out) -> None:
    """Every argument, before any work: ValueError (or TypeError for ``fn``) naming it."""
    if not callable(fn):
        raise TypeError(f"`fn` must be a callable {SIGNATURE}; got {type(fn).__name__}")
    try:
        inspect.signature(fn).bind(None, None, None, k=1, max_new_tokens=2, config=None, eos_token_id=None,
                                   generator=None)
    except TypeError as e:
        raise TypeError(f"`fn` must accept {SIGNATURE}; {getattr(fn, '__name__', 'fn')} cannot ({e})") from None
    except ValueError:  # no readable signature (a builtin): left to the call
        pass
    known = list_scenarios(SCENARIO_DIR)
    check_option(not isinstance(scenarios, str) and len(list(scenarios)) >= 1, "scenarios", scenarios,
                 "a non-empty list of scenario names")
    bad = [s for s in scenarios if s not in known]
    check_option(not bad, "scenarios", list(scenarios), f"names from {known} (exact-law scenarios; the real-model "
                 "scenario runs from the command line: python -m harness verify --scenario real_model)")
    check_option(len(set(scenarios)) == len(list(scenarios)), "scenarios", list(scenarios), "names without repeats")
    check_option(budget_s is None or (isinstance(budget_s, (int, float)) and budget_s > 0), "budget_s", budget_s,
                 "None or a number of seconds > 0")
    check_option(draws is None or (isinstance(draws, (int, np.integer)) and draws >= 2), "draws", draws,
                 "None (sized by the planner) or an integer >= 2")
    check_option(seed is None or (isinstance(seed, (int, np.integer)) and 0 <= seed < 2 ** 63), "seed", seed,
                 "None or an integer in [0, 2**63)")
    check_option(isinstance(workers, (int, np.integer)) and workers >= 1, "workers", workers, "an integer >= 1")
    check_option(isinstance(rate, (int, float)) and 0 < rate < 1, "inconclusive_rate", rate, "a number in (0, 1)")
    check_option(confidence is None or (isinstance(confidence, (int, float)) and 0 < confidence < 1), "confidence",
                 confidence, "None or a number in (0, 1)")
    if out is not None:
        check_out(Path(out), "out")


def _settings(epsilon: Epsilon, confidence: Optional[float]):
    """default.toml's run settings with the API's ε and confidence laid over them (ValueError naming ``epsilon``)."""
    s = load_settings()
    if epsilon is not None:
        s = replace(s, epsilon_override=_epsilon_override(epsilon, s.epsilon))
    return s if confidence is None else replace(s, tv_confidence=float(confidence))


def _epsilon_override(epsilon: Epsilon, defaults: dict) -> dict:
    if isinstance(epsilon, Mapping):
        bad = {k: v for k, v in epsilon.items() if k not in EPSILON_KEYS or not _is_eps(v)}
        check_option(not bad, "epsilon", dict(epsilon), f"a number in [{MIN_EPSILON:g}, 1] or a mapping of "
                     f"{list(EPSILON_KEYS)} to numbers in [{MIN_EPSILON:g}, 1] ({EPSILON_WHY})")
        return {k: float(v) for k, v in epsilon.items()}
    check_option(_is_eps(epsilon), "epsilon", epsilon, f"None, a number in [{MIN_EPSILON:g}, 1] (the per-position TV) or a "
                 f"mapping of {list(EPSILON_KEYS)} to numbers in [{MIN_EPSILON:g}, 1] ({EPSILON_WHY})")
    scale = float(epsilon) / float(defaults["position"])
    return {k: min(1.0, float(defaults[k]) * scale) for k in EPSILON_KEYS}


def _is_eps(v) -> bool:
    return isinstance(v, (int, float, np.floating)) and not isinstance(v, bool) and MIN_EPSILON <= float(v) <= 1


def _check_budget(plan: DrawPlan, pilot: VerifyResult, budget_s: Optional[float], spent: float, est: float,
                  scenarios) -> None:
    """ValueError naming ``budget_s`` when the planned run's estimated time ``est`` does not fit what is left of it."""
    if budget_s is None:
        return
    if spent + est > budget_s:
        eps = {k: pilot.verdicts[f"epsilon_{k}"].max() for k in EPSILON_KEYS}
        raise ValueError(
            f"`budget_s` = {budget_s:g} s cannot fit the run that certifies a lossless sampler at epsilon "
            f"{', '.join(f'{k} {v:g}' for k, v in eps.items())} on {list(scenarios)}: the planner needs "
            f"{plan.draws:,} draws per scenario, estimated {est:.0f} s on this machine (after {spent:.0f} s of "
            f"pilot and planning); allowed: budget_s >= {math.ceil(spent + est)}, a looser epsilon, or draws=N "
            "(fewer draws may end inconclusive)")


def _verification(res: VerifyResult, settings, name: str, scenarios: tuple, draws: int, planned: bool, seed: int,
                  wall: float, rate: float) -> Verification:
    """The :class:`Verification` of a finished run: the command's verdict (``res.verdict``, judged by
    :func:`harness.verify.outcome.judge` over every row of ``runs.csv``, as ``verify`` does), the loss of the first
    run found lossy that must not be (:func:`harness.verify.outcome.unexpected_losses`)."""
    v = res.verdicts
    under = v[v.role.isin(UNDER_TEST)]
    lossy = unexpected_losses(v) if res.verdict == "lossy" else v.iloc[:0]
    lossy_run = lossy.iloc[0] if len(lossy) else None
    certify = plan_draws(res, settings, rate).draws if res.verdict == "inconclusive" else None
    return Verification(
        verdict=res.verdict, epsilon={k: float(under[f"epsilon_{k}"].max()) for k in EPSILON_KEYS},
        confidence=float(under.cert_confidence.max()), tv_hat=_loss(res, under, lossy_run),
        runs=v.reset_index(drop=True), tests=res.table.reset_index(drop=True), certify_draws=certify, draws=draws,
        planned=planned, scenarios=scenarios, seed=seed, wall_s=wall, out=res.out, meta=res.meta,
        caught_by=str(lossy_run.caught_by) if lossy_run is not None else "", sampler=name)


def _loss(res: VerifyResult, under: pd.DataFrame, lossy_run: Optional[pd.Series]) -> Optional[Loss]:
    """The estimated loss, read from ``runs.csv``'s row (:mod:`harness.verify.verdicts` computes it): the lossy
    run's most clearly non-zero TV (``tv_best*``: the largest lower bound), else the largest per-position
    estimate of the runs under test (``tv_position_*``); the tokens that carry it from
    :func:`harness.verify.outcome.top_cells`."""
    if lossy_run is not None and isinstance(lossy_run.tv_best_test, str) and lossy_run.tv_best_test:
        row, test = lossy_run, lossy_run.tv_best_test
        estimate, lower, upper = row.tv_best, row.tv_best_lower, row.tv_best_upper
    else:
        rows = under[under.tv_position_max.notna()]
        if not len(rows):
            return None
        row = rows.loc[rows.tv_position_max.idxmax()]
        test = f"position[{int(row.tv_position_max_at)}]"
        estimate, lower, upper = row.tv_position_max, row.tv_position_lower, row.tv_position_upper
    spec = next((r for r in res.runs if r.label == row.run and r.scenario.name == row.scenario), None)
    name, _, arg = test.rstrip("]").partition("[")
    joint = name == "joint"
    return Loss(scenario=str(row.scenario), test=test if joint else name, position=None if joint else int(arg),
                estimate=float(estimate), lower=float(lower), upper=float(upper),
                cells=tuple(top_cells(spec, test)) if spec is not None else ())
