"""The exit-code contract of ``python -m harness`` and the errors that carry it.

Every subcommand ends with one of these statuses; :func:`harness.cli.main` is the one place that maps
an outcome or an exception to it:

    0    certified / ok            every run as its role requires (``calibrate``: rates consistent)
    1    lossy                     a sampler under test was judged lossy, a buggy control certified, or
                                   ``calibrate`` measured a false-alarm rate inconsistent with the nominal one
    2    usage or configuration    a bad option, scenario file or sweep file: one line naming the
                                   option or ``file: key`` and the value (:class:`UsageError`)
    3    a sampler or model failed the sampler under test (or a model) raised, exited, or returned
                                   malformed output; one or two lines on stderr, the full traceback in
                                   ``<out>/error.log`` (:class:`SamplerError`)
    4    inconclusive              nothing was found lossy, but a run that must be certified was not (a bound
                                   above its tolerance): the console says how many draws would certify and
                                   the command that draws them (``verify``, ``verify-samples``, ``pit``)
    130  interrupted               Ctrl-C from the user (state saved so far is kept for a resume)

``SystemExit`` and ``KeyboardInterrupt`` raised *inside a sampler call* are the sampler's failure (3),
not the harness's exit: :func:`sigint_flag` records whether the user really pressed Ctrl-C, and
:func:`user_interrupted` tells the two apart.
"""
from __future__ import annotations

import contextlib
import signal
import threading

__all__ = ["EXIT_OK", "EXIT_LOSSY", "EXIT_USAGE", "EXIT_FAILED", "EXIT_INCONCLUSIVE", "EXIT_INTERRUPTED", "EXIT_CODES", "HarnessError",
           "UsageError", "SamplerError", "sigint_flag", "user_interrupted"]

EXIT_OK, EXIT_LOSSY, EXIT_USAGE, EXIT_FAILED, EXIT_INCONCLUSIVE, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 130

EXIT_CODES = {
    EXIT_OK: "certified / ok",
    EXIT_LOSSY: "lossy (a sampler judged lossy, a buggy control certified, calibrate inconsistent)",
    EXIT_USAGE: "usage or configuration error (one line naming the option or file: key and the value)",
    EXIT_FAILED: "the sampler or a model failed (summary on stderr, traceback in <out>/error.log)",
    EXIT_INCONCLUSIVE: "inconclusive (nothing lossy, not certified: the draws that would certify and the command)",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C)",
}


class HarnessError(Exception):
    """An error with its exit status."""

    exit_code = EXIT_FAILED


class UsageError(HarnessError, ValueError):
    """A bad option or configuration value (exit 2).  Its message is one line that names the option
    (``--seed``) or the file and key (``bad.toml: `draft.kind```), echoes the value and says what is allowed."""

    exit_code = EXIT_USAGE

    def __init__(self, msg: str):
        super().__init__(" ".join(str(msg).split()))


class SamplerError(HarnessError):
    """A sampler (or model) call failed (exit 3).  ``summary``: one or two lines for stderr;
    ``details``: the full traceback (or whatever explains it), written to the error log."""

    exit_code = EXIT_FAILED

    def __init__(self, summary: str, details: str = ""):
        super().__init__(summary)
        self.summary, self.details = summary, details


# ------------------------------------------------------------------- Ctrl-C from the user, or not
_state = {"interrupted": False, "armed": False}


def _on_sigint(signum, frame):
    _state["interrupted"] = True
    raise KeyboardInterrupt


@contextlib.contextmanager
def sigint_flag():
    """While inside, a SIGINT both raises ``KeyboardInterrupt`` (as Python's own handler does) and records
    that the user interrupted, so that a ``KeyboardInterrupt`` a sampler raises by itself can be told
    apart.  Outside the main thread (where signals cannot be handled) it does nothing."""
    _state["interrupted"] = False
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGINT, _on_sigint)
    _state["armed"] = True
    try:
        yield
    finally:
        _state["armed"] = False
        signal.signal(signal.SIGINT, old)


def user_interrupted() -> bool:
    """Whether a ``KeyboardInterrupt`` now propagating should count as the user's: a SIGINT arrived
    inside :func:`sigint_flag`, or no such flag is set up (a library caller: assume the user)."""
    return _state["interrupted"] or not _state["armed"]
