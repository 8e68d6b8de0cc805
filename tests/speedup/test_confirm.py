"""`tune --confirm`: the shortlist timed side by side and the measured best recommended (harness.speedup.confirm)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from harness.cli import main
from harness.speedup.confirm import (OFF, confirm_prompts, measured_speedups, pick, shortlist, time_arms)
from harness.speedup.tune import confirmed
from specimpl.hf import TINY_PAIR_DIR

T, D = str(TINY_PAIR_DIR / "target"), str(TINY_PAIR_DIR / "draft")


class _Clock:
    """A clock each arm advances by its own cost: timings without a timer's noise."""

    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t

    def arm(self, seconds: float, tokens: int = 8):
        def run(prompts):
            self.t += seconds * len(prompts)
            return SimpleNamespace(lengths=np.full(len(prompts), tokens))
        return run


def test_time_arms_runs_every_arm_once_per_pass_and_batch_in_varied_order():
    order = []
    arms = {name: (lambda p, name=name: order.append(name) or SimpleNamespace(lengths=np.ones(len(p))))
            for name in ("ar", "a", "b")}
    t = time_arms(arms, [[[1]], [[2]]], repeats=10)
    assert len(t) == 3 * 2 * 10 and (t.groupby(["rep", "prompt"]).arm.nunique() == 3).all()
    timed = order[3:]  # after one warm-up run of each
    units = [tuple(timed[i:i + 3]) for i in range(0, len(timed), 3)]
    assert {u[0] for u in units} == {"ar", "a", "b"}  # each arm goes first in some (pass, batch) ...
    assert {u[1] for u in units if u[0] == "ar"} == {"a", "b"}  # ... and follows target-only with either arm


def test_measured_speedup_is_the_ratio_of_rates_paired_within_a_pass():
    """Exact on constructed timings: S = (tokens/s of the arm) / (tokens/s of target-only).  The passes differ in
    speed (1 + 0.1 r) for every arm alike, so a paired interval has zero width and an unpaired one would not."""
    rows = [{"rep": r, "prompt": j, "arm": a, "seconds": s * (1 + 0.1 * r), "tokens": n}
            for r in range(4) for j in range(2) for a, s, n in (("ar", 2.0, 10), ("fast", 2.0, 20), ("slow", 4.0, 10))]
    m = measured_speedups(pd.DataFrame(rows)).set_index("arm")
    assert m.loc["fast", "measured_speedup"] == pytest.approx(2.0) and m.loc["slow", "measured_speedup"] == pytest.approx(0.5)
    assert m.loc["fast", "measured_lo"] == pytest.approx(2.0) and m.loc["fast", "measured_hi"] == pytest.approx(2.0)
    assert (m.units == 8).all()
    assert pick(m.reset_index()) == "fast"
    assert pick(m.drop("fast").reset_index()) == OFF  # nothing beats target-only: off


def test_measured_interval_is_students_t_on_the_log_ratios():
    """Three units with ratios 1.1, 1.2, 1.5: exp(mean log +- t(0.975, 2) sd / sqrt 3), t = 4.303."""
    ratios = [1.1, 1.2, 1.5]
    rows = [r for u, x in enumerate(ratios) for r in ({"rep": u, "prompt": 0, "arm": "ar", "seconds": 1.0, "tokens": 10},
                                                      {"rep": u, "prompt": 0, "arm": "k", "seconds": 1 / x, "tokens": 10})]
    m = measured_speedups(pd.DataFrame(rows)).iloc[0]
    lr = np.log(ratios)
    half = 4.302652729911275 * lr.std(ddof=1) / np.sqrt(3)
    assert m.measured_lo == pytest.approx(np.exp(lr.mean() - half)) and m.measured_hi == pytest.approx(np.exp(lr.mean() + half))
    assert m.measured_lo < 1.0 < m.measured_speedup  # three units: wide, as it should be
    one = measured_speedups(pd.DataFrame(rows[:2])).iloc[0]
    assert np.isnan(one.measured_lo) and np.isnan(one.measured_hi) and one.measured_speedup == pytest.approx(1.1)


def test_timed_arms_rank_as_their_costs():
    """Arms costing 1 and 3 units a prompt against target-only's 2: measured S exactly 2 and 2/3, the faster picked."""
    clock = _Clock()
    t = time_arms({"ar": clock.arm(2.0), "k1": clock.arm(1.0), "k2": clock.arm(3.0)}, [[[1]], [[2], [3]]], repeats=3,
                  clock=clock)
    m = measured_speedups(t).set_index("arm")
    assert m.loc["k1", "measured_speedup"] == pytest.approx(2.0) and m.loc["k2", "measured_speedup"] == pytest.approx(2 / 3)
    assert pick(m.reset_index()) == "k1"


