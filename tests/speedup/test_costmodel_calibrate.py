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


def test_a_flattened_isolated_shape_is_priced_by_the_runs_cost_per_added_row():
    """Memory-bound target on a busy machine: the isolated profile's few-row calls inflated, so its shape is flat
    (T(3) / T(1) = 1.2); the target-only run's step (1.0) and prefill of 15 tokens a sequence (8.0) price each
    added token at 0.5: T(3) = 2.0, not the scaled shape's 1.2.  Without the per-row term this fails."""
    prof = _prof()
    prof.loc[(prof.op == "target.forward") & (prof.n == 3), ["cpu_median_s", "cpu_samples_s"]] = [1.2, None]
    prof.at[prof.index[(prof.op == "target.forward") & (prof.n == 3)][0], "cpu_samples_s"] = [1.1, 1.3]
    solo = pd.DataFrame([("target.forward", 1, 4, 16, 1.0), ("target.prefill", 15, 4, 16, 8.0)],
                        columns=["op", "n", "batch", "context", "cpu_s"])
    c = calibrate(prof, solo)
    t3 = c[(c.op == "target.forward") & (c.n == 3)].iloc[0]
    assert t3.cpu_median_s == pytest.approx(2.0)
    assert t3.cpu_samples_s == pytest.approx([1.9, 2.1])  # each sample moved with its median
    assert "per added token" in t3.calibration
    assert c[(c.op == "target.forward") & (c.n == 1)].cpu_median_s.iloc[0] == pytest.approx(1.0)


def test_an_overhead_bound_shape_above_the_line_is_kept():
    """Cost concave in rows (fixed per-operation cost, a prefill that amortises it): the line through step and
    prefill lies below the scaled isolated shape, which is kept."""
    solo = pd.DataFrame([("target.forward", 1, 4, 16, 1.0), ("target.prefill", 15, 4, 16, 1.4)],
                        columns=["op", "n", "batch", "context", "cpu_s"])
    c = calibrate(_prof(), solo)
    assert c[(c.op == "target.forward") & (c.n == 3)].cpu_median_s.iloc[0] == pytest.approx(1.5)


def _sweep_folder(tmp_path, target="w8/target", max_new_tokens=32):
    import json
    meas = pd.DataFrame({"cell": ["c1"], "prompt_len": [16], "max_new_tokens": [max_new_tokens]})
    rows = [("target.forward", 1, 4, [0.10, 0.12]), ("target.forward", 3, 4, [9.0]),  # a verification: left out
            ("target.prefill", 15, 4, [0.5, 7.0, 0.7, 7.0]),  # target-only run first in every pass
            ("ar.overhead", 1, 4, [0.001]), ("draft.forward", 1, 4, [0.01])]
    prof = pd.DataFrame([{"model": f"in situ: {target} / d", "cell": "c1", "op": op, "n": n, "batch": b,
                          "cpu_samples_s": json.dumps(xs)} for op, n, b, xs in rows])
    meas.to_csv(tmp_path / "measured.csv", index=False)
    prof.to_csv(tmp_path / "profiles.csv", index=False)
    return tmp_path


def test_sweep_target_only_keeps_the_target_only_runs_calls(tmp_path):
    from harness.speedup.costmodel_calibrate import sweep_target_only
    f = sweep_target_only(_sweep_folder(tmp_path), "build/w8/target", 32)
    assert set(f.op) == {"target.forward", "target.prefill", "ar.overhead"} and set(f.n[f.op == "target.forward"]) == {1}
    assert sorted(f[f.op == "target.prefill"].cpu_s) == [0.5, 0.7]  # the speculative runs' prefills left out
    assert set(f.context) == {16} and set(f.batch) == {4}


@pytest.mark.parametrize("target,mnt,needle", [("other/target", 32, "holds no in-situ runs"),
                                               ("w8/target", 64, "max_new_tokens")])
def test_sweep_target_only_refuses_another_target_or_workload(tmp_path, target, mnt, needle):
    from harness.speedup.costmodel_calibrate import TargetOnlyError, sweep_target_only
    with pytest.raises(TargetOnlyError, match=needle):
        sweep_target_only(_sweep_folder(tmp_path), target, mnt)
    with pytest.raises(TargetOnlyError, match="no measured.csv"):
        sweep_target_only(tmp_path / "nowhere", "w8/target", 32)
