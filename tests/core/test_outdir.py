"""Default output folders (harness/core/outdir.py), the lock on `--out` (outlock.py) and stale staging folders
(atomic.py): a command run without --out writes under runs/, never into committed results/ (issues 40 and 45)."""
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from harness.cli import build_parser, main
from harness.core.atomic import remove_stale_staging, staged_report
from harness.core.errors import UsageError
from harness.core.outdir import RUNS, claim_out, default_out
from harness.core.outlock import lock_out, lock_path

REPO = Path(__file__).resolve().parents[2]
QUICK = ["--no-real-model", "--no-controls", "--no-figures", "--no-progress", "--workers", "1"]


def _args(*argv):
    parser, _ = build_parser()
    return parser.parse_args(list(argv))


# ------------------------------------------------------------------------------------------ the default folder
def test_default_folder_is_under_runs_and_named_by_the_options():
    out = default_out("verify", _args("verify", "--scenario", "base", "--draws", "2000"), ("sampler", "scenario"))
    assert out.parts[:2] == (str(RUNS), "verify") and RUNS == Path("runs")
    assert re.fullmatch(r"base-[0-9a-f]{8}", out.name), out


def test_the_command_line_as_main_keeps_it_is_not_part_of_the_key(monkeypatch):
    """main() keeps the command's own argv for the rerun advice; like --workers, how it was spelled must not move
    the default folder (it once did: `--workers 1` gave another folder than the default)."""
    import harness.verify.cli as verify_cli
    seen = []
    monkeypatch.setattr(verify_cli, "run", lambda args: seen.append(default_out("verify", args, ("scenario",))) or 0)
    assert main(["verify", "--scenario", "base", "--draws", "2000"]) == 0
    assert main(["verify", "--draws", "2000", "--scenario", "base", "--workers", "1", "--no-progress"]) == 0
    assert len(seen) == 2 and seen[0] == seen[1], seen


def test_same_options_same_folder_other_options_another():
    key = ("sampler", "scenario", "full")
    a = default_out("verify", _args("verify", "--scenario", "base", "--draws", "2000"), key)
    assert default_out("verify", _args("verify", "--scenario", "base", "--draws", "2000"), key) == a
    # how, not what: workers, threads, progress and --fresh leave the folder alone (an interrupted run resumes there)
    assert default_out("verify", _args("verify", "--scenario", "base", "--draws", "2000", "--workers", "1",
                                       "--threads", "2", "--no-progress", "--fresh", "--no-figures"), key) == a
    sweep = default_out("sweep", _args("sweep"), default_name="default")
    assert default_out("sweep", _args("sweep", "--report", "--redo"), default_name="default") == sweep
    assert default_out("sweep", _args("sweep", "--suites", "grid"), default_name="default") != sweep
    others = {default_out("verify", _args("verify", *argv), key) for argv in (
        ["--scenario", "base", "--draws", "4000"], ["--scenario", "base", "--draws", "2000", "--seed", "1"],
        ["--scenario", "base", "--draws", "2000", "--full"], ["--scenario", "power", "--draws", "2000"],
        ["--scenario", "base", "--draws", "2000", "--epsilon", "0.03"])}
    assert a not in others and len(others) == 5
    assert default_out("verify", _args("verify", "--scenario", "base", "--full"), key).name.startswith("base-full-")


def test_a_sampler_names_its_folder_by_its_function():
    out = default_out("verify", _args("verify", "--sampler", "my/dir/s.py:fast_fn", "--scenario", "base"),
                      ("sampler", "scenario"))
    assert out.name.startswith("fast_fn-base-")


@pytest.mark.parametrize("argv", [
    ["verify"], ["pit"], ["calibrate"], ["numerics"], ["alpha"], ["report"], ["sweep"],
    ["verify-samples", "--samples", "s.jsonl", "--target", "t"], ["tune", "--target", "t", "--draft", "d"],
])
def test_no_command_defaults_into_results(argv):
    """Every command that writes a folder or file has no --out default of its own: claim_out picks runs/."""
    assert _args(*argv).out is None