def test_confirm_prompts_are_windows_of_the_given_length():
    ps = confirm_prompts([[256, 1, 2, 3], [256, 4, 5]], n=5, length=9, seed=3)
    assert len(ps) == 5 and all(len(p) == 9 and p[0] == 256 for p in ps)
    assert ps == confirm_prompts([[256, 1, 2, 3], [256, 4, 5]], n=5, length=9, seed=3)


def _grid():
    return pd.DataFrame([{"context": 32, "batch": B, "algorithm": "chain", "k": k, "speedup": s, "speedup_lo": s - .1,
                          "speedup_hi": s + .1, "speedup_steady": s, "goodput_spec": 1.0, "goodput_ar": 1.0,
                          "tokens_per_round": 2.0, "c": 0.2, "max_new_tokens": 8, "fits": True}
                         for B, ks in ((1, {1: 1.2, 2: 1.4, 4: 1.3}), (4, {1: 1.1, 2: 1.05, 4: 0.9}))
                         for k, s in ks.items()])


def test_shortlist_is_the_models_n_best_per_batch():
    short = shortlist(_grid(), [1, 4], 2)
    assert sorted(short[short.batch == 1].k) == [2, 4] and sorted(short[short.batch == 4].k) == [1, 2]


def test_confirmed_replaces_the_models_pick_by_the_measured_one_and_off():
    from harness.speedup.tune import recommend
    grid = _grid()
    rec, _ = recommend(grid, [1, 4])
    conf = pd.DataFrame([{"context": 32, "batch": 1, "algorithm": "chain", "k": 4, "measured_speedup": 1.5,
                          "measured_lo": 1.4, "measured_hi": 1.6, "chosen": True},
                         {"context": 32, "batch": 1, "algorithm": "chain", "k": 2, "measured_speedup": 1.3,
                          "measured_lo": 1.2, "measured_hi": 1.4, "chosen": False},
                         {"context": 32, "batch": 4, "algorithm": "chain", "k": 1, "measured_speedup": 0.95,
                          "measured_lo": 0.9, "measured_hi": 1.0, "chosen": False}])
    out = confirmed(rec, conf, grid).set_index("batch")
    assert out.loc[1, "recommendation"] == "chain, k = 4" and out.loc[1, "model_recommendation"] == "chain, k = 2"
    assert out.loc[1, "speedup"] == pytest.approx(1.3) and out.loc[1, "measured_speedup"] == pytest.approx(1.5)
    assert out.loc[4, "recommendation"] == OFF and not out.loc[4, "speculate"]
    assert out.loc[4, "model_recommendation"] == "chain, k = 1" and out.loc[4, "measured_speedup"] == 1.0


def test_confirmed_turns_speculation_on_where_the_model_said_off():
    from harness.speedup.tune import recommend
    grid = _grid().assign(speedup=lambda g: g.speedup.where(g.batch == 1, g.speedup - 0.2))  # B 4: all below 1
    rec, _ = recommend(grid, [4])
    assert rec.iloc[0].recommendation == OFF
    conf = pd.DataFrame([{"context": 32, "batch": 4, "algorithm": "chain", "k": 2, "measured_speedup": 1.08,
                          "measured_lo": 1.02, "measured_hi": 1.14, "chosen": True}])
    out = confirmed(rec, conf, grid).iloc[0]
    assert out.recommendation == "chain, k = 2" and out.speculate and out.k == 2
    assert out.model_recommendation == OFF and out.speedup == pytest.approx(0.85)


def test_tune_confirm_on_the_tiny_pair_writes_the_measured_pick(tmp_path):
    out = tmp_path / "o"
    assert main(["tune", "--target", T, "--draft", D, "--hardware", "local", "--batch", "1", "--context", "16",
                 "--repeats", "1", "--n-sequences", "4", "--max-new-tokens", "8", "--k", "1,2", "--algorithms",
                 "chain", "--confirm", "2", "--confirm-repeats", "1", "--confirm-prompts", "2",
                 "--out", str(out)]) == 0
    conf = pd.read_csv(out / "confirm.csv")
    rec = pd.read_csv(out / "recommendation.csv").iloc[0]
    assert len(conf) == 2 and set(conf.k) == {1, 2}
    best = conf.sort_values("measured_speedup").iloc[-1]
    want = f"chain, k = {best.k}" if best.measured_speedup > 1 else OFF
    assert rec.recommendation == want and "model_recommendation" in rec
    from harness.speedup.confirm import tie_note
    assert conf.ties_pick.dtype == bool and (rec.tie if isinstance(rec.tie, str) else "") == tie_note(conf)
    t = pd.read_csv(out / "confirm_timings.csv")
    assert set(t.arm) == {"ar", "chain, k = 1", "chain, k = 2"} and len(t) == 3 * 2


