"""The package works when installed non-editably, run from a directory that is not the source tree.

A fresh virtual environment gets the pinned CPU torch and then ``pip install <copy of the tracked
files>`` (not editable); from an empty directory, ``python -m harness --help`` must list every
subcommand and a small ``verify`` must run and exit 0, its report written under that directory.
Slow (a venv and an install: about two minutes); ``make install-check`` and CI run it.
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import COMMANDS

REPO = Path(__file__).resolve().parents[1]
TORCH_SPEC = os.environ.get("TORCH_SPEC", "torch==2.13.0")
TORCH_INDEX = os.environ.get("TORCH_INDEX", "")


def _run(cmd, cwd, timeout=900):
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                       env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")})
    assert r.returncode == 0, f"{cmd} exited {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


def _tracked_copy(dest: Path) -> Path:
    """The files git tracks (committed or staged), copied: what a fresh clone would hold."""
    files = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        if (REPO / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, dest / rel)
    return dest


@pytest.mark.slow
def test_non_editable_install_runs_from_another_directory(tmp_path):
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs the git checkout to know which files are tracked")
    src = _tracked_copy(tmp_path / "src")
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path)
    py = str(venv / "bin" / "python")
    torch_cmd = [py, "-m", "pip", "install", "-q", TORCH_SPEC] + (["--index-url", TORCH_INDEX] if TORCH_INDEX else [])
    _run(torch_cmd, cwd=tmp_path)
    _run([py, "-m", "pip", "install", "-q", str(src)], cwd=tmp_path)
    shutil.rmtree(src)  # nothing may be read from the source tree after the install

    work = tmp_path / "elsewhere"
    work.mkdir()
    helptext = _run([py, "-m", "harness", "--help"], cwd=work).stdout
    missing = [name for name in COMMANDS if name not in helptext]
    assert not missing, f"`python -m harness --help` does not list {missing}:\n{helptext}"

    r = subprocess.run([py, "-m", "harness", "verify", "--scenario", "base", "--draws", "200000",
                        "--no-real-model", "--no-progress", "--epsilon", "position=0.03,pair=0.05,joint=0.15"],
                       cwd=work, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, f"verify exited {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    # without --out the report goes to a run folder of its own (runs/verify/<name>-<hash>), never results/
    assert len(list(work.glob("runs/verify/base-*/summary.md"))) == 1, sorted(p.name for p in work.rglob("*"))
    assert not (work / "results").exists()
    _check_short_model_names(py, venv, work)


def _check_short_model_names(py: str, venv: Path, work: Path) -> None:
    """Issue 40 item 5: the shipped models by short name from outside the tree (their folders inside the install)."""
    folder = Path(_run([py, "-m", "harness", "models", "--path", "exact-markov"], cwd=work).stdout.strip())
    assert folder.is_dir() and venv.resolve() in folder.resolve().parents, folder
    c = '"controls":{"temperature":1.0,"top_k":0,"top_p":1.0,"max_new_tokens":4},"engine":{"name":"hand"}'
    (work / "s.jsonl").write_text("".join(
        f'{{"format":"specverify.samples/1","request_id":"p0-s{j}","prompt_id":"p0","prompt_ids":[13,2,5],'
        f'"output_ids":[{j},3,4,5],"finish_reason":"length",{c}}}\n' for j in range(4)))
    r = subprocess.run([py, "-m", "harness", "verify-samples", "--samples", "s.jsonl", "--target", "exact-markov",
                        "--exact", "--no-progress", "--out", "rep"], cwd=work, capture_output=True, text=True,
                       timeout=900)
    assert r.returncode in (0, 1, 4), f"verify-samples exited {r.returncode}\n{r.stderr[-3000:]}"  # a verdict
    assert (work / "rep" / "meta.json").is_file()
