"""The Ray backend (issue 11): a verification on Ray gives the statistics and p-values of one drawn in
this process — on a local Ray the test starts (ray.init, 2 CPUs, a small object store), on a head node
the test starts with `ray start --head` on a loopback address and joins by address (then stops it), and with a
Ray worker SIGKILLed mid-run (task retries).  Slow: each starts Ray (tens of seconds on 2 busy cores)."""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from harness.core.backends import RayBackend, SerialBackend

# `make ray-check` (CI) sets SPECVERIFY_REQUIRE_RAY: there a Ray that cannot be imported fails, not skips
ray = pytest.importorskip("ray") if not os.environ.get("SPECVERIFY_REQUIRE_RAY") else __import__("ray")
pytestmark = pytest.mark.slow

from test_shards import _same_real_runs, _same_tables, _verify, _verify_real  # noqa: E402

STORE = 80 * 1024 * 1024  # bytes of object store: shard results are small


@pytest.fixture(scope="module")
def serial_reference():
    return _verify(SerialBackend())[0]


def test_ray_local_cluster_gives_identical_results(serial_reference, monkeypatch):
    from shard_samplers import thread_counts
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.setenv(var, "2")  # Ray's workers inherit it: the limits, not Ray's default of 1, give the ones
    backend = RayBackend(None, workers=2, object_store_memory=STORE)
    try:
        table, _ = _verify(backend)
        ((_, (torch_threads, blas_threads)),) = backend.map_unordered(thread_counts, [None])
    finally:
        backend.close()
    assert not ray.is_initialized()
    _same_tables(serial_reference, table)
    assert (torch_threads, blas_threads) == (1, [1, 1])  # as in a pool worker


def test_local_ray_listens_on_loopback_only():
    """Issue 45: a local Ray (--backend ray without --address) binds 127.0.0.1 only -- GCS, raylet, object
    manager, workers, agents: every listening socket of this process's tree, read from /proc, once a task ran
    (so workers exist).  Without the pin, Ray 2.x binds 0.0.0.0, :: and the machine's network address."""
    from listening import listening, non_loopback
    from shard_samplers import thread_counts
    backend = RayBackend(None, workers=1, object_store_memory=STORE)
    try:
        list(backend.map_unordered(thread_counts, [None]))
        rows = listening(os.getpid())
    finally:
        backend.close()
    assert len({r[0] for r in rows}) >= 3, rows  # the GCS, the raylet and more: the listing sees Ray's processes
    assert non_loopback(rows) == [], non_loopback(rows)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_port(host: str, port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection((host, port), timeout=1).close()
            return
        except OSError:
            assert time.monotonic() < deadline, f"the Ray head did not open {host}:{port} in {timeout} s"
            time.sleep(1)


def test_ray_head_node_joined_by_address_gives_identical_results(serial_reference):
    """`ray start --head --block` on a loopback address (127.0.0.2: Ray rewrites 127.0.0.1 to the machine's
    network address), with Ray's default authentication; stopped by signalling the process group this test started
    (`ray stop` would stop every Ray on the machine)."""
    exe = shutil.which("ray", path=os.path.dirname(sys.executable)) or shutil.which("ray")
    assert exe, "the ray command is installed with the ray package"
    host, port = "127.0.0.2", _free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    start = [exe, "start", "--head", "--block", "--node-ip-address", host, "--port", str(port), "--num-cpus", "2",
             "--object-store-memory", str(STORE), "--include-dashboard", "false", "--disable-usage-stats",
             "--temp-dir", tempfile.mkdtemp(prefix="rt", dir="/tmp")]  # short: Ray's socket paths have a length limit
    head = subprocess.Popen(start, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        _wait_for_port(host, port, 180)
        backend = RayBackend(f"{host}:{port}")
        try:
            assert backend.workers == 2
            table, _ = _verify(backend)
        finally:
            backend.close()
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        try:
            head.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait(30)
    _same_tables(serial_reference, table)


def test_a_sigkilled_ray_worker_is_retried_and_changes_nothing(tmp_path, monkeypatch):
    from shard_samplers import KILL_MARKER, kill_once_generate
    table_serial, _ = _verify(SerialBackend(), kill_once_generate, "kill_once")
    marker = tmp_path / "killed"
    monkeypatch.setenv(KILL_MARKER, str(marker))  # Ray's workers inherit the driver's environment
    backend = RayBackend(None, workers=2, object_store_memory=STORE)
    try:
        table, runs = _verify(backend, kill_once_generate, "kill_once")
    finally:
        backend.close()
    assert marker.exists() and all(r.error is None for r in runs)
    _same_tables(table_serial, table)


def test_a_real_model_run_on_ray_equals_one_drawn_in_the_driver():
    """A real-model run (harness.verify.shards.RealTask) is a Ray task like a shard: the tiny pair is loaded in the
    Ray worker, and its PIT values and rows are those of the run drawn in this process."""
    here = _verify_real(SerialBackend())
    backend = RayBackend(None, workers=2, object_store_memory=STORE)
    try:
        there = _verify_real(backend)
    finally:
        backend.close()
    _same_real_runs(here, there)
