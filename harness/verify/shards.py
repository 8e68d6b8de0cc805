"""Shards: the units of work of a verification, drawn anywhere and merged exactly.

An exact-law run (one sampler on one scenario, or a scenario's target-only baseline) is a fixed list of
shards, one per sampler call of :func:`harness.verify.battery.plan_chunks`.  Shard ``c`` of run ``label`` on
scenario ``sc`` draws its ``B`` sequences with the generator seeded ``derive_seed(seed, label, sc.name,
c)`` and its PIT uniforms from ``derive_seed(seed, label, sc.name, c, "pit")``, and returns the
statistics of an :class:`harness.verify.battery.Accumulator` fed that one call (:class:`ShardResult`).  Every
random stream is fixed by (run seed, scenario, sampler, shard index) alone, and the driver merges the
shards of a run in shard order (:meth:`harness.verify.battery.Accumulator.merge`), so every statistic and
p-value is the same whichever process, machine or backend drew which shard.

A :class:`ShardTask` travels to a worker without models or functions: the worker rebuilds the
scenario's models and exact law (cached per process) and resolves the sampler from a *recipe*
(:func:`sampler_recipe`: an importable function, a control of :mod:`harness.controls.chain` /
:mod:`harness.controls.tree` by name, a block / tree algorithm by name, a ``--sampler`` file).  A sampler
no recipe reproduces is drawn in the driver (:attr:`ShardTask.portable` False).
"""
from __future__ import annotations

import importlib
import importlib.util
import pickle
import sys
import time
import traceback
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np
import torch

from harness.verify.battery import Accumulator
from harness.core.config import derive_seed
from harness.core.cputime import task_clock
from harness.core.fingerprint import loaded_module_files
from specimpl.autoregressive import autoregressive_generate
from harness.laws.algorithms import Algorithm
from harness.laws.scenarios import scenario_law
from harness.verify.sampler import guard_sampler, load_sampler
from harness.verify.sampler import check_output
from harness.verify.exactmodel import exact_model_draw, exact_model_law
from harness.verify.realmodel import real_model_draw

__all__ = ["ShardTask", "ShardResult", "RealTask", "ExactTask", "LawTask", "PilotTask", "draw_pilot", "RealResult", "draw_exact_task", "draw_shard", "draw_shard_in_worker", "draw_real_task",
           "draw_task_in_worker", "sampler_recipe", "resolve_sampler"]


@dataclass(frozen=True)
class ShardTask:
    """One shard of one run: ``run`` (the driver's index of the run), ``shard`` (its index in the run),
    ``B`` sequences, drawn by ``sampler`` (a recipe, :func:`sampler_recipe`) on ``scenario``;
    ``is_baseline``: target-only sampling (no PIT).  The remaining fields are the run's settings."""

    run: int
    shard: int
    B: int
    label: str
    scenario: object
    sampler: tuple
    seed: int
    is_baseline: bool
    pit_bins: int
    pair_bins: int
    logprob_max: int
    first: int = 0  # sequences of the run in the shards before this one

    @property
    def logprob_room(self) -> int:
        """Per-sequence log-probabilities this shard keeps: the run keeps its first ``logprob_max``, so a shard
        past them sends none (the merge would drop them)."""
        return max(0, self.logprob_max - self.first)

    @property
    def portable(self) -> bool:
        """Whether the task can leave the driver (its sampler travels as a recipe, not as an object)."""
        return self.sampler[0] != "object"

    @property
    def positions(self) -> int:
        return self.B * self.scenario.max_new_tokens


@dataclass(frozen=True)
class ShardResult:
    """What a shard sends back: the Accumulator's statistics (None when the call failed), the tokens
    and positions drawn, the seconds the call and its statistics took (``wall_s``; ``cpu_s``: CPU seconds,
    :func:`harness.core.cputime.task_clock`), and the error with its details (a traceback) when the sampler failed."""

    run: int
    shard: int
    statistics: Optional[dict]
    tokens: int
    positions: int
    wall_s: float
    error: Optional[str] = None
    details: str = ""
    modules: dict = field(default_factory=dict)  # path -> SHA-256 of the modules loaded outside the libraries
    cpu_s: float = 0.0


@dataclass(frozen=True)
class RealTask:
    """One real-model run as one task: ``index`` (the driver's index of the run), ``n_sequences`` prompts on
    the shipped tiny pair in calls of ``batch_size``, drawn by ``sampler`` (a recipe) from ``seed`` under
    ``spec`` (:class:`harness.verify.realmodel.RealModelSpec`).  One task, not shards: the run's draws come from
    one generator (:func:`harness.verify.realmodel.real_model_draw`), so they are those of the driver's own draw."""

    index: int
    label: str
    sampler: tuple
    n_sequences: int
    seed: int
    batch_size: int
    spec: object

    @property
    def portable(self) -> bool:
        return self.sampler[0] != "object"

    @property
    def positions(self) -> int:
        return self.n_sequences * self.spec.max_new_tokens


