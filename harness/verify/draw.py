"""Drawing the runs of a verification, with resume.

Exact-law runs are drawn as shards (:mod:`harness.verify.shards`: one per sampler call of
:func:`harness.verify.battery.plan_chunks`, each seeded from the run seed, scenario, sampler and shard index)
on a backend (:mod:`harness.core.backends`: this process, a local process pool, Ray) and merged run by run
in shard order into an :class:`harness.verify.battery.Accumulator` (:class:`ShardedRun`), so the statistics
do not depend on the backend or the number of workers.  Real-model runs are tasks on the same backend
(:class:`harness.verify.shards.RealTask`, one per run, submitted first: they are the longest), drawn and
scored by :func:`harness.verify.realmodel.real_model_draw`, and their draws on the exact transformer pair (the
certificate) as shards of independent sequences (:class:`harness.verify.shards.ExactTask`, each with its own seed;
:func:`harness.verify.exactmodel.exact_model_draw`); one whose sampler cannot leave this process is drawn
in a thread here, beside the shards (:class:`_Background`); the von Neumann runs propose once.  Every random
stream is seeded by :func:`harness.core.config.derive_seed` from the run seed and the run's names, so a
run's draws do not depend on which other runs share the command.

Resume: each run's merged prefix of shards (every shard once the run is done) and each finished
real-model run is pickled under ``<out>/_tmp_state/`` (:class:`RunState`) with the fingerprint of
everything that determines its draws (:mod:`harness.core.fingerprint`: project code and sampler source by
content, the scenario's resolved config, seed, draw counts, the shard scheme); an interrupted command
picks up the saved shards whose fingerprint matches, draws the rest, says which on stderr and in the
report, and the folder is removed once the report is written.
"""
from __future__ import annotations

import hashlib
import json
import pickle
import sys
import threading
import time
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from harness import stats
from harness.core.backends import Backend, SerialBackend, TaskLost
from harness.verify.battery import Accumulator, plan_chunks
from harness.core.config import derive_seed
from harness.laws.ngram import ExactLaw
from harness.laws.scenarios import scenario_law
from harness.core.fingerprint import (code_fingerprint, files_fingerprint, fingerprint, sampler_fingerprint,
                                      sampler_sources, short)
from harness.core.provenance import atomic_write_bytes
from harness.verify.realmodel import REAL_MODEL_SCENARIO, RealModelDraw, RealModelSpec
from harness.verify.runs import UNDER_TEST, RealRun, RunSet, RunSpec, VonNeumannRun
from harness.verify.sequential import RunEProcess, sequential_level
from harness.verify.progress import CostBar, kind_of
from harness.verify.exactmodel import EXACT_PAIR_DIR, ExactModelDraw, remember_law, sequences_per_shard
from harness.verify.shards import (ExactTask, LawTask, RealResult, RealTask, ShardTask, draw_task,
                                   draw_task_in_worker, sampler_recipe)
from specimpl.hf import TINY_PAIR_DIR
from harness.controls.chain import VN_CONTROLS
from specimpl.von_neumann import SNUG_M, TwoPeakDensity, two_peak_sampler

__all__ = ["RunState", "ShardedRun", "draw_all", "draw_von_neumann", "SHARD_SCHEME"]


