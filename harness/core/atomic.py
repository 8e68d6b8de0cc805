"""Whole reports or none: a run's output files are staged, then moved into place together.

:func:`staged_report` gives a staging folder beside the destination (same filesystem, a hidden
``.<name>.staging-*`` folder); the command writes every file of its report there.  When the block ends
normally the files are moved into the destination with ``os.replace`` (SIGINT held off meanwhile), and
the files the *previous* report of the same kind wrote there but this one did not (``figures/`` of a run
with figures, when this run has ``--no-figures``) are removed.  What a report wrote is kept in a manifest,
``<out>/.<kind>-manifest.json``; a folder without one (written before manifests existed) is cleaned of the
kind's known file names (``patterns``) only.  Nothing else in the destination is touched: resume state
(``_tmp_state``, ``_tmp_seeds``, sweep cells) and the user's own files stay.  When the block raises (an
error, an interrupt) the staging folder is removed and the destination keeps the previous report whole.

A process killed outright (SIGKILL, power loss) cannot remove its staging folder: the folder's name carries the
writer's pid (``.<name>.staging-<pid>-*``), and the next report staged for the same destination removes those
of pids no longer running (:func:`remove_stale_staging`), and those of the unnamed older form once they are an
hour old.  The pattern is git-ignored.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterable, Iterator
from harness.core.provenance import atomic_write_text
from harness.core import jsonfile

__all__ = ["staged_report", "Staged", "manifest_path", "remove_stale_staging"]

LEGACY_STALE_S = 3600  # a staging folder without a pid in its name (written before pids) is stale after this


def manifest_path(out: Path, kind: str) -> Path:
    """Where the list of files of the last ``kind`` report in ``out`` is kept."""
    return Path(out) / f".{kind}-manifest.json"


class Staged:
    """A staging folder (:attr:`dir`) for the report of ``kind`` that goes to ``out``."""

    def __init__(self, out: Path, kind: str, patterns: Iterable[str] = (), keep: Iterable[str] = ()):
        self.out, self.kind, self.patterns = Path(out), kind, tuple(patterns)
        self.keep = set(keep)  # files of the previous report this one does not own: left in place, still listed
        where = self.out.resolve()
        where.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_staging(where)
        pid = os.getpid()
        try:  # beside the destination (same filesystem) ...
            self.dir = Path(tempfile.mkdtemp(prefix=f".{where.name}.staging-{pid}-", dir=where.parent))
        except OSError:  # ... or, where its parent is read-only, inside it
            where.mkdir(parents=True, exist_ok=True)
            self.dir = Path(tempfile.mkdtemp(prefix=f".staging-{pid}-", dir=where))

    def final(self, path) -> Path:
        """Where ``path`` (a file under the staging folder) lands in the destination."""
        return self.out / Path(path).relative_to(self.dir)

    def _previous(self) -> set[str]:
        """Files (relative names) of the previous report of this kind in the destination."""
        man = manifest_path(self.out, self.kind)
        if man.is_file():
            try:
                return set(jsonfile.loads(man.read_text())["files"])
            except (OSError, ValueError, KeyError, TypeError):
                pass
        if not self.out.is_dir():
            return set()
        return {p.relative_to(self.out).as_posix() for pat in self.patterns for p in self.out.glob(pat) if p.is_file()}

    def commit(self) -> list[str]:
        """Move the staged files into the destination, drop the previous report's other files, write the
        manifest; returns the relative names of the report's files.  Files named in ``keep`` that the
        previous report wrote stay as they are (a partial run keeps the tables it did not rebuild)."""
        new = sorted(p.relative_to(self.dir).as_posix() for p in self.dir.rglob("*") if p.is_file())
        with _no_interrupt():
            old = self._previous()
            kept = sorted(rel for rel in (old & self.keep) - set(new) if (self.out / rel).is_file())
            self.out.mkdir(parents=True, exist_ok=True)
            for rel in new:
                _unlink_linked_folders(self.out, rel)  # a report is written inside --out, never through a link
                (self.out / rel).parent.mkdir(parents=True, exist_ok=True)
                os.replace(self.dir / rel, self.out / rel)
            for rel in sorted(old - set(new) - set(kept)):
                _remove(self.out, rel)
            atomic_write_text(manifest_path(self.out, self.kind),
                              json.dumps({"kind": self.kind, "files": sorted(new + kept)}, indent=1) + "\n")
            self.discard()
        return new

    def discard(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def remove_stale_staging(out: Path) -> list[Path]:
    """Remove the staging folders of ``out`` (beside it, or inside it) that no running process owns: those
    whose pid has ended, and those without a pid (older code) over :data:`LEGACY_STALE_S` old; the removed."""
    out = Path(out)
    found = list(out.parent.glob(f".{out.name}.staging-*"))
    if out.is_dir():
        found += list(out.glob(".staging-*"))
    removed = []
    for d in found:
        if d.is_dir() and _stale(d):
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


def _stale(folder: Path) -> bool:
    """Whether the staging ``folder`` belongs to no running process."""
    head = folder.name.rpartition(".staging-")[2].split("-", 1)
    if len(head) == 2 and head[0].isdigit():
        return not _alive(int(head[0]))
    try:
        return time.time() - folder.stat().st_mtime > LEGACY_STALE_S
    except OSError:
        return False


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, but another user's
        return True
    return True


def _folders(out: Path, rel: str):
    """The folders between ``out`` and ``out/rel``, outermost first."""
    p = out
    for part in Path(rel).parts[:-1]:
        p = p / part
        yield p


def _through_link(out: Path, rel: str) -> bool:
    """Whether a folder between ``out`` and ``out/rel`` is a symbolic link (it would lead outside ``out``)."""
    return any(p.is_symlink() for p in _folders(out, rel))


def _unlink_linked_folders(out: Path, rel: str) -> None:
    """Remove the symbolic links among the folders between ``out`` and ``out/rel`` (the links only, never what
    they point to), so that the file is written inside ``out``."""
    for p in _folders(out, rel):
        if p.is_symlink():
            p.unlink()


def _remove(out: Path, rel: str) -> None:
    """Remove ``out/rel`` (a file of the previous report) and the folders it leaves empty, up to ``out``; never
    through a symbolic link (a planted ``out/lnk -> elsewhere`` with a manifest naming ``lnk/x`` deleted x there)."""
    path = out / rel
    if ".." in Path(rel).parts or Path(rel).is_absolute() or _through_link(out, rel):
        return  # a manifest never names anything outside its folder
    try:
        path.unlink()
    except (FileNotFoundError, IsADirectoryError):
        return
    parent = path.parent
    while parent != out and out in parent.parents:
        try:
            parent.rmdir()
        except OSError:
            break
        parent = parent.parent


@contextlib.contextmanager
def _no_interrupt() -> Iterator[None]:
    """Hold SIGINT off (in the main thread) while the files are moved, so a report is never half-moved."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextlib.contextmanager
def staged_report(out, kind: str, patterns: Iterable[str] = (), keep: Iterable[str] = ()) -> Iterator[Staged]:
    """Stage a report of ``kind`` for ``out``: write into ``staged.dir``; on success the files replace the
    previous report of that kind together (but those named in ``keep``, which stay), on an exception
    nothing in ``out`` changes."""
    staged = Staged(Path(out), kind, patterns, keep)
    try:
        yield staged
    except BaseException:
        staged.discard()
        raise
    staged.commit()
