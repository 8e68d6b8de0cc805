"""`python -m harness tune` on the shipped tiny pair: its recommendation, its files, its bad-input errors."""
from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

from harness.cli import main
from specimpl.hf import TINY_PAIR_DIR

T, D = str(TINY_PAIR_DIR / "target"), str(TINY_PAIR_DIR / "draft")
SMALL = ["--n-sequences", "4", "--max-new-tokens", "8", "--k", "1,2", "--algorithms", "chain,block"]


def _tune(*args):
    return main(["tune", "--target", T, "--draft", D, *args])


def test_unknown_hardware_is_exit_2(capsys, tmp_path):
    assert _tune("--hardware", "h1000", "--out", str(tmp_path / "o")) == 2
    err = capsys.readouterr().err
    assert "`--hardware`" in err and "h1000" in err and "h100" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("opt,value", [("--batch", "0,8"), ("--context", "x"), ("--algorithms", "chian"),
                                       ("--k", "")])
def test_bad_list_options_are_exit_2(capsys, opt, value):
    assert _tune("--hardware", "h100", opt, value) == 2
    assert f"`{opt}`" in capsys.readouterr().err


HW = 'name = "x"\nsource = "s"\nbandwidth_gbps = {bw}\noverhead_s = {oh}\n[peak_tflops]\nfloat32 = {pk}\n'


@pytest.mark.parametrize("key,fields", [("bandwidth_gbps", dict(bw=0)), ("bandwidth_gbps", dict(bw="nan")),
                                        ("bandwidth_gbps", dict(bw="inf")), ("bandwidth_gbps", dict(bw=-5)),
                                        ("peak_tflops.float32", dict(pk=0)), ("overhead_s", dict(oh=-1))])
def test_non_positive_or_non_finite_hardware_numbers_are_exit_2(capsys, tmp_path, key, fields):
    """A bandwidth of 0 used to give exit 0, recommending "off" with S = nan."""
    hw = tmp_path / "hw.toml"
    hw.write_text(HW.format(**{"bw": 1000, "oh": 0.0005, "pk": 100, **fields}))
    assert _tune("--hardware", str(hw), "--out", str(tmp_path / "o")) == 2
    err = capsys.readouterr().err
    assert f"'{key}'" in err and str(hw) in err and "Traceback" not in err
    assert "is not a valid hardware description" in err and "must be 'local' or one of" not in err  # its own fault first
    assert not (tmp_path / "o").exists()


def test_a_hardware_file_that_does_not_exist_is_named(capsys, tmp_path):
    assert _tune("--hardware", str(tmp_path / "nonexist.toml"), "--out", str(tmp_path / "o")) == 2
    err = capsys.readouterr().err
    assert "nonexist.toml' does not exist" in err and "Traceback" not in err


