"""A local engine server for the length of a ``with`` block: started on 127.0.0.1, stopped whatever happens.

    with local_server(cmd, ready_url, timeout_s=300, error=ServerError) as proc:
        ...                                  # the server answered ready_url with 200

The server runs in its own process group, so the children an engine starts (vLLM's engine core and workers)
stop with it: SIGINT to the group, SIGKILL after 20 s; after the leader exited, whatever it left behind gets
SIGTERM.  Used by the llama.cpp and vLLM servers and by the vLLM sample worker.
"""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from typing import Optional

__all__ = ["free_port", "local_server", "wait_ready", "stop_group"]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(proc, url: str, timeout_s: float, error: type = RuntimeError, what: str = "the server") -> None:
    """Poll ``url`` until it answers 200; ``error`` when ``proc`` exits first or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise error(f"{what} exited with status {proc.returncode} before answering at {url}")
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.5)
    raise error(f"{what} did not answer at {url} within {timeout_s:g} s")


def stop_group(proc) -> None:
    """Stop ``proc``'s process group (it was started with ``start_new_session=True``)."""
    if proc.poll() is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


@contextlib.contextmanager
def local_server(cmd: list[str], ready_url: str, *, timeout_s: float, error: type = RuntimeError,
                 what: str = "the server", env: Optional[dict] = None, log_path=None):
    """Run ``cmd`` until the block ends; yields the process once ``ready_url`` answers."""
    log = open(log_path, "wb") if log_path else subprocess.DEVNULL
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_ready(proc, ready_url, timeout_s, error, what)
        yield proc
    finally:
        stop_group(proc)
        if log_path:
            log.close()
