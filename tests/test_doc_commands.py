"""Every shell command of README.md and docs/*.md runs as written and ends with the exit status its text promises.

The convention (issue 40, item 2).  Each fenced ```sh or ```bash block is preceded by an HTML comment, invisible
on the rendered page, with one line per command of the block, in order:

    <!-- commands:
    exit=0 tier=fast
    exit=0|4 tier=slow
    tier=external by=make:vllm-check
    -->

* a *command* is a non-blank, non-comment line of the block, with its ``\\``-continued lines;
* ``exit=`` the statuses that are correct (``|`` between alternatives; the contract of harness/core/errors.py:
  0 certified/ok, 1 lossy, 2 bad input, 3 failed, 4 inconclusive);
* ``tier=fast``: runs in ``make test`` (under ~20 s); ``tier=slow``: runs in ``make test-slow`` (marked slow);
  ``tier=external``: needs what a test machine does not have (a server, an engine, vLLM, a network index, or it
  is a make target itself); ``by=`` names what exercises it instead, ``make:<target>`` (a Makefile target) or
  ``tests/<file>.py::<test>`` (a test that exists), and this file checks that it exists;
* ``timeout=<s>`` (optional) the seconds allowed (default 20 fast, 1800 slow).

A block with no comment, or a comment with more or fewer lines than the block has commands, fails
:func:`test_every_shell_command_is_annotated`.  The fast and slow commands run with ``bash`` in a copy of the
checkout (tracked files, no .git), the ``python`` on PATH being this interpreter and PYTHONPATH the copy, so
nothing in the checkout changes; a ```python block whose first line is ``# <name>.py`` in the same page is
written to that file first (the doc's ``my_sampler.py``).  Commands of one page run in page order in one copy (a
later command may read what an earlier one wrote).
"""
from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Optional

import pytest

# one page's commands run in order in one checkout (a later command reads an earlier one's output): on one
# pytest-xdist worker (make test and make test-slow run with -n, --dist loadgroup)
pytestmark = pytest.mark.xdist_group("doc_commands")

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TIERS = ("fast", "slow", "external")
DEFAULT_TIMEOUT = {"fast": 20, "slow": 1800}
_BLOCK = re.compile(r"(?:<!--\s*commands:\s*\n(?P<note>.*?)-->\s*\n)?```(?:sh|bash)\n(?P<body>.*?)```", re.S)
_FILE_BLOCK = re.compile(r"```python\n# (?P<name>[\w./-]+\.py)\n(?P<body>.*?)```", re.S)


@dataclass(frozen=True)
class DocCommand:
    page: str
    line: int
    command: str
    exits: Optional[tuple]
    tier: Optional[str]
    by: Optional[str]
    timeout: Optional[float]
    problem: Optional[str] = None

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def _commands(body: str) -> list[tuple[int, str]]:
    """(line offset in the block, command) of each command: blank and comment-only lines skipped, ``\\``-continued
    lines joined."""
    out, cur, start = [], [], 0
    for i, line in enumerate(body.splitlines()):
        if not cur and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if not cur:
            start = i
        cur.append(line.rstrip())
        if not line.rstrip().endswith("\\"):
            out.append((start, "\n".join(cur)))
            cur = []
    if cur:
        out.append((start, "\n".join(cur)))
    return out


def _parse_note(line: str) -> dict:
    fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
    bad = [f for f in line.split() if "=" not in f]
    return {"fields": fields, "bad": bad}


def doc_commands(page: pathlib.Path) -> list[DocCommand]:
    """Every shell command of ``page`` with its annotation (``problem`` set where the annotation is missing or bad)."""
    text, rel, out = page.read_text(), str(page.relative_to(ROOT)), []
    for m in _BLOCK.finditer(text):
        body_line = text[:m.start("body")].count("\n") + 1
        cmds = _commands(m.group("body"))
        notes = [ln.strip() for ln in (m.group("note") or "").splitlines() if ln.strip()]
        for j, (off, cmd) in enumerate(cmds):
            line = body_line + off
            if m.group("note") is None:
                out.append(DocCommand(rel, line, cmd, None, None, None, None, "the block has no <!-- commands: --> note"))
                continue
            if len(notes) != len(cmds):
                out.append(DocCommand(rel, line, cmd, None, None, None, None,
                                      f"the note has {len(notes)} lines for {len(cmds)} commands"))
                continue
            n = _parse_note(notes[j])
            f, problem = n["fields"], None
            tier = f.get("tier")
            exits = tuple(int(x) for x in f["exit"].split("|")) if re.fullmatch(r"\d+(\|\d+)*", f.get("exit", "")) else None
            if n["bad"] or tier not in TIERS or set(f) - {"exit", "tier", "by", "timeout"}:
                problem = f"bad note line {notes[j]!r}"
            elif tier != "external" and exits is None:
                problem = f"`exit=` missing or malformed in {notes[j]!r}"
            elif tier == "external" and not f.get("by"):
                problem = f"an external command names what exercises it (`by=`): {notes[j]!r}"
            timeout = float(f["timeout"]) if "timeout" in f else DEFAULT_TIMEOUT.get(tier)
            out.append(DocCommand(rel, line, cmd, exits, tier, f.get("by"), timeout, problem))
    return out


