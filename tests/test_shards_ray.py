"""The Ray backend (issue 11): a verification on Ray gives the statistics and p-values of one drawn in
this process — on a local Ray the test starts (ray.init, 2 CPUs, a small object store), on a head node
the test starts with `ray start --head` on 127.0.0.1 and joins by address (then `ray stop`), and with a
Ray worker SIGKILLed mid-run (task retries).  Slow: each starts Ray (tens of seconds on 2 busy cores)."""
import os
import shutil
import socket
import subprocess
import sys
import tempfile

import pytest

from harness.backends import RayBackend, SerialBackend

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow

from test_shards import _same_tables, _verify  # noqa: E402

STORE = 80 * 1024 * 1024  # bytes of object store: shard results are small


@pytest.fixture(scope="module")
def serial_reference():
    return _verify(SerialBackend())[0]


def test_ray_local_cluster_gives_identical_results(serial_reference):
    backend = RayBackend(None, workers=2, object_store_memory=STORE)
    try:
        table, _ = _verify(backend)
    finally:
        backend.close()
    assert not ray.is_initialized()
    _same_tables(serial_reference, table)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ray_head_node_joined_by_address_gives_identical_results(serial_reference):
    exe = shutil.which("ray", path=os.path.dirname(sys.executable)) or shutil.which("ray")
    assert exe, "the ray command is installed with the ray package"
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    start = [exe, "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(port), "--num-cpus", "2",
             "--object-store-memory", str(STORE), "--include-dashboard", "false", "--disable-usage-stats",
             "--temp-dir", tempfile.mkdtemp(prefix="rt", dir="/tmp")]  # short: Ray's socket paths have a length limit
    try:
        done = subprocess.run(start, env=env, timeout=180, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
        backend = RayBackend(f"127.0.0.1:{port}")
        try:
            table, _ = _verify(backend)
        finally:
            backend.close()
    finally:
        subprocess.run([exe, "stop", "--force"], env=env, timeout=120, capture_output=True)
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
