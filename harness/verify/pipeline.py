"""One verification from start to end: the runs, their draws, the family of tests, the verdicts, the report.

:func:`verify` is the library entry point of ``python -m harness verify`` (and of ``python -m harness
calibrate``, which calls it once per seed); :func:`conclude` is the part it shares with ``python -m
harness pit``: evaluate the family, judge every run, write the report, drop the resume state.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Optional

import pandas as pd

from harness.core.backends import Backend
from harness.core.cputime import TREE_SCOPE, tree_cpu_s
from harness.core.matmul import forward_flops, matmul_gflops, model_flop_share
from harness.verify.exactmodel import exact_pair
from harness.verify.realmodel import RealModelSpec, tiny_pair
from harness.laws.scenarios import SCENARIO_DIR
import harness.verify.report as report
from harness.verify.draw import RunState, draw_all, draw_von_neumann
from harness.verify.family import FamilyLevels, evaluate_family, family_config, plan_family
from harness.verify.runs import (UNDER_TEST, RunSet, Sizes, algorithm_runs, baselines_for, exact_runs, real_runs_for,
                                 run_sizes)
from harness.verify.outcome import Outcome, judge
from harness.verify.verdicts import certifier_for, verdict_table
from harness.verify.stopping import stop_summary
from specimpl.speculative import speculative_generate

__all__ = ["verify", "conclude", "VerifyResult"]


@dataclass(frozen=True)
class VerifyResult:
    """The outcome of a verification: ``passed`` (every run as its role requires), the table of tests,
    the runs, the markdown summary and console lines, the report folder (None: nothing written), the
    provenance, ``verdicts`` (the rows of ``runs.csv``) and ``outcome`` (:class:`harness.verify.outcome.Outcome`:
    the command's verdict, certified / lossy / inconclusive, with its reasons, losses and advice)."""

    passed: bool
    table: pd.DataFrame
    runs: list
    summary: str
    console: str
    out: Optional[Path]
    meta: dict
    real_runs: list = field(default_factory=list)
    verdicts: Optional[pd.DataFrame] = None
    outcome: Optional[Outcome] = None

    @property
    def verdict(self) -> str:
        """certified / lossy / inconclusive (:mod:`harness.core.verdict`)."""
        return self.outcome.verdict if self.outcome is not None else ("certified" if self.passed else "inconclusive")


def verify(*, sampler: Optional[Callable], sampler_label: str, scenarios: list, settings, draws: Optional[int] = None,
           control_draws: Optional[int] = None, seed: Optional[int] = None, full: bool = False, controls: bool = True,
           out: Optional[Path] = None, fresh: bool = False, figures: bool = True, progress: bool = True,
           scenario_dir: Path = SCENARIO_DIR, von_neumann: Optional[bool] = None,
           real_model: Optional[RealModelSpec] = None, real_model_sequences: Optional[int] = None,
           real_model_controls: Optional[bool] = None, algorithm: Optional[str] = None,
           backend: Optional[Backend] = None, note: Optional[dict] = None,
           rerun: Optional[Callable[[dict], str]] = None,
           sampler_timeout: Optional[float] = None) -> VerifyResult:
    """Run the battery; write the report to ``out`` (None: write nothing).  See :mod:`harness.verify`.

    ``sampler`` None: the reference sampler, and (with ``controls``) every control; ``von_neumann``
    (default: with the reference sampler) adds the von Neumann sampler.  ``real_model``: the real-model
    scenario's settings (None: no real-model scenario); the sampler under test draws
    ``real_model_sequences`` (default: the spec's, or its ``full_n_sequences`` with ``full``) and, with
    ``real_model_controls`` (default: ``controls``), the spec's controls run too.  ``algorithm``: the
    verification algorithm (:class:`harness.laws.algorithms.Algorithm` name) whose exact acceptance law the
    sampler is judged against (default: the sampler's ``algorithm`` attribute, else ``chain``); with the
    reference sampler, the block / tree reference runs and controls of default.toml's ``[algorithms]``
    join the run.  ``backend``: where the exact-law shards are drawn (:mod:`harness.core.backends`; None: in
    this process); the results do not depend on it.  ``note``: recorded in the config (a round of
    :mod:`harness.verify.until`).  ``rerun``: options -> the command line that draws with them, for the advice of
    an inconclusive verdict (:func:`harness.core.verdict.rerun_command`; None: the options are named alone).
    ``sampler_timeout``: seconds a sampler task may run on a worker process
    (:func:`harness.verify.isolation.task_timeout`; None: the default limit, 0: none)."""
    t_start, c_start = time.perf_counter(), tree_cpu_s()
    if full and not getattr(settings, "full", False):
        settings = replace(settings, full=True)  # the scenario files' full_epsilon_* apply
    seed = settings.seed if seed is None else seed
    sizes = run_sizes(settings, full, draws, control_draws)
    fn, role = (speculative_generate, "reference") if sampler is None else (sampler, "sampler")
    algorithm = algorithm or getattr(fn, "algorithm", None) or "chain"
    algos = algorithm_runs(scenario_dir) if sampler is None else None
    rs = RunSet(runs=exact_runs(fn, sampler_label, role, scenarios, sizes, full=full, controls=controls,
                                scenario_dir=scenario_dir, algorithm=algorithm, algorithms=algos),
                real_model=real_model)
    rs.baselines = baselines_for(rs.runs)
    if real_model is not None:
        n = real_model_sequences or (real_model.full_n_sequences if full else real_model.n_sequences)
        ex = real_model.exact
        rs.real_runs = real_runs_for(real_model, fn, sampler_label, role, n, seed,
                                     controls if real_model_controls is None else real_model_controls,
                                     exact_n=0 if ex is None else (ex.full_n_sequences if full else ex.n_sequences))
    state = RunState(out, fresh)
    draw_all(rs, seed, settings, state, progress, backend, sampler_timeout)
    with_von_neumann = sampler is None if von_neumann is None else von_neumann
    if with_von_neumann:
        rs.vn = draw_von_neumann(sizes.von_neumann_proposals, seed, controls)

    def config(levels: FamilyLevels) -> dict:
        return {"sampler": sampler_label, "scenarios": [s.name for s in scenarios], "draws": sizes.draws,
                "control_draws": sizes.control_draws if controls else 0, "full": full, "algorithm": algorithm,
                "algorithms": _algorithms_config(rs, algos), **({"until_certified": note} if note else {}),
                **family_config(settings, levels), **_sources_config(rs, sizes)}

    return conclude(rs, settings, config, seed=seed, out=out, figures=figures, state=state, t_start=t_start,
                    t_drawn=time.perf_counter(), workers=backend.local_workers if backend is not None else 1,
                    rerun=rerun, c_start=c_start)


def _algorithms_config(rs: RunSet, algos) -> Optional[dict]:
    """default.toml's ``[algorithms]`` and the block / tree runs drawn from it (None without)."""
    if algos is None:
        return None
    settings = {"draws": algos.draws, "full_draws": algos.full_draws, "control_draws": algos.control_draws,
                "full_control_draws": algos.full_control_draws, "control_scenario": algos.control_scenario,
                "runs": {k: list(v) for k, v in algos.runs.items()}}
    return {"settings": settings,
            "runs": [{"run": r.label, "scenario": r.scenario.name, "algorithm": r.algorithm, "sequences": r.draws}
                     for r in rs.runs if r.algorithm != "chain"]}


def _sources_config(rs: RunSet, sizes: Sizes) -> dict:
    """What was drawn from what, as recorded in the provenance."""
    return {"scenario_defs": {name: b.scenario.raw for name, b in rs.baselines.items()},
            "von_neumann_proposals": sizes.von_neumann_proposals, "real_model": real_model_config(rs)}


def real_model_config(rs: RunSet) -> Optional[dict]:
    """The real-model settings and runs of ``rs`` (None without a real-model scenario)."""
    spec = rs.real_model
    if spec is None:
        return None
    return {"settings": spec.raw, "config": spec.config.describe(), "k": spec.k, "max_new_tokens": spec.max_new_tokens,
            "runs": {rr.label: {"role": rr.role, "sequences": rr.n_sequences, "seed": rr.seed,
                                "exact_pair_sequences_per_prompt": rr.exact_n,
                                **({"exact_pair_looks": list(rr.stop.looks.sizes),
                                    "exact_pair_lossy_looks": list(rr.stop.early)} if rr.stop is not None else {})}
                       for rr in rs.real_runs}}


def conclude(rs: RunSet, settings, config: Callable[[FamilyLevels], dict], *, seed: int, out: Optional[Path],
             figures: bool, state: RunState, t_start: float, t_drawn: float, workers: int = 1,
             rerun: Optional[Callable[[dict], str]] = None, c_start: Optional[float] = None) -> VerifyResult:
    """Evaluate the family of tests of the drawn ``rs``, judge each run and the command
    (:func:`harness.verify.outcome.judge`; ``rerun`` writes the command of its advice), write the report
    (``config`` gives the command's settings for the provenance, once the family's levels are known), and drop
    the resume state.  ``t_start`` / ``c_start``: :func:`time.perf_counter` and
    :func:`harness.core.cputime.tree_cpu_s` when the command began (the whole run's wall and CPU seconds; ``c_start``
    None: CPU not measured).  ``workers``: processes evaluating the tests and judging the runs
    (:func:`harness.core.forkmap.fork_map`; the result does not depend on it)."""
    table, levels = evaluate_family(plan_family(rs), settings, workers)
    t_tested = time.perf_counter()
    certifier = certifier_for(rs, settings, levels.delta_each)
    verdicts = verdict_table(rs, table, certifier, workers)
    cfg = config(levels)
    outcome = judge(rs, table, verdicts, certifier, cfg, rerun)
    passed = outcome.verdict == "certified"
    timing = _timing(rs, t_start, t_drawn, t_tested, c_start)
    result = report.build(table=table, verdicts=verdicts, runs=rs.runs, baselines=rs.baselines, laws=rs.laws,
                          real_runs=rs.real_runs, config=cfg, seed=seed, timing=timing, outcome=outcome,
                          out=out, figures=figures, resume=state.summary(), resume_lines=state.announcement(),
                          workers=workers)
    state.clear()
    return VerifyResult(passed=passed, table=table, runs=rs.runs, summary=result["summary"],
                        console=result["console"], out=out, meta=result["meta"], real_runs=rs.real_runs,
                        verdicts=verdicts, outcome=outcome)


def _timing(rs: RunSet, t_start: float, t_drawn: float, t_tested: float, c_start: Optional[float] = None) -> dict:
    """The command's seconds and tokens: wall (``wall_*``), CPU (``cpu_total_s``: this process and its children over
    the command, :data:`harness.core.cputime.TREE_SCOPE`; ``cpu_draws_s``: the runs' draws, every run's ``cpu_s``
    and baseline, :mod:`harness.verify.cost`), tokens drawn, sequential stopping."""
    tested = [r for r in rs.runs if r.role in UNDER_TEST]
    controls = [r for r in rs.runs if r.role not in UNDER_TEST]
    timing = {
        "wall_total_s": time.perf_counter() - t_start, "wall_draw_s": t_drawn - t_start,
        "wall_tests_s": t_tested - t_drawn,
        "tokens_sampler": int(sum(r.tokens for r in tested)),
        "tokens_controls": int(sum(r.tokens for r in controls)),
        "tokens_target_only": int(sum(b.tokens for b in rs.baselines.values())),
        "positions_total": int(sum(r.positions for r in [*rs.runs, *rs.baselines.values()])),
        "von_neumann_proposals": int(sum(v.draw.proposed for v in rs.vn)),
        "tokens_real_model": int(sum(rr.tokens for rr in rs.real_runs)),
        "tokens_exact_pair": int(sum(rr.exact_tokens for rr in rs.real_runs)),
        "wall_real_model_s": float(sum(rr.wall_s for rr in rs.real_runs)),
        "cpu_total_s": tree_cpu_s() - c_start if c_start is not None else None, "cpu_scope": TREE_SCOPE,
        "cpu_draws_s": float(sum(r.cpu_s for r in [*rs.runs, *rs.baselines.values(), *rs.real_runs, *rs.vn])),
    }
    timing["tokens_total"] = timing["tokens_sampler"] + timing["tokens_controls"] + timing["tokens_target_only"] + \
        timing["tokens_real_model"]
    timing["sequential"] = sequential_summary(rs)
    timing["stop_at_need"] = stop_summary(rs)
    if timing["wall_real_model_s"] > 0:
        timing.update(real_model_arithmetic(rs, timing))
    return timing


def _n_params(pair) -> int:
    return int(sum(p.numel() for m in pair for p in m.model.parameters()))


def real_model_arithmetic(rs: RunSet, timing: dict) -> dict:
    """The real-model part's arithmetic as a share of this machine's one-thread float32 matmul rate
    (:mod:`harness.core.matmul`): at least 2 x (target + draft parameters) flops per token drawn on each pair
    (every emitted token passes through both models at least once), over the part's summed sampler seconds
    (each run on one worker of one thread)."""
    spec = rs.real_model
    flops = forward_flops(_n_params(tiny_pair()), timing["tokens_real_model"])
    if timing["tokens_exact_pair"] and spec is not None and spec.exact is not None:
        flops += forward_flops(_n_params(exact_pair(spec.exact)), timing["tokens_exact_pair"])
    rate = matmul_gflops()
    return {"matmul_gflops_1thread": rate, "real_model_flops_min": flops,
            "real_model_flop_share": model_flop_share(flops, timing["wall_real_model_s"], rate)}


def sequential_summary(rs: RunSet) -> dict:
    """The runs looked at sequentially, how many stopped early, and the sequences they drew of those planned."""
    seq = [r for r in rs.runs if r.sequential is not None]
    stopped = [r for r in seq if r.sequential.stopped_at is not None]
    return {"runs": len(seq), "level": seq[0].sequential.level if seq else 0.0, "stopped": len(stopped),
            "stopped_sequences": int(sum(r.acc.n for r in stopped)), "stopped_planned": int(sum(r.draws for r in stopped)),
            "stopped_tokens": int(sum(r.tokens for r in stopped)),
            "stopped_runs": [f"{r.label}@{r.scenario.name}:{r.acc.n}/{r.draws}" for r in stopped]}