class RunState:
    """Finished runs of an interrupted command, pickled under ``<out>/_tmp_state`` (no ``out``: none).

    A shard's file is named by its *slot* (which run on which scenario, :meth:`slot`) and holds the
    *fingerprint* of what produced it (:mod:`harness.core.fingerprint`: the project's code, the sampler's
    source, the scenario's resolved config, seed, draw counts and settings).  A shard is reused only when
    its fingerprint equals the current one; otherwise it is stale, counted in :attr:`stale` and redrawn."""

    def __init__(self, out: Optional[Path], fresh: bool = False):
        self.dir = None if out is None else Path(out) / "_tmp_state"
        self.reused: list[str] = []  # slots reused from an earlier run of the same code
        self.stale: list[str] = []  # slots whose saved shard came from other code or settings (redrawn)
        self._code: Optional[str] = None
        self._samplers: dict = {}  # id(fn) -> its fingerprint; ('sources', id(fn)) -> its files' fingerprints
        self._sources: dict[str, dict] = {}  # fingerprint -> {source: its fingerprint} (to name what changed)
        self.changed: set[str] = set()  # what made saved shards stale, where it can be named
        self.run_fingerprint: Optional[str] = None  # code + sampler under test, as announced
        if self.dir is not None:
            if fresh and self.dir.exists():
                for p in self.dir.glob("*.pkl"):
                    p.unlink()
            self.dir.mkdir(parents=True, exist_ok=True)

    @property
    def code(self) -> str:
        """Fingerprint of the project's own code (computed once per run)."""
        if self._code is None:
            self._code = code_fingerprint()
        return self._code

    def sampler(self, fn) -> str:
        """Fingerprint of a sampler's source (computed once per sampler and run)."""
        if id(fn) not in self._samplers:
            self._samplers[id(fn)] = sampler_fingerprint(fn)
        return self._samplers[id(fn)]

    def fingerprint(self, fn, *parts) -> str:
        """The fingerprint of a shard drawn by sampler ``fn`` from ``parts`` (config, seed, draws...);
        empty without a state folder (nothing is saved or reused then)."""
        if self.dir is None:
            return ""
        fp = fingerprint(self.code, self.sampler(fn), *parts)
        if fp not in self._sources:
            if ("sources", id(fn)) not in self._samplers:  # the files are hashed once per sampler and run
                self._samplers[("sources", id(fn))] = sampler_sources(fn)
            self._sources[fp] = {"project code": self.code, **self._samplers[("sources", id(fn))],
                                 "settings": fingerprint(*parts)}
        return fp

    @staticmethod
    def slot(*parts) -> str:
        """File name of a shard: which run of which scenario (not what code drew it)."""
        blob = json.dumps([*parts], sort_keys=True, default=str)
        return hashlib.sha1(blob.encode()).hexdigest()[:16]

    def load(self, slot: str, fp: str) -> Optional[dict]:
        """The saved shard of ``slot`` when it was made with fingerprint ``fp``; None otherwise (a shard
        with another fingerprint is recorded as stale and will be overwritten)."""
        path = None if self.dir is None else self.dir / f"{slot}.pkl"
        if path is None or not path.is_file():
            return None
        try:
            with open(path, "rb") as f:
                saved = pickle.load(f)
        except Exception:  # noqa: BLE001 - an unreadable shard is stale, never trusted
            saved = None
        if not isinstance(saved, dict) or saved.get("fingerprint") != fp:
            self.stale.append(slot)
            self.changed |= self._what_changed(saved.get("sources") if isinstance(saved, dict) else None, fp)
            return None
        self.reused.append(slot)
        return saved["obj"]

    def _what_changed(self, saved: Optional[dict], fp: str) -> set:
        """The names of the sources (a file by its name, 'project code', 'settings') whose fingerprint differs
        between a stale shard and this run (empty when the shard recorded none)."""
        now = self._sources.get(fp)
        if not isinstance(saved, dict) or now is None:
            return set()
        keys = set(saved) | set(now)
        return {k if k in ("project code", "settings") else Path(k).name for k in keys if saved.get(k) != now.get(k)}

    def save(self, slot: str, fp: str, obj: dict) -> None:
        if self.dir is not None:
            atomic_write_bytes(self.dir / f"{slot}.pkl", pickle.dumps({"fingerprint": fp, "obj": obj,
                                                                       "sources": self._sources.get(fp)}))

    def summary(self) -> dict:
        """What was reused, for meta.json: shard counts and the run's fingerprint."""
        return {"reused_shards": len(self.reused), "stale_shards_redrawn": len(self.stale),
                "fingerprint": self.run_fingerprint, "code_fingerprint": self._code}

    def announcement(self) -> list[str]:
        """Lines saying what state was reused or ignored (empty when none was found)."""
        fp = short(self.run_fingerprint or self._code)
        lines = []
        if self.reused:
            lines.append(f"reused {len(self.reused)} saved draw shard{'s' * (len(self.reused) != 1)} from an "
                         f"earlier run of the same code (fingerprint {fp})")
        if self.stale:
            what = (f"changed: {', '.join(sorted(self.changed))}" if self.changed else
                    "sampler source, project code, scenario, seed or draws changed")
            lines.append(f"ignored {len(self.stale)} saved draw shard{'s' * (len(self.stale) != 1)} made by other "
                         f"code or settings ({what}); redrawn (fingerprint now {fp})")
        return lines

    def clear(self) -> None:
        if self.dir is None:
            return
        for p in self.dir.glob("*.pkl"):
            p.unlink()
        try:
            self.dir.rmdir()
        except OSError:
            pass


