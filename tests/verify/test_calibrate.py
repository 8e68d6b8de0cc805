"""`python -m harness calibrate`: KS per kind, the QQ figure from stored results, kinds, --null, --jobs."""
import numpy as np
import pandas as pd
import pytest

from harness.verify.calibrate import _kinds, _ks_per_kind, _pvalues, qq_figure
from harness.cli import main
from harness.core.provenance import atomic_write_parquet
from harness.laws.scenarios import load_scenario, load_settings


def _fake_pvalues(seed=0, n=400):
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"kind": ["gof.position"] * n + ["bad.test"] * n,
                         "pvalue": np.concatenate([rng.random(n), rng.random(n) ** 3])})


def test_ks_per_kind_flags_too_many_small_pvalues():
    ks = _ks_per_kind(_fake_pvalues()).set_index("kind")
    assert ks.loc["bad.test", "ks_greater_pvalue"] < 1e-6
    assert ks.loc["gof.position", "ks_greater_pvalue"] > 1e-3


def test_qq_figure_from_stored_results_is_byte_reproducible(tmp_path):
    atomic_write_parquet(tmp_path / "pvalues.parquet", _fake_pvalues(), {"commit": "x", "seed": 1})
    first = qq_figure(tmp_path, formats=("png", "pdf"))
    data = [open(p, "rb").read() for p in first]
    again = qq_figure(tmp_path, formats=("png", "pdf"))
    assert [open(p, "rb").read() for p in again] == data
    assert all(len(d) > 1000 for d in data)


def test_real_model_tests_get_their_own_kinds():
    t = pd.DataFrame({"family": ["pit", "pit"], "test": ["pooled", "pooled"], "scenario": ["base", "real_model"]})
    from harness.verify.realmodel import REAL_MODEL_SCENARIO
    t.loc[1, "scenario"] = REAL_MODEL_SCENARIO
    assert _kinds(t).tolist() == ["pit.pooled", "real_model:pit.pooled"]


def test_calibrate_null_cli_writes_its_report(tmp_path):
    assert main(["calibrate", "--null", "--scenario", "base", "--replicates", "2000", "--null-draws", "5000",
                 "--out", str(tmp_path), "--no-progress"]) == 0
    per = pd.read_csv(tmp_path / "null" / "per_kind.csv")
    assert {"gof.position", "gof.joint", "two_sample.position", "pit.pairs"} <= set(per.kind)
    exact = pd.read_csv(tmp_path / "null" / "exact_tails.csv")
    assert (exact.corrected_ratio <= 1).all() and (exact.asymptotic_ratio > 1).any()
    assert "gate level" in (tmp_path / "null" / "summary.md").read_text()


def test_calibrate_options_checked(capsys):
    assert main(["calibrate", "--jobs", "0"]) == 2
    assert "--jobs" in capsys.readouterr().err
    assert main(["calibrate", "--null", "--replicates", "10"]) == 2


@pytest.mark.slow
def test_parallel_seeds_equal_serial_seeds(tmp_path):
    settings, sc = load_settings(), load_scenario("base")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, _ = _pvalues(settings, [sc], seeds=2, draws=1000, store=tmp_path / "a", progress=False)
    b, _ = _pvalues(settings, [sc], seeds=2, draws=1000, store=tmp_path / "b", progress=False, jobs=2)
    assert a.pvalue.tolist() == b.pvalue.tolist()