ALL = [c for p in PAGES for c in doc_commands(p)]


def test_pages_hold_commands():
    assert len(ALL) >= 20, "README and docs lost their shell commands (or the parser lost them)"
    assert {c.tier for c in ALL} >= {"slow", "external"}


def test_every_shell_command_is_annotated():
    problems = [f"{c.id}: {c.problem}: {c.command.splitlines()[0]}" for c in ALL if c.problem]
    assert not problems, "\n".join(problems)


def _make_targets() -> set:
    return set(re.findall(r"^([A-Za-z][\w-]*)\s*:", (ROOT / "Makefile").read_text(), flags=re.M))


@pytest.mark.parametrize("cmd", [c for c in ALL if c.tier == "external"], ids=lambda c: c.id)
def test_external_commands_name_what_exercises_them(cmd):
    by = cmd.by
    if by.startswith("make:"):
        assert by[5:] in _make_targets(), f"{cmd.id}: no Makefile target {by[5:]!r}"
        return
    path, _, name = by.partition("::")
    assert path.startswith("tests/") and (ROOT / path).is_file(), f"{cmd.id}: no test file {path!r}"
    assert name and re.search(rf"^def {re.escape(name)}\(", (ROOT / path).read_text(), flags=re.M), \
        f"{cmd.id}: no test {name!r} in {path}"


# ----------------------------------------------------------------------------------------- running them
@pytest.fixture(scope="module")
def checkout_copy(tmp_path_factory):
    """A copy of the checkout's tracked files (no .git, no .venv, no runs/), for the commands to run in."""
    dst = tmp_path_factory.mktemp("checkout") / "repo"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        src = ROOT / rel
        if src.is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / rel)
    return dst


def _prepare(copy: pathlib.Path, page: str) -> None:
    for m in _FILE_BLOCK.finditer((ROOT / page).read_text()):
        (copy / m.group("name")).write_text(m.group("body"))


def run_doc_command(cmd: DocCommand, cwd: pathlib.Path) -> tuple[int, float, str]:
    """(exit status, wall seconds, the output's tail) of ``cmd`` run by bash in ``cwd``."""
    env = {**os.environ, "PYTHONPATH": str(cwd), "PATH": f"{pathlib.Path(sys.executable).parent}:{os.environ['PATH']}"}
    t0 = time.perf_counter()
    try:
        p = subprocess.run(["bash", "-c", cmd.command], cwd=cwd, env=env, capture_output=True, text=True,
                           timeout=cmd.timeout)
        rc, tail = p.returncode, (p.stdout + p.stderr)[-2000:]
    except subprocess.TimeoutExpired:
        rc, tail = None, f"timed out after {cmd.timeout} s"
    return rc, time.perf_counter() - t0, tail


_RAN: dict = {}  # copy -> ids of the commands run in it


def _check(cmd: DocCommand, copy: pathlib.Path) -> None:
    """Run ``cmd`` in ``copy`` after the earlier commands of its page (same tier) that this copy has not run: a
    page's commands may read what earlier ones wrote, and pytest-xdist may hand a page's tests to two workers
    (each with its own copy) whatever their xdist_group says (seen with xdist 3.8 / pytest 9.2)."""
    _prepare(copy, cmd.page)
    ran = _RAN.setdefault(copy, set())
    for prior in [c for c in ALL if c.page == cmd.page and c.tier == cmd.tier and c.line < cmd.line]:
        if prior.id not in ran:
            run_doc_command(prior, copy)  # its own test judges its exit status
            ran.add(prior.id)
    ran.add(cmd.id)
    rc, wall, tail = run_doc_command(cmd, copy)
    assert rc in cmd.exits, f"{cmd.id}: `{cmd.command}` exited {rc} in {wall:.0f} s, the page says {cmd.exits}:\n{tail}"


@pytest.mark.parametrize("cmd", [c for c in ALL if c.tier == "fast"], ids=lambda c: c.id)
def test_fast_command_runs_as_written(cmd, checkout_copy):
    _check(cmd, checkout_copy)


@pytest.mark.slow
@pytest.mark.parametrize("cmd", [c for c in ALL if c.tier == "slow"], ids=lambda c: c.id)
def test_slow_command_runs_as_written(cmd, checkout_copy):
    _check(cmd, checkout_copy)
