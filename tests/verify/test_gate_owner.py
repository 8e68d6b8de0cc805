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
    ("import atexit, os\natexit.register(lambda: os._exit(0))\n", "pass", "status 4 stands"),
    ("import os, threading, time\n"
     "threading.Thread(target=lambda: (time.sleep(4), os._exit(0)), daemon=True).start()\n", "pass", "no verdict"),
    ("import os, signal\nsignal.signal(signal.SIGTERM, lambda *a: os._exit(0))\n",
     "import os, signal; os.kill(os.getppid(), signal.SIGTERM)", "no verdict"),
    ("import os, signal, sys\nsignal.signal(signal.SIGUSR1, lambda *a: sys.exit(0))\n",
     "import os, signal; os.kill(os.getppid(), signal.SIGUSR1)", "no verdict"),
], ids=["atexit", "thread", "sigterm-handler", "sigusr1-sys-exit"])
def test_code_the_module_set_up_never_makes_exit_0(tmp_path, top, call, says):
    """Each was exit 0 (atexit: with the run's INCONCLUSIVE headline; the others with no verdict at all)."""
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
