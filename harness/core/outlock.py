"""One writer per output folder: an advisory lock (``fcntl.flock``) on ``<out>/.lock``, the holder's pid in it.

:func:`lock_out` takes the lock for the life of the process (a killed process releases it: the kernel drops
the lock with the process's open files) or raises :class:`harness.core.errors.UsageError` naming the option,
the folder and the pid that holds it (exit 2, before any work).  Within one process the lock is re-entrant:
a second command run in the same process (tests, ``--until-certified`` rounds) into the same folder reuses it.
An output *file* (``alpha --out a.csv``) is locked through ``.<name>.lock`` beside it.  The lock files are
hidden and git-ignored (``.lock``, ``.*.lock``); they stay after the run (removing a lock file others may
be waiting on would let two writers in).
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Optional

from harness.core.errors import UsageError

__all__ = ["lock_out", "lock_path", "release_all", "abandon_all", "held_outputs"]

_HELD: dict[str, int] = {}  # resolved lock-file path -> open descriptor holding its flock
_CREATED: dict[str, list[Path]] = {}  # resolved lock-file path -> the folders taking it created, deepest first


def lock_path(out: Path, is_file: bool = False) -> Path:
    """The lock file of the folder ``out`` (``out/.lock``), or of the file ``out`` (``.<name>.lock`` beside it)."""
    out = Path(out)
    return out.parent / f".{out.name}.lock" if is_file else out / ".lock"


def lock_out(out: Path, option: str = "--out", is_file: bool = False) -> Optional[Path]:
    """Hold the lock of ``out`` (creating the folder) until the process ends; its lock file, or None where
    the system has no ``flock``.  UsageError when another live process holds it."""
    try:
        import fcntl
    except ImportError:  # not a POSIX system: no lock
        return None
    path = lock_path(out, is_file)
    key = str(path.resolve())
    if key in _HELD:
        return path
    where = path.parent.resolve()
    created = [p for p in (where, *where.parents) if not p.exists()]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink() or (path.exists() and not path.is_file()):  # planted: a link would truncate its target
            path.unlink()
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except OSError as e:
        raise UsageError(f"`{option}` must be {'a file' if is_file else 'a folder'} that can be written; got "
                         f"{str(out)!r} ({e.strerror or e})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        raise UsageError(f"`{option}` {str(out)!r} is in use by another run (pid {holder}); wait for it to end, "
                         f"or write to another {option}") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    _HELD[key] = fd
    _CREATED[key] = created
    return path


def _holder(fd: int) -> str:
    """The pid the holder wrote into the lock file (or 'unknown')."""
    try:
        text = os.pread(fd, 32, 0).decode(errors="replace").strip()
    except OSError:
        return "unknown"
    return text if text.isdigit() else "unknown"


def release_all() -> None:
    """Release every lock this process holds (the end of a command run in-process)."""
    _CREATED.clear()
    while _HELD:
        _, fd = _HELD.popitem()
        try:
            os.close(fd)
        except OSError:
            pass


def abandon_all() -> None:
    """Release every lock and remove what taking them created where nothing else was written: a command that
    stopped on bad input (exit 2) leaves no empty output folder behind."""
    for key, created in list(_CREATED.items()):
        lock = Path(key)
        folder = lock.parent
        if folder in created and {p.name for p in folder.iterdir()} == {lock.name}:
            lock.unlink(missing_ok=True)
            for d in created:  # deepest first; stops at the first that holds something else
                try:
                    d.rmdir()
                except OSError:
                    break
    release_all()


@contextlib.contextmanager
def held_outputs():
    """The locks a command takes inside the block are released when it ends (a command run in-process)."""
    try:
        yield
    finally:
        release_all()
