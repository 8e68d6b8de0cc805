"""Who is tested on what: one record per (sampler, scenario), their sizes, and the set of a whole run.

Roles (notation used throughout :mod:`harness.verify`):

    reference        the reference sampler (``specimpl.speculative_generate``), and the block / tree reference
                     samplers of default.toml's ``[algorithms]``: must be lossless and as efficient as the
                     exact acceptance law of their algorithm (``RunSpec.algorithm``)
    sampler          a user's sampler (``--sampler``): must be lossless
    lossy            a buggy control: must be caught (a loss test rejects)
    lossy-by-design  a control that changes the law on purpose (typical acceptance): must be caught
    lossless         a control that is lossless but not the reference: must pass
    peer             another implementation run for comparison (``python -m harness pit``): reported, not judged
    baseline         target-only sampling of a scenario, the two-sample tests' reference

:class:`RunSpec` is a sampler on an exact-law (n-gram) scenario, :class:`RealRun` a sampler on the
real-model pair, :class:`VonNeumannRun` the rejection sampler; :class:`RunSet` holds all of one run.
Drawing fills them in (:mod:`harness.verify.draw`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from harness.verify.battery import Accumulator
from harness.core.config import derive_seed
from harness.verify.exactmodel import merge_draws
from harness.verify.realmodel import REAL_MODEL_SCENARIO, RealModelSpec
from harness.laws.scenarios import Scenario, load_scenario
from specimpl.autoregressive import autoregressive_generate
from specimpl.errors import check_arg
from harness.controls.chain import CATALOGUE
from harness.laws.algorithms import Algorithm
from harness.laws.scenarios import read_defaults
from harness.controls.tree import CATALOGUE as TREE_CATALOGUE

__all__ = ["RunSpec", "RealRun", "VonNeumannRun", "RunSet", "Sizes", "run_sizes", "exact_runs", "baselines_for",
           "AlgorithmRuns", "algorithm_runs", "algorithm_exact_runs", "control_algorithm",
           "real_model_seed", "real_runs_for", "MUST_BE_CAUGHT", "UNDER_TEST"]

MUST_BE_CAUGHT = ("lossy", "lossy-by-design")
UNDER_TEST = ("reference", "sampler")


@dataclass
class RunSpec:
    """One sampler on one scenario.  role: 'reference' | 'sampler' | 'lossy' | 'lossy-by-design' | 'lossless'.
    ``algorithm``: the verification algorithm whose exact acceptance law the run is judged against
    (:class:`harness.laws.algorithms.Algorithm` name: chain, block, tree<n>[-wor])."""

    label: str
    role: str
    sampler: Callable
    scenario: Scenario
    draws: int
    algorithm: str = "chain"
    # filled by the runner
    acc: Optional[Accumulator] = None
    error: Optional[str] = None
    wall_s: float = 0.0  # seconds of its shards (sampler calls and their statistics), summed over the workers
    cpu_s: float = 0.0  # CPU seconds of the same (harness.core.cputime.task_clock), summed over the workers
    tokens: int = 0
    positions: int = 0
    sequential: Optional[object] = None  # its e-process (harness.verify.sequential.RunEProcess); None: not sequential


@dataclass
class RealRun:
    """One sampler on the real-model scenario.  role: 'reference' | 'sampler' | 'lossy' | 'lossless' | 'peer'.
    ``batch_size``: prompts per sampler call (None: the spec's)."""

    label: str
    role: str
    sampler: Callable
    n_sequences: int
    seed: int
    batch_size: Optional[int] = None
    draw: object = None  # harness.verify.realmodel.RealModelDraw, filled by the runner
    wall_s: float = 0.0
    cpu_s: float = 0.0  # CPU seconds of its tasks: the tiny-pair draw and scoring, and every exact-pair shard
    exact_cpu_s: float = 0.0  # the exact-pair shards' part of cpu_s (the draws the certificate rests on)
    exact_n: int = 0  # sequences per prompt on the exact pair (harness.verify.exactmodel; 0: not drawn there)
    exact_parts: dict = field(default_factory=dict)  # shard -> harness.verify.exactmodel.ExactModelDraw
    stop_delta: float = 0.0  # stop at the need on the exact pair: δ per bound its looks are decided at (0: fixed n)
    stop_eps: Optional[object] = None  # ... its tolerances (harness.verify.epsilon.Epsilons)
    stop: Optional[object] = None  # ... its harness.verify.stopping.PairStopRule (built at the first look)
    certified_at: Optional[int] = None  # ... the look (sequences per prompt) it was certified at
    lossy_at: Optional[int] = None  # ... or the look it was lossy beyond doubt at (stopping.LOSSY_P)
    looked: int = 0  # ... the looks checked so far
    exact_pending: dict = field(default_factory=dict)  # shard -> positions: exact-pair tasks still to arrive

    @property
    def exact(self):
        """The exact-pair draw, its shards merged (None when not drawn there or not yet complete)."""
        if not self.exact_parts:
            return None
        return merge_draws([self.exact_parts[i] for i in sorted(self.exact_parts)])

    @property
    def exact_drawn(self) -> int:
        """Sequences per prompt on the exact pair the certificate reads (the run's size, or where it stopped)."""
        parts = list(self.exact_parts.values())  # counted, not merged (merging copies every row)
        if not parts or any(d.error is not None for d in parts):
            return 0
        return sum(d.n_sequences for d in parts) // max(parts[0].n_prompts, 1)

    @property
    def error(self) -> Optional[str]:
        if self.draw is not None and self.draw.error:
            return self.draw.error
        bad = [d.error for d in self.exact_parts.values() if d.error]
        return f"exact pair: {bad[0]}" if bad else None

    @property
    def tokens(self) -> int:
        return 0 if self.draw is None or self.draw.error else self.draw.n_tokens

    @property
    def exact_tokens(self) -> int:
        return sum(d.tokens.size for d in self.exact_parts.values() if d.error is None)


@dataclass(frozen=True)
class VonNeumannRun:
    """The von Neumann sampler (or a broken one) with envelope M, drawn: ``draw`` is its
    ``specimpl.von_neumann`` proposal record, ``cdf`` the target's CDF."""

    label: str
    role: str
    M: float
    draw: object
    cdf: Callable
    wall_s: float
    cpu_s: float = 0.0

    @property
    def scenario(self) -> str:
        return f"von_neumann_M{self.M:g}"


@dataclass
class RunSet:
    """Everything one verification draws: the exact-law runs, the target-only baseline and exact law of
    each of their scenarios (by name), the real-model runs (with ``real_model``, their settings) and the
    von Neumann runs."""

    runs: list[RunSpec] = field(default_factory=list)
    baselines: dict[str, RunSpec] = field(default_factory=dict)
    laws: dict = field(default_factory=dict)
    real_runs: list[RealRun] = field(default_factory=list)
    real_model: Optional[RealModelSpec] = None
    vn: list[VonNeumannRun] = field(default_factory=list)


@dataclass(frozen=True)
class Sizes:
    """Sequences per scenario (times its weight), per control, and von Neumann proposals; ``explicit``:
    the draws were given (--draws / --control-draws), not default.toml's."""

    draws: int
    control_draws: int
    von_neumann_proposals: int
    explicit: bool = False


def run_sizes(settings, full: bool, draws: Optional[int], control_draws: Optional[int]) -> Sizes:
    """The run's sizes: the arguments where given, else default.toml's (``full_*`` with ``full``);
    with ``draws`` given, controls and von Neumann proposals shrink with it."""
    base = draws if draws is not None else (settings.full_draws if full else settings.draws)
    explicit = draws is not None or control_draws is not None
    if control_draws is None:
        control_draws = settings.full_control_draws if full else settings.control_draws
        if draws is not None:
            control_draws = min(control_draws, draws)
    proposals = settings.full_von_neumann_proposals if full else settings.von_neumann_proposals
    if draws is not None:
        proposals = min(proposals, max(10_000, 5 * draws))
    return Sizes(base, control_draws, proposals, explicit)


def exact_runs(fn: Callable, label: str, role: str, scenarios: list, sizes: Sizes, *, full: bool, controls: bool,
               scenario_dir: Path, algorithm: str = "chain", algorithms: Optional["AlgorithmRuns"] = None
               ) -> list[RunSpec]:
    """The sampler (judged against ``algorithm``'s acceptance law) on each scenario, then (with
    ``controls``) every control of :data:`harness.controls.chain.CATALOGUE` on its own scenario; with ``algorithms``
    the block / tree reference runs on the scenarios they list (those of ``scenarios`` only) and (with
    ``controls``) the block / tree controls of :data:`harness.controls.tree.CATALOGUE`."""
    runs = [RunSpec(label, role, fn, sc, max(2, round(sizes.draws * (sc.full_weight if full else sc.weight))),
                    algorithm) for sc in scenarios]
    cache = {sc.name: sc for sc in scenarios}
    if controls:
        for c in CATALOGUE:
            sc = cache.get(c.scenario) or load_scenario(c.scenario, scenario_dir)
            cache[sc.name] = sc
            runs.append(RunSpec(c.name, c.kind, c.sampler, sc, max(2, round(sizes.control_draws * min(1.0, sc.weight)))))
    if algorithms is not None:
        runs += algorithm_exact_runs(algorithms, {sc.name: sc for sc in scenarios}, cache, sizes, full, controls,
                                scenario_dir)
    return runs


@dataclass(frozen=True)
class AlgorithmRuns:
    """The ``[algorithms]`` table of default.toml: sequences per block / tree reference run and per
    block / tree control (``full_*`` with --full), ``runs``: algorithm name -> scenario names, and
    ``control_scenario``: where the controls that :data:`harness.controls.tree.CATALOGUE` places on ``base``
    run instead (None: on ``base``)."""

    draws: int
    full_draws: int
    control_draws: int
    full_control_draws: int
    runs: dict
    control_scenario: Optional[str] = None


def algorithm_runs(scenario_dir: Path) -> Optional[AlgorithmRuns]:
    """The ``[algorithms]`` table of ``scenario_dir``'s default.toml (None when it has none)."""
    table = read_defaults(scenario_dir).get("algorithms")
    if table is None:
        return None
    missing = [key for key in ("draws", "full_draws", "control_draws", "full_control_draws", "runs")
               if key not in table]
    check_arg(not missing, "[algorithms]", sorted(table), f"a table with the keys {missing} too")
    for name in table["runs"]:
        Algorithm.parse(name, "[algorithms.runs]")
    return AlgorithmRuns(*(int(table[key]) for key in ("draws", "full_draws", "control_draws", "full_control_draws")),
                         {name: tuple(v) for name, v in table["runs"].items()}, table.get("control_scenario"))


def control_algorithm(control) -> str:
    """The algorithm whose acceptance law a :class:`harness.controls.tree.TreeControl` is compared with."""
    if control.family == "block":
        return "block"
    n = control.kwargs.get("n_drafts", 2)
    return f"tree{n}" + ("" if control.kwargs.get("replacement", True) else "-wor")


def algorithm_exact_runs(a: AlgorithmRuns, chosen: dict, cache: dict, sizes: Sizes, full: bool, controls: bool,
                    scenario_dir: Path) -> list[RunSpec]:
    """Block / tree reference runs on the chosen scenarios they list, then the block / tree controls.
    Sizes: ``a``'s; given --draws / --control-draws (``sizes.explicit``) no more than those."""
    draws = a.full_draws if full else a.draws
    control_draws = a.full_control_draws if full else a.control_draws
    if sizes.explicit:
        draws, control_draws = min(draws, sizes.draws), min(control_draws, sizes.control_draws)
    runs = []
    for name, names in a.runs.items():
        algo = Algorithm.parse(name, "[algorithms.runs]")
        runs += [RunSpec(name, "reference", algo.sampler(), chosen[s],
                         max(2, round(draws * min(1.0, chosen[s].weight))), name) for s in names if s in chosen]
    if controls:
        for c in TREE_CATALOGUE:
            name = a.control_scenario if c.scenario == "base" and a.control_scenario else c.scenario
            sc = cache.get(name) or load_scenario(name, scenario_dir)
            cache[sc.name] = sc
            runs.append(RunSpec(c.name, c.kind, c.sampler, sc, max(2, round(control_draws * min(1.0, sc.weight))),
                                control_algorithm(c)))
    return runs


def baselines_for(runs: list[RunSpec]) -> dict[str, RunSpec]:
    """Target-only sampling per scenario of ``runs`` (in their order), as many sequences as the largest
    run under test there (else the largest run)."""
    by_scenario: dict[str, list[RunSpec]] = {}
    for r in runs:
        by_scenario.setdefault(r.scenario.name, []).append(r)
    out = {}
    for name, rs in by_scenario.items():
        tested = [r.draws for r in rs if r.role in UNDER_TEST]
        out[name] = RunSpec("target-only", "baseline", autoregressive_generate, rs[0].scenario,
                            max(tested) if tested else max(r.draws for r in rs))
    return out


def real_model_seed(seed: int, label: str) -> int:
    """The seed of a real-model run (prompts, sampler generator, PIT draws)."""
    return derive_seed(seed, label, REAL_MODEL_SCENARIO) % 2**31


def real_runs_for(spec: RealModelSpec, fn: Callable, label: str, role: str, n_sequences: int, seed: int,
                  controls: bool, exact_n: int = 0) -> list[RealRun]:
    """The sampler on the real-model pair and (with ``controls``) the spec's controls; ``exact_n``: the sampler's
    sequences per prompt on the exact pair (the controls': ``[real_model.exact.controls]``)."""
    runs = [RealRun(label, role, fn, n_sequences, real_model_seed(seed, label), exact_n=exact_n if spec.exact else 0)]
    if controls:
        sizes = spec.exact.controls_of() if spec.exact is not None else {}
        for name, crole, cfn, n in spec.control_samplers():
            runs.append(RealRun(name, crole, cfn, n, real_model_seed(seed, name), exact_n=sizes.get(name, 0)))
    return runs