SHARD_SCHEME = "shards-v2"  # how a run is cut into shards and seeded, and its statistics (v2: every J-window); part of every state fingerprint
SEQUENTIAL_SCHEME = "eprocess-v1"  # how a run is looked at and stopped (harness.verify.sequential)
CHECKPOINT_S = 10.0  # a run's merged prefix of shards is saved at most this often while it is drawn


class ShardedRun:
    """One exact-law run (``run``, or with ``is_baseline`` its scenario's target-only baseline) drawn as
    the shards of :mod:`harness.verify.shards`, merged into ``run.acc`` in shard order whatever order
    they arrive in.  Resume: the merged prefix (shards 0..j-1) is saved under ``state`` now and then and
    when the run ends; a matching saved prefix is picked up and only the shards after it are drawn."""

    def __init__(self, index: int, run: RunSpec, law: ExactLaw, seed: int, settings, pair_bins: int,
                 state: RunState, is_baseline: bool = False, seq_level: float = 0.0):
        sc = run.scenario
        self.run, self.state = run, state
        run.acc = Accumulator(law, sc.joint_tokens, settings.pit_bins, pair_bins, settings.logprob_max, None,
                              with_pit=not is_baseline, pit_max_lag=sc.k + 1)
        # sequential stopping (harness.verify.sequential): every run but a baseline, when the level is > 0
        run.sequential = None if is_baseline or seq_level <= 0 else RunEProcess.for_accumulator(run.acc, seq_level)
        run.error, run.wall_s, run.tokens, run.positions = None, 0.0, 0, 0
        sizes = plan_chunks(run.draws, 1 if is_baseline else settings.min_chunks, settings.max_chunk)
        self.n_shards, self.next, self.pending = len(sizes), 0, {}
        self.slot = RunState.slot(run.label, run.role, sc.name, seed)
        self.fp = state.fingerprint(run.sampler, SHARD_SCHEME, sc, run.draws, seed, is_baseline, settings.min_chunks,
                                    settings.max_chunk, settings.pit_bins, settings.logprob_max, sc.joint_tokens,
                                    pair_bins, SEQUENTIAL_SCHEME, seq_level if run.sequential else 0.0)
        saved = state.load(self.slot, self.fp)
        if saved is not None:
            run.acc.merge(saved["acc"])
            if run.sequential is not None:
                run.sequential.restore(saved.get("sequential"))
            run.wall_s, run.tokens, run.positions, self.next = (saved[k] for k in ("wall_s", "tokens", "positions",
                                                                                   "done"))
        self.saved_at, self.saved_next = time.perf_counter(), self.next
        recipe = ("baseline",) if is_baseline else sampler_recipe(run.sampler, run.label)
        first = np.cumsum([0, *sizes[:-1]])  # sequences before each shard
        self.tasks = [ShardTask(index, c, B, run.label, sc, recipe, seed, is_baseline, settings.pit_bins, pair_bins,
                                settings.logprob_max, int(first[c])) for c, B in enumerate(sizes) if c >= self.next]

    @property
    def resumed_positions(self) -> int:
        return self.run.positions

    @property
    def stopped(self) -> bool:
        """Whether the run stopped early (lossy by its e-process): its later shards are not drawn."""
        return self.run.sequential is not None and self.run.sequential.stopped_at is not None

    def take(self, shard: int, result) -> None:
        """A shard's result (a :class:`ShardResult`, or :class:`harness.core.backends.TaskLost`): merged once
        every shard before it is."""
        self.pending[shard] = result
        while self.next in self.pending and not self.stopped:
            self._fold(self.pending.pop(self.next))
            self.next += 1
        if self.stopped:
            self.pending.clear()  # shards drawn after the stop (in flight when it came) do not count
        if self.next > self.saved_next and time.perf_counter() - self.saved_at > CHECKPOINT_S:
            self.save()

    def _fold(self, r) -> None:
        run = self.run
        if run.error is not None:  # the run ended at its first failed shard (the shards after it do not count)
            return
        if isinstance(r, TaskLost):
            run.error = f"WorkerLost: the worker drawing shard {self.next} died {r.attempts} times ({r.reason})"
            return
        if r.error is not None:
            run.error = r.error
            failures = getattr(run.sampler, "failures", None)
            if isinstance(failures, list) and r.details and all(d != r.details for _, d in failures):
                failures.append((r.error, r.details))
            return
        run.acc.merge(r.statistics)
        run.tokens += r.tokens
        run.positions += r.positions
        run.wall_s += r.wall_s
        if run.sequential is not None:
            run.sequential.look(run.acc)

    def save(self) -> None:
        """Save the merged prefix (nothing once the run has failed: a failed run is drawn again)."""
        run = self.run
        if run.error is None:
            self.state.save(self.slot, self.fp, {"acc": run.acc.statistics(), "done": self.next, "tokens": run.tokens,
                                                 "positions": run.positions, "wall_s": run.wall_s,
                                                 "sequential": run.sequential.state() if run.sequential else None})
        self.saved_at, self.saved_next = time.perf_counter(), self.next


