"""docs/: every code block marked runnable executes as written, and every link of README and docs resolves."""
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md"))
MARK = "<!-- runnable: tests/test_docs.py executes the next block -->"


def runnable_blocks(path: pathlib.Path) -> list[str]:
    return re.findall(re.escape(MARK) + r"\n```python\n(.*?)```", path.read_text(), flags=re.S)


def test_docs_have_runnable_blocks():
    assert sum(len(runnable_blocks(p)) for p in DOCS) >= 4, "docs/ lost its runnable examples"


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_runnable_blocks_run(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a block that writes files writes them here
    for code in runnable_blocks(path):
        exec(compile(code, str(path), "exec"), {"__name__": "__docs__"})


@pytest.mark.parametrize("path", [ROOT / "README.md", *DOCS], ids=lambda p: p.name)
def test_relative_links_resolve(path):
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text()):
        if "://" in target:
            continue
        assert (path.parent / target).exists(), f"{path.name}: link to {target} does not resolve"


def test_readme_is_short():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 300
