"""Where a command writes when ``--out`` is not given: a folder of its own under ``runs/``, never ``results/``.

The committed reference results (``results/``) change only when a command is told to write there
(``--out results/verify``, ``make verify-reference``).  Without ``--out`` a command writes to

    runs/<command>/<name>-<hash>

under the current directory (``runs/`` is git-ignored): ``name`` a short readable label from the main options
(the sampler, the scenarios, ``full``: ``runs/verify/base-1a2b3c4d``), ``hash`` the first 8 hex digits of a
SHA-256 of every option that shapes the result, as parsed (defaults included).  The same options give the
same folder, so an interrupted run resumes where it stopped; different options never share one, so a quick
look never overwrites a certificate.  Options that change how, not what, a command computes, or only what it
draws from the same tables (``--out``, ``--workers``, ``--threads``, ``--no-progress``, ``--fresh``, ``--redo``,
``--no-figures``, ``sweep --list / --tables / --report``: :data:`NOT_KEYED`) are left out of the hash.

:func:`claim_out` is what a command calls once its options are checked: it resolves the folder (``--out``
or the default, printed on stderr: ``writing to runs/verify/base-1a2b3c4d``), checks it can be written, and
takes its lock (:mod:`harness.core.outlock`), and removes the staging folders a killed run left beside it
(:func:`harness.core.atomic.remove_stale_staging`).
"""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Iterable, Optional

from harness.core.atomic import remove_stale_staging
from harness.core.options import check_out
from harness.core.outlock import lock_out

__all__ = ["RUNS", "NOT_KEYED", "run_key", "default_out", "resolve_out", "claim_out", "own_subfolder"]

RUNS = Path("runs")  # relative: runs land under the directory the command runs in
NOT_KEYED = frozenset({"out", "command", "failure_dir", "fresh", "redo", "list", "tables", "report", "no_figures",
                       "no_progress", "threads", "workers", "backend", "address", "jobs"})
_PLAIN = (str, int, float, bool, type(None), Path)


def _plain(value):
    """``value`` as JSON-able data, or None for what has no stable text (functions, objects)."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value if isinstance(value, _PLAIN) else None


def _label(value) -> str:
    """A short readable word for one option's value: a sampler ``pkg/file.py:fn`` is ``fn``, a path its stem."""
    if isinstance(value, (list, tuple)):
        return "+".join(_label(v) for v in value)
    text = str(value)
    if ":" in text and not text.startswith(("http:", "https:")):
        text = text.rsplit(":", 1)[1]
    elif "/" in text or text.endswith((".toml", ".jsonl", ".json", ".csv")):
        text = Path(text).stem or Path(text).name
    return text


def _slug(text: str, limit: int = 48) -> str:
    s = "".join(c if c.isalnum() or c in "._+-" else "_" for c in text).strip("._")
    return s[:limit] or "run"


def run_key(options: dict, name_keys: Iterable[str] = (), default_name: str = "default") -> str:
    """``<name>-<hash8>``: ``name`` from the values of ``name_keys`` that are set (a flag set to True gives its
    own name), ``hash`` over every option but those of :data:`NOT_KEYED` (and private ones)."""
    words = []
    for key in name_keys:
        v = options.get(key)
        if v is None or v is False or v == [] or v == "":
            continue
        words.append(key.replace("_", "-") if v is True else _label(v))
    keyed = {k: _plain(v) for k, v in sorted(options.items())
             if k not in NOT_KEYED and not k.startswith("_") and isinstance(v, _PLAIN + (list, tuple))}
    digest = hashlib.sha256(json.dumps(keyed, sort_keys=True, default=str).encode()).hexdigest()[:8]
    return f"{_slug('-'.join(words) or default_name)}-{digest}"


def default_out(command: str, args, name_keys: Iterable[str] = (), filename: Optional[str] = None,
                default_name: str = "default") -> Path:
    """``runs/<command>/<name>-<hash>`` (and ``filename`` in it, for a command whose ``--out`` is a file)."""
    folder = RUNS / command / run_key(vars(args), name_keys, default_name)
    return folder / filename if filename else folder


def resolve_out(args, command: str, name_keys: Iterable[str] = (), filename: Optional[str] = None,
                default_name: str = "default") -> Path:
    """``args.out``, or :func:`default_out`; neither created nor locked (a command that only reads its folder:
    ``sweep --list``)."""
    out = getattr(args, "out", None)
    return Path(out) if out is not None else default_out(command, args, name_keys, filename, default_name)


def own_subfolder(path: Path) -> Path:
    """``path``, a folder a command keeps inside its ``--out`` (saved seeds, stored cells), as a real folder: a
    symbolic link there is removed, never followed (its target's files would be read, overwritten or deleted:
    probe 47), then the folder is made."""
    path = Path(path)
    if path.is_symlink():
        path.unlink()
    path.mkdir(parents=True, exist_ok=True)
    return path


def claim_out(args, command: str, name_keys: Iterable[str] = (), filename: Optional[str] = None,
              default_name: str = "default", option: str = "--out", quiet: bool = False) -> Path:
    """The output of this run: ``args.out``, or :func:`default_out` (stored back into ``args.out`` and printed
    unless ``quiet``); checked writable and locked for this process (UsageError, exit 2, otherwise)."""
    out = resolve_out(args, command, name_keys, filename, default_name)
    if getattr(args, "out", None) is None:
        args.out = out
        if not quiet:
            print(f"writing to {out}", file=sys.stderr)
    is_file = filename is not None
    check_out(out, option, is_file=is_file)
    lock_out(out, option, is_file=is_file)
    if not is_file:
        remove_stale_staging(out)  # what a killed run left beside the folder
    return out
