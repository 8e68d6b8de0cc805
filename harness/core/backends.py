"""Where tasks run: in this process, on a local process pool (every core, the default), or on Ray.

A backend maps a picklable function over a list of picklable tasks and yields ``(index, result)`` as
results arrive, in any order; callers that need an order (the shard merge of
:mod:`harness.verify.draw`) restore it themselves.  A task whose worker process dies (killed, out of
memory) is run again, up to ``retries`` times: the pool restarts its workers and resubmits the tasks
that were lost; Ray retries the task itself (``max_retries``).  A task lost more often than that
yields a :class:`TaskLost` in place of its result.

    ``serial``   in this process (``--workers 1``; also what library callers get by default)
    ``local``    a ``concurrent.futures.ProcessPoolExecutor`` of ``workers`` processes (spawn context,
                 one torch thread each; no server to start)
    ``ray``      Ray tasks (``--backend ray``): a local Ray started for the run, or the cluster at
                 ``--address auto|host:port``; ``num_gpus`` per task where a task needs a GPU.  A local Ray
                 binds loopback only (127.0.0.1: GCS, raylet, object manager, workers, agents; no dashboard);
                 ``SPECVERIFY_RAY_NODE_IP=<address>`` binds it to another address instead, explicitly

:func:`make_backend` checks the options first (:class:`harness.core.errors.UsageError`, exit 2, naming the
option): ``--workers`` >= 1 and, for the processes of this machine (``local``, or a Ray started here), at
most :func:`max_local_workers` (two per core); Ray installed for ``--backend ray``, a reachable ``--address``.
"""
from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional

from harness.core.errors import UsageError
from harness.core.lifeline import die_with_parent
from harness.core.options import check_option

__all__ = ["add_backend_arguments", "check_backend_options", "Backend", "SerialBackend", "LocalPool", "RayBackend", "TaskLost", "make_backend", "BACKENDS", "limit_threads",
           "default_workers", "max_local_workers"]

BACKENDS = ("local", "ray")
LOOPBACK = "127.0.0.1"
RAY_NODE_IP_ENV = "SPECVERIFY_RAY_NODE_IP"  # a local Ray (--backend ray, no --address) binds this address; unset:
                                           # LOOPBACK (nothing of it reachable from another machine)
RETRIES = 3  # times a task whose worker died is run again
WORKERS_PER_CORE = 2  # each worker is a CPU-bound process with one torch thread: more per core only queue and take memory
ABORT_GRACE_S = 30.0  # an interrupted pool waits this long for the tasks in flight before it kills their workers
WEDGE_S = 5.0  # a worker dead this long while its pool still reports nothing: the pool's reader is stuck (LocalPool)
POLL_S = 1.0  # how often a pool without time limits looks at its workers


@dataclass(frozen=True)
class TaskLost:
    """In place of a result: the task's worker died ``attempts`` times (``reason``: the last failure, a phrase
    that follows "the worker drawing it ..."); ``exitcode``: the dead worker's exit status where it is known
    (negative: the signal that killed it); ``timed_out``: the limit in seconds when the task ran past it
    (``map_unordered(timeout=...)``) and its worker was stopped."""

    attempts: int
    reason: str
    exitcode: Optional[int] = None
    timed_out: Optional[float] = None


def default_workers() -> int:
    """Every core this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def max_local_workers() -> int:
    """The most worker processes a run starts on this machine: :data:`WORKERS_PER_CORE` per core this process
    may use (at least 2).  Every task is CPU-bound at one thread, so more workers than cores gain nothing; a
    thousand of them (issue 26) spent minutes starting processes and produced nothing."""
    return max(2, WORKERS_PER_CORE * default_workers())


class Backend:
    """Runs ``fn`` over tasks: :meth:`map_unordered` yields (index, result) as results arrive."""

    name = "serial"
    workers = 1

    def map_unordered(self, fn: Callable, tasks: list, num_gpus: float = 0,
                      skip: Optional[Callable[[int], bool]] = None,
                      timeout: Optional[Callable[[object], Optional[float]]] = None) -> Iterator[tuple[int, object]]:
        """(index, fn(task)) for each task, in any order; a task for which ``skip(index)`` is true when its
        turn to start comes is never started (and not yielded).  ``timeout(task)``: the seconds a task may run
        (None: no limit); one that runs longer is stopped and yields a :class:`TaskLost` with ``timed_out``
        (enforced by :class:`LocalPool`; a task in this process, or on Ray, cannot be stopped)."""
        raise NotImplementedError

    def describe(self) -> str:
        return f"{self.name} ({self.workers} worker{'s' * (self.workers != 1)})"

    @property
    def local_workers(self) -> int:
        """Processes for the driver's own work on this machine once the draws are in (evaluating the tests,
        :func:`harness.core.forkmap.fork_map`): this backend's workers where they are local, else every core."""
        return self.workers

    def close(self, abort: bool = False) -> None:
        """Release the workers (``abort``: at once, without waiting for the tasks in flight)."""

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        self.close(abort=kind is not None)


