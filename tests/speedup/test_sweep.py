"""Sweeps as data: configuration, plan, resumable cells, exact accounting on a virtual clock, report."""
import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.speedup.report import cli as report
from harness.speedup.sweep import cli as sweep
from harness.speedup.sweep.tables import StoredCell, measured_row

TINY = """
name = "tiny"
suites = ["grid", "synthetic"]
[grid]
alpha = [0.0, 0.9, 10]
c = [0.05, 1.0, 6]
c_extra = [0.5]
k_max = 4
[synthetic]
alpha = [0.0, 0.9]
c = [0.5]
k = [2]
max_new_tokens = 12
repeats = 2
profile_repeats = 1
clock = "virtual"
"""


def _args(config, out, **kw):
    p = argparse.ArgumentParser()
    sweep.add_arguments(p)
    argv = ["--config", str(config), "--out", str(out), "--no-progress"]
    for k, v in kw.items():
        argv += [f"--{k}"] + ([] if v is True else [str(v)])
    return p.parse_args(argv)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("sweep")
    (d / "tiny.toml").write_text(TINY)
    out = d / "out"
    assert sweep.run(_args(d / "tiny.toml", out)) == 0
    return d, out


def test_default_config_is_valid_and_overlays_are_checked(tmp_path):
    cfg = sweep.load_config()
    assert cfg["suites"] == ["grid", "synthetic", "real", "profile", "algorithms"]
    assert len(sweep.plan(cfg)) > 50
    bad = tmp_path / "bad.toml"
    bad.write_text("[synthetic]\nalpah = [0.5]\n")
    with pytest.raises(ValueError, match="synthetic.alpah"):
        sweep.load_config(bad)
    bad.write_text('[synthetic]\nclock = "sundial"\n')
    with pytest.raises(ValueError, match="`synthetic.clock` must be"):
        sweep.load_config(bad)
    bad.write_text('suites = ["grid", "lottery"]\n')
    with pytest.raises(ValueError, match="`suites` must be"):
        sweep.load_config(bad)
    with pytest.raises(ValueError, match="--config"):
        sweep.load_config(tmp_path / "missing.toml")