def test_claim_prints_the_folder_and_stores_it(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    args = _args("verify", "--scenario", "base")
    out = claim_out(args, "verify", ("scenario",))
    assert args.out == out and out.is_dir() and str(out).startswith("runs/verify/base-")
    assert capsys.readouterr().err == f"writing to {out}\n"
    out2 = claim_out(_args("alpha", "--variant", "draft"), "alpha", ("variant",), filename="alpha.csv")
    assert out2.name == "alpha.csv" and out2.parent.parent == Path("runs/alpha") and out2.parent.is_dir()


def test_verify_without_out_leaves_results_alone(tmp_path, monkeypatch, scen_dir, capsys):
    """A quick look in a folder holding committed results: the reference report stays byte for byte, the run's
    report lands in runs/verify/<name>-<hash>/."""
    monkeypatch.chdir(tmp_path)
    ref = tmp_path / "results" / "verify"
    ref.mkdir(parents=True)
    (ref / "summary.md").write_text("the committed certificate\n")
    before = {p: p.read_bytes() for p in (tmp_path / "results").rglob("*") if p.is_file()}
    rc = main(["verify", "--scenario-dir", str(scen_dir), "--scenario", "tiny", "--draws", "2000", *QUICK])
    assert rc in (0, 1, 4)
    after = {p: p.read_bytes() for p in (tmp_path / "results").rglob("*") if p.is_file()}
    assert after == before
    err = capsys.readouterr().err
    (made,) = (tmp_path / "runs" / "verify").iterdir()
    assert err.splitlines()[0] == f"writing to runs/verify/{made.name}" and made.name.startswith("tiny-")
    assert (made / "summary.md").is_file()


def test_make_verify_writes_a_run_folder_and_verify_reference_the_committed_one():
    text = (REPO / "Makefile").read_text()
    verify = re.search(r"^verify: .*\n((?:\t.*\n)+)", text, re.M).group(1)
    reference = re.search(r"^verify-reference: .*\n((?:\t.*\n)+)", text, re.M).group(1)
    assert "harness verify" in verify and "--out" not in verify
    assert "harness verify" in reference and "--out results/verify" in reference


def test_runs_staging_and_locks_are_git_ignored():
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs the git checkout")
    paths = ["runs/verify/base-1a2b3c4d/summary.md", "results/.verify.staging-123-abc/x", "results/verify/.lock",
             "results/hf/.alpha.csv.lock"]
    r = subprocess.run(["git", "-C", str(REPO), "check-ignore", *paths], capture_output=True, text=True)
    assert r.stdout.split() == paths


# ------------------------------------------------------------------------------------------------ the lock
def _wait_for_pid(lock: Path, proc, timeout=120) -> int:
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            pytest.fail(f"the first run ended first (exit {proc.returncode}): {proc.stderr.read()[-2000:]}")
        if lock.is_file() and lock.read_text().strip().isdigit():
            return int(lock.read_text())
        time.sleep(0.2)
    pytest.fail("the first run never took its lock")


@pytest.mark.slow  # ~15s: a child interpreter per run; make test-slow (CI) runs it
def test_a_second_verify_into_the_same_out_exits_2_naming_it_and_the_pid(tmp_path, monkeypatch, capsys):
    """Two verify runs into one --out: the second exits 2 before any work, one line naming --out and the pid of
    the first; after the first is SIGKILLed its lock is gone and a run goes ahead."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "slow.py").write_text(textwrap.dedent("""\
        import time
        def fn(target, draft, prompts, *, k, max_new_tokens, config=None, eos_token_id=None, generator=None):
            time.sleep(600)
        """))
    argv = ["verify", "--sampler", "slow.py:fn", "--scenario", "base", "--draws", "2000", *QUICK, "--out", "shared"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    first = subprocess.Popen([sys.executable, "-m", "harness", *argv], cwd=tmp_path, env=env, text=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        pid = _wait_for_pid(tmp_path / "shared" / ".lock", first)
        # the lock is held by the process that draws: the command itself, or, for a --sampler run, its child under
        # the parent that owns the exit status (harness.core.owner)
        parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]) if pid != first.pid else pid
        assert first.pid in (pid, parent)
        assert main(argv) == 2
        err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
        assert len(err) == 1 and "`--out` 'shared'" in err[0] and f"pid {pid}" in err[0], err
    finally:
        first.kill()
        first.wait()
    end = time.time() + 30  # an owned run's child dies with its parent (harness.core.lifeline): a moment later
    while time.time() < end and Path(f"/proc/{pid}").exists():
        time.sleep(0.1)
    lock_out(tmp_path / "shared")  # the kernel dropped the killed run's lock


def test_the_lock_is_reentrant_in_one_process_and_names_a_file_beside_a_file(tmp_path):
    assert lock_out(tmp_path / "o") == lock_out(tmp_path / "o") == tmp_path / "o" / ".lock"
    assert lock_path(tmp_path / "a.csv", is_file=True) == tmp_path / ".a.csv.lock"


def test_a_lock_held_elsewhere_is_a_usage_error(tmp_path):
    code = ("import sys, time; from harness.core.outlock import lock_out; lock_out(sys.argv[1]); "
            "print('held', flush=True); time.sleep(60)")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    holder = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "o")], env=env, text=True,
                              stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(UsageError, match=rf"`--out` '.*o' is in use by another run \(pid {holder.pid}\)"):
            lock_out(tmp_path / "o")
    finally:
        holder.kill()
        holder.wait()


# ------------------------------------------------------------------------------------------ stale staging
def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_stale_staging_of_a_dead_pid_is_removed_by_the_next_report(tmp_path):
    out = tmp_path / "out"
    dead = tmp_path / f".out.staging-{_dead_pid()}-abc123"
    live = tmp_path / f".out.staging-{os.getppid()}-def456"  # a running process (pytest's parent) owns it
    old = tmp_path / ".out.staging-zz9_legacy"  # the form without a pid, from before: stale after an hour
    young = tmp_path / ".out.staging-yy8_legacy"
    other = tmp_path / f".other.staging-{_dead_pid()}-x"  # another destination's: not this report's to touch
    for d in (dead, live, old, young, other):
        d.mkdir()
        (d / "tests.csv").write_text("half a report")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    with staged_report(out, "verify") as st:
        (st.dir / "summary.md").write_text("ok\n")
        assert str(os.getpid()) in st.dir.name
    assert not dead.exists() and not old.exists()
    assert live.is_dir() and young.is_dir() and other.is_dir()
    assert (out / "summary.md").read_text() == "ok\n"
    assert not list(tmp_path.glob(f".out.staging-{os.getpid()}-*"))


def test_claiming_an_out_removes_what_a_killed_run_left(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    dead = tmp_path / f".o.staging-{_dead_pid()}-q"
    dead.mkdir()
    claim_out(_args("verify", "--out", "o"), "verify")
    assert not dead.exists()
    assert remove_stale_staging(tmp_path / "o") == []


def test_bad_input_after_the_claim_leaves_no_empty_folder(tmp_path, monkeypatch):
    """A command that stops on bad input (exit 2) after taking its default folder removes what it created
    (harness.cli.main calls abandon_all on a UsageError; test_schema_version's report refusals run through it)."""
    from harness.core.outlock import abandon_all
    monkeypatch.chdir(tmp_path)
    lock_out(Path("runs/x/a-1"))
    lock_out(Path("kept"))
    (tmp_path / "kept" / "report.md").write_text("written")
    abandon_all()
    assert not (tmp_path / "runs").exists() and (tmp_path / "kept" / "report.md").is_file()