def _sharded_runs(rs: RunSet, seed: int, settings, state: RunState) -> list[ShardedRun]:
    """Per scenario (in order): its exact law, then its target-only baseline and every run on it."""
    jobs = []
    level = sequential_level(settings, len(rs.runs))  # every run has its scenario's baseline
    for name, base in rs.baselines.items():
        runs = [r for r in rs.runs if r.scenario.name == name]
        rs.laws[name], _ = scenario_law(base.scenario)
        n_max = max(r.draws for r in runs)  # grid of the PIT pair tables: n_max sequences of N // 2 pairs
        pair_bins = stats.pit_pair_bins(n_max * (base.scenario.max_new_tokens // 2))
        jobs.append(ShardedRun(len(jobs), base, rs.laws[name], seed, settings, pair_bins, state, is_baseline=True))
        for r in runs:
            jobs.append(ShardedRun(len(jobs), r, rs.laws[name], seed, settings, pair_bins, state, seq_level=level))
    return jobs


def _draw_scenarios(rs: RunSet, seed: int, settings, state: RunState, pbar, backend: Backend,
                    real: list[RealTask] = ()) -> None:
    """Every shard of every exact-law run, and the real-model tasks ``real``, on ``backend`` (those whose
    sampler cannot leave this process are drawn here), the shards merged run by run in shard order.  The
    real-model runs go first (each is one long task), so the shards fill the cores around them."""
    jobs = _sharded_runs(rs, seed, settings, state)
    pbar.update(sum(j.resumed_positions for j in jobs))
    tasks = [*real, *(t for j in jobs for t in j.tasks)]
    remote = [t for t in tasks if t.portable]
    here = [t for t in tasks if not t.portable]
    arrived: set = set()
    for j in jobs:
        if j.stopped:  # stopped in an earlier, interrupted command: its remaining shards are never drawn
            _drop_from_bar(pbar, j, arrived)

    def skip(part, i):
        return isinstance(part[i], ShardTask) and jobs[part[i].run].stopped

    for part, where in ((remote, backend), (here, SerialBackend())):
        fn = draw_task if isinstance(where, SerialBackend) else draw_task_in_worker
        for i, result in where.map_unordered(fn, part, skip=lambda i, part=part: skip(part, i)):
            t = part[i]
            if isinstance(t, LawTask):
                if not isinstance(result, TaskLost):  # else: computed in this process when the tests are planned
                    remember_law(t.spec, t.config, result)
                continue
            if isinstance(t, (RealTask, ExactTask)):
                _take_real(rs.real_runs[t.index], t, result, state)
                pbar.update(t.positions, kind_of(t), getattr(result, "wall_s", None))
                continue
            job = jobs[t.run]
            was_stopped = job.stopped
            if not was_stopped:  # a shard that was in flight when its run stopped is not counted
                pbar.update(t.positions, "law", getattr(result, "wall_s", None))
                arrived.add((t.run, t.shard))
            job.take(t.shard, result)
            if job.stopped and not was_stopped:
                _drop_from_bar(pbar, job, arrived)
    for j in jobs:
        j.save()


def _drop_from_bar(pbar, job: ShardedRun, arrived: set) -> None:
    """A run stopped early: the positions of its shards that will not be counted leave the bar's total."""
    pbar.drop(sum(t.positions for t in job.tasks if (t.run, t.shard) not in arrived))


# -------------------------------------------------------------------------------------- real model
class _Background:
    """``fn(*args)`` in a daemon thread (torch releases the GIL, so the real-model runs use the core the shard
    workers leave to the driver); :meth:`join` waits and re-raises what it raised.  A daemon: an interrupted
    command does not wait for it at exit."""

    def __init__(self, fn, *args):
        self.error: Optional[BaseException] = None
        self.thread = threading.Thread(target=self._run, args=(fn, *args), daemon=True, name="verify-real-model")
        self.thread.start()

    def _run(self, fn, *args):
        try:
            fn(*args)
        except BaseException as e:  # noqa: BLE001 - re-raised in the driver by join()
            self.error = e

    def join(self) -> None:
        self.thread.join()
        if self.error is not None:
            raise self.error


def _draw_real_runs(tasks: list[RealTask], rs: RunSet, state: RunState, pbar) -> None:
    """The real-model runs whose sampler cannot leave this process, one after another (each seeded by its own
    generators: the draws do not depend on what runs beside them)."""
    for task in tasks:
        result = draw_task(task)
        _take_real(rs.real_runs[task.index], task, result, state)
        pbar.update(task.positions, kind_of(task), getattr(result, "wall_s", None))


def _real_slot(rr: RealRun, spec: RealModelSpec, state: RunState) -> tuple[str, str]:
    """The resume slot and fingerprint of a real-model run."""
    slot = "real_" + RunState.slot(rr.label, rr.role, rr.seed)
    fp = state.fingerprint(rr.sampler, rr.n_sequences, rr.seed, rr.batch_size or spec.batch_size, spec.raw,
                           spec.config.describe(), spec.k, spec.max_new_tokens, list(spec.prompt_lengths),
                           _pair_fingerprint(state))
    return slot, fp


def _load_real(rr: RealRun, spec: RealModelSpec, state: RunState) -> bool:
    """Whether ``rr`` was found drawn in the resume state (then filled from it)."""
    saved = state.load(*_real_slot(rr, spec, state))
    if saved is None:
        return False
    rr.draw, rr.wall_s = RealModelDraw(**saved["draw"]), saved["wall_s"]
    return True


def _save_real(rr: RealRun, spec: RealModelSpec, state: RunState) -> None:
    if rr.error is None:
        state.save(*_real_slot(rr, spec, state), {"draw": dict(rr.draw.__dict__), "wall_s": rr.wall_s})


def _exact_slot(rr: RealRun, shard: int, n_rows: int, exact, config, state: RunState) -> tuple[str, str]:
    """The resume slot and fingerprint of one exact-pair shard of a real-model run (keyed on the sampler, the
    shard's rows and seed, the exact spec, the sampling config and the exact pair's files)."""
    slot = f"exact_{shard}_" + RunState.slot(rr.label, rr.role, rr.seed)
    files = None if state.dir is None else files_fingerprint([p for p in EXACT_PAIR_DIR.rglob("*") if p.is_file()],
                                                              EXACT_PAIR_DIR)
    return slot, state.fingerprint(rr.sampler, n_rows, _exact_seed(rr, shard), exact.raw, config.describe(), files)


def _exact_seed(rr: RealRun, shard: int) -> int:
    return derive_seed(rr.seed, "exact_pair", shard) % 2**31


def _exact_tasks(i: int, rr: RealRun, spec: RealModelSpec, state: RunState) -> list[ExactTask]:
    """The exact-pair shards of real-model run ``rr`` not found in the resume state (those found fill the run)."""
    out = []
    for shard, n_rows in enumerate(sequences_per_shard(spec.exact, rr.exact_n) if rr.exact_n else ()):
        saved = state.load(*_exact_slot(rr, shard, n_rows, spec.exact, spec.config, state))
        if saved is not None:
            rr.exact_parts[shard] = ExactModelDraw(**saved["draw"])
            continue
        out.append(ExactTask(i, rr.label, sampler_recipe(rr.sampler, rr.label), shard, n_rows, _exact_seed(rr, shard),
                             spec.exact, spec.config))
    return out


def _real_tasks(rs: RunSet, state: RunState) -> tuple[list, list]:
    """The real-model runs (tiny pair) and their exact-pair shards not found in the resume state, as tasks (longest
    first): those for the backend, and those whose sampler cannot leave this process."""
    spec, tasks = rs.real_model, []
    for i, rr in enumerate(rs.real_runs):
        if not _load_real(rr, spec, state):
            tasks.append(RealTask(i, rr.label, sampler_recipe(rr.sampler, rr.label), rr.n_sequences, rr.seed,
                                  rr.batch_size or spec.batch_size, spec))
        if spec.exact is not None:
            tasks += _exact_tasks(i, rr, spec, state)
    tasks.sort(key=lambda t: -t.positions)
    return [t for t in tasks if t.portable], [t for t in tasks if not t.portable]


def _take_exact(rr: RealRun, task: ExactTask, result, state: RunState) -> None:
    """An exact-pair shard's result (or TaskLost) into its run, saved for resume."""
    if isinstance(result, TaskLost):
        result = RealResult(task.index, ExactModelDraw(rr.label, None, None, len(task.spec.prompts), error=(
            f"WorkerLost: the worker drawing exact-pair shard {task.shard} died {result.attempts} times "
            f"({result.reason})")), 0.0)
    rr.exact_parts[task.shard] = result.draw
    rr.wall_s += result.wall_s
    if result.draw.error is None:
        state.save(*_exact_slot(rr, task.shard, task.n_rows, task.spec, task.config, state),
                   {"draw": dict(result.draw.__dict__)})


def _take_real(rr: RealRun, task, result, state: RunState) -> None:
    """A real-model task's result (or :class:`harness.core.backends.TaskLost`) into its run, saved for resume."""
    if isinstance(task, ExactTask):
        return _take_exact(rr, task, result, state)
    spec = task.spec
    if isinstance(result, TaskLost):
        rr.draw = RealModelDraw(rr.label, None, rr.n_sequences, spec.max_new_tokens, spec.k, spec.config.describe(),
                                None, 0.0, 0.0, error=f"WorkerLost: the worker drawing this run died {result.attempts} "
                                                      f"times ({result.reason})")
        return
    rr.draw, rr.wall_s = result.draw, result.wall_s
    _save_real(rr, spec, state)


def _pair_fingerprint(state: RunState) -> Optional[str]:
    """Fingerprint of the shipped tiny pair's files (weights, configs, tokenizers); None without state."""
    if state.dir is None:
        return None
    return files_fingerprint([p for p in TINY_PAIR_DIR.rglob("*") if p.is_file()], TINY_PAIR_DIR)


# ------------------------------------------------------------------------------------- von Neumann
def draw_von_neumann(proposals: int, seed: int, controls: bool = True) -> list[VonNeumannRun]:
    """The reference von Neumann sampler at M = 2.8 and 5.6 and (with ``controls``) the broken envelopes
    of :data:`harness.controls.chain.VN_CONTROLS`, ``proposals`` proposals each."""
    d = TwoPeakDensity.with_peak(SNUG_M)
    cdf = lambda x: np.asarray(d.cdf(np.asarray(x)), dtype=np.float64)  # noqa: E731
    entries = [("von_neumann", "reference", M, two_peak_sampler(M, d)) for M in (SNUG_M, 2 * SNUG_M)]
    if controls:
        entries += [(name, "lossy", M, make(d)) for name, M, make in VN_CONTROLS]
    out = []
    for label, role, M, sampler in entries:
        g = torch.Generator().manual_seed(derive_seed(seed, label, M))
        tic = time.perf_counter()
        draw = sampler.propose(proposals, g)
        out.append(VonNeumannRun(label, role, M, draw, cdf, time.perf_counter() - tic))
    return out


# ------------------------------------------------------------------------------------------- all
def draw_all(rs: RunSet, seed: int, settings, state: RunState, progress: bool,
             backend: Optional[Backend] = None) -> None:
    """Draw every exact-law run (with its scenario's baseline) on ``backend`` (None: in this process), and
    every real-model run of ``rs`` in this process, under one progress bar counted in expected work
    (:class:`harness.verify.progress.CostBar`: a real-model token weighs thousands of exact-law tokens)."""
    under_test = [r.sampler for r in [*rs.runs, *rs.real_runs] if r.role in UNDER_TEST]
    if state.run_fingerprint is None and state.dir is not None:
        state.run_fingerprint = fingerprint(state.code, [state.sampler(fn) for fn in dict.fromkeys(under_test)])
    real_tasks, real_here = _real_tasks(rs, state) if rs.real_runs else ([], [])
    totals = {"law": sum(r.draws * r.scenario.max_new_tokens for r in [*rs.runs, *rs.baselines.values()]),
              "real": 0, "exact": 0}
    for t in [*real_tasks, *real_here]:  # those still to draw (a resumed run's saved ones are not counted)
        totals[kind_of(t)] += t.positions
    pbar = CostBar(totals, "verify: drawing", progress, lanes=getattr(backend, "workers", 1) + bool(real_here))
    real = _Background(_draw_real_runs, real_here, rs, state, pbar) if real_here else None
    spec = rs.real_model
    if rs.real_runs and spec.exact is not None and any(rr.exact_n for rr in rs.real_runs):
        real_tasks = [LawTask(spec.exact, spec.config), *real_tasks]  # the exact law, on a worker while others draw
    _draw_scenarios(rs, seed, settings, state, pbar, backend or SerialBackend(), real_tasks)
    if real is not None:
        real.join()
    pbar.close()
    for line in state.announcement():
        print(f"verify: {line}", file=sys.stderr)