@pytest.mark.parametrize("suite, key, value, says", [
    ("real", "drafts", '["no_such_draft"]', "`real.drafts` must be names among ['target', 'draft', "),
    ("real", "drafts", '["draft", "target[:9]"]', "(['target[:9]'] unknown)"),
    ("real", "drafts", "[]", "`real.drafts` must be a non-empty list"),
    ("membound", "drafts", '["drfat"]', "`membound.drafts` must be names among"),
    ("algorithms", "drafts", '["no_such_draft"]', "`algorithms.drafts` must be names among"),
    ("profile", "models", '["no_such_model"]', "`profile.models` must be 'tiny:<name>' with a name among"),
    ("profile", "models", '["tiny:nope", "random:llama-68m"]', "(['tiny:nope'] unknown)"),
    ("profile", "models", '["random:llama-7b"]', "a shape among ['llama-1.1b', 'llama-160m', 'llama-68m']"),
])
def test_unknown_models_of_a_sweep_file_exit_2_before_any_cell(tmp_path, capsys, suite, key, value, says):
    """Issue 26 finding 8: bad real.drafts / profile.models failed at the first cell, exit 3."""
    bad = tmp_path / "bad.toml"
    bad.write_text(f'name = "bad"\nsuites = ["{suite}"]\n[{suite}]\n{key} = {value}\n')
    from harness.cli import main
    assert main(["sweep", "--config", str(bad), "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(bad) in err[0] and says in err[0] and f"got {value.replace(chr(34), chr(39))}" in err[0]
    assert not (tmp_path / "out").exists()


def test_every_tiny_model_name_the_sweep_accepts_is_one_it_can_build():
    from harness.speedup.sweep.models import tiny_model, tiny_model_names
    names = tiny_model_names()
    assert names[:2] == ["target", "draft"] and "target[:3]" in names and "target[:4]" not in names
    for n in names:
        assert tiny_model(n, "cpu", "float32").vocab_size == 259  # 256 bytes, BOS, EOS, PAD


def test_cell_ids_are_stable_and_follow_every_setting(tmp_path):
    (tmp_path / "a.toml").write_text(TINY)
    a = sweep.plan(sweep.load_config(tmp_path / "a.toml"))
    assert [c.id for c in a] == [c.id for c in sweep.plan(sweep.load_config(tmp_path / "a.toml"))]
    assert len({c.id for c in a}) == len(a) == 3
    (tmp_path / "b.toml").write_text(TINY.replace("max_new_tokens = 12", "max_new_tokens = 13"))
    b = sweep.plan(sweep.load_config(tmp_path / "b.toml"))
    assert a[0].id == b[0].id  # the grid did not change
    assert not {c.id for c in a[1:]} & {c.id for c in b[1:]}


def test_virtual_clock_accounting_is_exact_and_negative_regime_measured(tiny):
    _, out = tiny
    m = pd.read_csv(out / "measured.csv")
    assert len(m) == 2
    # on the virtual clock every call costs exactly its set time and the sampler's logic nothing:
    # the realised rounds times the profiled costs reproduce the measured times
    assert np.allclose(m.err_accounting, 0, atol=1e-9)
    a0 = m[m.alpha_set == 0].iloc[0]
    # alpha = 0: one token a round, no randomness in the round count, so the measured model is exact too,
    # and so is the analytic one up to prefill: S = 1 / (k c + 1) = 0.5 at k = 2, c = 0.5
    assert a0.err_measured_model == pytest.approx(0, abs=1e-9)
    assert a0.speedup_measured < 1 and a0.speedup_analytic == pytest.approx(0.5, rel=1e-9)
    assert a0.c_profiled == pytest.approx(0.5) and a0.alpha_hat == 0
    assert a0.mean_acceptance_length == 1 and a0.acceptance_rate == 0
    assert m[m.alpha_set == 0.9].iloc[0].speedup_measured > 1
    assert np.isnan(m.cpu_speedup_measured).all()  # CPU-time basis only for real models on CPU
    fid = json.loads((out / "fidelity.json").read_text())["fidelity"]
    assert fid["synthetic/virtual"]["clock"]["accounting"]["worst"] < 1e-9
    meta = json.loads((out / "meta.json").read_text())
    assert meta["sweep"]["cells_stored"] == 3 and meta["seed"] == 20240901 and "versions" in meta
    g = pd.read_parquet(out / "grid.parquet")
    assert len(g) == 10 * 7 * 4 and 0.5 in set(np.round(g.c, 12))


def test_resume_skips_stored_cells_and_redoes_missing_ones(tiny, monkeypatch):
    d, out = tiny
    calls = []
    real = sweep.run_cell

    def counting(cell, cfg, code=None):
        calls.append(cell.id)
        return real(cell, cfg, code)

    monkeypatch.setattr(sweep, "run_cell", counting)
    assert sweep.run(_args(d / "tiny.toml", out)) == 0
    assert calls == []
    cells = sorted((out / "cells" / "synthetic").glob("*.json"))
    cells[0].unlink()
    assert sweep.run(_args(d / "tiny.toml", out)) == 0
    assert calls == [cells[0].stem]


def test_interrupt_loses_only_the_cell_in_flight(tmp_path, monkeypatch, capsys):
    (tmp_path / "t.toml").write_text(TINY)
    out = tmp_path / "out"
    real = sweep.run_cell
    n = {"calls": 0}

    def flaky(cell, cfg, code=None):
        n["calls"] += 1
        if n["calls"] == 2:
            raise KeyboardInterrupt
        return real(cell, cfg, code)

    monkeypatch.setattr(sweep, "run_cell", flaky)
    assert sweep.run(_args(tmp_path / "t.toml", out)) == 130
    stored = list((out / "cells").rglob("*.json"))
    assert len(stored) == 1 and not list(out.rglob("_tmp*"))
    assert "run the same command again to resume" in capsys.readouterr().err
    assert sweep.run(_args(tmp_path / "t.toml", out, list=True)) == 0
    assert capsys.readouterr().out.count("todo") == 2


def test_report_draws_every_figure_from_stored_results(tiny):
    _, out = tiny
    written = report.make_report(out)
    for name in ("speedup_vs_alpha", "speedup_heatmap", "optimal_k", "pred_vs_meas", "tokens_per_call"):
        assert len(written[name]) == 2
        for p in written[name]:
            with open(p, "rb") as f:
                assert f.read(4) in (b"\x89PNG", b"%PDF")
    tex = (out / "figures" / "synthetic_table.tex").read_text()
    assert r"\toprule" in tex and r"\bottomrule" in tex and tex.count(r"\\") >= 3
    summary = (out / "figures" / "summary.md").read_text()
    assert "Negative-speedup cells" in summary and "| synthetic/virtual | alpha=0.0 |" in summary
    with pytest.raises(FileNotFoundError, match="--results"):
        report.make_report(out / "nowhere")


def test_real_model_cell_runs_and_gives_both_time_bases():
    """Timed over 3 prompts at batch 1: one pair per prompt and pass, the speedup the ratio of summed times."""
    cfg = sweep.load_config(overrides={"suites": ["real"], "real": {
        "drafts": ["draft"], "k": [2], "max_new_tokens": 8, "prompt_len": 8, "repeats": 2, "profile_repeats": 1,
        "prompts": 3}})
    (cell,) = sweep.plan(cfg)
    rec = json.loads(json.dumps(sweep.run_cell(cell, cfg)))  # what the JSON file holds
    t = pd.DataFrame(rec["timings"])
    assert sorted(zip(t.rep, t.prompt, t.arm)) == sorted((r, j, a) for r in range(2) for j in range(3)
                                                         for a in ("ar", "spec"))
    row = measured_row(StoredCell.from_record(rec), n_sim=50)
    s = t.groupby("arm").seconds.sum()
    assert row["speedup_measured"] == pytest.approx(s["ar"] / s["spec"])
    assert row["prompts"] == 3 and row["prompts_shared"] and row["speedup_spread"] >= 0
    for key in ("speedup_measured", "speedup_measured_model", "speedup_analytic", "cpu_speedup_measured",
                "cpu_speedup_measured_model", "c_profiled", "alpha_hat"):
        assert np.isfinite(row[key]), key
    assert row["tokens_per_target_call"] >= 1


def test_report_of_a_grid_only_sweep(tmp_path):
    """A valid sweep of the grid alone: the report draws the model's figures and writes no measured tables."""
    (tmp_path / "g.toml").write_text(TINY.replace('suites = ["grid", "synthetic"]', 'suites = ["grid"]'))
    out = tmp_path / "out"
    assert sweep.run(_args(tmp_path / "g.toml", out)) == 0
    written = report.make_report(out, formats=("png",))
    assert set(written) == {"speedup_vs_alpha", "speedup_heatmap", "optimal_k"}
    assert json.loads((out / "meta.json").read_text())["schema_version"] >= 1


@pytest.mark.slow  # 31 s of `make test` (durations of stop 30's run): in `make test-slow`, which CI runs
def test_report_is_byte_reproducible(tmp_path):
    """The report of the committed results, made twice, gives the same bytes (no date of the report run, the
    provenance of the results), so `python -m harness report` leaves a clean checkout clean."""
    results = report.RESULTS / "sweep" / "default"
    results = results if results.is_absolute() else Path(__file__).resolve().parents[2] / results
    a = report.make_report(results, tmp_path / "a")
    b = report.make_report(results, tmp_path / "b")
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "b").iterdir()) and len(names) >= 10 and a.keys() == b.keys()
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    assert "drawn from the stored results of sweep `default`" in (tmp_path / "a" / "measured_table.tex").read_text()


