"""Whole reports or none (harness.core.atomic): staged files move in together, the previous report's other files
go, unrelated files and resume state stay, and a failed run leaves the previous report whole."""
import json

import pytest

from harness.core.atomic import manifest_path, staged_report


def _files(d):
    return sorted(p.relative_to(d).as_posix() for p in d.rglob("*") if p.is_file())


def test_rerun_without_figures_drops_old_figures(tmp_path):
    out = tmp_path / "out"
    with staged_report(out, "verify") as s:
        (s.dir / "summary.md").write_text("PASS")
        (s.dir / "figures").mkdir()
        (s.dir / "figures" / "pit.png").write_bytes(b"png")
    (out / "_tmp_state").mkdir()
    (out / "_tmp_state" / "x.pkl").write_bytes(b"state")
    (out / "notes.txt").write_text("mine")
    with staged_report(out, "verify") as s:
        (s.dir / "summary.md").write_text("FAIL")
    assert _files(out) == [".verify-manifest.json", "_tmp_state/x.pkl", "notes.txt", "summary.md"]
    assert (out / "summary.md").read_text() == "FAIL"
    assert json.loads(manifest_path(out, "verify").read_text())["files"] == ["summary.md"]
    assert not list(tmp_path.glob(".out.staging-*"))


def test_failed_run_keeps_previous_report(tmp_path):
    out = tmp_path / "out"
    with staged_report(out, "calibrate") as s:
        (s.dir / "a.csv").write_text("1")
        (s.dir / "b.csv").write_text("1")
    with pytest.raises(KeyboardInterrupt):
        with staged_report(out, "calibrate") as s:
            (s.dir / "a.csv").write_text("2")
            raise KeyboardInterrupt
    assert [(out / n).read_text() for n in ("a.csv", "b.csv")] == ["1", "1"]
    assert not list(tmp_path.glob(".out.staging-*"))


def test_without_manifest_only_known_names_are_removed(tmp_path):
    out = tmp_path / "out"
    (out / "figures").mkdir(parents=True)
    (out / "figures" / "pit.png").write_bytes(b"old")
    (out / "figures" / "mine.svg").write_bytes(b"user")
    (out / "tests.csv").write_text("old")
    with staged_report(out, "verify", ("tests.csv", "figures/*.png")) as s:
        (s.dir / "summary.md").write_text("new")
    assert _files(out) == [".verify-manifest.json", "figures/mine.svg", "summary.md"]


def test_other_kinds_in_the_same_folder_stay(tmp_path):
    out = tmp_path / "out"
    with staged_report(out, "sweep") as s:
        (s.dir / "meta.json").write_text("{}")
    with staged_report(out, "report") as s:
        (s.dir / "figures" ).mkdir()
        (s.dir / "figures" / "f.png").write_bytes(b"x")
    with staged_report(out, "sweep") as s:
        (s.dir / "grid.parquet").write_bytes(b"g")
    assert _files(out) == [".report-manifest.json", ".sweep-manifest.json", "figures/f.png", "grid.parquet"]


def test_verify_rerun_without_figures_leaves_no_stale_figures(tmp_path):
    from harness.laws.scenarios import load_scenario, load_settings
    from harness.verify.pipeline import verify
    out = tmp_path / "out"
    kw = dict(sampler=None, sampler_label="reference", scenarios=[load_scenario("base")], settings=load_settings(),
              draws=1000, controls=False, out=out, progress=False, von_neumann=False)
    verify(figures=True, **kw)
    assert list((out / "figures").glob("*.png"))
    (out / "mine.txt").write_text("a user's file")
    verify(figures=False, **kw)
    assert not (out / "figures").exists() and (out / "mine.txt").exists()
    assert sorted(json.loads(manifest_path(out, "verify").read_text())["files"]) == sorted(
        p.name for p in out.iterdir() if p.is_file() and p.name not in ("mine.txt", ".verify-manifest.json"))
    assert not list(tmp_path.glob(".out.staging-*")) and not (out / "_tmp_state").exists()


def test_out_given_as_dot(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("mine")
    with staged_report(".", "calibrate") as s:
        (s.dir / "summary.md").write_text("x")
    assert _files(tmp_path) == [".calibrate-manifest.json", "notes.txt", "summary.md"]
