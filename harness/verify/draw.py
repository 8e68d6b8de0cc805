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
real-model run is saved under ``<out>/_tmp_state/`` (:class:`RunState`; plain data and numeric arrays in an
``.npz``, :mod:`harness.core.safestate`, never a pickle) with the fingerprint of everything that determines its
draws (:mod:`harness.core.fingerprint`: project code and sampler source by content, the scenario's resolved
config, seed, draw counts, the shard scheme) and the module files the sampler imported while drawing; an
interrupted command picks up the saved shards whose fingerprint and module files match (checked before the
rest of the file is decoded), draws the rest, says which on stderr and in the report, and the folder is removed
once the report is written.
"""
from __future__ import annotations

import hashlib
import json
import math
import sys
import threading
import time
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from harness import stats
from harness.stats.lagged import LaggedTables
from harness.stats.loglik import LoglikSums
from harness.core.backends import Backend, SerialBackend, TaskLost
from harness.verify.battery import Accumulator, plan_chunks
from harness.core.config import derive_seed
from harness.core.errors import SamplerError
from harness.laws.ngram import ExactLaw
from harness.laws.scenarios import scenario_law
from harness.core import safestate
from harness.core.fingerprint import (changed_module_files, code_fingerprint, files_fingerprint, fingerprint,
                                      sampler_fingerprint, sampler_sources, short)
from harness.core.provenance import atomic_write_bytes
from harness.verify.realmodel import REAL_MODEL_SCENARIO, RealModelDraw, RealModelSpec
from harness.verify.runs import UNDER_TEST, RealRun, RunSet, RunSpec, VonNeumannRun
from harness.verify.sequential import RunEProcess, sequential_level
from harness.verify.epsilon import epsilons_for
from harness.verify.verdicts import control_sized
from harness.verify.stopping import (CAP_FACTOR, SCHEME as STOP_SCHEME, look_chunks, pair_cap, pair_stop_rule,
                                     reference_delta, stop_rule)
from harness.verify.isolation import backend_for, is_plugin_task, lost_message, not_from_generator, task_timeout
from harness.verify.progress import CostBar, kind_of
from harness.verify.exactmodel import (EXACT_PAIR_DIR, ExactModelDraw, exact_model_law, merge_draws, remember_law,
                                       sequences_per_shard)
from harness.verify.shards import (ExactTask, LawTask, PilotTask, RealResult, RealTask, ShardTask, draw_task,
                                   draw_task_in_worker, sampler_recipe)
from specimpl.hf import TINY_PAIR_DIR
from harness.controls.chain import VN_CONTROLS
from specimpl.von_neumann import SNUG_M, TwoPeakDensity, two_peak_sampler

__all__ = ["RunState", "ShardedRun", "draw_all", "draw_von_neumann", "SHARD_SCHEME", "STATE_TYPES"]

# the dataclasses a saved shard may hold (harness.core.safestate builds only these, from their fields)
STATE_TYPES = {c.__name__: c for c in (LoglikSums, LaggedTables, RealModelDraw, ExactModelDraw)}


class RunState:
    """Finished runs of an interrupted command, saved under ``<out>/_tmp_state`` (no ``out``: none).

    A shard's file ``<slot>.npz`` (:mod:`harness.core.safestate`: plain data and numeric arrays, no pickle) is
    named by its *slot* (which run on which scenario, :meth:`slot`) and its header holds the *fingerprint* of
    what produced it (:mod:`harness.core.fingerprint`: the project's code, the sampler's source, the scenario's
    resolved config, seed, draw counts and settings) and the files of the modules the sampler imported while it
    drew (``modules``: path -> SHA-256, :func:`harness.core.fingerprint.loaded_module_files`).  The header is read
    and checked first; a shard is decoded and reused only when its fingerprint equals the current one and every
    one of those module files is unchanged; otherwise it is stale, counted in :attr:`stale` and redrawn.  Files of
    another format (an old ``.pkl``) are never opened: counted in :attr:`foreign` and announced."""

    def __init__(self, out: Optional[Path], fresh: bool = False):
        self.dir = None if out is None else Path(out) / "_tmp_state"
        self.reused: list[str] = []  # slots reused from an earlier run of the same code
        self.stale: list[str] = []  # slots whose saved shard came from other code or settings (redrawn)
        self.foreign: list[str] = []  # files in the folder not of the state format: never opened
        self.modules: dict[str, dict] = {}  # slot -> the module files recorded with a reused shard
        self._code: Optional[str] = None
        self._samplers: dict = {}  # id(fn) -> its fingerprint; ('sources', id(fn)) -> its files' fingerprints
        self._sources: dict[str, dict] = {}  # fingerprint -> {source: its fingerprint} (to name what changed)
        self.changed: set[str] = set()  # what made saved shards stale, where it can be named
        self.run_fingerprint: Optional[str] = None  # code + sampler under test, as announced
        self.link: Optional[str] = None  # where a `_tmp_state` that was a symbolic link pointed: never followed
        if self.dir is not None and self.dir.is_symlink():  # else its target's .npz files would be read and removed
            self.link = str(self.dir.readlink())
            self.dir.unlink()
        if self.dir is not None:
            if fresh and self.dir.exists():
                self._remove_files()
            self.dir.mkdir(parents=True, exist_ok=True)
            self.foreign = sorted(p.name for p in self.dir.iterdir()
                                  if p.suffix != safestate.SUFFIX and not p.name.startswith("_tmp"))

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
        """The saved shard of ``slot`` when it was made with fingerprint ``fp`` and the module files it recorded
        are unchanged; None otherwise (such a shard is recorded as stale and will be overwritten).  Only the
        header is read until both hold."""
        path = None if self.dir is None else self.dir / f"{slot}{safestate.SUFFIX}"
        if path is None or not path.is_file():
            return None
        try:
            head = safestate.read_header(path)
        except safestate.StateFormatError:  # unreadable or not ours: stale, never trusted
            head = {}
        # the module files are read only for a shard of this very code: a foreign header's paths are never opened
        moved = changed_module_files(head.get("modules")) if head.get("fingerprint") == fp else []
        if head.get("fingerprint") != fp or moved:
            self.stale.append(slot)
            self.changed |= self._what_changed(head.get("sources"), fp) | {Path(m).name for m in moved}
            return None
        try:
            saved = safestate.read_body(path, STATE_TYPES)
        except safestate.StateFormatError:
            self.stale.append(slot)
            return None
        self.reused.append(slot)
        self.modules[slot] = dict(head.get("modules") or {})
        return saved

    def _what_changed(self, saved: Optional[dict], fp: str) -> set:
        """The names of the sources (a file by its name, 'project code', 'settings') whose fingerprint differs
        between a stale shard and this run (empty when the shard recorded none)."""
        now = self._sources.get(fp)
        if not isinstance(saved, dict) or now is None:
            return set()
        keys = set(saved) | set(now)
        return {k if k in ("project code", "settings") else Path(k).name for k in keys if saved.get(k) != now.get(k)}

    def save(self, slot: str, fp: str, obj: dict, modules: Optional[dict] = None) -> None:
        """Save ``obj`` for ``slot`` with fingerprint ``fp`` and ``modules`` (path -> SHA-256: the module files
        the sampler imported while drawing it, checked again before a resumed run reuses it)."""
        if self.dir is not None:
            head = {"fingerprint": fp, "sources": self._sources.get(fp), "modules": modules or {}}
            atomic_write_bytes(self.dir / f"{slot}{safestate.SUFFIX}", safestate.dumps(head, obj, STATE_TYPES))

    def summary(self) -> dict:
        """What was reused, for meta.json: shard counts and the run's fingerprint."""
        return {"reused_shards": len(self.reused), "stale_shards_redrawn": len(self.stale),
                "ignored_files": list(self.foreign), "ignored_link": self.link, "fingerprint": self.run_fingerprint,
                "code_fingerprint": self._code}

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
        if self.link is not None:
            lines.append(f"ignored {self.dir}: a symbolic link (to {self.link!r}), not the run's own folder; never "
                         f"followed (nothing there was read or removed); the link was removed")
        if self.foreign:
            names = ", ".join(self.foreign[:3]) + (f" and {len(self.foreign) - 3} more" if len(self.foreign) > 3 else "")
            lines.append(f"ignored {len(self.foreign)} file{'s' * (len(self.foreign) != 1)} in {self.dir} not in the "
                         f"saved-state format ({names}): never opened (a pickled file can run code); removed with "
                         f"the state folder")
        return lines

    def _remove_files(self) -> None:
        for p in self.dir.iterdir():
            if p.is_file() and (p.suffix in (safestate.SUFFIX, ".pkl") or p.name.startswith("_tmp")):
                p.unlink()

    def clear(self) -> None:
        if self.dir is None or not self.dir.is_dir():
            return
        self._remove_files()
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
        run.error, run.wall_s, run.cpu_s, run.tokens, run.positions = None, 0.0, 0.0, 0, 0
        stop = getattr(run, "stop", None)  # --stop-at-need (harness.verify.stopping): calls end at every look
        run.certified_at = None
        sizes = (look_chunks(stop.looks.sizes, settings.min_chunks, settings.max_chunk) if stop is not None else
                 plan_chunks(run.draws, 1 if is_baseline else settings.min_chunks, settings.max_chunk))
        self.n_shards, self.next, self.pending, self.failures = len(sizes), 0, {}, 0
        self.slot = RunState.slot(run.label, run.role, sc.name, seed)
        self.fp = state.fingerprint(run.sampler, SHARD_SCHEME, sc, run.draws, seed, is_baseline, settings.min_chunks,
                                    settings.max_chunk, settings.pit_bins, settings.logprob_max, sc.joint_tokens,
                                    pair_bins, SEQUENTIAL_SCHEME, seq_level if run.sequential else 0.0,
                                    *((STOP_SCHEME, list(stop.looks.sizes), list(stop.looks.deltas), stop.delta_ref)
                                      if stop is not None else ()))
        saved = state.load(self.slot, self.fp)
        self.modules = dict(state.modules.get(self.slot) or {})  # module files its sampler imported while drawing
        if saved is not None:
            run.acc.merge(saved["acc"])
            if run.sequential is not None:
                run.sequential.restore(saved.get("sequential"))
            run.certified_at = saved.get("certified_at")
            run.wall_s, run.cpu_s, run.tokens, run.positions, self.next = (
                saved[k] for k in ("wall_s", "cpu_s", "tokens", "positions", "done"))
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
        """Whether the run stopped early (lossy by its e-process, or certified at a look of --stop-at-need): its later
        shards are not drawn."""
        return ((self.run.sequential is not None and self.run.sequential.stopped_at is not None)
                or self.run.certified_at is not None)

    @property
    def failed(self) -> bool:
        """Whether a shard of the run failed (its sampler raised, exited, hung or lost its worker): the run ends in
        an error whatever its other shards give, so those not started yet are never drawn."""
        return self.failures > 0

    def take(self, shard: int, result) -> None:
        """A shard's result (a :class:`ShardResult`, or :class:`harness.core.backends.TaskLost`): merged once
        every shard before it is."""
        self.pending[shard] = result
        self.failures += isinstance(result, TaskLost) or getattr(result, "error", None) is not None
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
            run.error = lost_message(r, f"shard {self.next}")
            return
        if r.error is not None:
            run.error = r.error
            failures = getattr(run.sampler, "failures", None)
            if isinstance(failures, list) and r.details and all(d != r.details for _, d in failures):
                failures.append((r.error, r.details))
            return
        run.acc.merge(r.statistics)
        self.modules.update(r.modules)
        run.tokens += r.tokens
        run.positions += r.positions
        run.wall_s += r.wall_s
        run.cpu_s += r.cpu_s
        if run.sequential is not None:
            run.sequential.look(run.acc)
        stop = getattr(run, "stop", None)
        if stop is not None and not self.stopped and stop.certified(run.acc):
            run.certified_at = int(run.acc.n)

    def save(self) -> None:
        """Save the merged prefix (nothing once the run has failed: a failed run is drawn again)."""
        run = self.run
        if run.error is None:
            self.state.save(self.slot, self.fp, {"acc": run.acc.statistics(), "done": self.next, "tokens": run.tokens,
                                                 "positions": run.positions, "wall_s": run.wall_s,
                                                 "cpu_s": run.cpu_s,
                                                 "sequential": run.sequential.state() if run.sequential else None,
                                                 "certified_at": run.certified_at},
                            self.modules)
        self.saved_at, self.saved_next = time.perf_counter(), self.next


