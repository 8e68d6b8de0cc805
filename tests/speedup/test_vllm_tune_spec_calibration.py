"""experiments/vllm_tune_spec_calibration.py on a made-up table: a round linear in k is recovered from two depths and
the pick follows it; a depth measured off that line is scored as evaluation, not fitted."""
import pandas as pd
import pytest

from experiment_script import load_experiment


def _table(c, d, t=0.01, E=(1.8, 2.4, 2.9, 3.3), bump=None):
    """A tune-check table.csv at one batch whose measured rounds are t + c + k d (``bump``: {k: factor} on S)."""
    rows = []
    for k, e in enumerate(E, start=1):
        s = e * t / (t + c + k * d) * (bump or {}).get(k, 1.0)
        rows.append({"k": k, "batch": 1, "tokens_per_round": e, "target_step_s": t, "measured_speedup": s,
                     "measured_rep_lo": s * 0.9, "measured_rep_hi": s * 1.1})
    return pd.DataFrame(rows)


def test_a_linear_round_is_recovered_and_predicts_the_other_depths():
    cal = load_experiment("vllm_tune_spec_calibration")
    table, picks = cal.calibrate(_table(c=0.0015, d=0.003), [1, 2])
    assert table.draft_ms_in_engine.iloc[0] == pytest.approx(3.0) and table.round_fixed_ms.iloc[0] == pytest.approx(1.5)
    assert table.error_pct.abs().max() < 1e-9
    assert list(table.role) == ["calibration", "calibration", "evaluation", "evaluation"]
    best = int(table.set_index("k").measured_speedup.idxmax())
    assert picks.calibrated_k.iloc[0] == best and bool(picks.within_5pct.iloc[0])


def test_a_depth_off_the_line_is_an_evaluation_miss_and_can_fail_the_5_percent_rule():
    cal = load_experiment("vllm_tune_spec_calibration")
    table, picks = cal.calibrate(_table(c=0.0015, d=0.008, bump={4: 1.6}), [1, 2])
    assert table.set_index("k").error_pct[4] == pytest.approx(100 * (1 / 1.6 - 1))
    assert picks.measured_best_k.iloc[0] == 4 and picks.calibrated_k.iloc[0] != 4
    assert not bool(picks.within_5pct.iloc[0])


def test_one_calibration_depth_identifies_nothing():
    cal = load_experiment("vllm_tune_spec_calibration")
    with pytest.raises(ValueError, match="two distinct depths"):
        cal.calibrate(_table(c=0.001, d=0.003), [1])
