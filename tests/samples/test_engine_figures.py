"""experiments/engine_figures.py without its runs: the registry matches the engine-level controls, the
planner rows come from the certificate's planners, and the table says every verdict it was given."""
from pathlib import Path
from types import SimpleNamespace

import pandas as pd

from harness.samples.certificate import scored_n_for_distance, two_sample_n_for_tv
from harness.samples.controls import CONTROLS

from experiment_script import load_experiment


def _module():
    return load_experiment("engine_figures")


def test_the_registry_names_every_lossy_control_and_nothing_else():
    E = _module()
    lossy = {n for n, (role, *_rest) in E.RUNS.items() if role == "lossy control"}
    assert lossy == {n for n, c in CONTROLS.items() if c.role == "lossy"}
    for name in lossy:  # each runs through `sample --control NAME`
        assert E.RUNS[name][1][E.RUNS[name][1].index("--control") + 1] == name


def _row(mode, verdict="certified", first_rejections=""):
    return dict(engine="ours_speculative", role="lossless", mode=mode, verdict=verdict, completions=100, tokens=3200,
                bound=0.04, completions_needed=6336, first_rejections=first_rejections, sample_wall_s=1.0,
                verify_wall_s=2.0, delta_each=3.1e-5, reach=0.9, headline="", report="x")


def test_planner_rows_are_the_certificates_planners():
    E = _module()
    a = SimpleNamespace(planner_epsilon=0.01, tokens=32, epsilon=0.05)
    rows = E.planner_rows(a, [_row("scored"), _row("two-sample")])
    got = {r["mode"]: r["completions_needed"] for r in rows}
    assert got["scored"] == scored_n_for_distance(0.01, 3.1e-5, 0.99, 0.9)
    assert got["two-sample"] == two_sample_n_for_tv(0.01, E.VOCAB + 1, 3.1e-5, 0.99)
    assert got["two-sample"] > got["scored"]  # 260 cells per position cost far more than one PIT law


def test_table_shows_each_verdict():
    E = _module()
    a = SimpleNamespace(planner_epsilon=0.01, tokens=32, epsilon=0.05)
    rows = [_row("scored"), _row("two-sample", verdict="lossy", first_rejections="ending/x p_adj 0")]
    df = pd.DataFrame(rows + E.planner_rows(a, rows))
    text = E.table_md(df, a, {"commit": "0" * 40, "dirty": False, "command": "python experiments/engine_figures.py"})
    assert "**certified**" in text and "**lossy**" in text and "ending/x p_adj 0" in text
    assert "completions certify PIT Kolmogorov distance 0.01" in text and "per file certify token TV 0.01" in text


def test_scored_token_tv_planner_row_comes_from_the_report():
    """A scored report that planned epsilon = 0.01 (bounds.completions_needed_at) gives a token-TV planner row
    worded by its law, beside the PIT Kolmogorov row (which is not a token TV)."""
    E = _module()
    a = SimpleNamespace(planner_epsilon=0.01, tokens=32, epsilon=0.05)
    sc = dict(_row("scored"), completions_needed_at={"0.05": 43000, "0.01": 1100000})
    rows = E.planner_rows(a, [sc, _row("two-sample")])
    heads = [r["headline"] for r in rows if r["mode"] == "scored"]
    assert heads[0].startswith("1100000 completions certify token TV of each step from the engine's own prefixes 0.01")
    assert "PIT Kolmogorov distance 0.01" in heads[1]


def test_the_dependence_rows_table_says_each_rows_stage():
    # experiments/dependence_rows.py without its runs: one row per (engine, mode) with the stage's two tests
    D = load_experiment("dependence_rows")
    row = dict(engine="shared_stream", role="lossy control", mode="scored", verdict="lossy", completions=64,
               duplicates_p=0.0, duplicates_detects=1e-5, repeats=48.0, repeats_expected=0.147, siblings_p=1.0,
               siblings_detects=float("inf"), designated_pairs=32, finding="dependent completions: 48 of 64 | x",
               line="", sample_wall_s=1.0, verify_wall_s=2.0)
    md = D.table_md(pd.DataFrame([row, {**row, "mode": "two-sample", "duplicates_detects": float("nan"),
                                        "finding": ""}]), {"commit": "0" * 40, "dirty": False, "command": "c"})
    lines = [x for x in md.splitlines() if x.startswith("| shared_stream")]
    assert len(lines) == 2 and "48 (0.147)" in lines[0] and "0.001 %" in lines[0] and "| none |" in lines[0]
    assert "48 of 64 / x" in lines[0] and lines[1].endswith("| - | 32 | 1 | none | - |")