@pytest.mark.parametrize("args,needle", [(["--hardware", "h100", "--confirm", "2"], "`--confirm`"),
                                         (["--hardware", "local", "--confirm", "-1"], "`--confirm`"),
                                         (["--hardware", "local", "--confirm", "1", "--confirm-repeats", "0"],
                                          "`--confirm-repeats`"),
                                         (["--hardware", "local", "--confirm", "1", "--confirm-prompts", "0"],
                                          "`--confirm-prompts`")])
def test_bad_confirm_options_are_exit_2(capsys, tmp_path, args, needle):
    assert main(["tune", "--target", T, "--draft", D, *args, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err and not (tmp_path / "o").exists()


def _measured(rows):
    return pd.DataFrame([{"arm": a, "measured_speedup": s, "measured_lo": lo, "measured_hi": hi, "units": 3}
                         for a, s, lo, hi in rows])


def test_noise_ties_flag_overlapping_intervals_and_target_only():
    from harness.speedup.confirm import noise_ties
    # issue 40's run: the pick at 1.080 (0.881-1.329) straddles 1 and its rivals
    m = _measured([("chain, k = 2", 1.080, 0.881, 1.329), ("chain, k = 4", 1.05, 0.95, 1.10),
                   ("chain, k = 1", 0.80, 0.70, 0.85)])
    assert pick(m) == "chain, k = 2"
    assert noise_ties(m, "chain, k = 2") == {"chain, k = 2": True, "chain, k = 4": True, "chain, k = 1": False}
    # a clear pick: its interval above 1 and above every rival's
    clear = _measured([("a", 1.5, 1.4, 1.6), ("b", 1.2, 1.1, 1.3)])
    assert noise_ties(clear, "a") == {"a": False, "b": False}
    # off picked: an arm whose interval reaches 1 ties it
    off = _measured([("a", 0.97, 0.90, 1.03), ("b", 0.8, 0.7, 0.9)])
    assert pick(off) == OFF and noise_ties(off, OFF) == {"a": True, "b": False}
    # one unit, no interval: cannot be told apart
    assert noise_ties(_measured([("a", 1.3, float("nan"), float("nan"))]), "a") == {"a": True}


def test_tune_names_a_tie_within_noise_in_its_recommendation():
    from harness.speedup.confirm import tie_note
    from harness.speedup.tune import _confirm_md, recommend
    grid = _grid()
    rec, _ = recommend(grid, [1, 4])
    conf = pd.DataFrame([{"context": 32, "batch": 1, "algorithm": "chain", "k": 4, "measured_speedup": 1.08,
                          "measured_lo": 0.88, "measured_hi": 1.33, "chosen": True, "ties_pick": True},
                         {"context": 32, "batch": 1, "algorithm": "chain", "k": 2, "measured_speedup": 1.05,
                          "measured_lo": 0.95, "measured_hi": 1.10, "chosen": False, "ties_pick": True},
                         {"context": 32, "batch": 4, "algorithm": "chain", "k": 1, "measured_speedup": 1.5,
                          "measured_lo": 1.4, "measured_hi": 1.6, "chosen": True, "ties_pick": False}])
    for c in ("predicted_speedup", "predicted_lo", "predicted_hi"):
        conf[c] = 1.1
    assert tie_note(conf[conf.batch == 1]) == "tie within noise with chain, k = 2, off (target-only)"
    assert tie_note(conf[conf.batch == 4]) == ""
    out = confirmed(rec, conf, grid).set_index("batch")
    assert out.loc[1, "tie"] == "tie within noise with chain, k = 2, off (target-only)" and out.loc[4, "tie"] == ""
    md = _confirm_md(conf)
    assert "Tie within noise at (context/batch) 32/1: chain, k = 2, off (target-only): the pick" in md
    assert "32/4" not in md.split("Tie within noise")[-1]
