"""fork_map: the driver's in-memory work on forked children gives what a serial loop gives."""
import threading

import numpy as np
import pytest

from harness.core.forkmap import fork_available, fork_map


def test_fork_map_equals_the_serial_loop_over_unpicklable_closures():
    lock = threading.Lock()  # not picklable: a spawned pool could not take a closure over it
    data = np.arange(1000.0)

    def work(i):
        with lock:
            return float(data[: i + 1].sum()), i

    assert fork_map(work, 57, 2) == [work(i) for i in range(57)] == fork_map(work, 57, 1)


def test_fork_map_raises_what_the_work_raised():
    def work(i):
        if i == 5:
            raise ValueError(f"item {i}")
        return i

    with pytest.raises(ValueError, match="item 5"):
        fork_map(work, 9, 2)


@pytest.mark.skipif(not fork_available(), reason="fork_map is serial off Linux")
def test_fork_map_runs_in_other_processes():
    import os
    pids = fork_map(lambda i: os.getpid(), 40, 2, chunksize=1)
    assert os.getpid() not in pids


def test_a_child_ended_by_an_at_fork_handler_is_an_error_not_a_wait():
    """probe 47: a loaded module's os.register_at_fork handler that exits left multiprocessing.Pool waiting forever."""
    import subprocess
    import sys
    from pathlib import Path
    code = ("import os\nfrom harness.core.forkmap import fork_map, ForkedChildLost\n"
            "os.register_at_fork(after_in_child=lambda: os._exit(0))\n"
            "try:\n    fork_map(lambda i: i, 8, 2)\nexcept ForkedChildLost as e:\n    print('lost:', e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={"PYTHONPATH": str(Path(__file__).resolve().parents[2]), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0 and r.stdout.startswith("lost: a forked child"), (r.returncode, r.stdout, r.stderr[-800:])
