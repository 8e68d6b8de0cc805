"""`python -m harness samples-dedupe`: repair a sample file that holds a request id more than once.

    python -m harness samples-dedupe --samples out.jsonl              # in place
    python -m harness samples-dedupe --samples out.jsonl --out fixed.jsonl

A request id must appear once in a sample file (it is ``sample``'s resume key; :func:`read_samples`
refuses a repeat, exit 2).  A file can hold repeats when it was written by two processes at once (before
``sample`` locked its file) or edited by hand.  This command keeps the *first* line of each request id, in
file order, and drops the later ones — whatever their content, so the choice does not depend on the
completions (each is a draw of the same request; keeping the first biases nothing).  It says how many
lines it dropped and how many of them differed from the line kept.  A last line cut short by a crash is
dropped too; any other malformed line is refused (``FILE:LINE``, exit 2) and nothing is written.  The
file is rewritten atomically (a temporary file beside it, then ``os.replace``), under the writers' lock:
a file that ``sample`` is writing is refused.  Exit 0 done (also when there was nothing to drop), 2 bad
input.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from harness.core.errors import UsageError
from harness.core.options import check_out
from harness.core.provenance import atomic_write_text
from harness.samples.format import _parse_line, lock_exclusive

__all__ = ["add_arguments", "run", "dedupe_lines"]


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--samples", type=Path, required=True, help="the sample file to repair")
    ap.add_argument("--out", type=Path, help="write the repaired file here (default: replace --samples)")


def dedupe_lines(path: Path, text: str) -> tuple[list[str], int, int, bool]:
    """(lines kept, lines dropped, dropped lines whose record differs from the one kept, torn last line
    dropped); SampleFormatError (exit 2) at a malformed line other than a torn last one."""
    torn = bool(text) and not text.endswith("\n")
    lines = text.split("\n")
    if torn:
        lines = lines[:-1]
    kept, first, dropped, differ = [], {}, 0, 0
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        rec = _parse_line(path, lineno, line)
        if rec.request_id in first:
            dropped += 1
            differ += json.loads(line) != json.loads(first[rec.request_id])
            continue
        first[rec.request_id] = line
        kept.append(line)
    return kept, dropped, differ, torn


def _check_writable(src: Path) -> None:
    """Repairing in place replaces ``src``: it must be writable (its mode, not only root's rights) and so
    must its folder; UsageError naming --samples (and --out, the way out) otherwise."""
    if not (src.stat().st_mode & 0o222) or not os.access(src, os.W_OK):
        raise UsageError(f"`--samples` must be a writable file to be repaired in place; got {str(src)!r}, which is "
                         "read-only (give --out for a repaired copy)")
    check_out(src, option="--samples", is_file=True)


def run(args) -> int:
    src = Path(args.samples)
    if not src.is_file():
        raise UsageError(f"`--samples` must be a sample file; got {str(src)!r}, which "
                         f"{'is not a file' if src.exists() else 'does not exist'}")
    check_out(args.out, is_file=True)
    dst = Path(args.out) if args.out else src
    if dst == src:
        _check_writable(src)
    try:
        lock = open(src, "a" if dst == src else "r", encoding="utf-8")
    except OSError as e:
        raise UsageError(f"`--samples` {str(src)!r} cannot be opened ({e.strerror})") from None
    with lock:  # the writers' lock: not while `sample` writes the file
        lock_exclusive(lock, src, "--samples")
        try:
            text = src.read_bytes().decode("utf-8")
        except UnicodeDecodeError as e:
            raise UsageError(f"`--samples` {str(src)!r} is not UTF-8 (byte {e.start})") from None
        kept, dropped, differ, torn = dedupe_lines(src, text)
        if not kept:
            raise UsageError(f"`--samples` {str(src)!r} holds no record; nothing to repair")
        if dropped or torn or dst != src:
            atomic_write_text(dst, "".join(line + "\n" for line in kept))
    print(f"{dst}: kept {len(kept)} records (the first of each request id); dropped {dropped} repeated line(s)"
          + (f", {differ} of them with another completion than the one kept" if dropped else "")
          + ("; dropped an unfinished last line" if torn else ""), file=sys.stderr)
    return 0
