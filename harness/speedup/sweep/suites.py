"""The sweep's suites: what a cell is, each suite's typed cell settings, and how one cell is computed.

A suite turns its table of the sweep file into cells — one frozen settings record each, whose fields
(with the suite's name) are hashed into the cell's id — and computes one cell into a JSON-able payload.
:data:`SUITES` is the registry the sweep looks suites up in; adding a suite is adding an entry.

    grid       :class:`GridParams`: the analytic model S(alpha, c, k) on a grid (a DataFrame payload)
    synthetic  :class:`SyntheticParams`: timed n-gram pairs with exact alpha and set c (:mod:`harness.speedup.synthetic`)
    real       :class:`RealParams`: the shipped tiny HF pair and its draft variants
    profile    :class:`ProfileParams`: per-call cost curves T(n, B) of named models (random weights allowed)
    membound   :class:`MemboundParams`: the tiny draft (or a variant) against the widened, memory-bound target
               of :mod:`harness.speedup.membound.widen` (built on demand, cached): the tiny target's law at a large model's cost

The measured suites (synthetic, real, membound) share one protocol, :func:`measure_pair`: ``repeats`` passes
over the cell's prompt batches, each an interleaved pair (target-only, speculative; the order alternates) after one
warm-up pair, and after each pass one pass of the profiler over exactly the calls the cost model needs, so the
predictions use costs profiled under the same machine load as the runs.  Its result is a :class:`Measurement`.

The real-model suites (real, membound) time each cell over at least ``prompts`` prompts: ceil(prompts / batch)
batches of ``batch`` prompts (:func:`prompt_sets`), drawn from a seed of the group alone (suite, batch,
prompt_len, the sweep's seed: :func:`prompt_seed`), never of k or the draft, so every configuration of a batch is
timed on the same prompts and a measured best k is not the luck of its prompt.  The speedup of a cell is the
ratio of summed times (:mod:`harness.speedup.sweep.tables`): a throughput over the prompts, the quantity `tune`
predicts (the expected call time over prompts, from the mean acceptance).
"""
from __future__ import annotations

import functools
import math
import time
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Callable, Optional

import numpy as np
import pandas as pd
import torch

from harness.core.config import derive_seed
from harness.speedup.membound.widen import PREPACKS
from harness.speedup.sweep.algorithms import algorithms_suite
from harness.speedup.sweep.cell import Cell, Suite, _cell
from harness.speedup.sweep.models import (SHAPES, check_model_specs, check_tiny_names, resolve_model, tiny_model,
                                          widened_model)

from harness.speedup import costmodel as cm
from harness.speedup.profiler import profile_in_situ, profile_model, profile_pair, summarise
from harness.speedup.synthetic import CallCost, HybridClock, VirtualClock, WallClock, synthetic_pair
from specimpl.autoregressive import autoregressive_generate
from specimpl.errors import check_arg
from specimpl.sampling import SamplingConfig
from specimpl.speculative import speculative_generate
from specimpl.hf import tiny_pair_positions, tiny_pair_prompts

__all__ = ["Cell", "Suite", "SUITES", "GridParams", "SyntheticParams", "RealParams", "ProfileParams", "MemboundParams",
           "Measurement", "measure_pair", "prompt_seed", "prompt_sets", "resolve_model", "SHAPES", "CLOCKS"]

CLOCKS = ("wall", "hybrid", "spin", "virtual")


# -- cell settings, one record type per suite -----------------------------------------------------
class _Params:
    @classmethod
    def from_settings(cls, settings: dict):
        """The record from a stored cell's ``params`` (which also hold ``suite``); a field with a default that a
        cell stored before the field existed lacks takes the default (what that cell was computed with)."""
        return cls(**{f.name: settings[f.name] for f in fields(cls)
                      if f.name in settings or (f.default is MISSING and f.default_factory is MISSING)})


