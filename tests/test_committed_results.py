"""Every committed result names the clean commit it was produced from, and that commit is in HEAD's history.

A result regenerated from a modified working tree (``dirty``), or from a commit on another branch, cannot be
reproduced from a checkout of this repository; the gate's reference figures must be.  Provenance is read
where the writers put it (:mod:`harness.core.provenance`): ``meta.json``, a CSV's sidecar ``<name>.csv.meta.json``
(a CSV without one: its ``# provenance:`` first line, the layout before sidecars), the ``provenance`` key of a
parquet file's schema metadata.
"""
from __future__ import annotations

import json
import subprocess
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not (REPO / ".git").exists(), reason="not a git checkout (e.g. an installed copy)")


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=60)


def _committed_results() -> list[str]:
    out = _git("ls-files", "results").stdout.split()
    return [f for f in out if f.endswith(("meta.json", ".csv", ".parquet"))]


def provenance_of(path: Path) -> dict | None:
    """The provenance record a result file carries, or None if it carries none."""
    if path.name.endswith(".json"):
        return json.loads(path.read_text())
    if path.suffix == ".csv":
        side = path.with_name(path.name + ".meta.json")
        if side.is_file():
            return json.loads(side.read_text())
        with open(path) as f:
            first = f.readline()
        return json.loads(first.split(":", 1)[1]) if first.startswith("# provenance:") else None
    import pyarrow.parquet as pq
    md = pq.read_schema(path).metadata or {}
    return json.loads(md[b"provenance"]) if b"provenance" in md else None


@cache
def _is_ancestor(commit: str) -> bool:
    if _git("cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
        if _git("rev-parse", "--is-shallow-repository").stdout.strip() == "true":
            pytest.skip("shallow clone: older commits are not available to check ancestry")
        return False
    return _git("merge-base", "--is-ancestor", commit, "HEAD").returncode == 0


@pytest.mark.parametrize("rel", _committed_results())
def test_committed_result_is_from_a_clean_ancestor_commit(rel):
    meta = provenance_of(REPO / rel)
    assert meta is not None and meta.get("commit"), f"{rel} carries no provenance commit"
    assert meta.get("dirty") is False, f"{rel} was produced from a modified working tree (dirty = {meta.get('dirty')!r})"
    assert _is_ancestor(meta["commit"]), f"{rel} names commit {meta['commit'][:12]}, which is not an ancestor of HEAD"


def test_the_check_sees_a_dirty_result(tmp_path):
    """The reader finds the provenance a writer puts beside a CSV (a test that could not fail would be a defect),
    and the first line of a CSV written before sidecars."""
    import pandas as pd

    from harness.core.provenance import atomic_write_csv
    atomic_write_csv(tmp_path / "t.csv", pd.DataFrame({"a": [1], "b": [2]}), {"commit": "0", "dirty": True})
    assert provenance_of(tmp_path / "t.csv") == {"commit": "0", "dirty": True}
    f = tmp_path / "old.csv"
    f.write_text('# provenance: {"commit": "0" , "dirty": true}\na,b\n1,2\n')
    assert provenance_of(f) == {"commit": "0", "dirty": True}
    assert not _is_ancestor("0" * 40)
