"""Samplers for tests/verify/test_shards.py that worker processes import by name (not a test module)."""
import os
import signal
from pathlib import Path

from specimpl.speculative import speculative_generate

KILL_MARKER = "SPECVERIFY_TEST_KILL_MARKER"  # env: a file path; the first call that creates it kills its process


def kill_once_generate(target, draft, prompts, **kw):
    """The reference sampler, except that the first call anywhere (the one that creates the marker file
    named by $SPECVERIFY_TEST_KILL_MARKER) SIGKILLs its own process mid-run, as a lost worker."""
    marker = os.environ.get(KILL_MARKER)
    if marker:
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            fd = None
        if fd is not None:
            os.write(fd, str(os.getpid()).encode())
            os.close(fd)
            os.kill(os.getpid(), signal.SIGKILL)
    return speculative_generate(target, draft, prompts, **kw)


def marker_pid(marker) -> int:
    return int(Path(marker).read_text())


def die(_task):
    """A task that always kills its own process."""
    os.kill(os.getpid(), signal.SIGKILL)


def thread_counts(_=None) -> tuple[int, list[int]]:
    """torch's threads and every BLAS pool's threads in the calling process, once the harness's statistics
    (scipy, with its own OpenBLAS) are loaded as a shard task loads them."""
    import torch
    from threadpoolctl import threadpool_info
    import harness.verify.battery  # noqa: F401
    return torch.get_num_threads(), [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]


def exit_zero(_task):
    """A task that ends its own process with exit status 0 (as a library calling os._exit(0) would)."""
    os._exit(0)


def die_mid_result(_task):
    """A task whose worker dies while its result is half sent (as a worker SIGKILLed by a time limit or the
    out-of-memory killer in the middle of sending a large result would): it writes the header of a 1 MB message
    and 16 bytes of it into the pool's result pipe, then ends its process.  The executor's reader then waits
    for the rest of the message for ever."""
    import struct
    import sys
    frame = sys._getframe()
    while frame is not None and "result_queue" not in frame.f_locals:
        frame = frame.f_back
    fd = frame.f_locals["result_queue"]._writer.fileno()
    os.write(fd, struct.pack("!i", 1 << 20) + b"\0" * 16)
    os._exit(9)