@dataclass(frozen=True)
class GridParams(_Params):
    """The [grid] table: ``alpha`` = linspace(start, stop, num), ``c`` = logspace, plus ``c_extra``; k = 1..k_max."""

    alpha: list
    c: list
    c_extra: list
    k_max: int


@dataclass(frozen=True)
class _MeasuredParams(_Params):
    """Settings every measured cell has; the properties say how its row of measured.csv is labelled."""

    prompt_len: int
    max_new_tokens: int
    repeats: int
    profile_repeats: int
    temperature: float
    k: int
    batch: int

    clock_name = "wall"
    device_name = "cpu"
    alpha_set = math.nan  # alpha set by construction (synthetic), else NaN
    c_set = math.nan  # c set by construction (synthetic), else NaN
    cpu_basis = False  # also report on process CPU time (real models on a CPU device)

    @property
    def label(self) -> str:
        raise NotImplementedError

    @property
    def group(self) -> str:
        raise NotImplementedError


@dataclass(frozen=True)
class SyntheticParams(_MeasuredParams):
    """One synthetic cell: target cost ``target_ms`` (1 + token_slope (n - 1)) (1 + batch_slope (B - 1)),
    draft cost c times that, acceptance exactly ``alpha``, timed on ``clock``."""

    target_ms: float
    token_slope: float
    batch_slope: float
    vocab_size: int
    support: int
    alpha: float
    c: float
    clock: str

    device_name = "cpu"

    @property
    def clock_name(self) -> str:
        return self.clock

    @property
    def alpha_set(self) -> float:
        return self.alpha

    @property
    def c_set(self) -> float:
        return self.c

    @property
    def label(self) -> str:
        return f"alpha={self.alpha}"

    @property
    def group(self) -> str:
        return f"synthetic/{self.clock}"


