"""In-memory work on every core: ``fork_map(fn, n, workers)`` is ``[fn(0), ..., fn(n - 1)]``, computed by
forked children that inherit ``fn`` and everything it reaches (a family's test closures, the runs'
accumulators) without pickling any of it; only the results travel back, in order.

It is for the driver's own work once the draws are in (evaluating the family of tests, judging the runs):
work that is a list of closures over large in-memory state, which a spawned pool or Ray could only take
after pickling that state.  ``fn`` must be deterministic, so the result does not depend on ``workers``
(tested: identical tables at 1 and 2 workers).  Serial where fork is not safe to use (not Linux), for one
worker, or for fewer than two items.
"""
from __future__ import annotations

import multiprocessing
import os
import sys
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Callable

from harness.core.lifeline import die_with_parent

__all__ = ["fork_map", "fork_available", "ForkedChildLost", "run_jobs"]

class ForkedChildLost(RuntimeError):
    """A child of :func:`fork_map` ended without returning its result."""


_WORK: list = []  # the function the forked children call (set for the duration of one fork_map)


def fork_available() -> bool:
    """Whether :func:`fork_map` forks here (Linux: fork is the platform's own start method)."""
    return sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods()


def _child_init(parent: int = 0, from_main_thread: bool = True) -> None:
    import signal
    if parent:
        die_with_parent(parent, from_main_thread)  # a child never outlives the command (SIGKILL of the parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's: it terminates the children
    try:
        import torch
        torch.set_num_threads(1)
    except ImportError:  # pragma: no cover - torch is a dependency
        pass


def _call(i: int):
    return _WORK[0](i)


def fork_map(fn: Callable[[int], object], n: int, workers: int, chunksize: int = 4) -> list:
    """``[fn(i) for i in range(n)]`` on ``workers`` forked processes (each picks ``chunksize`` items at a
    time, so unequal items balance); an exception in ``fn`` is raised here, and a child that ends without its
    result (an at-fork handler of a loaded module that exits, the out-of-memory killer) is a
    :class:`ForkedChildLost` -- never a wait without end, as ``multiprocessing.Pool`` gives (probe 47)."""
    if workers <= 1 or n < 2 or not fork_available():
        return [fn(i) for i in range(n)]
    _WORK.append(fn)
    main = threading.current_thread() is threading.main_thread()
    pool = ProcessPoolExecutor(min(workers, n), mp_context=multiprocessing.get_context("fork"),
                               initializer=_child_init, initargs=(os.getpid(), main))
    done = False
    try:
        out = list(pool.map(_call, range(n), chunksize=max(1, chunksize)))
        done = True
        return out
    except BrokenProcessPool:
        raise ForkedChildLost("a forked child of this process ended before it returned its result (killed, or "
                              "ended by code of a loaded module, e.g. an os.register_at_fork handler)") from None
    finally:
        _WORK.clear()
        children = list((getattr(pool, "_processes", None) or {}).values())
        pool.shutdown(wait=done, cancel_futures=True)
        for child in children if not done else ():  # Ctrl-C or an error: the rest of the work is not wanted
            if child.is_alive():
                child.terminate()


def run_jobs(fn, todo: list, jobs: int, bar) -> None:
    """``fn`` over ``todo`` on ``jobs`` spawned processes (serially for one), ticking ``bar`` per finished job."""
    if jobs > 1 and len(todo) > 1:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor
        with ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn")) as pool:
            for _ in pool.map(fn, todo):
                bar.update(1)
    else:
        for job in todo:
            fn(job)
            bar.update(1)
