"""Readers check the ``schema_version`` of the result files they read back, and refuse an unknown one with
one line naming the file (exit 2): the sweep's report, a tune folder's report, the sweep's resume."""
import json

import pandas as pd
import pytest

from harness import cli
from harness.core.errors import UsageError
from harness.core.provenance import (SCHEMA_VERSIONS_READ, atomic_write_csv, atomic_write_json, atomic_write_parquet,
                                     check_schema, metadata, read_provenance)
from harness.speedup.report import cli as report
from harness.speedup.sweep import cli as sweep

FUTURE = 999
GRID_ONLY = """
name = "schema"
suites = ["grid"]
[grid]
alpha = [0.0, 0.9, 4]
c = [0.05, 1.0, 3]
c_extra = []
k_max = 2
"""


def _meta(version=FUTURE, **extra) -> dict:
    return {**metadata({"name": "schema"}, 0), "schema_version": version, "command": "python -m harness x", **extra}


def _refusal(path, version=FUTURE) -> str:
    return (f"{path}: schema_version {version} is not one this harness reads "
            f"({', '.join(map(str, SCHEMA_VERSIONS_READ))}); regenerate it with `python -m harness x`")


def _only_line(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("meta", [None, {}, {"commit": None}, {"schema_version": 1}, "not a dict"])
def test_known_and_unversioned_provenance_is_accepted(meta):
    check_schema(meta, "x.json")  # no schema_version: older than versioning, read as before


@pytest.mark.parametrize("version", [FUTURE, 0, True, "1", None, 1.5])
def test_an_unknown_version_is_refused_with_one_line_naming_the_file(version):
    with pytest.raises(UsageError) as e:
        check_schema({"schema_version": version, "command": "python -m harness x"}, "/tmp/r/meta.json")
    assert str(e.value) == (f"/tmp/r/meta.json: schema_version {version!r} is not one this harness reads "
                            f"({', '.join(map(str, SCHEMA_VERSIONS_READ))}); regenerate it with `python -m harness x`")


def test_read_provenance_of_each_format(tmp_path):
    meta = _meta(version=1)
    df = pd.DataFrame({"a": [1, 2]})
    for name, write in (("t.csv", atomic_write_csv), ("t.parquet", atomic_write_parquet)):
        write(tmp_path / name, df, meta)
        assert read_provenance(tmp_path / name)["schema_version"] == 1
    assert json.loads((tmp_path / "t.csv.meta.json").read_text()) == meta  # the CSV's sidecar
    assert list(pd.read_csv(tmp_path / "t.csv").columns) == ["a"]  # the CSV holds the table only
    atomic_write_json(tmp_path / "meta.json", meta)
    assert read_provenance(tmp_path / "meta.json")["command"] == "python -m harness x"
    atomic_write_csv(tmp_path / "bare.csv", df)
    assert read_provenance(tmp_path / "bare.csv") is None
    atomic_write_csv(tmp_path / "t.csv", df)  # rewritten without provenance: the old sidecar goes
    assert read_provenance(tmp_path / "t.csv") is None and not (tmp_path / "t.csv.meta.json").exists()
    (tmp_path / "odd.csv").write_text("# provenance: {not json\na\n1\n")
    assert read_provenance(tmp_path / "odd.csv") is None


def test_a_csv_written_before_sidecars_is_still_read(tmp_path):
    """Backward reading: a first line ``# provenance: {json}`` (files before the sidecar) is the provenance,
    and read_table_csv skips it; a field holding '#' is kept whole (``comment='#'`` would cut it)."""
    from harness.core.provenance import read_table_csv
    (tmp_path / "old.csv").write_text('# provenance: {"schema_version": 1, "seed": 3}\na,b\n1,x#y\n')
    assert read_provenance(tmp_path / "old.csv") == {"schema_version": 1, "seed": 3}
    t = read_table_csv(tmp_path / "old.csv")
    assert list(t.columns) == ["a", "b"] and t.b.tolist() == ["x#y"]
    atomic_write_csv(tmp_path / "new.csv", pd.DataFrame({"a": [1], "b": ["x#y"]}), {"seed": 3})
    assert read_table_csv(tmp_path / "new.csv").equals(t)


def test_report_refuses_a_sweep_of_an_unknown_version(tmp_path, capsys):
    atomic_write_json(tmp_path / "meta.json", _meta())
    with pytest.raises(UsageError) as e:
        report.SweepResults.load(tmp_path)
    assert str(e.value) == _refusal(tmp_path / "meta.json")
    assert cli.main(["report", "--results", str(tmp_path), "--formats", "png"]) == 2
    assert _only_line(capsys) == f"python -m harness report: error: {_refusal(tmp_path / 'meta.json')}"


def test_report_refuses_a_table_of_an_unknown_version(tmp_path):
    atomic_write_json(tmp_path / "meta.json", _meta(version=1))
    atomic_write_csv(tmp_path / "measured.csv", pd.DataFrame({"suite": ["real"]}), _meta())
    with pytest.raises(UsageError, match="measured.csv: schema_version 999 "):
        report.SweepResults.load(tmp_path)


def test_report_of_a_tune_folder_refuses_a_roofline_of_an_unknown_version(tmp_path, capsys):
    """``python -m harness report --results <tune out>`` reads the tune folder's meta.json and roofline.csv."""
    atomic_write_json(tmp_path / "meta.json", _meta(version=1))
    grid = pd.DataFrame({"scenario": ["s"], "context": [64], "batch": [1], "algorithm": ["chain"], "k": [1],
                         "speedup": [1.2], "fits": [True]})
    atomic_write_csv(tmp_path / "roofline.csv", grid, _meta())
    assert cli.main(["report", "--results", str(tmp_path), "--formats", "png"]) == 2
    assert _only_line(capsys) == f"python -m harness report: error: {_refusal(tmp_path / 'roofline.csv')}"
    atomic_write_json(tmp_path / "meta.json", _meta())
    with pytest.raises(UsageError, match="meta.json: schema_version 999 "):
        report.SweepResults.load(tmp_path)


def test_sweep_resume_refuses_a_stored_cell_of_an_unknown_version(tmp_path, capsys):
    (tmp_path / "g.toml").write_text(GRID_ONLY)
    out = tmp_path / "out"
    cell = sweep.plan(sweep.load_config(tmp_path / "g.toml"))[0]
    path = out / "cells" / cell.suite / f"{cell.id}.json"
    atomic_write_json(path, {"id": cell.id, "suite": cell.suite, "params": cell.settings, "key": "k", "meta": _meta()})
    with pytest.raises(UsageError) as e:
        sweep.read_cell(path)
    assert str(e.value) == _refusal(path)
    argv = ["sweep", "--config", str(tmp_path / "g.toml"), "--out", str(out), "--no-progress", "--list"]
    assert cli.main(argv) == 2
    assert _only_line(capsys) == f"python -m harness sweep: error: {_refusal(path)}"
    rec = json.loads(path.read_text())
    rec["meta"].pop("schema_version")  # older than versioning: read as before (its key differs: recomputed)
    atomic_write_json(path, rec)
    assert cli.main(argv) == 0
    assert "stored by other code: recomputed" in capsys.readouterr().out