def test_partial_sweep_keeps_the_tables_of_suites_it_did_not_run(tiny, tmp_path, capsys):
    """Issue 26, finding 1: `sweep --suites grid` into a folder holding a full sweep kept measured.csv,
    timings.csv, fidelity.json and profiles.csv only if it rebuilt them; they are fed by the synthetic suite
    it did not run, so they stay byte-identical (and listed in the manifest), and a following report draws
    every figure of the full sweep's report."""
    import shutil
    _, full = tiny
    out = tmp_path / "out"
    shutil.copytree(full, out, ignore=shutil.ignore_patterns("cells", "figures"))
    shutil.copytree(full / "cells" / "grid", out / "cells" / "grid")
    kept = ["measured.csv", "timings.csv", "fidelity.json", "profiles.csv"]
    before = {n: (out / n).read_bytes() for n in kept}
    figs_full = set(report.make_report(full, tmp_path / "f_full", formats=("png",)))
    assert sweep.run(_args(full.parent / "tiny.toml", out, suites="grid")) == 0
    assert {n: (out / n).read_bytes() for n in kept} == before
    assert set(kept) <= set(json.loads((out / ".sweep-manifest.json").read_text())["files"])
    assert "kept" in capsys.readouterr().err
    assert set(report.make_report(out, formats=("png",))) == figs_full
    # a full sweep into the same folder owns every table again
    assert sweep.not_owned(out, ["grid", "synthetic"], ["grid", "synthetic"]) == set()
    assert sweep.not_owned(out, ["synthetic"], ["grid", "synthetic"]) == {"grid.parquet"}