@dataclass(frozen=True)
class ExactTask:
    """One shard of a real-model run on the exact transformer pair (:mod:`harness.verify.exactmodel`): ``n_rows``
    rows (alternating the prompts) drawn by ``sampler`` (a recipe) from its own ``seed`` under ``spec`` (the
    :class:`harness.verify.exactmodel.ExactModelSpec`) and sampling ``config``.  Shards are independent draws."""

    index: int
    label: str
    sampler: tuple
    shard: int
    n_rows: int
    seed: int
    spec: object
    config: object

    @property
    def portable(self) -> bool:
        return self.sampler[0] != "object"

    @property
    def positions(self) -> int:
        return self.n_rows * self.spec.n_tokens

    @property
    def n_sequences(self) -> int:  # for ordering the tasks with the others (longest first)
        return self.n_rows


@dataclass(frozen=True)
class PilotTask:
    """The determinism check of a plug-in sampler (:func:`draw_pilot`): ``B`` sequences of ``scenario`` drawn
    twice by ``sampler`` (a recipe) with generators of the same ``seed``.  Drawn first; not part of any run."""

    label: str
    scenario: object
    sampler: tuple
    seed: int
    B: int = 64
    positions: int = 0  # not on the progress bar
    n_sequences: int = 1 << 63  # ordered first

    @property
    def portable(self) -> bool:
        return self.sampler[0] != "object"


@dataclass(frozen=True)
class LawTask:
    """The exact pair's enumerated law (:func:`harness.verify.exactmodel.exact_model_law`) as a task: computed on a
    worker while the others draw (model loading is not thread-safe, so not in a thread of the driver)."""

    spec: object
    config: object
    portable: bool = True
    positions: int = 0
    n_sequences: int = 1 << 62  # ordered first


@dataclass(frozen=True)
class RealResult:
    """What a real-model task sends back: the :class:`harness.verify.realmodel.RealModelDraw` (its ``error`` set when
    the sampler failed) and the seconds it took (``cpu_s``: CPU seconds, :func:`harness.core.cputime.task_clock`)."""

    index: int
    draw: object
    wall_s: float
    modules: dict = field(default_factory=dict)  # path -> SHA-256 of the modules loaded outside the libraries
    cpu_s: float = 0.0


# ------------------------------------------------------------------------------------ sampler recipes
def sampler_recipe(fn: Callable, label: str) -> tuple:
    """How a worker gets ``fn`` (the sampler of run ``label``) back: ``("import", module, name, guarded)``,
    ``("control", module, name)``, ``("algorithm", name)``, ``("file", path, name)``, ``("spec", value)``, ``("pickle", bytes)``,
    or ``("object", fn)`` when none reproduces it (the run is then drawn in the driver).  A sampler loaded from
    a ``--sampler`` value (:func:`harness.verify.sampler.load_sampler`) travels as ``("spec", value)``: a worker
    imports what the user named, whether a function, a callable object or a closure, so it never runs in the
    driver."""
    spec = getattr(fn, "sampler_spec", None)
    if isinstance(spec, str):
        return ("spec", spec)
    for recipe in _candidate_recipes(fn, label):
        try:
            if _same_function(resolve_sampler(recipe), fn):
                return recipe
        except Exception:  # noqa: BLE001 - a recipe that does not resolve is simply not used
            continue
    return ("object", fn)


def _candidate_recipes(fn: Callable, label: str):
    inner = getattr(fn, "__wrapped__", fn)
    guarded = inner is not fn
    yield ("control", "harness.controls.chain", label)
    yield ("control", "harness.controls.tree", label)
    yield ("algorithm", label)
    module, name = getattr(inner, "__module__", None), getattr(inner, "__qualname__", "")
    if module and module in sys.modules and _importable(module):
        yield ("import", module, name, guarded)
    path = getattr(inner, "__globals__", {}).get("__file__")
    if path and guarded and module not in sys.modules:
        yield ("file", path, getattr(inner, "__name__", name))
    try:
        yield ("pickle", pickle.dumps(fn))
    except Exception:  # noqa: BLE001 - closures and the like do not pickle
        pass


