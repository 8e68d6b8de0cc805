"""Worker processes die with their parent: a worker that outlives the command that started it (SIGKILLed, OOM-killed)
would keep drawing, and holding its memory, for nobody.

:func:`die_with_parent` runs in a worker as it starts: on Linux it asks the kernel for SIGKILL when the parent dies
(``prctl(PR_SET_PDEATHSIG)``; only when the worker was started from the parent's main thread, since the kernel
sends the signal when the *thread* that started the worker ends), and on every platform a daemon thread checks
``os.getppid()`` every :data:`POLL_S` seconds and ends the worker when its parent is gone (reparented).
"""
from __future__ import annotations

import os
import sys
import threading
import time

__all__ = ["die_with_parent", "POLL_S"]

POLL_S = 0.5  # seconds between two looks at the parent (the fallback where prctl is not there)
_PR_SET_PDEATHSIG = 1


def _pdeathsig() -> None:
    import ctypes
    import signal
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):  # no prctl: the watch thread does it
        pass


def _watch(parent: int) -> None:
    while True:
        time.sleep(POLL_S)
        if os.getppid() != parent:
            os._exit(1)


def die_with_parent(parent: int, from_main_thread: bool = True) -> None:
    """End this process when process ``parent`` (its parent) ends; see the module docstring."""
    if from_main_thread and sys.platform.startswith("linux"):
        _pdeathsig()
    if os.getppid() != parent:  # the parent died before the signal was asked for
        os._exit(1)
    threading.Thread(target=_watch, args=(parent,), daemon=True, name="die-with-parent").start()