class SerialBackend(Backend):
    """Every task in this process, in order.  ``isolate_plugins`` (what ``--workers 1`` gives, :func:`make_backend`):
    callers that run a plug-in sampler (code from outside the project) run its tasks on one worker process
    instead (:class:`LocalPool` of 1), so that the sampler never runs in the process that decides the exit
    status (:mod:`harness.verify.draw`)."""

    def __init__(self, isolate_plugins: bool = False):
        self.isolate_plugins = bool(isolate_plugins)

    def map_unordered(self, fn, tasks, num_gpus=0, skip=None, timeout=None):
        for i, t in enumerate(tasks):
            if skip is None or not skip(i):
                yield i, fn(t)


def limit_threads(threads: int) -> Callable[[], None]:
    """Run torch's and the BLAS libraries' (numpy's, scipy's OpenBLAS) thread pools at ``threads`` threads in this
    process; returns what puts them back.  A worker of this module runs both at 1: the parallelism is the
    workers, and an idle BLAS pool's threads spin on the core another worker needs (the default battery at
    200 k draws on 2 workers: 71.0 / 69.9 s with 2 BLAS threads per process, 65.5 / 64.8 s with 1;
    results/verify_throughput).  scipy's BLAS is loaded first, so that it is limited too: a spawned worker
    otherwise loads it later, with its first task."""
    import scipy.linalg  # noqa: F401 - loads scipy's own OpenBLAS (numpy's comes with torch)
    import torch
    from threadpoolctl import threadpool_limits
    n, old = max(1, int(threads)), torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        blas = threadpool_limits(limits=n, user_api="blas")
    except BaseException:
        torch.set_num_threads(old)
        raise

    def restore() -> None:
        blas.restore_original_limits()
        torch.set_num_threads(old)
    return restore


def _pool_init(initializer: Optional[Callable], started=None, parent: Optional[int] = None,
               from_main_thread: bool = True) -> None:
    import signal
    if parent is not None:
        die_with_parent(parent, from_main_thread)  # a worker never outlives the command (SIGKILL of the driver)
    _STARTED[:] = [started]
    limit_threads(1)
    signal.signal(signal.SIGINT, _forward_sigint)  # Ctrl-C is the driver's: it stops the pool
    if initializer is not None:
        initializer()


def _forward_sigint(signum, frame) -> None:
    """A SIGINT that reaches a worker is passed to the driver (a Ctrl-C in the terminal reaches both; one
    a sampler sends itself reaches only its worker) and otherwise ignored: the driver stops the pool."""
    import signal
    parent = os.getppid()
    if parent > 1 and not _FORWARDED:
        _FORWARDED.append(signum)
        os.kill(parent, signal.SIGINT)


_FORWARDED: list = []  # a worker passes on its first SIGINT only
_STARTED: list = [None]  # a worker's channel to the driver: (task key, pid, start time) as each task starts


def _tracked_call(fn: Callable, key: int, task):
    """``fn(task)`` in a pool worker, after telling the driver which process started it and when (so that the
    driver can name the task whose worker died, and stop one that runs past its time)."""
    if _STARTED[0] is not None:
        _STARTED[0].put((key, os.getpid(), time.monotonic()))
    return fn(task)


def _death(code: Optional[int]) -> str:
    """What an exit status says about how a worker ended."""
    import signal
    if code is None:
        return "died (how is unknown)"
    if code >= 0:
        return (f"exited by itself with status {code} in the middle of a task (os._exit, or exit() in C code: "
                f"nothing of harness ends a worker)")
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    return f"was killed by {name}" + (" (the out-of-memory killer, or kill -9)" if name == "SIGKILL" else "")