@dataclass(frozen=True)
class RealParams(_MeasuredParams):
    """One real-model cell: the tiny pair's target against draft variant ``draft`` on ``device``, timed over
    ``prompts`` prompts or more (ceil(prompts / batch) batches) drawn from ``prompt_seed`` (:func:`prompt_sets`).
    Cells stored before the two fields existed read as prompts = 1, prompt_seed = None: one batch drawn from
    the cell's own seed (which differs with k)."""

    dtype: str
    draft: str
    device: str
    prompts: int = field(default=1, kw_only=True)
    prompt_seed: Optional[int] = field(default=None, kw_only=True)

    @property
    def prompt_batches(self) -> int:
        return -(-int(self.prompts) // int(self.batch))

    @property
    def prompts_shared(self) -> bool:
        """Whether every k and draft of this batch is timed on the same prompts."""
        return self.prompt_seed is not None

    @property
    def device_name(self) -> str:
        return self.device

    @property
    def cpu_basis(self) -> bool:
        return str(self.device) == "cpu"

    @property
    def label(self) -> str:
        return self.draft

    @property
    def group(self) -> str:
        return f"tiny-pair/{self.device}"


@dataclass(frozen=True)
class MemboundParams(RealParams):
    """One memory-bound cell: the widened target (:func:`harness.speedup.membound.widen.build_widened` at ``width``,
    ``extra_layers``) against tiny-pair draft variant ``draft`` on ``device``."""

    width: int
    extra_layers: int
    prepack: str

    @property
    def group(self) -> str:
        return f"membound/{self.device}"


@dataclass(frozen=True)
class ProfileParams(_Params):
    """One cost-curve cell: ``model`` ('tiny:<variant>' or 'random:<shape>') timed at n tokens × batch sizes."""

    n: list
    batch: list
    context_len: int
    repeats: int
    dtype: str
    model: str
    device: str


def _pick(table: dict, cls, **more) -> dict:
    """The fields of ``cls`` from a suite's table, with ``more`` (the cell's own values) laid over."""
    return {f.name: more[f.name] if f.name in more else table[f.name] for f in fields(cls)}


# -- cells of each suite ----------------------------------------------------------------------------
def _grid_cells(table: dict, cfg: dict) -> list[Cell]:
    return [_cell("grid", "grid", GridParams(**table))]


def _synthetic_cells(table: dict, cfg: dict) -> list[Cell]:
    return [_cell("synthetic", f"syn_{clock}_a{a:g}_c{c:g}_k{k}_B{B}",
                  SyntheticParams(**_pick(table, SyntheticParams, alpha=a, c=c, k=k, batch=B, clock=clock)))
            for clock in table["clock"] for B in table["batch"] for c in table["c"] for a in table["alpha"]
            for k in table["k"]]


def prompt_seed(cfg: dict, suite: str, batch: int, prompt_len: int) -> int:
    """The seed of a group's prompts: the sweep's seed, the suite, the batch and the prompt length — not k, not
    the draft, so every configuration of the group is timed on the same prompts."""
    return derive_seed(cfg["seed"], f"{suite}/prompts/B{batch}/L{prompt_len}")


def _real_cells(table: dict, cfg: dict) -> list[Cell]:
    return [_cell("real", f"real_{d}_k{k}_B{B}".replace("+", "_"),
                  RealParams(**_pick(table, RealParams, draft=d, k=k, batch=B, device=cfg["device"],
                                     prompt_seed=prompt_seed(cfg, "real", B, table["prompt_len"]))))
            for B in table["batch"] for d in table["drafts"] for k in table["k"]]


def _membound_cells(table: dict, cfg: dict) -> list[Cell]:
    return [_cell("membound", f"membound_w{table['width']}x{table['extra_layers']}_{d}_k{k}_B{B}".replace("+", "_"),
                  MemboundParams(**_pick(table, MemboundParams, draft=d, k=k, batch=B, device=cfg["device"],
                                         prompt_seed=prompt_seed(cfg, "membound", B, table["prompt_len"]))))
            for B in table["batch"] for d in table["drafts"] for k in table["k"]]


def _profile_cells(table: dict, cfg: dict) -> list[Cell]:
    return [_cell("profile", f"prof_{m}".replace(":", "_").replace("+", "_"),
                  ProfileParams(**_pick(table, ProfileParams, model=m, device=cfg["device"])))
            for m in table["models"]]


# -- checks of each suite's table -----------------------------------------------------------------
GRID_AXIS = 10_000  # points of the grid's alpha or c axis at most
GRID_K_MAX = 1024   # the grid's k = 1 .. k_max at most
GRID_CELLS = 10 ** 7  # rows of the grid table at most (alpha x c x k; ~0.3 GB as a DataFrame)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _check_axis(key: str, v, lo: float, hi: float, allowed: str) -> None:
    check_arg(isinstance(v, list) and len(v) == 3 and all(_is_num(x) for x in v[:2]) and _is_int(v[2])
              and lo <= v[0] <= v[1] <= hi and 1 <= v[2] <= GRID_AXIS and (v[2] > 1 or v[0] == v[1]), key, v,
              f"[start, stop, num] with {allowed} and num an integer in [1, {GRID_AXIS:,}]")


def _check_grid(table: dict) -> None:
    """[grid]: alpha in [0, 1], c > 0, k_max >= 1, and a grid small enough to hold."""
    _check_axis("grid.alpha", table["alpha"], 0.0, 1.0, "0 <= start <= stop <= 1")
    _check_axis("grid.c", table["c"], 1e-300, math.inf, "0 < start <= stop")
    extra = table["c_extra"]
    check_arg(isinstance(extra, list) and all(_is_num(x) and x > 0 for x in extra), "grid.c_extra", extra,
              "a list of numbers > 0")
    k = table["k_max"]
    check_arg(_is_int(k) and 1 <= k <= GRID_K_MAX, "grid.k_max", k, f"an integer in [1, {GRID_K_MAX}]")
    cells = table["alpha"][2] * (table["c"][2] + len(extra)) * k
    check_arg(cells <= GRID_CELLS, "grid.k_max", k, f"small enough that alpha num x c num x k_max <= {GRID_CELLS:,} "
              f"(here {cells:,} rows)")


MEASURED_LIST = 1000  # values in a measured suite's k / batch list at most (each value is a cell: timed runs)
MEASURED_MOST = {"k": GRID_K_MAX, "batch": 4096, "repeats": 10_000, "profile_repeats": 10_000, "prompt_len": 100_000,
                 "max_new_tokens": 100_000}  # what a measured cell may ask (probe 47: k = 10^9 was a MemoryError)


def _check_measured(name: str, table: dict) -> None:
    for key in ("k", "batch"):
        v, most = table[key], MEASURED_MOST[key]
        check_arg(isinstance(v, list) and 0 < len(v) <= MEASURED_LIST and all(
            isinstance(x, int) and not isinstance(x, bool) and 1 <= x <= most for x in v), f"{name}.{key}",
            v if not isinstance(v, list) or len(v) <= 8 else f"a list of {len(v):,} values",
            f"a non-empty list of at most {MEASURED_LIST:,} integers in [1, {most:,}]")
    for key in ("repeats", "profile_repeats", "prompt_len", "max_new_tokens"):
        most = MEASURED_MOST[key]
        check_arg(_is_int(table[key]) and 1 <= table[key] <= most, f"{name}.{key}", table[key],
                  f"an integer in [1, {most:,}]")
    check_arg(_is_num(table["temperature"]) and table["temperature"] >= 0, f"{name}.temperature",
              table["temperature"], "a number >= 0")


def _check_positions(name: str, table: dict) -> None:
    """The tiny pair's positions hold prompt_len + max_new_tokens + the largest k."""
    mpe = tiny_pair_positions()
    need = table["prompt_len"] + table["max_new_tokens"] + max(table["k"]) + 1
    check_arg(need <= mpe, f"{name}.max_new_tokens", table["max_new_tokens"],
              f"at most {mpe - need + table['max_new_tokens']:,} (the tiny pair's {mpe:,} positions hold prompt_len + "
              "max_new_tokens + the largest k + 1)")


def _check_synthetic(table: dict) -> None:
    """Checks [synthetic]; a single ``clock`` becomes a list."""
    clocks = table["clock"] if isinstance(table["clock"], list) else [table["clock"]]
    check_arg(len(clocks) > 0 and all(c in CLOCKS for c in clocks), "synthetic.clock", table["clock"],
              f"one of {list(CLOCKS)} or a list of them")
    table["clock"] = clocks
    _check_measured("synthetic", table)
    check_arg(isinstance(table["alpha"], list) and table["alpha"] and all(_is_num(a) and 0 <= a <= 1
                                                                          for a in table["alpha"]),
              "synthetic.alpha", table["alpha"], "a non-empty list of numbers in [0, 1]")
    check_arg(isinstance(table["c"], list) and table["c"] and all(_is_num(c) and c > 0 for c in table["c"]),
              "synthetic.c", table["c"], "a non-empty list of numbers > 0")
    V = table["vocab_size"]
    check_arg(_is_int(V) and 2 <= V <= 4096, "synthetic.vocab_size", V, "an integer in [2, 4096]")
    check_arg(_is_int(table["support"]) and 1 <= table["support"] <= V, "synthetic.support", table["support"],
              f"an integer in [1, vocab_size = {V}]")
    for key in ("target_ms", "token_slope", "batch_slope"):
        v = table[key]
        check_arg(_is_num(v) and (v > 0 if key == "target_ms" else v >= 0), f"synthetic.{key}", v,
                  "a number > 0" if key == "target_ms" else "a number >= 0")


def _check_prompts(name: str, table: dict) -> None:
    v = table["prompts"]
    check_arg(isinstance(v, int) and not isinstance(v, bool) and v >= 1, f"{name}.prompts", v, "an integer >= 1")


def _check_real(table: dict) -> None:
    _check_measured("real", table)
    _check_positions("real", table)
    _check_prompts("real", table)
    check_tiny_names("real.drafts", table["drafts"])


def _check_profile(table: dict) -> None:
    check_model_specs("profile.models", table["models"])


def _check_membound(table: dict) -> None:
    _check_measured("membound", table)
    _check_positions("membound", table)
    _check_prompts("membound", table)
    check_tiny_names("membound.drafts", table["drafts"])
    w = table["width"]
    check_arg(isinstance(w, int) and w >= 1 and w & (w - 1) == 0, "membound.width", w, "a power of two >= 1")
    x = table["extra_layers"]
    check_arg(isinstance(x, int) and x >= 0, "membound.extra_layers", x, "an integer >= 0")
    check_arg(table["prepack"] in PREPACKS, "membound.prepack", table["prepack"], f"one of {list(PREPACKS)}")


def _clock(name: str):
    return {"wall": WallClock(), "spin": WallClock(spin=True), "hybrid": HybridClock(), "virtual": VirtualClock()}[name]


# -- the measured-cell protocol ---------------------------------------------------------------------
@dataclass
class Measurement:
    """What a measured cell records (the keys of its JSON file besides the settings and provenance).

    timings        one row per run: rep, arm ('ar' or 'spec'), seconds, cpu_seconds, tokens (+ rounds)
    accepted_hist  rounds with n = 0..k accepted drafts, over every speculative run
    round_batches  the active batch of each round, one list per speculative run
    profile        the in-cell profile (rows of :func:`harness.speedup.profiler.summarise`)
    """

    timings: list
    accepted_hist: list
    emitted: int
    target_calls: int
    draft_calls: int
    round_batches: list
    profile: list

    @classmethod
    def from_record(cls, rec: dict) -> "Measurement":
        return cls(**{f.name: rec[f.name] for f in fields(cls)})


def _merge_profiles(frames: list[pd.DataFrame]) -> pd.DataFrame:
    f = pd.concat(frames, ignore_index=True)
    samples, cpu, meta = {}, {}, {}
    for r in f.itertuples():
        key = (r.op, int(r.n), int(r.batch))
        samples.setdefault(key, []).extend(r.samples_s)
        cpu.setdefault(key, []).extend(r.cpu_samples_s)
        meta[key] = {"model": r.model, "device": r.device, "timer": r.timer, "context_len": r.context_len}
    rows = [summarise({key: xs}, meta[key], cpu={key: cpu[key]}) for key, xs in samples.items()]
    return pd.concat(rows, ignore_index=True).sort_values(["op", "batch", "n"], ignore_index=True)


def _timer(clock, dev: torch.device) -> Callable:
    """fn -> (result, seconds on ``clock``, process CPU seconds) with CUDA synchronised around the call."""
    def timed(fn):
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        c0 = time.process_time()
        t0 = clock.now()
        out = fn()
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        dt = clock.now() - t0
        return out, dt, (dt if getattr(clock, "virtual", False) else time.process_time() - c0)
    return timed


class _SpecTally:
    """Acceptance and call counts summed over a cell's speculative runs."""

    def __init__(self, k: int):
        self.hist = np.zeros(k + 1, dtype=np.int64)
        self.emitted = self.target_calls = self.draft_calls = 0
        self.round_batches: list[list[int]] = []

    def add(self, stats) -> int:
        """Add one run's SpecStats; returns its number of rounds."""
        self.hist += stats.accepted_hist
        f = stats.frame()
        self.emitted += int(f["emitted"].sum())
        self.target_calls += int(f["target_calls"].sum())
        self.draft_calls += int(f["draft_calls"].sum())
        self.round_batches.append(f["batch"].astype(int).tolist())
        return len(f)


def _profile_between(target, draft, prompts, k, N, config, seed, clock, profile_repeats, in_situ) -> pd.DataFrame:
    """One profile pass between two timed pairs: in situ (``profile_repeats`` instrumented target-only and
    speculative runs of the cell's own prompts, :func:`harness.speedup.profiler.profile_in_situ`) or isolated (each
    model's calls on their own and the sampler on null models, :func:`harness.speedup.profiler.profile_pair`)."""
    if in_situ:  # runs of their own: not the draws of the timed runs (whose generator starts at ``seed``)
        return profile_in_situ(target, draft, prompts, k, N, config, seed=seed + 1_000_003, clock=clock,
                               passes=profile_repeats)
    return profile_pair(target, draft, [k], [len(prompts)], prompt_len=len(prompts[0]), max_new_tokens=N,
                        config=config, repeats=profile_repeats, warmup=0, clock=clock, seed=seed)


def measure_pair(target, draft, prompt_sets, *, k: int, max_new_tokens: int, config: SamplingConfig, repeats: int,
                 seed: int, clock, device: str = "cpu", profile_repeats: int = 1, in_situ: bool = False) -> Measurement:
    """Interleaved target-only / speculative runs of one cell: ``repeats`` passes, each one pair per batch of
    ``prompt_sets`` (a list of prompt batches; the order within a pair alternates over passes and batches), with
    in-cell profiling after each pass on one of the batches (``in_situ``: profiled inside instrumented runs of
    the cell, see :func:`_profile_between`).  A timing row names its pass (``rep``) and batch (``prompt``)."""
    dev = torch.device(device)
    g = torch.Generator(device=dev).manual_seed(seed)
    N = max_new_tokens
    timed = _timer(clock, dev)
    arms = {"ar": lambda ps: autoregressive_generate(target, ps, max_new_tokens=N, config=config, generator=g),
            "spec": lambda ps: speculative_generate(target, draft, ps, k=k, max_new_tokens=N, config=config,
                                                    generator=g)}
    with torch.no_grad():
        arms["ar"](prompt_sets[0]), arms["spec"](prompt_sets[0])  # warm-up pair, discarded
        timings, profiles, tally = [], [], _SpecTally(k)
        for rep in range(repeats):
            for j, ps in enumerate(prompt_sets):
                for arm in (("ar", "spec") if (rep + j) % 2 == 0 else ("spec", "ar")):
                    res, dt, ct = timed(functools.partial(arms[arm], ps))
                    row = {"rep": rep, "prompt": j, "arm": arm, "seconds": dt, "cpu_seconds": ct,
                           "tokens": int(res.lengths.sum())}
                    if arm == "spec":
                        row["rounds"] = tally.add(res.stats)
                    timings.append(row)
            profiles.append(_profile_between(target, draft, prompt_sets[rep % len(prompt_sets)], k, N, config,
                                             seed + rep, clock, profile_repeats, in_situ))
    return Measurement(timings, tally.hist.tolist(), tally.emitted, tally.target_calls, tally.draft_calls,
                       tally.round_batches, _merge_profiles(profiles).to_dict(orient="records"))


# -- computing one cell of each suite ---------------------------------------------------------------
def _run_grid(p: GridParams, seed: int) -> dict:
    a = np.linspace(*p.alpha[:2], int(p.alpha[2]))
    c = np.logspace(math.log10(p.c[0]), math.log10(p.c[1]), int(p.c[2]))
    c = np.unique(np.concatenate([c, np.asarray(p.c_extra, dtype=float)]))
    ks = np.arange(1, p.k_max + 1)
    A, C, K = np.meshgrid(a, c, ks, indexing="ij")
    return {"grid": pd.DataFrame({"alpha": A.ravel(), "c": C.ravel(), "k": K.ravel().astype(np.int16),
                                  "speedup": cm.analytic_speedup(A, C, K).ravel(),
                                  "expected_tokens": cm.expected_tokens(A, K).ravel()})}


def _run_synthetic(p: SyntheticParams, seed: int) -> dict:
    clock = _clock(p.clock)
    tc = CallCost(p.target_ms / 1e3, p.token_slope, p.batch_slope)
    target, draft, _, _ = synthetic_pair(p.alpha, p.c, tc, p.vocab_size, p.support, seed=seed % 2**31, clock=clock)
    g = torch.Generator().manual_seed(seed)
    prompts = torch.randint(0, p.vocab_size, (p.batch, p.prompt_len), generator=g).tolist()
    m = measure_pair(target, draft, [prompts], k=p.k, max_new_tokens=p.max_new_tokens,
                     config=SamplingConfig(temperature=p.temperature), repeats=p.repeats, seed=seed, clock=clock,
                     profile_repeats=p.profile_repeats)
    return {**asdict(m), "c_set": p.c, "alpha_exact": p.alpha}


def prompt_sets(p: RealParams, seed: int) -> list[list[list[int]]]:
    """A real-model cell's prompts: ``p.prompt_batches`` batches of ``p.batch`` held-out prompts, prompt i of the
    group the i-th draw from ``p.prompt_seed`` (so a cell with more prompts extends one with fewer); a cell
    stored before prompts were shared (prompt_seed None) drew its one batch from its own ``seed``."""
    base = seed if p.prompt_seed is None else p.prompt_seed
    flat = tiny_pair_prompts(p.prompt_batches * p.batch, p.prompt_len, seed=base % 2**31)
    return [flat[i * p.batch:(i + 1) * p.batch] for i in range(p.prompt_batches)]


def _run_real(p: RealParams, seed: int) -> dict:
    target = tiny_model("target", p.device, p.dtype)
    draft = tiny_model(p.draft, p.device, p.dtype)
    m = measure_pair(target, draft, prompt_sets(p, seed), k=p.k, max_new_tokens=p.max_new_tokens,
                     config=SamplingConfig(temperature=p.temperature), repeats=p.repeats, seed=seed,
                     clock=WallClock(), device=p.device, profile_repeats=p.profile_repeats, in_situ=True)
    return asdict(m)


def _run_membound(p: MemboundParams, seed: int) -> dict:
    target = widened_model(p.width, p.extra_layers, p.device, p.dtype, p.prepack)
    draft = tiny_model(p.draft, p.device, p.dtype)
    m = measure_pair(target, draft, prompt_sets(p, seed), k=p.k, max_new_tokens=p.max_new_tokens,
                     config=SamplingConfig(temperature=p.temperature), repeats=p.repeats, seed=seed,
                     clock=WallClock(), device=p.device, profile_repeats=p.profile_repeats, in_situ=True)
    return asdict(m)


def _run_profile(p: ProfileParams, seed: int) -> dict:
    model = resolve_model(p.model, p.device, p.dtype, seed)
    prof = profile_model(model, "model", p.n, p.batch, context_len=p.context_len, repeats=p.repeats, warmup=2,
                         seed=seed)
    prof["model"] = p.model
    return {"profile": prof.to_dict(orient="records")}


SUITES: dict[str, Suite] = {s.name: s for s in (
    Suite("grid", GridParams, _grid_cells, _run_grid, _check_grid, frozenset({"grid"})),
    Suite("synthetic", SyntheticParams, _synthetic_cells, _run_synthetic, _check_synthetic,
          frozenset({"measured", "profiles"})),
    Suite("real", RealParams, _real_cells, _run_real, _check_real, frozenset({"measured", "profiles"})),
    Suite("profile", ProfileParams, _profile_cells, _run_profile, _check_profile, frozenset({"profiles"})),
    Suite("membound", MemboundParams, _membound_cells, _run_membound, _check_membound,
          frozenset({"measured", "profiles"})),
)}

SUITES["algorithms"] = algorithms_suite()
