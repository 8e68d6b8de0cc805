"""CPU seconds: of one task (in a worker process or in the driver) and of this process with its child processes.

    clock = task_clock(in_worker)        # time.process_time in a worker process, time.thread_time in the driver
    c0 = tree_cpu_s(); ...; tree_cpu_s() - c0   # this process and every process it started, over the work

A task's clock: a worker process of :mod:`harness.core.backends` runs one task at a time with torch and BLAS at one
thread, so the process's CPU time over the task is the task's (every thread it ran on included); in the driver
another task may run at the same time in a second thread (a real-model run beside the shards,
:mod:`harness.verify.draw`), so the calling thread's CPU time is the task's there (exact with torch and BLAS at one
thread, ``--threads 1``, the default; with more, the helper threads of torch's pool are not counted).

:func:`tree_cpu_s` is user + system time of this process (every thread), of the children it has waited for
(``os.times``: the processes of :func:`harness.core.forkmap.fork_map`, a pool shut down) and of every live
descendant, read from ``/proc/<pid>/stat`` (Linux; a pool's workers still running: their start-up, imports and
idle polling included).  Not counted: processes on other machines (Ray workers) and, off Linux, live children
(:data:`TREE_SCOPE` says which).
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable

__all__ = ["task_clock", "tree_cpu_s", "TREE_SCOPE"]

_PROC = Path("/proc")
TREE_SCOPE = ("this process and every process it started (live ones from /proc)" if (_PROC / "self" / "stat").exists()
              else "this process and the child processes it has waited for (live workers not counted: no /proc)")


def task_clock(in_worker: bool) -> Callable[[], float]:
    """The CPU clock of a task: the process's in a worker process, the calling thread's in the driver."""
    return time.process_time if in_worker else time.thread_time


def _stat(pid: str) -> tuple[int, float]:
    """(parent pid, user + system seconds of the process and of its waited-for children) from /proc/<pid>/stat."""
    text = (_PROC / pid / "stat").read_text()
    f = text[text.rindex(")") + 2:].split()  # fields 3.. (the command name, field 2, may hold spaces)
    tick = os.sysconf("SC_CLK_TCK")
    return int(f[1]), sum(int(x) for x in f[11:15]) / tick  # ppid (4); utime, stime, cutime, cstime (14-17)


def _descendants_cpu_s() -> float:
    """CPU seconds of every live descendant of this process (0 without /proc)."""
    if not (_PROC / "self" / "stat").exists():
        return 0.0
    children: dict[int, list[tuple[int, float]]] = {}
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid, cpu = _stat(entry.name)
        except (OSError, ValueError, IndexError):  # ended while read, or not readable
            continue
        children.setdefault(ppid, []).append((int(entry.name), cpu))
    total, todo = 0.0, [os.getpid()]
    while todo:
        for pid, cpu in children.get(todo.pop(), ()):
            total += cpu
            todo.append(pid)
    return total


def tree_cpu_s() -> float:
    """User + system CPU seconds so far of this process, its waited-for children and its live descendants."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system + _descendants_cpu_s()
