"""The verdict is owned by the parent (issue 45, item 1): a plug-in sampler never runs in the process that decides
`verify`'s exit status (with --workers 1 on one worker process), so one that exits, hangs past --sampler-timeout or
kills its worker ends in exit 3 with a line naming it and what it did, never exit 0 without a report; and the
workers die with the command (SIGKILL of the driver)."""
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from harness.core.backends import LocalPool, SerialBackend, TaskLost, make_backend
from harness.verify.isolation import backend_for, is_plugin_task, lost_message, task_timeout

REPO = Path(__file__).resolve().parents[2]
SIG = ("from specimpl import speculative_generate\n"
       "def fn(target, draft, prompts, *, k, max_new_tokens, config, eos_token_id=None, generator=None):\n")


def _cli(tmp_path, body, *extra, timeout=300):
    src = tmp_path / "s.py"
    src.write_text(SIG + textwrap.indent(textwrap.dedent(body), "    "))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "harness", "verify", "--sampler", f"{src}:fn", "--scenario", "base", "--draws",
           "2000", "--no-real-model", "--no-progress", "--no-figures", "--out", str(tmp_path / "out"), *extra]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout)


def _last(err: str) -> str:
    return [line for line in err.splitlines() if line.strip()][-1]


@pytest.mark.slow  # ~30s: a child interpreter per run; make test-slow (CI) runs it
def test_os_exit_0_at_one_worker_is_exit_3_naming_the_sampler(tmp_path):
    """Was exit 0 with nothing printed and no report (the sampler ran in the driver)."""
    r = _cli(tmp_path, "import os\nos._exit(0)\n", "--workers", "1")
    assert r.returncode == 3, r.stderr
    line = _last(r.stderr)
    assert "s.py:fn" in line and "exit status 0" in line and "os._exit" in line, line
    assert (tmp_path / "out" / "runs.csv").is_file()  # the report says what happened too


@pytest.mark.slow  # 39 s at load 6-12 on 2 cores: two worker starts (the determinism check's worker is stopped too)
def test_hang_past_sampler_timeout_is_exit_3(tmp_path):
    t0 = time.monotonic()
    r = _cli(tmp_path, "import time\ntime.sleep(3600)\n", "--workers", "1", "--sampler-timeout", "2")
    assert r.returncode == 3, r.stderr
    line = _last(r.stderr)
    assert "s.py:fn" in line and "did not return within 2 s" in line and "--sampler-timeout" in line, line
    assert time.monotonic() - t0 < 240


def test_sampler_timeout_is_checked_up_front(tmp_path):
    r = _cli(tmp_path, "return None\n", "--sampler-timeout", "-1")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "`--sampler-timeout` must be a finite number of seconds >= 0" in r.stderr and "-1" in r.stderr


# ------------------------------------------------------------------------------------------- the pool
def _sleep(seconds):
    time.sleep(seconds)
    return seconds


def test_pool_names_an_exiting_task_and_stops_a_hung_one():
    from shard_samplers import exit_zero
    with LocalPool(1) as pool:
        out = dict(pool.map_unordered(exit_zero, [None]))
    assert isinstance(out[0], TaskLost) and out[0].exitcode == 0 and out[0].attempts == 1  # not retried
    with LocalPool(2) as pool:
        out = dict(pool.map_unordered(_sleep, [30, 0.1, 0.2], timeout=lambda s: 3.0 if s > 1 else None))
    assert isinstance(out[0], TaskLost) and out[0].timed_out == 3.0
    assert out[1] == 0.1 and out[2] == 0.2  # the others are drawn (again, if they were in flight), uncounted
    assert "did not return within 3 s" in lost_message(out[0], "shard 0")


def test_one_worker_isolates_plugins_only():
    from harness.verify.shards import ShardTask
    serial = make_backend("local", 1)
    assert isinstance(serial, SerialBackend) and serial.isolate_plugins
    plug = ShardTask(0, 0, 2, "x", None, ("file", "/x/s.py", "fn"), 0, False, 2, 2, 0)
    own = ShardTask(0, 0, 2, "reference", None, ("import", "specimpl.speculative", "speculative_generate", False),
                    0, False, 2, 2, 0)
    base = ShardTask(0, 0, 2, "x", None, ("baseline",), 0, True, 2, 2, 0)
    assert is_plugin_task(plug) and not is_plugin_task(own) and not is_plugin_task(base)
    assert backend_for(serial, [own, base]) == (serial, False)
    pool, close = backend_for(serial, [own, plug])
    assert isinstance(pool, LocalPool) and pool.workers == 1 and close
    assert backend_for(SerialBackend(), [plug])[1] is False  # a library caller's own process: its choice
    assert task_timeout(None)(base) is None and task_timeout(0)(plug) is None and task_timeout(5)(plug) == 5.0


def _children(pid: int) -> list[int]:
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                ppid = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == pid:
                out.append(int(p.name))
    return out


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        kids = _children(todo.pop())
        out += kids
        todo += kids
    return out