def _sharded_runs(rs: RunSet, seed: int, settings, state: RunState) -> list[ShardedRun]:
    """Per scenario (in order): its exact law, then its target-only baseline and every run on it."""
    jobs = []
    level = sequential_level(settings, len(rs.runs))  # every run has its scenario's baseline
    delta_ref = reference_delta(settings, _bounds_upper_count(rs)) if getattr(settings, "stop_at_need", False) else 0
    for name, base in rs.baselines.items():
        runs = [r for r in rs.runs if r.scenario.name == name]
        rs.laws[name], _ = scenario_law(base.scenario)
        for r in runs:  # --stop-at-need: the runs under test stop at their first certified look
            r.stop = (stop_rule(rs.laws[name], r.scenario.joint_tokens, epsilons_for(settings, r.scenario), delta_ref,
                                r.draws) if delta_ref and _stops_at_need(r, settings) else None)
        n_max = max(r.draws for r in runs)  # grid of the PIT pair tables: n_max sequences of N // 2 pairs
        pair_bins = stats.pit_pair_bins(n_max * (base.scenario.max_new_tokens // 2))
        jobs.append(ShardedRun(len(jobs), base, rs.laws[name], seed, settings, pair_bins, state, is_baseline=True))
        for r in runs:
            jobs.append(ShardedRun(len(jobs), r, rs.laws[name], seed, settings, pair_bins, state, seq_level=level))
    return jobs


def _stops_at_need(r, settings) -> bool:
    """Whether ``r`` is drawn by --stop-at-need (a run under test at its own size, not control-sized)."""
    return bool(getattr(settings, "stop_at_need", False)) and r.role in UNDER_TEST and not control_sized(r)


def _bar_draws(r, settings) -> int:
    """Sequences the progress bar counts for ``r`` before drawing: its size, or its cap under --stop-at-need (the
    bar drops what a stop leaves undrawn)."""
    return int(math.ceil(CAP_FACTOR * r.draws)) if _stops_at_need(r, settings) else int(r.draws)


def _bounds_upper_count(rs: RunSet) -> int:
    """An upper count of the command's TV bounds (every exact-law run's positions, pairs and J-windows; the
    real-model certificate's per prompt): δ per bound from it is at most the verdict's (harness.verify.stopping)."""
    n = 0
    for r in rs.runs:
        N, J = r.scenario.max_new_tokens, r.scenario.joint_tokens
        n += N + (N - 1) + (N - J + 1 if J >= 2 else 0)
    spec = rs.real_model
    ex = getattr(spec, "exact", None) if spec is not None else None
    if ex is not None:
        per = len(ex.prompts) * (2 * ex.n_tokens - 1 + max(0, ex.n_tokens - ex.window + 1))
        n += per * sum(1 for rr in rs.real_runs if getattr(rr, "exact_n", 0) > 0)
    return n


def _draw_scenarios(rs: RunSet, seed: int, settings, state: RunState, pbar, backend: Backend,
                    real: list[RealTask] = (), sampler_timeout: Optional[float] = None) -> None:
    """Every shard of every exact-law run, and the real-model tasks ``real``, on ``backend`` (those whose
    sampler cannot leave this process are drawn here), the shards merged run by run in shard order.  The
    real-model runs go first (each is one long task), so the shards fill the cores around them."""
    jobs = _sharded_runs(rs, seed, settings, state)
    limit = task_timeout(sampler_timeout)
    pbar.update(sum(j.resumed_positions for j in jobs))
    pilots = _pilots(jobs, seed)  # drawn first, alone: a sampler that fails it stops the run before any shard
    tasks = [*real, *(t for j in jobs for t in j.tasks)]
    remote = [t for t in tasks if t.portable]
    here = [t for t in tasks if not t.portable]
    arrived: set = set()
    for j in jobs:
        if j.stopped:  # stopped in an earlier, interrupted command: its remaining shards are never drawn
            _drop_from_bar(pbar, j, arrived)

    def skip(part, i):  # a stopped or failed run's remaining tasks are never drawn (a failed one: fail fast)
        t = part[i]
        if isinstance(t, (RealTask, ExactTask)):
            rr = rs.real_runs[t.index]
            return rr.error is not None or (isinstance(t, ExactTask) and t.shard not in rr.exact_pending)
        return isinstance(t, ShardTask) and (jobs[t.run].stopped or jobs[t.run].failed)

    isolated, own = backend_for(backend, remote)  # a plug-in sampler never runs in this process (exit status)
    try:
        for part, where in ((pilots, isolated), (remote, isolated), (here, SerialBackend())):
            _draw_part(part, where, jobs, rs, state, pbar, arrived, skip, limit)
    except BaseException:
        if own:
            isolated.close(abort=True)
        raise
    if own:
        isolated.close()
    for j in jobs:
        j.save()


def _draw_part(part: list, where: Backend, jobs: list, rs: RunSet, state: RunState, pbar, arrived: set, skip,
               limit) -> None:
    """The tasks ``part`` on backend ``where``, each result taken as it arrives."""
    fn = draw_task if isinstance(where, SerialBackend) else draw_task_in_worker
    for i, result in where.map_unordered(fn, part, skip=lambda i, part=part: skip(part, i), timeout=limit):
        t = part[i]
        if isinstance(t, PilotTask):
            if isinstance(result, tuple) and result[0] == "differs":
                raise SamplerError(not_from_generator(t.label, *result[1:]))
            continue  # same, or failed (its shards say why)
        if isinstance(t, LawTask):
            if not isinstance(result, TaskLost):  # else: computed in this process when the tests are planned
                remember_law(t.spec, t.config, result)
            continue
        if isinstance(t, (RealTask, ExactTask)):
            _real_arrival(rs, t, result, state, pbar)
            continue
        job = jobs[t.run]
        was_stopped = job.stopped
        if not was_stopped:  # a shard that was in flight when its run stopped is not counted
            pbar.update(t.positions, "law", getattr(result, "wall_s", None))
            arrived.add((t.run, t.shard))
        job.take(t.shard, result)
        if job.stopped and not was_stopped:
            _drop_from_bar(pbar, job, arrived)


def _pilots(jobs: list, seed: int) -> list[PilotTask]:
    """The determinism check of each plug-in sampler (:class:`harness.verify.shards.PilotTask`), on the first
    scenario it still has shards to draw on."""
    out, seen = [], set()
    for j in jobs:
        t = j.tasks[0] if j.tasks else None
        if t is not None and is_plugin_task(t) and t.sampler not in seen:
            seen.add(t.sampler)
            out.append(PilotTask(t.label, t.scenario, t.sampler, derive_seed(seed, "determinism", t.label) % 2**31))
    return out


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
        rr = rs.real_runs[task.index]
        if isinstance(task, ExactTask) and (rr.error is not None or task.shard not in rr.exact_pending):
            continue  # its run failed, or stopped at the need
        _real_arrival(rs, task, draw_task(task), state, pbar)


def _real_arrival(rs: RunSet, task, result, state: RunState, pbar) -> None:
    """A real-model task's result into its run and the bar; an exact-pair shard may end its run's draw at a look
    (stop at the need: the shards not drawn yet leave the bar) and is not counted when it arrives after that."""
    rr = rs.real_runs[task.index]
    if isinstance(task, ExactTask) and rr.exact_pending.pop(task.shard, None) is None:
        return  # in flight when its run stopped at the need: not counted
    _take_real(rr, task, result, state)
    pbar.update(task.positions, kind_of(task), getattr(result, "wall_s", None))
    if isinstance(task, ExactTask) and _pair_look(rr, rs.real_model):
        pbar.drop(sum(rr.exact_pending.values()), "exact")
        rr.exact_pending.clear()


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
    rr.draw = RealModelDraw(**saved["draw"])
    rr.wall_s += saved["wall_s"]
    rr.cpu_s += saved["cpu_s"]
    return True


def _save_real(rr: RealRun, spec: RealModelSpec, state: RunState, result: RealResult) -> None:
    """Save the tiny-pair draw of ``rr`` with the seconds its task took (``result``'s)."""
    if rr.error is None:
        state.save(*_real_slot(rr, spec, state), {"draw": dict(rr.draw.__dict__), "wall_s": result.wall_s,
                                                  "cpu_s": result.cpu_s}, result.modules)


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
    """The exact-pair shards of real-model run ``rr`` not found in the resume state (those found fill the run, and
    are looked at: a run they certify draws nothing more), up to its cap when it stops at the need."""
    out = []
    for shard, n_rows in enumerate(_pair_shards(rr, spec)):
        saved = state.load(*_exact_slot(rr, shard, n_rows, spec.exact, spec.config, state))
        if saved is not None:
            rr.exact_parts[shard] = ExactModelDraw(**saved["draw"])
            _add_cpu(rr, saved["wall_s"], saved["cpu_s"], exact=True)
            continue
        out.append(ExactTask(i, rr.label, sampler_recipe(rr.sampler, rr.label), shard, n_rows, _exact_seed(rr, shard),
                             spec.exact, spec.config))
    if rr.exact_parts and _pair_look(rr, spec):
        out = [t for t in out if t.shard < rr.stop.shards_at(rr.certified_at or rr.lossy_at)]
    rr.exact_pending = {t.shard: t.positions for t in out}
    return out


def _pair_stops(rs: RunSet, settings) -> None:
    """Stop at the need on the exact pair: each real-model run under test at its own size (not control-sized)
    gets the δ per bound its looks are decided at (:func:`harness.verify.stopping.reference_delta`)."""
    if not getattr(settings, "stop_at_need", False) or getattr(rs.real_model, "exact", None) is None:
        return
    delta_ref = reference_delta(settings, _bounds_upper_count(rs))
    for rr in rs.real_runs:
        if rr.role in UNDER_TEST and not control_sized(rr) and rr.exact_n > 0:
            rr.stop_delta, rr.stop_eps = delta_ref, epsilons_for(settings)


def _pair_shards(rr: RealRun, spec: RealModelSpec) -> list[int]:
    """Rows of each exact-pair shard of ``rr``: its size, or its cap when it stops at the need."""
    n = pair_cap(rr.exact_n) if rr.stop_delta else rr.exact_n
    return sequences_per_shard(spec.exact, n) if n else []


def _pair_look(rr: RealRun, spec: RealModelSpec) -> bool:
    """Stop at the need on the exact pair (:class:`harness.verify.stopping.PairStopRule`): each look the run's
    shards in order reach is checked once, on those shards alone (whatever order the others arrive in); at the first
    that certifies (``rr.certified_at``), or shows the run lossy beyond doubt (``rr.lossy_at``), the run stops and
    the shards after it are dropped.  Whether it stopped now."""
    if not rr.stop_delta or rr.certified_at is not None or rr.lossy_at is not None or rr.error is not None:
        return False
    law = exact_model_law(spec.exact, spec.config)  # remembered from the worker that computed it, if it has
    if rr.stop is None:
        P = len(spec.exact.prompts)
        ends = np.cumsum(_pair_shards(rr, spec)) // P
        rr.stop = pair_stop_rule(law, P, ends, rr.stop_eps, rr.stop_delta, rr.exact_n)
    done = 0
    while done in rr.exact_parts:
        done += 1
    for n in rr.stop.all_sizes[rr.looked:]:  # the lossy side's early looks, then the certificate's
        k = rr.stop.shards_at(n)
        if k > done:
            break
        rr.looked += 1
        draw = merge_draws([rr.exact_parts[i] for i in range(k)])
        if rr.stop.certified_draw(draw, law):
            rr.certified_at = int(n)
        elif rr.stop.lossy_draw(draw, law):
            rr.lossy_at = int(n)
        else:
            continue
        for i in [i for i in rr.exact_parts if i >= k]:
            del rr.exact_parts[i]
        return True
    return False


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
        result = RealResult(task.index, ExactModelDraw(rr.label, None, None, len(task.spec.prompts),
                                                       error=lost_message(result, f"exact-pair shard {task.shard}")),
                            0.0)
    rr.exact_parts[task.shard] = result.draw
    _add_cpu(rr, result.wall_s, result.cpu_s, exact=True)
    if result.draw.error is None:
        state.save(*_exact_slot(rr, task.shard, task.n_rows, task.spec, task.config, state),
                   {"draw": dict(result.draw.__dict__), "wall_s": result.wall_s, "cpu_s": result.cpu_s},
                   result.modules)


def _add_cpu(rr: RealRun, wall_s: float, cpu_s: float, exact: bool = False) -> None:
    """A task's seconds into its real-model run (``exact``: an exact-pair shard's, the certificate's draws)."""
    rr.wall_s += wall_s
    rr.cpu_s += cpu_s
    rr.exact_cpu_s += cpu_s if exact else 0.0


def _take_real(rr: RealRun, task, result, state: RunState) -> None:
    """A real-model task's result (or :class:`harness.core.backends.TaskLost`) into its run, saved for resume."""
    if isinstance(task, ExactTask):
        return _take_exact(rr, task, result, state)
    spec = task.spec
    if isinstance(result, TaskLost):
        rr.draw = RealModelDraw(rr.label, None, rr.n_sequences, spec.max_new_tokens, spec.k, spec.config.describe(),
                                None, 0.0, 0.0, error=lost_message(result, "this run"))
        return
    rr.draw = result.draw
    _add_cpu(rr, result.wall_s, result.cpu_s)
    _save_real(rr, spec, state, result)


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
        tic, c0 = time.perf_counter(), time.thread_time()
        draw = sampler.propose(proposals, g)
        out.append(VonNeumannRun(label, role, M, draw, cdf, time.perf_counter() - tic, time.thread_time() - c0))
    return out


# ------------------------------------------------------------------------------------------- all
def draw_all(rs: RunSet, seed: int, settings, state: RunState, progress: bool,
             backend: Optional[Backend] = None, sampler_timeout: Optional[float] = None) -> None:
    """Draw every exact-law run (with its scenario's baseline) on ``backend`` (None: in this process), and
    every real-model run of ``rs`` in this process, under one progress bar counted in expected work
    (:class:`harness.verify.progress.CostBar`: a real-model token weighs thousands of exact-law tokens).
    ``sampler_timeout``: the seconds a sampler task may run on a worker (:func:`harness.verify.isolation.task_timeout`;
    None: the default limit, 0: none)."""
    under_test = [r.sampler for r in [*rs.runs, *rs.real_runs] if r.role in UNDER_TEST]
    if state.run_fingerprint is None and state.dir is not None:
        state.run_fingerprint = fingerprint(state.code, [state.sampler(fn) for fn in dict.fromkeys(under_test)])
    _pair_stops(rs, settings)
    real_tasks, real_here = _real_tasks(rs, state) if rs.real_runs else ([], [])
    totals = {"law": sum(_bar_draws(r, settings) * r.scenario.max_new_tokens for r in [*rs.runs, *rs.baselines.values()]),
              "real": 0, "exact": 0}
    for t in [*real_tasks, *real_here]:  # those still to draw (a resumed run's saved ones are not counted)
        totals[kind_of(t)] += t.positions
    pbar = CostBar(totals, "verify: drawing", progress, lanes=getattr(backend, "workers", 1) + bool(real_here))
    real = _Background(_draw_real_runs, real_here, rs, state, pbar) if real_here else None
    spec = rs.real_model
    if rs.real_runs and spec.exact is not None and any(rr.exact_n for rr in rs.real_runs):
        real_tasks = [LawTask(spec.exact, spec.config), *real_tasks]  # the exact law, on a worker while others draw
    _draw_scenarios(rs, seed, settings, state, pbar, backend or SerialBackend(), real_tasks, sampler_timeout)
    if real is not None:
        real.join()
    pbar.close()
    for line in state.announcement():
        print(f"verify: {line}", file=sys.stderr)
