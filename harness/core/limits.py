"""Sizes checked before any work: what a run can hold, and the options and settings that decide it.

An option or a settings key whose value decides how much memory or time a run takes (``--draws``,
``--n-per-prompt``, ``--batch``, a scenario's ``target.order`` ...) is checked here *before* anything is
allocated or drawn: a value the run cannot hold is a :class:`harness.core.errors.UsageError` (exit 2)
naming the option (or ``file: key``), echoing the value and stating the limit, instead of a MemoryError
(exit 3) after minutes, or the kernel's OOM killer (which, on a shared machine, may kill others first).

The memory a run may use, :func:`memory_budget`, is half of the least of: the memory the kernel reports
available (``MemAvailable``), the address space left under ``ulimit -v`` (RLIMIT_AS), and the room left
in the process's cgroup (``memory.max``).  Half, because the estimates count the large arrays only (the
interpreter, torch and the copies numpy makes on the way are not counted).

Names that become folders (a sweep's ``name``) are checked by :func:`check_folder_name`: never ``.``,
``..``, empty, or holding a path separator.
"""
from __future__ import annotations

import os
import resource
from pathlib import Path
from typing import Optional

from harness.core.errors import UsageError
from harness.core.options import check_option, quoted

__all__ = ["MEMORY_SHARE", "MAX_SEQUENCES", "MIN_EPSILON", "EPSILON_WHY", "available_memory", "memory_budget", "fmt_bytes", "check_count",
           "check_bytes", "check_folder_name"]

MEMORY_SHARE = 0.5  # of the available memory a run's counted arrays may take (the rest: what is not counted)
MAX_SEQUENCES = 10 ** 10  # sequences one run may draw: 10,000 x the default 10^6; at a few 10^5 sequences a
                          # second that is more than a day per scenario (and the chunk plan, a list of one size
                          # per sampler call, stays at 5 x 10^4 entries at max_chunk = 200,000)
MIN_EPSILON = 1e-6  # a certificate's smallest tolerance: a TV bound from n draws is at least ~1/sqrt(n) >= 1e-5
EPSILON_WHY = f"below {MIN_EPSILON:g} no run of at most {MAX_SEQUENCES:,} sequences can certify"


def _meminfo_available() -> Optional[int]:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _address_space_left() -> Optional[int]:
    """Room under RLIMIT_AS (``ulimit -v``): the limit less the address space this process already maps."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmSize:"):
                return max(soft - int(line.split()[1]) * 1024, 0)
    except (OSError, ValueError, IndexError):
        pass
    return soft


def _cgroup_left() -> Optional[int]:
    """Room in this process's cgroup (v2 ``memory.max`` less ``memory.current``), when it has a limit."""
    try:
        rel = next(ln.split(":", 2)[2] for ln in Path("/proc/self/cgroup").read_text().splitlines()
                   if ln.startswith("0::"))
        d = Path("/sys/fs/cgroup") / rel.strip().lstrip("/")
        top = (d / "memory.max").read_text().strip()
        if top == "max":
            return None
        return max(int(top) - int((d / "memory.current").read_text().strip()), 0)
    except (OSError, ValueError, StopIteration, IndexError):
        return None


def available_memory() -> tuple[int, str]:
    """(bytes this process can still allocate, where that figure comes from)."""
    found = [(v, src) for v, src in ((_meminfo_available(), "MemAvailable"), (_address_space_left(), "ulimit -v"),
                                     (_cgroup_left(), "cgroup memory.max")) if v is not None]
    if not found:
        return 2 ** 40, "no limit known"
    return min(found)


def memory_budget() -> tuple[int, str]:
    """(bytes a run's counted arrays may take, a phrase saying why)."""
    avail, src = available_memory()
    return int(avail * MEMORY_SHARE), f"half of the {fmt_bytes(avail)} available here ({src})"


def fmt_bytes(n: float) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:,.0f} {unit}" if n >= 1000 * size else f"{n / size:.3g} {unit}"
    return f"{int(n)} B"


def check_count(option: str, value: int, per_item: float, what: str, fixed: float = 0.0,
                hard: Optional[int] = None, hard_why: str = "") -> None:
    """``value`` items of ``per_item`` bytes each (plus ``fixed``) must fit the memory budget, and ``value``
    must be at most ``hard`` (a fixed cap, ``hard_why`` saying why); UsageError naming ``option`` with the
    value and the limit otherwise.  ``option`` is an option (``--batch``) or ``file: `key```."""
    if hard is not None:
        check_option(value <= hard, option, value, f"at most {hard:,} ({hard_why})")
    budget, why = memory_budget()
    limit = int(max(budget - fixed, 0) // max(per_item, 1.0))
    check_option(value <= limit, option, value,
                 f"at most {limit:,} on this machine ({what}: about {fmt_bytes(per_item)} each, "
                 f"{fmt_bytes(per_item * value + fixed)} in all; the run may use {fmt_bytes(budget)}, {why})")


def check_bytes(option: str, value, need: float, what: str) -> None:
    """An allocation of ``need`` bytes (``what``, decided by ``option`` = ``value``) must fit the budget."""
    budget, why = memory_budget()
    if need > budget:
        raise UsageError(f"{quoted(option)} = {value!r} needs about {fmt_bytes(need)} ({what}); the run may use "
                         f"{fmt_bytes(budget)}, {why}: choose a smaller value")


def check_folder_name(name, where: str) -> None:
    """A name that becomes a folder: non-empty, not ``.`` or ``..``, no path separator."""
    bad = (not isinstance(name, str) or name.strip() in ("", ".", "..") or "/" in name or "\\" in name
           or "\0" in name)
    check_option(not bad, where, name, "a folder name (not empty, '.' or '..', no '/')")