def test_a_partial_sweep_keeps_the_provenance_of_the_tables_it_keeps(tiny, tmp_path):
    """Issue 26, by-hand rerun (row 1c): after `sweep --suites grid` meta.json described only the 1-cell run, and
    the report headed summary.md and fidelity.md with that run's commit and machine over measured tables made by
    another run.  meta.json now records each kept table's own provenance (kept_tables), and every output drawn
    from measured.csv is stamped with measured.csv's."""
    import shutil
    _, full = tiny
    out = tmp_path / "out"
    shutil.copytree(full, out, ignore=shutil.ignore_patterns("cells", "figures"))
    shutil.copytree(full / "cells" / "grid", out / "cells" / "grid")
    path = out / "measured.csv.meta.json"  # measured.csv's sidecar: the earlier run, another commit, machine, date
    old = json.loads(path.read_text())
    old.update(commit="0123456789" * 4, created_utc="2001-02-03T04:05:06+00:00")
    old["machine"] = dict(old["machine"], cpu="An Older CPU")
    path.write_text(json.dumps(old))
    assert sweep.run(_args(full.parent / "tiny.toml", out, suites="grid")) == 0
    meta = json.loads((out / "meta.json").read_text())
    assert meta["kept_tables"]["measured.csv"]["created_utc"] == "2001-02-03T04:05:06+00:00"
    assert meta["kept_tables"]["fidelity.json"]["fidelity"] and meta["created_utc"] != old["created_utc"]
    report.make_report(out, formats=("png",))
    summary = (out / "figures" / "summary.md").read_text()
    assert "commit 0123456789" in summary and "2001-02-03T04:05:06" in summary and "An Older CPU" in summary
    assert "commit 0123456789" in (out / "figures" / "fidelity.md").read_text()
    # outputs drawn from the cells of a suite this run skipped are stamped with the run that stored them
    full_meta = json.loads((full / "meta.json").read_text())
    assert meta["previous_run"]["created_utc"] == full_meta["created_utc"]
    res = report.SweepResults.load(out)
    assert res.meta_for_suite("synthetic")["created_utc"] == full_meta["created_utc"]
    assert res.meta_for_suite("grid")["created_utc"] == meta["created_utc"]
    # a partial run into a new folder has no run before it (the gate probe report_grid_only caught a crash here)
    assert sweep.run(_args(full.parent / "tiny.toml", tmp_path / "fresh", suites="grid")) == 0
    assert "previous_run" not in json.loads((tmp_path / "fresh" / "meta.json").read_text())


def test_a_partial_sweep_still_draws_the_algorithm_cells_it_did_not_run():
    """Issue 26, finding 1 (the report half): after `sweep --suites grid` the run's meta lists only grid, and
    the report planned the algorithm figures from that list, so `report` deleted the committed
    algorithms_* figures although their cells were still stored.  The meta now records the sweep file's
    suites (sweep.config_suites), and the algorithm rows are read from them."""
    from harness.speedup.sweep.algorithms import algorithms_table
    res = Path(__file__).resolve().parents[2] / "results" / "sweep" / "default"
    meta = json.loads((res / "meta.json").read_text())
    full = algorithms_table(res, meta)
    assert full is not None and len(full)
    partial = {**meta, "config": {**meta["config"], "suites": ["grid"]}}
    assert algorithms_table(res, partial) is None  # the old meta of a partial run: nothing to draw
    partial["sweep"] = {**meta.get("sweep", {}), "config_suites": list(meta["config"]["suites"])}
    assert algorithms_table(res, partial).equals(full)
