"""Isolated profiles calibrated by target-only runs (harness.speedup.costmodel_calibrate)."""
import pandas as pd
import pytest

from harness.speedup.costmodel_calibrate import calibrate, profile_solo_runs
from specimpl.hf import TINY_PAIR_DIR, load_pair


def _prof():
    rows = [("target.forward", 1, 4, 16, 1.0), ("target.forward", 3, 4, 16, 1.5), ("target.prefill", 15, 4, 16, 2.0),
            ("target.rollback", 1, 4, 16, 0.01), ("ar.overhead", 1, 4, 0, 0.1), ("spec.overhead", 2, 4, 0, 0.3)]
    f = pd.DataFrame(rows, columns=["op", "n", "batch", "context", "cpu_median_s"])
    f["cpu_samples_s"] = [[v, v] for v in f.cpu_median_s]
    return f


def test_calibrate_scales_forwards_replaces_prefill_and_adds_per_call_overhead():
    solo = pd.DataFrame([("target.forward", 1, 4, 16, 1.2), ("target.forward", 1, 4, 16, 1.2),
                         ("target.prefill", 15, 4, 16, 3.0), ("ar.overhead", 1, 4, 16, 0.15)],
                        columns=["op", "n", "batch", "context", "cpu_s"])
    c = calibrate(_prof(), solo).set_index("op")
    assert c.loc["target.forward"].cpu_median_s.tolist() == pytest.approx([1.2, 1.8])  # x 1.2: shape kept
    assert c.loc["target.prefill", "cpu_median_s"] == pytest.approx(3.0)
    assert c.loc["target.rollback", "cpu_median_s"] == pytest.approx(0.01)  # not covered by the runs
    assert c.loc["ar.overhead", "cpu_median_s"] == pytest.approx(0.15)
    assert c.loc["spec.overhead", "cpu_median_s"] == pytest.approx(0.3 + 3 * 0.05)  # k + 1 = 3 calls a round
    assert c.loc["spec.overhead", "cpu_samples_s"] == pytest.approx([0.45, 0.45])


def test_solo_runs_record_every_call_of_the_target_only_call():
    target, draft = load_pair(str(TINY_PAIR_DIR / "target"), str(TINY_PAIR_DIR / "draft"), local_files_only=True)
    solo = profile_solo_runs({"target": target, "draft": draft}, lambda B, L: [[1] * L] * B, [2], [8], 5, repeats=1)
    t = solo[solo.op == "target.forward"]
    assert len(t) == 5 and set(t.batch) == {2}  # one forward per new token
    assert set(solo.op) == {"target.forward", "target.prefill", "draft.forward", "draft.prefill", "ar.overhead"}
    assert set(solo[solo.op.str.endswith("prefill")].n) == {7}  # prompts of L = 8 tokens: 7 prefilled
