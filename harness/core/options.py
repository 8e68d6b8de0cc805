"""Checks of the command-line options every subcommand shares, before any work: each bad value raises a
:class:`harness.core.errors.UsageError` (exit 2) naming the option, echoing the value and saying what is allowed."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Iterable, Optional

from harness.core.errors import UsageError

__all__ = ["check_option", "check_seed", "check_threads", "check_out", "check_unique"]


def quoted(option: str) -> str:
    """``--x`` -> ```--x```; ``file: `key``` (already quoted by the caller) as it is."""
    return option if "`" in option else f"`{option}`"


def check_option(ok: bool, option: str, value, allowed: str) -> None:
    """Raise a UsageError naming ``option`` (or ``file: `key```, quoted by the caller) and its bad ``value``
    unless ``ok``."""
    if not ok:
        raise UsageError(f"{quoted(option)} must be {allowed}; got {value!r}")


def check_seed(seed: Optional[int], option: str = "--seed") -> None:
    check_option(seed is None or 0 <= seed < 2 ** 63, option, seed, "an integer in [0, 2**63)")


THREADS_PER_CORE = 4  # torch / BLAS threads per core at most: more only thrash, and 10^9 ran libgomp out of memory (exit 1)


def check_threads(threads: Optional[int], option: str = "--threads") -> None:
    """``threads`` is None or an integer in [1, THREADS_PER_CORE x the cores of this machine]."""
    cores = os.cpu_count() or 1
    check_option(threads is None or 1 <= threads <= THREADS_PER_CORE * cores, option, threads,
                 f"an integer in [1, {THREADS_PER_CORE * cores}] on this machine ({THREADS_PER_CORE} per core; "
                 f"{cores} cores here)")


def check_out(path: Optional[Path], option: str = "--out", is_file: bool = False) -> None:
    """``path`` (a folder, or with ``is_file`` a file) can be created and written: no part of it is a
    regular file where a folder is needed, and its nearest existing folder is writable.  Creates nothing."""
    if path is None:
        return
    path = Path(path)
    if path.exists() and (path.is_dir() if is_file else not path.is_dir()):
        raise UsageError(f"`{option}` must be {'a file' if is_file else 'a folder'}; got {str(path)!r}, which is "
                         f"{'a folder' if is_file else 'an existing file'}")
    folder = path.parent if is_file else path
    p = folder
    while not p.exists() and p != p.parent:
        p = p.parent
    what = "a file" if is_file else "a folder"
    if p.exists() and not p.is_dir():
        raise UsageError(f"`{option}` must be {what} that can be created; got {str(path)!r}, but {str(p)!r} is a file")
    if p.exists() and not (os.access(p, os.W_OK | os.X_OK) and _can_write_in(p)):
        raise UsageError(f"`{option}` must be {what} that can be written; got {str(path)!r}, but {str(p)!r} "
                         "is not writable")


def _can_write_in(folder: Path) -> bool:
    """Whether a file can be made in ``folder`` (an unnamed temporary file, gone at once): catches what
    os.access cannot tell, such as /proc, /sys or a read-only mount seen by root."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            return True
    except OSError:
        return False


def check_unique(values: Optional[Iterable], option: str) -> None:
    """A repeatable option names each value once."""
    values = list(values or [])
    dup = sorted({v for v in values if values.count(v) > 1})
    if dup:
        raise UsageError(f"`{option}` names {', '.join(map(repr, dup))} more than once; got {values}")
