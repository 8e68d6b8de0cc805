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


def test_a_report_never_removes_or_writes_through_a_linked_folder(tmp_path):
    """probe 47: `out/lnk -> elsewhere` and a manifest naming `lnk/victim.txt` deleted the file elsewhere (verify,
    report); a linked `out/figures` had the new figures written there."""
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    (elsewhere / "a").mkdir(parents=True)
    (elsewhere / "victim.txt").write_text("precious")
    (elsewhere / "a" / "b.png").write_text("precious")
    out.mkdir()
    (out / "lnk").symlink_to(elsewhere)
    (out / "figures").symlink_to(elsewhere / "a")
    manifest_path(out, "verify").write_text(json.dumps({"kind": "verify", "files": ["lnk/victim.txt", "lnk/a/b.png"]}))
    with staged_report(out, "verify") as s:
        (s.dir / "summary.md").write_text("PASS")
        (s.dir / "figures").mkdir()
        (s.dir / "figures" / "pit.png").write_bytes(b"png")
    assert (elsewhere / "victim.txt").read_text() == "precious" and (elsewhere / "a" / "b.png").read_text() == "precious"
    assert not (elsewhere / "a" / "pit.png").exists() and not (out / "figures").is_symlink()
    assert (out / "figures" / "pit.png").read_bytes() == b"png"


def test_own_subfolder_removes_a_link_and_never_follows_it(tmp_path):
    from harness.core.outdir import own_subfolder
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "precious.parquet").write_text("mine")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "_tmp_seeds").symlink_to(elsewhere)
    d = own_subfolder(tmp_path / "out" / "_tmp_seeds")
    assert d.is_dir() and not d.is_symlink() and list(d.iterdir()) == []
    assert (elsewhere / "precious.parquet").read_text() == "mine"


def test_calibrate_with_a_linked_seed_store_leaves_its_target_alone(tmp_path):
    """probe 47, case 24: calibrate wrote its seeds through `_tmp_seeds -> elsewhere`, then deleted every
    *.parquet there, the user's own file included."""
    from harness.cli import main
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "precious.parquet").write_text("mine")
    (tmp_path / "cal").mkdir()
    (tmp_path / "cal" / "_tmp_seeds").symlink_to(elsewhere)
    assert main(["calibrate", "--scenario", "base", "--seeds", "2", "--draws", "500", "--no-progress",
                 "--out", str(tmp_path / "cal")]) in (0, 1)
    assert [p.name for p in elsewhere.iterdir()] == ["precious.parquet"]


def test_sweep_with_a_linked_cells_folder_writes_inside_its_out(tmp_path):
    """probe 47, case 25: `cells -> elsewhere` had the stored cell written there."""
    from harness.cli import main
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "sw").mkdir()
    (tmp_path / "sw" / "cells").symlink_to(elsewhere)
    assert main(["sweep", "--suites", "grid", "--no-progress", "--out", str(tmp_path / "sw")]) == 0
    assert list(elsewhere.iterdir()) == [] and list((tmp_path / "sw" / "cells" / "grid").glob("*.json"))