def _alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow  # ~15s: a child interpreter per run; make test-slow (CI) runs it
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_workers_die_with_a_sigkilled_driver(tmp_path):
    src = tmp_path / "s.py"
    src.write_text(SIG + textwrap.indent(textwrap.dedent("""
        import time
        if prompts.shape[0] != 64:  # the determinism check (64 sequences) passes; every shard (500) hangs
            time.sleep(3600)
        return speculative_generate(target, draft, prompts, k=k, max_new_tokens=max_new_tokens, config=config,
                                    eos_token_id=eos_token_id, generator=generator)
    """), "    "))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "harness", "verify", "--sampler", f"{src}:fn", "--scenario", "base", "--draws",
           "1000", "--no-real-model", "--no-progress", "--workers", "2", "--out", str(tmp_path / "out")]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers = []
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and len(workers) < 2:  # the two pool workers (and the resource tracker)
            time.sleep(0.5)
            workers = [c for c in _descendants(proc.pid) if "spawn_main" in  # owner -> driver -> its workers
                       (Path("/proc") / str(c) / "cmdline").read_bytes().decode(errors="replace")]
        driver = _children(proc.pid)
        assert len(workers) >= 2, "the workers did not start"
        time.sleep(2.0)  # they are drawing (sleeping in the sampler)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(map(_alive, workers)):
            time.sleep(0.2)
        assert not any(map(_alive, workers + driver)), "the driver or a worker outlived the SIGKILLed command"
    finally:
        if proc.poll() is None:
            proc.kill()
        for w in workers + (driver if workers else []):  # never leave one behind, even when the test fails
            if _alive(w):
                os.kill(w, signal.SIGKILL)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("prctl", [True, False])  # the kernel's parent-death signal, and the getppid watch alone