def _unwedge(pool: ProcessPoolExecutor) -> None:
    """Release ``pool``'s result reader when it waits for the rest of a message its dead worker half sent: feed the
    result pipe zero bytes (from this process's own end of it) until the message is complete; it then fails to
    decode, the executor marks itself broken and its thread ends.  Else that thread waits for ever, and the
    interpreter's exit, which joins it, with it.  Only for a pool being given up (a live one is broken by it);
    does nothing to a pool whose thread has ended."""
    thread, queue = getattr(pool, "_executor_manager_thread", None), getattr(pool, "_result_queue", None)
    if thread is None or queue is None or not thread.is_alive():
        return
    try:
        fd = queue._writer.fileno()
        os.set_blocking(fd, False)
    except (OSError, ValueError, AttributeError):
        return
    chunk, deadline = bytes(1 << 16), time.monotonic() + 30.0
    while thread.is_alive() and time.monotonic() < deadline:
        try:
            os.write(fd, chunk)
        except BlockingIOError:
            pass
        except OSError:
            return
        thread.join(0.01)


class LocalPool(Backend):
    """A process pool of ``workers`` spawned processes; at most ``window`` tasks in flight (their results
    wait in memory until taken).  A worker that dies breaks the pool: it is restarted and the lost
    tasks are resubmitted (each up to ``retries`` times, when it was killed by a signal; a worker that exited by
    itself, or a task past its time limit, is not retried: that is the task's doing).  Each worker tells the driver
    which task it starts (:func:`_tracked_call`), so a dead worker's task is named and only it is counted as lost,
    and dies with the driver (:mod:`harness.core.lifeline`)."""

    name = "local"

    def __init__(self, workers: int, retries: int = RETRIES, initializer: Optional[Callable] = None):
        import multiprocessing
        self.workers, self.retries, self.initializer = int(workers), int(retries), initializer
        self._ctx = multiprocessing.get_context("spawn")
        self._pool: Optional[ProcessPoolExecutor] = None
        self._started_q = None
        self._procs: dict = {}  # pid -> Process of every worker started (their exit statuses once they end)
        self._keys: dict = {}  # future -> its submission's key
        self._started: dict = {}  # key -> (pid, start time) as the workers report them
        self._timed_out: dict = {}  # key -> the limit it ran past (its worker was killed)
        self._dead_seen: dict = {}  # pid -> when a dead worker was first seen (:meth:`_wedged`)
        self._next_key = 0
        self.restarts = 0  # times the pool was restarted after a worker died

    def _executor(self) -> ProcessPoolExecutor:
        import threading
        if self._pool is None:
            if self._started_q is None:
                self._started_q = self._ctx.SimpleQueue()
            main = threading.current_thread() is threading.main_thread()
            self._pool = ProcessPoolExecutor(self.workers, mp_context=self._ctx, initializer=_pool_init,
                                             initargs=(self.initializer, self._started_q, os.getpid(), main))
        return self._pool

    def map_unordered(self, fn, tasks, num_gpus=0, skip=None, timeout=None):
        todo = list(range(len(tasks)))[::-1]  # a stack: pop() gives the lowest index first
        lost = [0] * len(tasks)
        running: dict = {}
        window = 2 * self.workers + 2
        while todo or running:
            while todo and len(running) < window:
                i = todo.pop()
                if skip is None or not skip(i):
                    running[self._submit(fn, tasks[i])] = i
            if not running:
                break
            done, _ = wait(list(running), timeout=self._poll(running, tasks, timeout), return_when=FIRST_COMPLETED)
            self._drain()
            if not done:
                self._stop_overdue(running, tasks, timeout)
                if self._wedged():  # a worker died while sending its result: nothing would ever arrive
                    yield from self._recover([], running, todo, lost)
                continue
            broken = []
            for fut in done:
                i = running.pop(fut)
                try:
                    result = fut.result()
                except BrokenProcessPool as e:
                    broken.append((i, fut, e))
                    continue
                self._started.pop(self._keys.pop(fut, None), None)
                yield i, result
            if broken:
                yield from self._recover(broken, running, todo, lost)

    def _submit(self, fn, task):
        key, self._next_key = self._next_key, self._next_key + 1
        try:
            fut = self._executor().submit(_tracked_call, fn, key, task)
        except BrokenProcessPool:
            self._restart()
            fut = self._executor().submit(_tracked_call, fn, key, task)
        self._procs.update(getattr(self._pool, "_processes", None) or {})
        self._keys[fut] = key
        return fut

    def _drain(self) -> None:
        """Take the workers' start reports."""
        q = self._started_q
        while q is not None and not q.empty():
            key, pid, t0 = q.get()
            self._started[key] = (pid, t0)

    def _poll(self, running, tasks, timeout) -> Optional[float]:
        """How long to wait for a result before looking at the running tasks' time again (None: no limit)."""
        if timeout is None:
            return POLL_S
        now, left = time.monotonic(), [POLL_S]
        for fut, i in running.items():
            limit, start = timeout(tasks[i]), self._started.get(self._keys.get(fut))
            if limit is not None and start is not None:
                left.append(start[1] + limit - now)
        return min(1.0, max(0.05, min(left)))

    def _stop_overdue(self, running, tasks, timeout) -> None:
        """Kill the worker of every task that has run past its limit (its future then fails: :meth:`_recover`)."""
        if timeout is None:
            return
        import signal
        now = time.monotonic()
        for fut, i in running.items():
            key = self._keys.get(fut)
            limit, start = timeout(tasks[i]), self._started.get(key)
            if limit is not None and start is not None and now - start[1] > limit and key not in self._timed_out:
                self._timed_out[key] = limit
                try:
                    os.kill(start[0], signal.SIGKILL)
                except OSError:
                    pass

    def _wedged(self) -> bool:
        """Whether a worker has been dead for :data:`WEDGE_S` while the pool still reports no broken task.  The
        executor notices a dead worker at once, unless the worker died in the middle of sending a result (killed
        past its time limit, or by the out-of-memory killer): its reader then waits for the rest of that message
        for ever, and with one worker nothing else arrives (the run would hang with no worker alive)."""
        now = time.monotonic()
        dead = [pid for pid, proc in self._procs.items() if proc.exitcode is not None]
        for pid in dead:
            self._dead_seen.setdefault(pid, now)
        return any(now - self._dead_seen[pid] >= WEDGE_S for pid in dead)

    def _culprits(self, inflight) -> dict:
        """Of the in-flight futures, those whose own worker died: future -> that worker's exit status (empty when
        no dead worker can be tied to a task).  Waits a moment for the pool to end the others (SIGTERM)."""
        import signal
        deadline = time.monotonic() + 2.0
        for proc in list(self._procs.values()):
            proc.join(max(0.0, deadline - time.monotonic()))
        self._drain()
        dead = {pid: p.exitcode for pid, p in self._procs.items()
                if p.exitcode is not None and p.exitcode != -signal.SIGTERM}
        out = {}
        for fut in inflight:
            start = self._started.get(self._keys.get(fut))
            if start is not None and start[0] in dead:
                out[fut] = dead[start[0]]
        return out

    def _recover(self, broken, running, todo, lost):
        """A worker died: every task in flight is lost; restart the pool and queue them again (or give
        up on a task lost ``retries`` times).  The task whose worker died is counted as lost (not retried when
        its worker exited by itself or ran past its time); the others in flight are queued again uncounted."""
        for fut, i in list(running.items()):
            if fut.done() and not fut.exception():
                yield i, fut.result()
            else:
                broken.append((i, fut, fut.exception() if fut.done() else None))
            running.pop(fut)
        culprits = self._culprits([fut for _, fut, _ in broken])
        self._restart()
        for i, fut, e in sorted(broken, key=lambda b: b[0], reverse=True):
            key = self._keys.pop(fut, None)
            if culprits and fut not in culprits:
                todo.append(i)  # lost only because another task's worker died
                continue
            lost[i] += 1
            code = culprits.get(fut)
            if key in self._timed_out:
                limit = self._timed_out[key]
                yield i, TaskLost(lost[i], f"ran past its limit of {limit:g} s and was stopped", code, limit)
            elif code is not None and (code >= 0 or lost[i] > self.retries):
                yield i, TaskLost(lost[i], _death(code), code)
            elif lost[i] > self.retries:
                yield i, TaskLost(lost[i], f"died ({e or 'pool restarted'})")
            else:
                todo.append(i)
        todo.sort(reverse=True)

    def _restart(self) -> None:
        self.restarts += 1
        if self._pool is not None:
            _unwedge(self._pool)
            self._pool.shutdown(wait=False, cancel_futures=True)
        self._pool = None
        self._dead_seen.clear()
        for pid, proc in list(self._procs.items()):
            if proc.exitcode is not None:
                del self._procs[pid]
            elif not proc.is_alive():
                del self._procs[pid]

    def close(self, abort: bool = False) -> None:
        """Shut the pool down.  ``abort`` (interrupted): queued tasks are cancelled and the tasks in flight get
        ``ABORT_GRACE_S`` to finish before their workers are killed.  Not at once: a worker killed while it
        sends a result leaves half a message in the pipe, and the executor's reader thread then blocks for
        ever (and with it the interpreter's exit, which joins that thread)."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        if not abort:
            pool.shutdown(wait=True, cancel_futures=True)
            return
        procs = list((getattr(pool, "_processes", None) or {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        deadline = time.monotonic() + ABORT_GRACE_S
        for proc in procs:
            proc.join(max(0.0, deadline - time.monotonic()))
        for proc in procs:
            if proc.is_alive():  # a task that does not end (a hung sampler): killed after all
                proc.kill()
        for proc in procs:
            proc.join(1.0)
        _unwedge(pool)  # one of them may have been sending a result


class RayBackend(Backend):
    """Ray tasks on a local Ray started here (``address`` None: ``workers`` CPUs) or on the cluster at
    ``address`` ("auto" or host:port).  Each task is retried ``retries`` times when its worker dies."""

    name = "ray"

    def __init__(self, address: Optional[str], workers: Optional[int] = None, retries: int = RETRIES,
                 object_store_memory: Optional[int] = None):
        import ray
        self.ray, self.address, self.retries = ray, address, int(retries)
        self._started = not ray.is_initialized()
        if self._started:
            kw = dict(address=address, runtime_env={"env_vars": {"PYTHONPATH": _python_path()}},
                      logging_level="WARNING", log_to_driver=False)
            if address is None:
                node_ip = os.environ.get(RAY_NODE_IP_ENV) or LOOPBACK
                kw.update(num_cpus=workers or default_workers(), include_dashboard=False, dashboard_host=LOOPBACK,
                          object_store_memory=object_store_memory, _node_ip_address=node_ip)
                with _node_ip_as_given(ray, node_ip):
                    ray.init(**kw)
                _check_node_ip(ray, node_ip)
            else:
                _token_auth_like_ray_start()
                if _loopback(address):  # a head on this machine's loopback: this driver's node is there too
                    kw.update(_node_ip_address=address.rpartition(":")[0])
                ray.init(**kw)
        self.workers = int(ray.cluster_resources().get("CPU", 1))
        self._local = default_workers() if address is not None else (workers or default_workers())

    @property
    def local_workers(self) -> int:
        return self._local

    def map_unordered(self, fn, tasks, num_gpus=0, skip=None, timeout=None):
        remote = self.ray.remote(num_cpus=1, num_gpus=num_gpus, max_retries=self.retries)(_one_thread_call)
        todo = list(range(len(tasks)))[::-1]
        running: dict = {}
        window = 2 * self.workers + 2
        while todo or running:
            while todo and len(running) < window:
                i = todo.pop()
                if skip is None or not skip(i):
                    running[remote.remote(fn, tasks[i])] = i
            if not running:
                break
            (ref,), _ = self.ray.wait(list(running), num_returns=1)
            i = running.pop(ref)
            try:
                yield i, self.ray.get(ref)
            except (self.ray.exceptions.WorkerCrashedError, self.ray.exceptions.NodeDiedError) as e:
                yield i, TaskLost(self.retries + 1, f"Ray worker died ({type(e).__name__})")

    def close(self, abort: bool = False) -> None:
        if self._started and self.ray.is_initialized():
            self.ray.shutdown()


def _one_thread_call(fn: Callable, task):
    """``fn(task)`` in a Ray worker, with torch and BLAS at one thread as in a pool worker (a Ray task asks for one
    CPU; Ray's own default, OMP_NUM_THREADS=1, is not there when the cluster's environment sets it otherwise)."""
    limit_threads(1)
    return fn(task)


@contextlib.contextmanager
def _node_ip_as_given(ray, node_ip: str):
    """While a local Ray starts: keep a loopback ``node_ip`` as it is.  Ray rewrites 127.0.0.1 to the machine's
    network address (services.resolve_ip_for_localhost) unless ``ray_constants.ENABLE_RAY_CLUSTER`` is false
    (what RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, Ray's macOS default, sets); with the node on 127.0.0.1 the GCS,
    raylet, object manager, workers and agents all bind loopback (tests/verify/test_shards_ray.py lists them).
    Read only while the node starts; restored after, so a later ray.init(address=...) is unaffected."""
    try:
        from ray._private import ray_constants
        old = ray_constants.ENABLE_RAY_CLUSTER
    except (ImportError, AttributeError):  # another Ray: _check_node_ip tells whether it held
        yield
        return
    ray_constants.ENABLE_RAY_CLUSTER = not _loopback(f"{node_ip}:0")
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = old


def _check_node_ip(ray, node_ip: str) -> None:
    """A local Ray must run on the node address asked for (loopback unless $SPECVERIFY_RAY_NODE_IP says
    otherwise); shut it down and fail (exit 3) when this Ray version bound elsewhere."""
    got = ray.util.get_node_ip_address()
    if got != node_ip:
        ray.shutdown()
        raise RuntimeError(f"the local Ray started on {got}, not on {node_ip} as asked (loopback unless "
                           f"${RAY_NODE_IP_ENV} names another address); this Ray version ({ray.__version__}) does "
                           "not keep the node address: start a head yourself and pass --address")


def _token_auth_like_ray_start() -> None:
    """Use Ray's token authentication when a token exists and RAY_AUTH_MODE is unset, as `ray start` does
    (Ray >= 2.5x): a driver joining such a head by address otherwise connects unauthenticated."""
    try:
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available)
    except ImportError:  # older Ray: no token authentication
        return
    maybe_enable_token_auth_if_token_available(warn_if_disabled=False)


def _loopback(address: str) -> bool:
    import ipaddress
    try:
        return ipaddress.ip_address(address.rpartition(":")[0]).is_loopback
    except ValueError:
        return False


def _python_path() -> str:
    """This process's import path (the project first), for Ray workers started from another folder."""
    root = str(Path(__file__).resolve().parents[2])
    parts = [root, *(p for p in sys.path if p and Path(p).is_dir())]
    return os.pathsep.join(dict.fromkeys(parts))


# ------------------------------------------------------------------------------------------ options
def add_backend_arguments(ap, workers_help: str) -> None:
    """``--workers``, ``--backend``, ``--address``: where the work runs."""
    ap.add_argument("--workers", type=int, metavar="N", help=workers_help)
    ap.add_argument("--backend", default="local", metavar="NAME",
                    help="local (processes on this machine, the default) or ray (Ray tasks; pip install "
                         "'specverify[ray]')")
    ap.add_argument("--address", metavar="auto|HOST:PORT",
                    help="with --backend ray: the Ray cluster to join (default: start a local Ray with --workers CPUs)")


def check_backend_options(backend: str, workers: Optional[int], address: Optional[str]) -> None:
    """The backend options, before any work; UsageError naming the option."""
    check_option(backend in BACKENDS, "--backend", backend, f"one of {list(BACKENDS)}")
    check_option(workers is None or (isinstance(workers, int) and workers >= 1), "--workers", workers,
                 "an integer >= 1")
    if workers is not None and (backend == "local" or address is None):  # processes of this machine
        most, cores = max_local_workers(), default_workers()
        check_option(workers <= most, "--workers", workers,
                     f"an integer in [1, {most}] on this machine (at most {WORKERS_PER_CORE} per core; {cores} "
                     f"core{'s' * (cores != 1)} here: each worker is a CPU-bound process)")
    if address is not None and backend != "ray":
        raise UsageError(f"`--address` needs `--backend ray`; got --address {address!r} with --backend {backend!r}")
    if backend != "ray":
        return
    try:
        import ray  # noqa: F401
    except ImportError:
        raise UsageError("`--backend` 'ray' needs Ray, which is not installed (pip install 'specverify[ray]'); "
                         "got --backend 'ray'") from None
    if address is not None and address != "auto":
        _check_address(address)


def _check_address(address: str, timeout: float = 5.0) -> None:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise UsageError(f"`--address` must be 'auto' or host:port; got {address!r}")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except OSError as e:
        raise UsageError(f"`--address` must be a reachable Ray head node (host:port); got {address!r} "
                         f"({type(e).__name__}: {e})") from None


def make_backend(backend: str = "local", workers: Optional[int] = None, address: Optional[str] = None) -> Backend:
    """The backend the options ask for (checked first: UsageError naming the option).  ``local`` with one
    worker runs in this process, except a plug-in sampler's tasks (one worker process: ``isolate_plugins``)."""
    check_backend_options(backend, workers, address)
    if backend == "ray":
        try:
            return RayBackend(address, workers)
        except ConnectionError as e:
            raise UsageError(f"`--address` must name a running Ray cluster; got {address!r} "
                             f"({' '.join(str(e).split())[:200]})") from None
    n = default_workers() if workers is None else workers
    return SerialBackend(isolate_plugins=True) if n == 1 else LocalPool(n)
