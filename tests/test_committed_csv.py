"""Every committed CSV under results/ reads with plain ``pandas.read_csv`` and ``csv.DictReader`` into its real
columns (issue 40): no ``# provenance:`` line, which both readers would take for the header.  Its provenance
is in the sidecar ``<name>.csv.meta.json`` beside it (:func:`harness.core.provenance.sidecar_path`)."""
from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not (REPO / ".git").exists(), reason="not a git checkout (e.g. an installed copy)")


def _committed_csvs() -> list[str]:
    out = subprocess.run(["git", "-C", str(REPO), "ls-files", "results"], capture_output=True, text=True, timeout=60)
    return [f for f in out.stdout.split() if f.endswith(".csv")]


def test_there_are_committed_csvs():
    assert len(_committed_csvs()) > 100  # the walk below is not vacuous


def _check_columns(columns, rel):
    assert columns, f"{rel}: no header"
    bad = [c for c in columns if str(c).startswith(("#", "{", '"', " ")) or str(c).startswith("Unnamed:")]
    assert not bad, f"{rel}: columns that are not a header: {bad[:3]}"
    assert len(set(columns)) == len(columns), f"{rel}: repeated column names"


@pytest.mark.parametrize("rel", _committed_csvs())
def test_committed_csv_reads_plainly(rel):
    path = REPO / rel
    text = path.read_text(encoding="utf-8")
    header = next(csv.reader([text.split("\n", 1)[0]]))
    df = pd.read_csv(path)
    _check_columns(list(df.columns), rel)
    assert list(df.columns) == header, f"{rel}: pandas' columns are not the file's first line"
    csv.field_size_limit(2**31 - 1)  # profiles.csv holds fields over the csv module's default 128 KiB limit
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    assert reader.fieldnames == header
    assert all(None not in r for r in rows), f"{rel}: a row with more fields than the header"
    records = list(csv.reader(text.splitlines(keepends=True)))  # quoted fields may span lines
    assert len(df) == len(rows) == len(records) - 1, f"{rel}: rows are not the lines after the header"
    side = path.with_name(path.name + ".meta.json")
    assert side.is_file(), f"{rel}: no provenance sidecar {side.name}"
    assert json.loads(side.read_text()).get("commit"), f"{side.name}: no commit"
