"""The verdict of a command a user acts on: its three words, its headline, its exit status, the command to run next.

    certified     PASS          exit 0   every run that must be certified is (and every control as its role requires)
    lossy         LOSSY         exit 1   a sampler under test is lossy, a lossless control was found lossy, or a
                                         buggy control was certified (the battery itself is wrong)
    inconclusive  INCONCLUSIVE  exit 4   nothing of the above, but a run that must be certified was not (a bound
                                         above its tolerance: the draws that would certify, and the command), or
                                         a buggy control was neither caught nor certified (the battery's power at
                                         this size is not shown; the gate's default sizes catch every control)

``verify``, ``pit``, ``verify-samples`` and the Python API use these words (:mod:`harness.core.errors` holds
the statuses).  :func:`rerun_command` writes the command line that draws more: the user's own, with the
sizing options replaced.
"""
from __future__ import annotations

import shlex
from typing import Iterable, Optional

from harness.core.errors import EXIT_INCONCLUSIVE, EXIT_LOSSY, EXIT_OK

__all__ = ["VERDICTS", "HEADLINE", "EXIT_STATUS", "combine", "exit_status", "headline", "with_options",
           "rerun_command"]

VERDICTS = ("certified", "lossy", "inconclusive")
HEADLINE = {"certified": "PASS", "lossy": "LOSSY", "inconclusive": "INCONCLUSIVE"}
EXIT_STATUS = {"certified": EXIT_OK, "lossy": EXIT_LOSSY, "inconclusive": EXIT_INCONCLUSIVE}
_RANK = {"certified": 0, "inconclusive": 1, "lossy": 2}


def combine(verdicts: Iterable[str]) -> str:
    """The verdict of several: lossy if any is, else inconclusive if any is, else certified (none: inconclusive,
    nothing was certified)."""
    vs = list(verdicts)
    for v in vs:
        if v not in _RANK:
            raise ValueError(f"`verdict` must be one of {VERDICTS}; got {v!r}")
    return max(vs, key=_RANK.__getitem__) if vs else "inconclusive"


def exit_status(verdict: str) -> int:
    """0 certified, 1 lossy, 4 inconclusive."""
    return EXIT_STATUS[combine([verdict])]


def headline(verdict: str) -> str:
    """PASS, LOSSY or INCONCLUSIVE."""
    return HEADLINE[combine([verdict])]


def with_options(argv: list, options: dict) -> list:
    """``argv`` with each option of ``options`` (``--draws`` -> 123) set: every earlier ``--draws X`` and
    ``--draws=X`` removed, the new value appended at the end (argparse keeps the last value of an option, so an
    abbreviation left earlier cannot win)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        name = a.split("=", 1)[0]
        if name in options:
            skip = "=" not in a
            continue
        out.append(a)
    for name, value in options.items():
        out += [name, str(value)]
    return out


def rerun_command(command: str, argv: Optional[list], options: dict) -> str:
    """``python -m harness COMMAND ...``: the options the user gave (``argv`` after the command name) with
    ``options`` set (:func:`with_options`), shell-quoted, ready to paste."""
    args = with_options(list(argv or []), options)
    return " ".join(["python", "-m", "harness", command] + [shlex.quote(str(a)) for a in args])
