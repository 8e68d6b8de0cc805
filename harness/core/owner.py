"""The exit status of a command that runs a plug-in sampler is owned by a parent that runs none of its code.

``python -m harness verify --sampler ...`` and ``pit --sampler ...`` import the user's module (after a trial import
in a child) and draw on worker processes.  What that module sets up when it is imported -- an ``atexit`` handler, a
thread, a signal handler, an object whose ``__del__`` runs at exit -- can still end the command's process later,
with an exit status of its choosing (``os._exit(0)``).  So such a command runs as the child of a thin parent
(:func:`owned_main`, from ``python -m harness`` and the ``specverify`` script): the child tells the parent the status
it decided, over a pipe, as :func:`harness.cli.main` returns (:func:`tell_owner`); the parent exits with that status,
and with exit 3 and one line when the child ended without telling one.  Where the child's own exit status differs
from the one it told (code of the sampler's module ran at exit), a line says so and the decided status stands.

The parent imports nothing but the standard library and waits through a Ctrl-C (the child, in the same process group,
gets it too, saves what it drew and ends with 130; a SIGINT sent to the parent alone is passed on), and the child
dies with it (:mod:`harness.core.lifeline`).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Optional

__all__ = ["ENV", "OWNED_COMMANDS", "needs_owner", "owned_main", "tell_owner", "is_owned", "claim"]

ENV = "SPECVERIFY_OWNER_FD"  # in the child: the pipe's write end, where it tells the status it decided
OWNED_COMMANDS = ("verify", "pit")  # the commands whose --sampler runs code from outside the project
# the notice multiprocessing's resource tracker prints (after the verdict) when a process it served was ended
# without its clean-up, as a sampler's os._exit does: the line this parent prints says what happened
_TRACKER_NOTICE = "ignore:resource_tracker:UserWarning"
EXIT_FAILED = 3  # harness.core.errors.EXIT_FAILED (not imported: this module stays free of the project's imports)


def _command(argv: list) -> Optional[str]:
    return next((a for a in argv if not a.startswith("-")), None)


def needs_owner(argv: list) -> bool:
    """Whether ``argv`` (after ``python -m harness``) runs a plug-in sampler under an owner: an owned command with
    ``--sampler`` (or an abbreviation argparse accepts), outside an owned child already."""
    if os.environ.get(ENV) or _command(argv) not in OWNED_COMMANDS:
        return False
    names = {a.split("=", 1)[0] for a in argv if a.startswith("--")}
    return any(len(n) > 3 and "--sampler".startswith(n) for n in names)


_FD: list = [None]  # the pipe's write end, once claimed (:func:`claim`)


def is_owned() -> bool:
    """Whether this process is an owned child (it then dies with its owner)."""
    return bool(os.environ.get(ENV)) or _FD[0] is not None


def claim() -> None:
    """In an owned child, first thing: take the pipe's write end out of the environment and make it
    non-inheritable, so that no process this one starts (the trial import, the workers, a subprocess of the
    sampler's) is told where the status goes or holds the pipe open."""
    fd = os.environ.pop(ENV, None)
    if fd is None or _FD[0] is not None:
        return
    try:
        _FD[0] = int(fd)
        os.set_inheritable(_FD[0], False)
    except (OSError, ValueError):
        _FD[0] = None


def tell_owner(status: int) -> None:
    """Tell the owner the status this command decided (nothing outside an owned child)."""
    claim()
    fd, _FD[0] = _FD[0], None
    if fd is None:
        return
    try:
        os.write(fd, f"{int(status)}\n".encode())
        os.close(fd)
    except (OSError, ValueError):
        pass


def owned_main(argv: list) -> int:
    """Run ``python -m harness argv`` as a child and return the status it decided (see the module docstring)."""
    read, write = os.pipe()
    quiet = ",".join(filter(None, [os.environ.get("PYTHONWARNINGS"), _TRACKER_NOTICE]))
    proc = subprocess.Popen([sys.executable, "-m", "harness", *argv], pass_fds=(write,),
                            env={**os.environ, ENV: str(write), "PYTHONWARNINGS": quiet})
    os.close(write)
    old = signal.signal(signal.SIGINT, lambda *_: _pass_on(proc))
    try:
        code = proc.wait()
    finally:
        signal.signal(signal.SIGINT, old)
    told = _told(read)
    prog = f"python -m harness {_command(argv)}"
    how = f"exit status {code}" if code >= 0 else f"signal {-code}"
    if told is None:
        print(f"{prog}: failed: its process ended with {how} before it decided a verdict: code of the sampler's "
              f"module (an atexit handler, a thread or a signal handler it set up) or a library it loaded ended "
              f"the process; no verdict", file=sys.stderr)
        return EXIT_FAILED
    if told != code:
        print(f"{prog}: note: the verdict's exit status {told} stands; the process then ended with {how} "
              f"(code of the sampler's module ran at exit: an atexit handler or a __del__)", file=sys.stderr)
    return told


def _pass_on(proc: subprocess.Popen) -> None:
    """A SIGINT reached this parent: the child gets it once.  A Ctrl-C at the terminal reaches the whole foreground
    process group, the child included; a ``kill -INT`` of this process alone is passed on."""
    try:
        from_terminal = os.tcgetpgrp(sys.stdin.fileno()) == os.getpgrp()
    except (OSError, ValueError, AttributeError):
        from_terminal = False
    if not from_terminal and proc.poll() is None:
        proc.send_signal(signal.SIGINT)


def _told(fd: int) -> Optional[int]:
    """The status the child wrote (None: none); read without waiting for writers the child may have left."""
    os.set_blocking(fd, False)
    data = b""
    try:
        while chunk := os.read(fd, 4096):
            data += chunk
    except BlockingIOError:
        pass
    finally:
        os.close(fd)
    lines = data.decode(errors="replace").split()
    return int(lines[0]) if lines and lines[0].lstrip("-").isdigit() else None