def _importable(module: str) -> bool:
    try:
        return module != "__main__" and importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _same_function(a: Callable, b: Callable) -> bool:
    """The same function: the same object, or the same code with equal closed-over values (a control's
    or algorithm's sampler is a new closure on each access), looking through :func:`guard_sampler`."""
    if a is b:
        return True
    a, b = getattr(a, "__wrapped__", a), getattr(b, "__wrapped__", b)
    if a is b:
        return True
    ca, cb = getattr(a, "__code__", None), getattr(b, "__code__", None)
    if ca is None or ca != cb:  # equal code: the same source (a --sampler file imported again)
        return False
    cells = lambda f: [c.cell_contents for c in (f.__closure__ or ())]  # noqa: E731
    return cells(a) == cells(b)


_SAMPLERS: dict = {}


def resolve_sampler(recipe: tuple) -> Callable:
    """The sampler a recipe names (cached per process)."""
    kind = recipe[0]
    if kind == "object":
        return recipe[1]
    key = recipe if kind != "pickle" else ("pickle", hash(recipe[1]))
    if key not in _SAMPLERS:
        _SAMPLERS[key] = _resolve(recipe)
    return _SAMPLERS[key]


def _resolve(recipe: tuple) -> Callable:
    kind = recipe[0]
    if kind == "control":
        return importlib.import_module(recipe[1]).get_control(recipe[2]).sampler
    if kind == "algorithm":
        return Algorithm.parse(recipe[1], "algorithm").sampler()
    if kind == "import":
        obj = importlib.import_module(recipe[1])
        for part in recipe[2].split("."):
            obj = getattr(obj, part)
        return guard_sampler(obj) if recipe[3] else obj
    if kind == "file":
        return load_sampler(f"{recipe[1]}:{recipe[2]}")
    if kind == "spec":
        return load_sampler(recipe[1])
    if kind == "pickle":
        return pickle.loads(recipe[1])
    raise ValueError(f"`recipe` must be a sampler recipe of harness.verify.shards; got kind {kind!r}")


# ------------------------------------------------------------------------------------------- workers
_LAWS: "OrderedDict[str, tuple]" = OrderedDict()
_LAWS_KEPT = 16  # scenarios whose models a worker keeps (the default battery has 10; small n-gram tables)


def _law_and_models(scenario):
    """The scenario's exact law and (target, draft), built once per process (the last few kept)."""
    key = repr(scenario)
    if key in _LAWS:
        _LAWS.move_to_end(key)
    else:
        _LAWS[key] = scenario_law(scenario)
        while len(_LAWS) > _LAWS_KEPT:
            _LAWS.popitem(last=False)
    return _LAWS[key]


def draw_shard_in_worker(task: ShardTask) -> ShardResult:
    """:func:`draw_shard` in a worker process, where no Ctrl-C of the user arrives (a SIGINT is passed
    to the driver, :mod:`harness.core.backends`): a ``KeyboardInterrupt`` or ``SystemExit`` inside the call
    is the sampler's failure."""
    return draw_shard(task, in_worker=True)


def draw_shard(task: ShardTask, in_worker: bool = False) -> ShardResult:
    """Draw one shard and return its statistics (a failing sampler gives a result with ``error``)."""
    sc = task.scenario
    law, (target, draft) = _law_and_models(sc)
    cpu = task_clock(in_worker)
    tic, c0 = time.perf_counter(), cpu()
    g = torch.Generator().manual_seed(derive_seed(task.seed, task.label, sc.name, task.shard))
    prompts = torch.tensor(list(sc.prompt), dtype=torch.long).unsqueeze(0).expand(task.B, -1).contiguous()  # (B, P)
    try:
        if task.is_baseline:
            res = autoregressive_generate(target, prompts, max_new_tokens=sc.max_new_tokens, config=sc.config,
                                          eos_token_id=sc.eos_token_id, generator=g)
        else:
            res = resolve_sampler(task.sampler)(target, draft, prompts, k=sc.k, max_new_tokens=sc.max_new_tokens,
                                                config=sc.config, eos_token_id=sc.eos_token_id, generator=g)
        tok = check_output(res, task.B, sc.max_new_tokens, target.vocab_size)  # (B, N)
    except (KeyboardInterrupt, SystemExit) as e:
        if not in_worker:
            raise
        what = "KeyboardInterrupt (not a Ctrl-C of the user)" if isinstance(e, KeyboardInterrupt) else \
            f"sys.exit({e.code!r})"
        return ShardResult(task.run, task.shard, None, 0, 0, time.perf_counter() - tic,
                           f"SamplerCallError: the sampler raised {what}", traceback.format_exc(), cpu_s=cpu() - c0)
    except Exception as e:  # noqa: BLE001 - a sampler that crashes fails verification, with the reason
        return ShardResult(task.run, task.shard, None, 0, 0, time.perf_counter() - tic, f"{type(e).__name__}: {e}",
                           traceback.format_exc(), cpu_s=cpu() - c0)
    rng = np.random.default_rng(derive_seed(task.seed, task.label, sc.name, task.shard, "pit"))
    acc = Accumulator(law, sc.joint_tokens, task.pit_bins, task.pair_bins, task.logprob_room, rng,
                      with_pit=not task.is_baseline, pit_max_lag=sc.k + 1)
    acc.add(tok, getattr(res, "stats", None))
    stats = acc.statistics(compact=True)
    wall, cpu_s = time.perf_counter() - tic, cpu() - c0
    return ShardResult(task.run, task.shard, stats, int((tok >= 0).sum()), task.positions, wall,
                       modules={} if task.is_baseline else loaded_module_files(), cpu_s=cpu_s)