def test_lifeline_ends_a_child_of_a_sigkilled_parent(prctl):
    script = textwrap.dedent(f"""
        import os, time
        from harness.core.lifeline import die_with_parent
        pid = os.fork()
        if pid == 0:
            die_with_parent(os.getppid(), {prctl})
            time.sleep(120)
            os._exit(0)
        print(pid, flush=True)
        time.sleep(120)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    child = int(parent.stdout.readline())
    try:
        time.sleep(0.5)
        assert _alive(child)
        parent.kill()
        parent.wait(10)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and _alive(child):
            time.sleep(0.1)
        assert not _alive(child)
    finally:
        if _alive(child):
            os.kill(child, signal.SIGKILL)


@pytest.mark.parametrize("top, says", [("import os\nos._exit(0)\n", "ended its process with exit status 0"),
                                       ("raise ValueError('bad at import')\n", "ValueError: bad at import")])
def test_import_time_exit_is_exit_2_naming_the_sampler(tmp_path, top, says):
    """An os._exit(0) at import time ended the command with status 0 (the file is imported in the driver)."""
    src = tmp_path / "s.py"
    src.write_text(top + SIG + "    return None\n")
    r = subprocess.run([sys.executable, "-m", "harness", "verify", "--sampler", f"{src}:fn", "--scenario", "base",
                        "--draws", "2000", "--no-real-model", "--no-progress", "--out", str(tmp_path / "out")],
                       cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "`--sampler`" in lines[0] and says in lines[0], r.stderr


# ------------------------------------------------------------------- samplers no function recipe rebuilds
OBJECTS = SIG + "    return speculative_generate(target, draft, prompts, k=k, max_new_tokens=max_new_tokens, " \
                "config=config, eos_token_id=eos_token_id, generator=generator)\n" + textwrap.dedent("""
    class Sampler:
        def __call__(self, target, draft, prompts, *, k, max_new_tokens, config, eos_token_id=None, generator=None):
            import os
            os._exit(0)

    obj = Sampler()

    def make():
        def inner(target, draft, prompts, **kw):
            return fn(target, draft, prompts, **kw)
        return inner

    closure = make()
    """)


@pytest.mark.parametrize("name", ["obj", "closure"])
def test_a_callable_object_or_closure_travels_as_its_sampler_value(tmp_path, monkeypatch, name):
    """A `--sampler` naming a callable object or a closure had no recipe a worker could rebuild, so it was drawn
    in the driver (at --workers 1, os._exit(0) there was exit 0 without a verdict): it travels as its value."""
    from harness.verify.sampler import load_sampler
    from harness.verify.shards import resolve_sampler, sampler_recipe
    (tmp_path / "s.py").write_text(OBJECTS)
    monkeypatch.chdir(tmp_path)
    fn = load_sampler(f"s.py:{name}")
    recipe = sampler_recipe(fn, "s.py:" + name)
    assert recipe == ("spec", f"{tmp_path / 's.py'}:{name}")  # absolute: a worker elsewhere finds the file
    assert is_plugin_task(type("T", (), {"sampler": recipe})())
    assert resolve_sampler(recipe).sampler_spec == recipe[1]
    assert not is_plugin_task(type("T", (), {"sampler": ("spec", "specimpl.speculative:speculative_generate")})())


@pytest.mark.slow  # ~30 s: a child interpreter and its worker; make test-slow (CI) runs it
def test_os_exit_0_in_a_callable_object_at_one_worker_is_exit_3(tmp_path):
    src = tmp_path / "s.py"
    src.write_text(OBJECTS)
    cmd = [sys.executable, "-m", "harness", "verify", "--sampler", f"{src}:obj", "--scenario", "base", "--draws",
           "2000", "--no-real-model", "--no-progress", "--no-figures", "--workers", "1", "--out", str(tmp_path / "o")]
    r = subprocess.run(cmd, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 3, r.stderr
    line = _last(r.stderr)
    assert "s.py:obj" in line and "exit status 0" in line and "os._exit" in line, line


@pytest.mark.slow  # ~15 s: two interpreter starts
def test_an_import_that_hangs_stops_at_sampler_timeout(tmp_path):
    """The trial import waited a fixed 600 s whatever --sampler-timeout said."""
    src = tmp_path / "s.py"
    src.write_text("import time\ntime.sleep(3600)\n" + SIG + "    return None\n")
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "harness", "verify", "--sampler", f"{src}:fn", "--scenario", "base",
                        "--draws", "2000", "--no-real-model", "--no-progress", "--sampler-timeout", "8",
                        "--out", str(tmp_path / "out")],
                       cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "did not finish within 8 s (--sampler-timeout)" in lines[0], r.stderr
    assert time.monotonic() - t0 < 120


def test_a_worker_dead_in_the_middle_of_its_result_does_not_hang_the_pool():
    """A worker killed while sending a result (past its time limit, or by the OOM killer) left half a message in
    the result pipe: the executor's reader waited for the rest for ever, and the run sat with no worker alive."""
    from shard_samplers import die_mid_result
    t0 = time.monotonic()
    with LocalPool(1) as pool:
        out = dict(pool.map_unordered(die_mid_result, [None]))
        assert dict(pool.map_unordered(_sleep, [0.1])) == {0: 0.1}  # the pool works again after it
    assert isinstance(out[0], TaskLost) and out[0].exitcode == 9 and "status 9" in out[0].reason
    assert time.monotonic() - t0 < 60


@pytest.mark.slow  # ~15 s: the real-model pair on a worker process
def test_os_exit_0_in_a_pit_sampler_is_exit_3(tmp_path):
    """`pit --sampler` drew in the process that decides its exit status: os._exit(0) there was exit 0, no report.
    And it fails fast: once a real-model run has failed, its other tasks are not drawn (before stop 51 each of its 37
    tasks (36 exact-pair shards, the tiny pair) was started and died in turn, 38 sampler calls and 254 s on 2 cores;
    now one call per worker in flight at most)."""
    src = tmp_path / "s.py"
    calls = tmp_path / "calls"
    src.write_text(SIG + f"    import os\n    open({str(calls)!r}, 'a').write('call\\n')\n    os._exit(0)\n")
    r = subprocess.run([sys.executable, "-m", "harness", "pit", "--sampler", f"{src}:fn", "--n-sequences", "4",
                        "--max-new-tokens", "8", "--no-progress", "--no-figures", "--out", str(tmp_path / "o")],
                       cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 3, r.stderr
    assert any("s.py:fn" in ln and "exit status 0" in ln and "os._exit" in ln for ln in r.stderr.splitlines()), r.stderr
    assert (tmp_path / "o" / "summary.md").is_file()
    n_calls = len(calls.read_text().splitlines())
    workers = max(2, len(os.sched_getaffinity(0)))  # the backend's default: one worker per core
    assert 1 <= n_calls <= workers, f"{n_calls} sampler calls: the failed run's other tasks were drawn"


@pytest.mark.parametrize("child", ["return", "sys.exit"])
def test_a_child_the_sampler_forks_never_goes_on_as_the_worker(tmp_path, child):
    """probe 47, case 8: a sampler that forks a child which returns or calls sys.exit(0) left that child running the
    worker's own loop (the pool then waited without end); guard_sampler ends such a child as it leaves the call."""
    import os
    from harness.verify.sampler import guard_sampler

    def fn(*args, **kwargs):
        if os.fork() == 0 and child == "sys.exit":
            raise SystemExit(0)
        return "result"

    me, went_on = os.getpid(), tmp_path / "went_on"
    try:
        out = guard_sampler(fn)()
    except Exception:  # noqa: BLE001 - only the child could get here (SystemExit -> SamplerCallError)
        out = None
    if os.getpid() != me:  # the forked child came back from the call: the defect
        went_on.write_text("yes")
        os._exit(1)
    _, status = os.wait()
    assert out == "result" and not went_on.exists() and os.waitstatus_to_exitcode(status) == 0