def test_config_without_a_needed_field_is_exit_2(capsys, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(TINY_PAIR_DIR / "draft", bad)
    cfg = json.loads((bad / "config.json").read_text())
    del cfg["intermediate_size"]
    (bad / "config.json").write_text(json.dumps(cfg))
    assert main(["tune", "--target", T, "--draft", str(bad), "--hardware", "h100"]) == 2
    err = capsys.readouterr().err
    assert "`--draft`" in err and "intermediate_size" in err and "config.json" in err


def test_vocabulary_mismatch_is_exit_2(capsys, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(TINY_PAIR_DIR / "draft", bad)
    cfg = json.loads((bad / "config.json").read_text())
    cfg["vocab_size"] = 300
    (bad / "config.json").write_text(json.dumps(cfg))
    assert main(["tune", "--target", T, "--draft", str(bad), "--hardware", "h100"]) == 2
    err = capsys.readouterr().err
    assert "vocabulary" in err and "300" in err and "259" in err


def test_context_past_the_models_positions_is_exit_2_on_local(capsys):
    assert _tune("--hardware", "local", "--context", "4096", *SMALL) == 2
    assert "`--context`" in capsys.readouterr().err


def test_tune_on_a_named_gpu_writes_a_recommendation_per_batch(tmp_path, capsys):
    out = tmp_path / "o"
    assert _tune("--hardware", "h100", "--batch", "1,8", "--context", "64,1024", "--out", str(out), *SMALL) == 0
    rec = pd.read_csv(out / "recommendation.csv")
    assert sorted(zip(rec.context, rec.batch)) == [(64, 1), (64, 8), (1024, 1), (1024, 8)]
    assert (rec.speedup_lo <= rec.speedup).all() and (rec.speedup <= rec.speedup_hi).all()
    # speculation is recommended exactly where the predicted speedup exceeds 1
    assert (rec.speculate == (rec.speedup > 1)).all()
    assert set(rec[~rec.speculate].recommendation) <= {"off (target-only)"}
    acc = pd.read_csv(out / "acceptance.csv")
    assert set(zip(acc.algorithm, acc.k)) == {("chain", 1), ("chain", 2), ("block", 1), ("block", 2)}
    assert ((acc.tokens_per_round >= 1) & (acc.tokens_per_round <= acc.k + 1)).all()
    alpha = pd.read_csv(out / "alpha.csv")
    assert list(alpha.position) == [1, 2] and ((alpha.alpha_lo95 <= alpha.alpha) & (alpha.alpha <= alpha.alpha_hi95)).all()
    grid = pd.read_csv(out / "roofline.csv")
    assert grid.batch.max() >= 1024  # the roofline scans batches past the ones asked for
    meta = json.loads((out / "meta.json").read_text())
    assert meta["config"]["hardware"] == "h100"
    assert "recommendation" in capsys.readouterr().out


def test_tune_local_profiles_this_machine(tmp_path):
    out = tmp_path / "o"
    assert _tune("--hardware", "local", "--batch", "1", "--context", "16", "--repeats", "1", "--out", str(out),
                 "--n-sequences", "4", "--max-new-tokens", "8", "--k", "1", "--algorithms", "chain") == 0
    costs = pd.read_csv(out / "costs.csv")
    assert {"target.forward", "draft.forward", "spec.overhead", "ar.overhead"} <= set(costs.op)
    assert len(pd.read_csv(out / "recommendation.csv")) == 1


@pytest.mark.parametrize("kind", ["mkldnn", "skinny"])
def test_tune_local_with_a_prepacked_target(tmp_path, kind):
    """--prepack profiles the target with its linear layers as the membound sweep runs them."""
    out = tmp_path / "o"
    assert _tune("--hardware", "local", "--batch", "1", "--context", "16", "--repeats", "1", "--out", str(out),
                 "--n-sequences", "4", "--max-new-tokens", "8", "--k", "1", "--algorithms", "chain",
                 "--prepack", kind) == 0
    assert json.loads((out / "meta.json").read_text())["config"]["prepack"] == kind


def _target_only_sweep(folder, batch=1, context=16, max_new_tokens=8, step=0.05):
    folder.mkdir()
    pd.DataFrame({"cell": ["c"], "prompt_len": [context], "max_new_tokens": [max_new_tokens]}).to_csv(
        folder / "measured.csv", index=False)
    rows = [("target.forward", 1, [step] * 3), ("target.prefill", context - 1, [0.2, 0.3, 0.2, 0.3]),
            ("ar.overhead", 1, [0.001] * 2)]
    pd.DataFrame([{"model": "in situ: tiny_pair/target / tiny_pair/draft", "cell": "c", "op": op, "n": n,
                   "batch": batch, "cpu_samples_s": json.dumps(xs)} for op, n, xs in rows]).to_csv(
        folder / "profiles.csv", index=False)
    return folder


def test_tune_local_calibrated_by_a_sweeps_target_only_runs(tmp_path):
    """--target-only: the target priced at the sweep's step (50 ms here), the draft by this machine's runs."""
    out = tmp_path / "o"
    sweep = _target_only_sweep(tmp_path / "sweep")
    assert _tune("--hardware", "local", "--batch", "1", "--context", "16", "--repeats", "1", "--out", str(out),
                 "--n-sequences", "4", "--max-new-tokens", "8", "--k", "1", "--algorithms", "chain",
                 "--target-only", str(sweep)) == 0
    costs = pd.read_csv(out / "costs.csv").set_index(["op", "n"])
    assert costs.loc[("target.forward", 1), "cpu_median_s"] == pytest.approx(0.05)
    assert costs.loc[("target.prefill", 15), "cpu_median_s"] == pytest.approx(0.2)  # the target-only runs' prefill
    assert "target-only run of the draft" in costs.loc[("draft.forward", 1), "calibration"]


@pytest.mark.parametrize("change,needle", [(dict(batch=4), "no target-only runs at (batch, context)"),
                                           (dict(max_new_tokens=16), "max_new_tokens")])
def test_target_only_sweep_without_the_workload_is_exit_2(tmp_path, capsys, change, needle):
    sweep = _target_only_sweep(tmp_path / "sweep", **change)
    assert _tune("--hardware", "local", "--batch", "1", "--context", "16", "--out", str(tmp_path / "o"),
                 *SMALL, "--target-only", str(sweep)) == 2
    err = capsys.readouterr().err
    assert "`--target-only`" in err and needle in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()
    assert _tune("--hardware", "h100", "--target-only", str(sweep), "--out", str(tmp_path / "o")) == 2
    assert "--hardware local" in capsys.readouterr().err