def draw_pilot(task: PilotTask, in_worker: bool = False) -> tuple[str, int, int]:
    """Call the sampler twice on ``task.B`` copies of the scenario's prompt, each time with a generator seeded
    ``task.seed``: ("same", 0, n) when the tokens agree, ("differs", m, n) when m of the n tokens differ, and
    ("failed", 0, 0) when a call raised or returned malformed output (the run's shards then say why)."""
    sc = task.scenario
    _, (target, draft) = _law_and_models(sc)
    prompts = torch.tensor(list(sc.prompt), dtype=torch.long).unsqueeze(0).expand(task.B, -1).contiguous()  # (B, P)
    fn, out = resolve_sampler(task.sampler), []
    try:
        for _ in range(2):
            res = fn(target, draft, prompts.clone(), k=sc.k, max_new_tokens=sc.max_new_tokens, config=sc.config,
                     eos_token_id=sc.eos_token_id, generator=torch.Generator().manual_seed(task.seed))
            out.append(check_output(res, task.B, sc.max_new_tokens, target.vocab_size).clone())  # (B, N)
    except (KeyboardInterrupt, SystemExit):
        if not in_worker:  # in this process: the user's Ctrl-C, or the guard's business (draw_shard)
            raise
        return ("failed", 0, 0)
    except Exception:  # noqa: BLE001 - a failing sampler is reported by its shards
        return ("failed", 0, 0)
    differ = int((out[0] != out[1]).sum())
    return ("same" if differ == 0 else "differs", differ, int(out[0].numel()))


def draw_real_task(task: RealTask, in_worker: bool = False) -> RealResult:
    """Draw one real-model run (the tiny pair loaded once per process) and score it."""
    cpu = task_clock(in_worker)
    spec, tic, c0 = task.spec, time.perf_counter(), cpu()
    draw = real_model_draw(resolve_sampler(task.sampler), n_sequences=task.n_sequences,
                           max_new_tokens=spec.max_new_tokens, k=spec.k, config=spec.config,
                           prompt_lengths=spec.prompt_lengths, batch_size=task.batch_size, seed=task.seed,
                           name=task.label, progress=False, catch=True)
    wall, cpu_s = time.perf_counter() - tic, cpu() - c0
    return RealResult(task.index, draw, wall, loaded_module_files(), cpu_s)


def draw_exact_task(task: ExactTask, in_worker: bool = False) -> RealResult:
    """Draw one shard of a real-model run on the exact pair (the pair loaded once per process)."""
    cpu = task_clock(in_worker)
    tic, c0 = time.perf_counter(), cpu()
    draw = exact_model_draw(resolve_sampler(task.sampler), task.spec, n_sequences=task.n_rows, seed=task.seed,
                            config=task.config, name=task.label, catch=True)
    wall, cpu_s = time.perf_counter() - tic, cpu() - c0
    return RealResult(task.index, draw, wall, loaded_module_files(), cpu_s)


def _real_or_exact(task, in_worker: bool = False):
    if isinstance(task, LawTask):
        return exact_model_law(task.spec, task.config)
    return (draw_real_task if isinstance(task, RealTask) else draw_exact_task)(task, in_worker)


def draw_task_in_worker(task):
    """A worker's entry: a shard (:func:`draw_shard_in_worker`), a real-model run (:func:`draw_real_task`) or one
    shard of it on the exact pair (:func:`draw_exact_task`), or a determinism check (:func:`draw_pilot`)."""
    if isinstance(task, PilotTask):
        return draw_pilot(task, in_worker=True)
    return _real_or_exact(task, True) if isinstance(task, (RealTask, ExactTask, LawTask)) else draw_shard_in_worker(task)


def draw_task(task):
    """:func:`draw_task_in_worker` in the driver."""
    if isinstance(task, PilotTask):
        return draw_pilot(task)
    return _real_or_exact(task) if isinstance(task, (RealTask, ExactTask, LawTask)) else draw_shard(task)
