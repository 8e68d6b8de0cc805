"""The exit status is owned by a parent that runs none of the sampler's code (harness.core.owner; probe 47, class
1): what the sampler's module sets up at import (an atexit handler, a thread, a signal handler, an object whose
__del__ runs at exit) can end the command's process, but never turns it into exit 0 without a verdict."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.core import owner

REPO = Path(__file__).resolve().parents[2]
GOOD = textwrap.dedent("""
    from specimpl import speculative_generate
    def fn(target, draft, prompts, *, k, max_new_tokens, config, eos_token_id=None, generator=None):
        {call}
        return speculative_generate(target, draft, prompts, k=k, max_new_tokens=max_new_tokens, config=config,
                                    eos_token_id=eos_token_id, generator=generator)
    """)


def _verify(tmp_path, top: str, call: str = "pass", *extra):
    (tmp_path / "s.py").write_text(textwrap.dedent(top) + GOOD.format(call=call))
    cmd = [sys.executable, "-m", "harness", "verify", "--sampler", "s.py:fn", "--scenario", "base", "--draws", "2000",
           "--no-real-model", "--no-controls", "--no-progress", "--no-figures", "--out", "o", *extra]
    return subprocess.run(cmd, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True,
                          text=True, timeout=600)


def test_needs_owner_only_for_a_plugin_of_verify_or_pit(monkeypatch):
    monkeypatch.delenv(owner.ENV, raising=False)
    assert owner.needs_owner(["verify", "--sampler", "s.py:fn"]) and owner.needs_owner(["pit", "--sampler=s.py:fn"])
    assert owner.needs_owner(["verify", "--sampl", "s.py:fn"])  # an abbreviation argparse accepts
    assert not owner.needs_owner(["verify", "--scenario", "base"])
    assert not owner.needs_owner(["verify", "--sampler-timeout", "5"]) and not owner.needs_owner(["sample", "--sampler", "x"])
    monkeypatch.setenv(owner.ENV, "7")  # the owned child itself
    assert not owner.needs_owner(["verify", "--sampler", "s.py:fn"])


@pytest.mark.slow  # ~30 s each: a verify of 2,000 draws under its owner
@pytest.mark.parametrize("top, call, says", [
    ("import atexit, os\natexit.register(lambda: os._exit(0))\n", "pass", "INCONCLUSIVE"),
    ("import os, threading, time\n"
     "threading.Thread(target=lambda: (time.sleep(4), os._exit(0)), daemon=True).start()\n", "pass", "verify s.py:fn"),
    ("import os, signal\nsignal.signal(signal.SIGTERM, lambda *a: os._exit(0))\n",
     "import os, signal; os.kill(os.getppid(), signal.SIGTERM)", "no verdict"),
    ("import os, signal, sys\nsignal.signal(signal.SIGUSR1, lambda *a: sys.exit(0))\n",
     "import os, signal; os.kill(os.getppid(), signal.SIGUSR1)", "no verdict"),
], ids=["atexit", "thread", "sigterm-handler", "sigusr1-sys-exit"])
def test_code_the_module_set_up_never_makes_exit_0(tmp_path, top, call, says):
    """Each was exit 0 (atexit: with the run's INCONCLUSIVE headline; the others with no verdict at all).  Since the
    deciding process no longer imports the module (stop 48), the atexit handler and the thread run only in the trial
    child and the workers: the run's own verdict stands (atexit), or the worker the thread ended is the sampler's
    failure (exit 3, `verify s.py:fn: FAILED`) unless its shard was done first (exit 4); the signal handlers are not
    set up in the deciding process any more, so the signal the call sends it ends it: no verdict, exit 3."""
    r = _verify(tmp_path, top, call, "--workers", "1")
    assert r.returncode in (3, 4), (r.returncode, r.stderr[-1500:])
    last = [ln for ln in r.stderr.splitlines() if ln.strip()][-1]
    assert says in last and "resource_tracker" not in r.stderr, r.stderr[-1500:]
    if says == "no verdict":
        assert r.returncode == 3 and "python -m harness verify: failed:" in last


@pytest.mark.slow  # ~30 s
def test_an_owned_run_keeps_its_output_and_status(tmp_path):
    r = _verify(tmp_path, "")
    assert r.returncode == 4, r.stderr[-1500:]
    assert "verify s.py:fn: INCONCLUSIVE" in r.stderr and (tmp_path / "o" / "summary.md").is_file()


def test_the_owned_child_hides_the_status_pipe_from_what_it_starts(monkeypatch):
    """claim(): the pipe's write end leaves the environment and is not inherited, so the trial import, the workers
    and any subprocess a sampler starts are not told where the status goes (tell_owner still writes it)."""
    read, write = os.pipe()
    monkeypatch.setenv(owner.ENV, str(write))
    monkeypatch.setattr(owner, "_FD", [None])
    os.set_inheritable(write, True)
    owner.claim()
    assert owner.ENV not in os.environ and owner.is_owned() and not os.get_inheritable(write)
    child = subprocess.run([sys.executable, "-c", f"import os; os.write({write}, b'0')"], close_fds=False,
                           capture_output=True, text=True)
    assert child.returncode != 0 and "Bad file descriptor" in child.stderr  # a fork+exec'd child has no such fd
    owner.tell_owner(4)
    assert os.read(read, 16) == b"4\n" and not owner.is_owned()
    os.close(read)


FORGERS = {  # probe 48 case 11: code at the sampler module's import that forged the owner's status
    "patch-tell-owner": "import harness.core.owner as _o, harness.cli as _c\n"
                        "_real = _o.tell_owner\n_o.tell_owner = _c.tell_owner = lambda s: _real(0)\n",
}


@pytest.mark.slow  # ~60 s each: a verify of 20,000 draws of a lossy sampler under its owner
@pytest.mark.parametrize("forger", list(FORGERS))
def test_the_deciding_process_never_imports_the_samplers_module(tmp_path, forger):
    """A lossy sampler (residual softmax) whose module forged the status at import was exit 0 under a LOSSY headline
    (case 11): the module ran in the process that decides.  It now runs only in the trial child and the workers,
    neither of which holds the status pipe, so the verdict's own status stands.  (Case 7 wrote 0 to every pipe at
    import: the deciding process no longer runs it either; in a worker the same writes corrupt the pool's own
    pipes, an open row of docs/gate-probes.md.)"""
    (tmp_path / "s.py").write_text(FORGERS[forger] + "from harness.controls.chain import get_control\n"
                                   "fn = get_control('residual_softmax').sampler\n")
    cmd = [sys.executable, "-m", "harness", "verify", "--sampler", "s.py:fn", "--scenario", "base", "--draws", "20000",
           "--no-real-model", "--no-controls", "--no-progress", "--no-figures", "--out", "o"]
    r = subprocess.run(cmd, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 1 and "LOSSY" in r.stderr.strip().splitlines()[-1], (r.returncode, r.stderr[-1500:])
