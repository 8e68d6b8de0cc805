"""`python -m harness verify`: exit codes, --sampler import errors, the report, the exact process law
and the battery's own small statistics (planners checked against each other)."""
import json
import math
import shlex
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import stats as sps

from conftest import TINY  # the shared tiny scenario (tests/conftest.py, with the scen_dir fixture)
from cost_columns import check_cost_columns, check_real_cost  # runs.csv's cost columns (issue 42)
from harness.verify.battery import (TEST_COLUMNS, chunk_t_min_detectable, chunk_t_n_for_deviation, chunk_t_test,
                             hotelling_test, ks_uniform_binned, plan_chunks, tv_interval)
from harness.stats import clopper_pearson
from harness.controls.chain import AcceptEverything, as_sampler_function
from harness.cli import build_parser, main
from harness.laws.ngram import ExactLaw
from harness.laws.scenarios import SCENARIO_DIR, load_scenario, load_settings
from harness.verify.sampler import SamplerSpecError, load_sampler
from specimpl import SamplingConfig, speculative_generate
from specimpl.ngram import exact_acceptance, exact_joint, exact_marginals, noisy_draft, random_ngram

HERE = Path(__file__).resolve()

# module-level samplers, reachable as --sampler <this file>:<name>
accept_everything_generate = as_sampler_function(AcceptEverything)


def wrong_shape_generate(target, draft, prompts, *, k, max_new_tokens, config, eos_token_id, generator):
    r = speculative_generate(target, draft, prompts, k=k, max_new_tokens=max_new_tokens, config=config,
                             eos_token_id=eos_token_id, generator=generator)
    r.tokens = r.tokens[:, :-1]
    return r


def plain_function_generate(target, draft, prompts, *, k, max_new_tokens, config, eos_token_id, generator):
    """A lossless sampler without instrumentation (stats=None): plain target sampling."""
    from specimpl.autoregressive import autoregressive_generate
    return autoregressive_generate(target, prompts, max_new_tokens=max_new_tokens, config=config,
                                   eos_token_id=eos_token_id, generator=generator)




# tolerances a 3000-sequence run of the tiny scenario certifies (its bounds: ~0.07 per position, ~0.1 on pairs)
LOOSE = ("--epsilon", "position=0.3,pair=0.5,joint=0.5,real=0.5")


def _verify(scen_dir, out, *extra):
    return main(["verify", "--scenario-dir", str(scen_dir), "--scenario", "tiny", "--draws", "3000",
                 "--out", str(out), "--no-progress", "--no-figures", *extra])


def test_reference_passes_and_writes_report(scen_dir, tmp_path, capsys):
    assert _verify(scen_dir, tmp_path / "r", "--no-controls", *LOOSE) == 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-1] == "verify reference: PASS (every run as its role requires)"
    out = tmp_path / "r"
    runs = check_cost_columns(out).set_index("run")
    assert runs.loc["reference", "certificate"] == "certified"  # the figures are checked on a certified run
    cost = next(x for x in lines if x.startswith("cost: "))
    assert " s wall, " in cost and " CPU-s; CPU-s to certify ε (bound × √CPU-s): tiny " in cost
    t = pd.read_parquet(out / "tests.parquet")
    for col in ("scenario", "test", "statistic", "pvalue", "p_adjusted", "min_detectable", "tv_upper", "verdict"):
        assert col in t.columns
    assert (t.verdict == "pass").all()
    assert set(t.family) >= {"gof", "two_sample", "pit", "acceptance"}
    csv = pd.read_csv(out / "tests.csv")
    assert len(csv) == len(t)
    assert list(csv.columns) == list(t.columns) == list(TEST_COLUMNS) == TESTS_CSV_COLUMNS
    meta = json.loads((out / "meta.json").read_text())
    assert meta["seed"] is not None and "versions" in meta and "machine" in meta and "commit" in meta
    assert meta["config"]["n_tests"] + meta["config"]["n_sequential"] == len(t)  # Holm's family + sequential rows
    summary = (out / "summary.md").read_text()
    assert "**Result: PASS**" in summary and "Holm" in summary and "## Why not PASS" not in summary
    assert "## What the certificates cost" in summary and " CPU-seconds** (" in summary
    stop = meta["timing"]["stop_at_need"]  # the default stops the run under test at the need, and says where
    (row,) = stop["runs"]
    assert meta["config"]["stop_at_need"] and (row["run"], row["scenario"], row["fixed_n"]) == ("reference", "tiny", 3000)
    assert row["sequences"] == runs.loc["reference", "sequences"] and 1 <= row["look"] <= row["looks"]
    assert f"- Stop at the need (" in summary and f"tiny {row['sequences']:,} of 3,000 (look {row['look']} of" in summary
    assert not list(out.glob("_tmp*")) and not (out / "_tmp_state").exists()


# the columns of tests.csv, in order: a contract with everything that reads the report
TESTS_CSV_COLUMNS = ["scenario", "run", "role", "family", "test", "position", "loss_test", "statistic", "pvalue",
                     "p_adjusted", "alpha_bonferroni", "min_detectable", "min_detectable_unit", "tv_hat", "tv_lower",
                     "tv_upper", "tv_method", "tv_cells", "tv_upper_asymptotic", "chi2_pooled_mass", "expected", "observed", "verdict", "n", "df", "cells", "method",
                     "direction", "kolmogorov_upper", "kolmogorov_method", "reject"]


def test_buggy_sampler_fails_with_exit_1(scen_dir, tmp_path, capsys):
    rc = _verify(scen_dir, tmp_path / "b", "--sampler", f"{HERE}:accept_everything_generate")
    assert rc == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-1].startswith(f"verify {HERE}:accept_everything_generate: LOSSY")
    loss = next(x for x in lines if x.strip().startswith("loss: "))
    assert " on tiny: loss TV ≈ " in loss and "(confidence 0.999) on " in loss and "observed" in loss
    runs = check_cost_columns(tmp_path / "b")  # lossy: no figures, its CPU seconds all the same
    assert runs.verdict.iloc[0].startswith("lossy") and not runs.passed.iloc[0]
    assert runs.caught_by.iloc[0] in ("sequential.eprocess",) or "gof" in runs.caught_by.iloc[0]  # stopped early, or not


def test_fixed_n_draws_the_fixed_size_and_says_nothing_of_looks(scen_dir, tmp_path):
    assert _verify(scen_dir, tmp_path / "f", "--no-controls", "--fixed-n", *LOOSE) == 0
    meta = json.loads((tmp_path / "f" / "meta.json").read_text())
    assert not meta["config"]["stop_at_need"] and meta["timing"]["stop_at_need"]["runs"] == []
    assert pd.read_csv(tmp_path / "f" / "runs.csv").set_index("run").loc["reference", "sequences"] == 3000
    assert "Stop at the need" not in (tmp_path / "f" / "summary.md").read_text()


def test_too_few_draws_are_inconclusive_exit_4_with_the_command_that_certifies(scen_dir, tmp_path, capsys):
    """The reference sampler at 3,000 sequences and the default tolerances: nothing lossy, not certified: exit 4,
    INCONCLUSIVE on the last line, and the command that draws what would certify (the same options, the new
    --draws), which the CLI's own parser reads back; summary.md carries the same command and no loss section."""
    assert _verify(scen_dir, tmp_path / "i", "--no-controls", "--seed", "3") == 4
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-1].startswith("verify reference: INCONCLUSIVE (nothing lossy") and "exit 4" in lines[-1]
    assert lines[-3] == "to certify, run:"
    # stop at the need (the default): never certified, the run drew to its cap, 1.25 x --draws 3,000
    advice = next(x for x in lines if x.strip().startswith("to certify: reference on tiny: drew 3,750; ~"))
    words = shlex.split(lines[-2])
    args = build_parser()[0].parse_args(words[3:])
    assert words[:4] == ["python", "-m", "harness", "verify"] and args.command == "verify"
    assert (args.scenario, args.seed, args.no_controls, args.out) == (["tiny"], 4, True, tmp_path / "i")  # next seed
    runs = check_cost_columns(tmp_path / "i").set_index("run")  # inconclusive: no figures
    assert args.draws > runs.loc["reference", "certify_draws"] > 3000  # planned to certify 95 %, not half the time
    assert f"--draws {args.draws:,}" in advice
    summary = (tmp_path / "i" / "summary.md").read_text()
    assert "**Result: INCONCLUSIVE**" in summary and lines[-2].strip() in summary
    assert "## Where the loss is" not in summary
    assert "tiny 3,750 of 3,000 (no look certified it)" in summary  # at its cap, not certified: no look counts


def test_uninstrumented_lossless_sampler_passes(scen_dir, tmp_path):
    assert _verify(scen_dir, tmp_path / "p", "--sampler", f"{HERE}:plain_function_generate", *LOOSE) == 0
    runs = pd.read_csv(tmp_path / "p" / "runs.csv")
    assert "not instrumented" in runs.verdict.iloc[0]


def test_sampler_with_wrong_output_fails_with_reason(scen_dir, tmp_path):
    assert _verify(scen_dir, tmp_path / "w", "--sampler", f"{HERE}:wrong_shape_generate") == 3  # failed, not lossy
    runs = pd.read_csv(tmp_path / "w" / "runs.csv")
    assert "shape (B, max_new_tokens)" in runs.verdict.iloc[0]


@pytest.mark.parametrize("spec, fragment", [
    ("specimpl", "must be 'package.module:function'"),
    ("a:b:c", "must be 'package.module:function'"),
    ("no_such_pkg.mod:fn", "No module named 'no_such_pkg'"),
    ("harness.controls.chain:no_such_fn", "no attribute 'no_such_fn'"),
    ("harness.controls.chain:CATALOGUE", "must name a callable"),
    ("/no/such/file.py:fn", "does not exist"),
])
def test_bad_sampler_spec_names_the_argument(spec, fragment, capsys, scen_dir, tmp_path):
    with pytest.raises(SamplerSpecError, match="`--sampler`"):
        load_sampler(spec)
    assert _verify(scen_dir, tmp_path / "x", "--sampler", spec) == 2
    err = capsys.readouterr().err
    assert "`--sampler`" in err and fragment in err


def test_bad_scenario_and_draws_exit_2(capsys, scen_dir, tmp_path):
    assert main(["verify", "--scenario-dir", str(scen_dir), "--scenario", "nope", "--no-progress"]) == 2
    assert "`--scenario` must be one of" in capsys.readouterr().err
    assert _verify(scen_dir, tmp_path / "y", "--draws", "1") == 2
    assert "`--draws`" in capsys.readouterr().err


def test_load_sampler_resolves_module_function():
    fn = load_sampler("specimpl.speculative:speculative_generate")
    assert fn.__wrapped__ is speculative_generate and fn.failures == []  # wrapped by guard_sampler


def test_default_settings_meet_the_budget():
    s = load_settings()
    assert s.family_alpha <= 1e-4
    assert set(s.scenarios) <= {p.stem for p in SCENARIO_DIR.glob("*.toml")}
    for name in s.scenarios:
        load_scenario(name)  # parses


# ---------------------------------------------------------------------------- exact process law
def _pair():
    t = random_ngram(5, 2, 0.6, seed=11)
    return t, noisy_draft(t, 0.4, seed=3)


def test_exact_law_agrees_with_ngram_module():
    t, d = _pair()
    cfg = SamplingConfig(temperature=0.8, top_k=4)
    law = ExactLaw(t, d, [2], 5, cfg, None)
    assert np.allclose(law.marginals()[:, :5], exact_marginals(t, [2], 5, cfg))
    assert np.allclose(law.marginals()[:, 5], 0)
    assert np.allclose(law.joint(3).reshape(6, 6, 6)[:5, :5, :5], exact_joint(t, [2], 3, cfg))
    pm = law.pair_marginals().reshape(4, 6, 6)
    assert np.allclose(pm.sum(2), law.marginals()[:4]) and np.allclose(pm.sum(1), law.marginals()[1:])
    # the reference process's position-1 acceptance, averaged per sequence, is exact_acceptance at t = 0
    acc = law.acceptance_law(3)
    assert np.isclose(acc.alpha[0] * acc.reached[0] / acc.rounds, acc.accepted[0] / acc.rounds)
    assert np.isclose(acc.hist.sum(), acc.rounds) and acc.reached[0] == pytest.approx(acc.rounds)


def test_exact_acceptance_law_matches_simulation():
    """Expected per-sequence SpecStats counts vs 100k simulated sequences (5 sd tolerance: false-fail
    rate < 1e-5 per coordinate); with EOS, so truncation inside a round is exercised."""
    t, d = _pair()
    law = ExactLaw(t, d, [1], 6, SamplingConfig(), eos_token_id=3)
    acc = law.acceptance_law(3)
    B = 100_000
    r = speculative_generate(t, d, torch.full((B, 1), 1), k=3, max_new_tokens=6, eos_token_id=3,
                             generator=torch.Generator().manual_seed(0))
    s = r.stats
    for emp, ex in ((s.reached, acc.reached), (s.accepted_at, acc.accepted), (s.accepted_hist, acc.hist)):
        emp = np.asarray(emp) / B
        # per-sequence counts are bounded by the number of rounds (<= 6): sd <= 6 / sqrt(B)
        assert np.all(np.abs(emp - ex) < 5 * 6 / math.sqrt(B)), (emp, ex)


def test_acceptance_is_not_iid_across_positions():
    """The exact alpha_i differ by position: a test against one alpha for all positions would be wrong."""
    sc = load_scenario("base")
    t, d = sc.build()
    a = ExactLaw(t, d, list(sc.prompt), sc.max_new_tokens, sc.config).acceptance_law(sc.k).alpha
    assert a.max() - a.min() > 0.01


def test_pit_is_uniform_for_reference_and_pad_convention():
    t, d = _pair()
    law = ExactLaw(t, d, [0], 6, SamplingConfig(), eos_token_id=2)
    r = speculative_generate(t, d, torch.zeros((20_000, 1), dtype=torch.long), k=2, max_new_tokens=6,
                             eos_token_id=2, generator=torch.Generator().manual_seed(5))
    sym = law.symbols(r.tokens)
    u = law.pit(sym, law.states(sym), np.random.default_rng(0).random(sym.shape))
    assert sps.kstest(u.ravel(), "uniform").pvalue > 1e-6
    # a PAD in a live sequence has U = 1; a token after EOS has U = 0 (PAD is symbol 5)
    bad = np.array([[0, 5, 5, 5, 5, 5], [2, 1, 5, 5, 5, 5]])
    ub = law.pit(bad, law.states(bad), np.full(bad.shape, 0.5))
    assert ub[0, 1] == 1.0 and ub[1, 1] == 0.0


# ------------------------------------------------------------------------- battery statistics
def test_chunk_t_planners_agree():
    for sd, scale in ((100.0, 20_000.0), (5.0, 300.0)):
        for dev in (0.01, 0.003):
            c = chunk_t_n_for_deviation(dev, sd, scale, 1e-7, 0.99)
            assert chunk_t_min_detectable(c, sd, scale, 1e-7, 0.99) <= dev
            assert chunk_t_min_detectable(c - 1, sd, scale, 1e-7, 0.99) > dev


def test_chunk_t_test_level_and_power():
    rng = np.random.default_rng(0)
    p = [chunk_t_test(rng.normal(0, 10, 32), np.full(32, 1000.0), alpha=0.05, power=0.9).pvalue for _ in range(2000)]
    assert abs(np.mean(np.array(p) <= 0.05) - 0.05) < 0.02
    r = chunk_t_test(rng.normal(0, 10, 32), np.full(32, 1000.0), alpha=1e-6, power=0.99)
    shift = r.min_detectable * 1000.0
    hits = [chunk_t_test(rng.normal(shift, 10, 32), np.full(32, 1000.0), alpha=1e-6, power=0.99).pvalue <= 1e-6
            for _ in range(300)]
    assert np.mean(hits) > 0.9  # the stated power (0.99) up to Monte Carlo error and the estimated sd


def test_hotelling_level_and_exact_dimensions():
    rng = np.random.default_rng(1)
    p = [hotelling_test(rng.normal(size=(32, 4)), alpha=0.05, power=0.9).pvalue for _ in range(1000)]
    assert abs(np.mean(np.array(p) <= 0.05) - 0.05) < 0.025
    D = np.zeros((32, 3))
    D[:, 1] = rng.normal(size=32)
    zero = np.array([True, False, False])
    assert hotelling_test(D, alpha=1e-6, power=0.99, zero_dims=zero).pvalue > 1e-6  # flat dims at 0 pass
    D[:, 2] = 2.0  # no spread but a non-zero mean deviation
    assert hotelling_test(D, alpha=1e-6, power=0.99, zero_dims=zero).pvalue == 0.0
    D[:, 2] = 0.0
    D[3, 0] = 1.0  # a count that is 0 under H0 is not: impossible
    assert hotelling_test(D, alpha=1e-6, power=0.99, zero_dims=zero).pvalue == 0.0


def test_binned_ks_is_conservative():
    rng = np.random.default_rng(2)
    u = rng.random(50_000) ** 1.02
    exact = sps.kstest(u, "uniform")
    binned = ks_uniform_binned(np.bincount((u * 4096).astype(int), minlength=4096), alpha=1e-3, power=0.9)
    assert binned.statistic <= exact.statistic + 1e-12 and binned.pvalue >= exact.pvalue * 0.999


def _binomial_tolerance(reps: int, rate: float) -> int:
    """Most misses of a rate-``rate`` event in ``reps`` trials short of a 1e-6 tail (the tests' slack)."""
    return int(sps.binom.isf(1e-6, reps, rate))


def _interval_misses(P, Q, n, delta, reps, seed):
    """(upper-end misses, lower-end misses) of tv_interval over ``reps`` multinomial(n, Q) draws."""
    tv = 0.5 * np.abs(Q - P).sum()
    rng = np.random.default_rng(seed)
    miss_up = miss_lo = 0
    for _ in range(reps):
        tv_hat, lo, up, how = tv_interval(rng.multinomial(n, Q), P, delta)
        miss_up += up < tv
        miss_lo += lo > tv
        assert "finite-sample" in how
    return miss_up, miss_lo


def test_tv_interval_covers_a_known_tv_over_many_seeds():
    """Coverage against a known TV(Q, P), in two regimes chosen so that a wrong bound visibly misses:
    (a) Q = P at 2000 draws: the lower end must stay at 0 = TV; with the width halved it exceeds 0 in ~25 % of
    draws (measured: 503 of 2000 lower-end misses with ``_tv_bound_width`` halved);
    (b) Q moves 0.02 of its mass onto a cell P gives 0 (TV 0.03) at 100,000 draws: with that cell's mass dropped
    the upper end (~0.028) lies below TV in nearly every draw (measured: 1883 of 2000 with ``lump_zero_cells``
    dropping it).
    Both ends hold in >= 1 - delta/2 of the draws each.  False-failure rate: each count may reach
    binom.isf(1e-6, reps, delta/2), so a correct interval fails each assertion with probability <= 1e-6."""
    P = np.array([0.4, 0.3, 0.2, 0.1, 0.0, 0.0])
    Q = np.array([0.37, 0.3, 0.21, 0.1, 0.02, 0.0])
    delta, reps = 0.2, 2000
    tol = _binomial_tolerance(reps, delta / 2)
    up, lo = _interval_misses(P, P, 2000, delta, reps, seed=11)
    assert up == 0 and lo <= tol
    up, lo = _interval_misses(P, Q, 100_000, delta, reps, seed=12)
    assert up <= tol and lo <= tol
    # the interval is informative: at 2000 draws it excludes TV = 0.2 in most draws
    rng = np.random.default_rng(13)
    assert np.mean([tv_interval(rng.multinomial(2000, Q), P, delta)[2] < 0.2 for _ in range(200)]) > 0.9


def test_tv_interval_asymptotic_bound_is_reported_apart():
    """The noncentral-chi-square inversion is labelled asymptotic and never the interval's upper end."""
    from harness.verify.battery import tv_upper_asymptotic
    P = np.full(4, 0.25)
    c = np.random.default_rng(0).multinomial(100_000, P)
    up_asym, how = tv_upper_asymptotic(c, P, 1e-3)
    assert how.startswith("asymptotic") and 0 < up_asym < 1
    assert tv_interval(c, P, 1e-3)[3].startswith("finite-sample")
    assert math.isnan(tv_upper_asymptotic(c[:3], np.array([0.5, 0.5, 0.0]), 1e-3)[0])  # zero cells: none


def test_plan_chunks():
    assert sum(plan_chunks(400_000, 32, 200_000)) == 400_000 and len(plan_chunks(400_000, 32, 200_000)) == 32
    assert len(plan_chunks(3000, 32, 200_000, min_chunk=500)) == 6
    assert len(plan_chunks(10_000_000, 32, 200_000)) == 50


# ------------------------------------------------------------------------------------- calibrate
def test_calibrate_runs_and_reports(scen_dir, tmp_path):
    out = tmp_path / "cal"
    assert main(["calibrate", "--seeds", "2", "--draws", "1000", "--scenario-dir", str(scen_dir), "--scenario",
                 "tiny", "--out", str(out), "--no-progress"]) == 0
    fam = pd.read_csv(out / "family_wise.csv")
    assert list(fam.family_level) == [1e-4, 0.01, 0.05, 0.2] and (fam.seeds == 2).all()
    per = pd.read_csv(out / "per_test.csv")
    assert {"gof.position", "pit.position", "acceptance.position"} <= set(per.kind)
    assert (out / "summary.md").is_file() and not (out / "_tmp_seeds").exists()
    assert main(["calibrate", "--seeds", "0", "--out", str(out)]) == 2


def test_clopper_pearson():
    lo, hi = clopper_pearson(0, 20, 0.05)
    assert lo == 0 and abs(hi - (1 - 0.025 ** (1 / 20))) < 1e-12
    lo, hi = clopper_pearson(5, 100, 0.05)
    assert lo < 0.05 < hi
    assert clopper_pearson(0, 0, 0.05) == (0.0, 1.0)
    # the interval scipy's binomtest finds by root finding, to its solver's precision
    for k, n, delta in ((3, 100_000, 2.4e-6), (10, 9_990, 1e-3), (7, 7, 0.01), (250, 1000, 0.05)):
        ci = sps.binomtest(k, n).proportion_ci(confidence_level=1 - delta, method="exact")
        assert np.allclose(clopper_pearson(k, n, delta), (ci.low, ci.high), rtol=1e-6, atol=0)


def test_tv_interval_one_hot_target_covers_over_many_seeds():
    """One-hot target: the interval is Clopper-Pearson on the draws off the one cell; against a known
    off-cell rate q it covers in >= 1 - delta of 2000 draws (each end within delta/2, binomial tolerance)."""
    p = np.array([0.0, 1.0, 0.0])
    tv_hat, lo, up, how = tv_interval(np.array([0, 50_000, 0]), p, 1e-6)
    assert tv_hat == 0 and lo == 0 and abs(up - (1 - (1e-6 / 2) ** (1 / 50_000))) < 1e-9 and "binomial" in how
    rng = np.random.default_rng(12)
    q, n, delta, reps = 0.002, 5000, 0.2, 2000
    miss_up = miss_lo = 0
    for m in rng.binomial(n, q, size=reps):
        _, lo, up, _ = tv_interval(np.array([m // 2, n - m, m - m // 2]), p, delta)
        miss_up += up < q
        miss_lo += lo > q
    assert miss_up <= _binomial_tolerance(reps, delta / 2) and miss_lo <= _binomial_tolerance(reps, delta / 2)
    assert miss_up + miss_lo > 0  # Clopper-Pearson is exact: at delta = 0.2 it does miss now and then


# ---------------------------------------------------------------------------------- real model
REAL_SMALL = """
[real_model]
enabled = true
n_sequences = 32
max_new_tokens = 64
[real_model.controls]
kv_not_rolled_back = 128
draft_kv_not_rolled_back = 32
[real_model.exact]
n_tokens = 3
window = 2
n_sequences = 1024
batch_size = 512
shard_sequences = 1024
[real_model.exact.controls]
kv_not_rolled_back = 1024
draft_kv_not_rolled_back = 512
"""


@pytest.fixture(scope="module")
def real_scen_dir(tmp_path_factory):
    """default.toml with a small [real_model] table, and the tiny scenario."""
    import re
    d = tmp_path_factory.mktemp("scenarios_rm")
    text = (SCENARIO_DIR / "default.toml").read_text()
    text = re.sub(r"\n\[real_model\].*", "", text, flags=re.S)  # drop the shipped table and its sub-tables
    for key, eps in (("position", 0.3), ("pair", 0.5), ("joint", 0.5), ("real", 0.3), ("real_pair", 0.6),
                     ("real_joint", 0.6)):  # what test sizes certify
        text = re.sub(rf"\nepsilon_{key} = \S+", f"\nepsilon_{key} = {eps}", text)
    (d / "default.toml").write_text(text + REAL_SMALL)
    (d / "tiny.toml").write_text(TINY)
    return d


def test_real_model_scenario_joins_the_family_and_catches_the_kv_bug(real_scen_dir, tmp_path):
    """Reference + real-model controls on the shipped tiny pair, in the same Holm family as the n-gram
    tests (n-gram controls off: at test sizes they lack power).  Power: the KV-cache bug at 128 sequences
    gave a smallest p-value <= 1e-10 in each of 4 seeds tried (vs a Bonferroni level ~5e-7 here); at 64
    sequences it was missed in 2 seeds of 2, so the test uses 128."""
    pytest.importorskip("transformers")
    from harness.core.config import read_toml
    from harness.verify.realmodel import load_real_model_spec
    from harness.verify.pipeline import verify
    settings = load_settings(real_scen_dir)
    spec = load_real_model_spec(read_toml(real_scen_dir / "default.toml")["real_model"])
    out = tmp_path / "rm"
    res = verify(sampler=None, sampler_label="reference", scenarios=[load_scenario("tiny", real_scen_dir)],
                 settings=settings, draws=3000, controls=False, real_model=spec, real_model_controls=True, out=out,
                 figures=False, progress=False, scenario_dir=real_scen_dir)
    assert res.passed
    runs = pd.read_csv(out / "runs.csv")
    rm = runs[runs.scenario == "real_model"].set_index("run")
    assert set(rm.index) == {"reference", "kv_not_rolled_back", "draft_kv_not_rolled_back"}
    assert rm.loc["kv_not_rolled_back", "verdict"] == "lossy" and rm.loc["kv_not_rolled_back", "passed"]
    assert "exact_pair.p" in rm.loc["kv_not_rolled_back", "caught_by"]
    assert rm.loc["reference", "verdict"] == "certified" and rm.loc["draft_kv_not_rolled_back", "passed"]
    # the certificate is the exact pair's token-TV bounds, worded by the laws they bound
    assert rm.loc["reference", "epsilon_real"] == 0.3 and rm.loc["reference", "cert_worst_ratio"] < 1
    assert rm.loc["reference", "cert_strongest"].startswith("token TV ≤ 0.6 for every window of 2 tokens")
    assert "(1,024 sequences each), on the exact transformer pair" in rm.loc["reference", "cert_scope"]
    assert rm.loc["reference", "cert_inconclusive_normal"] >= 0 and rm.loc["reference", "certify_draws"] > 0
    assert rm.loc["draft_kv_not_rolled_back", "certificate"] == "certified"  # at the control scale (6 x ε)
    assert rm.loc["reference", "tokens"] == 32 * 64
    check_cost_columns(out)  # what the certificates cost: every row, and the real-model one's parts
    check_real_cost(rm.loc["reference"], 1024)
    assert rm.loc[["kv_not_rolled_back"], ["cert_eps_sqrt_cpu", "certify_cpu_s"]].isna().all().all()
    t = pd.read_csv(out / "tests.csv")
    rt = t[(t.scenario == "real_model") & ~t.family.str.startswith("exact_pair")]
    assert len(rt) == 3 * (1 + 64 + 2 * 5 + 1)  # pooled, per position, PIT pairs at lags 1..k+1, martingale
    kv_pit = rt[(rt.run == "kv_not_rolled_back") & rt.family.isin(["pit", "loglik"])]
    assert kv_pit.reject.any()  # the tiny pair's PIT tests still catch it (they test; they do not certify)
    ex = t[t.family.str.startswith("exact_pair")]  # per run and prompt: 3 positions, 2 pairs, 2 windows of 2
    assert len(ex) == 3 * 2 * (3 + 2 + 2) and ex.tv_upper.notna().all()
    # one family: Holm over every test of the run, real-model ones included
    meta = json.loads((out / "meta.json").read_text())
    h = t[t.family != "sequential"]  # the sequential rows are judged apart (harness.verify.sequential)
    assert meta["config"]["n_tests"] == len(h) and meta["config"]["n_sequential"] == len(t) - len(h)
    assert meta["timing"]["tokens_real_model"] == (32 + 128 + 32) * 64
    assert meta["timing"]["tokens_exact_pair"] == (1024 + 1024 + 512) * 2 * 3
    tm = meta["timing"]  # the part's arithmetic, 2 flops per parameter per token on each pair, against the matmul rate
    from harness.core.matmul import model_flop_share
    assert tm["real_model_flops_min"] > 2 * tm["tokens_real_model"] and tm["matmul_gflops_1thread"] > 0
    assert tm["real_model_flop_share"] == model_flop_share(tm["real_model_flops_min"], tm["wall_real_model_s"],
                                                          tm["matmul_gflops_1thread"])
    from harness.stats import holm
    assert np.allclose(holm(h.pvalue.to_numpy()), h.p_adjusted.to_numpy())
    holm_alpha = meta["config"]["family_alpha"] - meta["config"]["sequential_alpha"]
    assert rt.min_detectable.notna().all() and np.allclose(rt.alpha_bonferroni, holm_alpha / len(h))
    assert rt[rt.test == "pooled"].kolmogorov_upper.notna().all()  # reported, not counted among the bounds
    summary = (out / "summary.md").read_text()
    assert "## Real model" in summary and "kv_not_rolled_back" in summary
    pit = pd.read_parquet(out / "pit_hist.parquet")
    assert (pit[pit.scenario == "real_model"].groupby("run")["count"].sum() > 0).all()


@pytest.mark.slow  # 51 s of `make test` (durations of stop 30's run): in `make test-slow`, which CI runs
def test_real_model_from_the_command_line(real_scen_dir, tmp_path, capsys):
    """`--scenario real_model` alone (reference, no controls) and the contradicting flag."""
    pytest.importorskip("transformers")
    out = tmp_path / "cli"
    assert main(["verify", "--scenario-dir", str(real_scen_dir), "--scenario", "real_model", "--no-controls",
                 "--real-model-sequences", "8", "--out", str(out), "--no-progress", "--no-figures"]) == 0
    runs = pd.read_csv(out / "runs.csv")
    assert list(runs[runs.scenario == "real_model"].run) == ["reference"]
    assert int(runs[runs.scenario == "real_model"].tokens.iloc[0]) == 8 * 64
    assert main(["verify", "--scenario-dir", str(real_scen_dir), "--scenario", "real_model", "--no-real-model",
                 "--no-progress"]) == 2
    assert "`--no-real-model`" in capsys.readouterr().err
    assert _verify(real_scen_dir, tmp_path / "t", "--no-controls") == 0  # --scenario tiny: no real model
    assert (pd.read_csv(tmp_path / "t" / "tests.csv").scenario != "real_model").all()


def test_real_model_spec_errors_name_the_key():
    from harness.verify.realmodel import load_real_model_spec
    with pytest.raises(ValueError, match="real_model.controls"):
        load_real_model_spec({"controls": {"no_such_bug": 10}})
    with pytest.raises(ValueError, match="real_model.n_sequences"):
        load_real_model_spec({"n_sequences": 0})
    assert load_real_model_spec(None).enabled


def test_pit_value_tests_level_and_pairs():
    """Level over 400 seeds of iid U(0,1) values (pooled KS, one position, the even pair grid): rejection rate
    at 0.1 within the binomial tolerance of 0.1; and only the pair test sees coupled consecutive values."""
    from harness.verify.battery import plan_pit_value_tests
    rng = np.random.default_rng(3)
    reps, level = 400, 0.1
    rejections = np.zeros(3, int)
    for _ in range(reps):
        rows = [s.evaluate(1e-3, 0.99, 1e-3) for s in plan_pit_value_tests(rng.random((200, 8)))]
        rejections += [rows[0].pvalue <= level, rows[3].pvalue <= level, rows[-2].pvalue <= level]
    lo, hi = sps.binom.ppf(1e-5, reps, level), sps.binom.isf(1e-5, reps, level)
    assert np.all((rejections >= lo) & (rejections <= hi)), rejections
    u = rng.random((200, 8))
    specs = plan_pit_value_tests(u)
    assert [s.test for s in specs] == ["pooled"] + ["position"] * 8 + ["pairs_even", "pairs_odd"]
    rows = [s.evaluate(1e-3, 0.99, 1e-3) for s in specs]
    assert rows[0].kolmogorov_upper > rows[0].statistic
    v = u.copy()
    v[:, 1::2] = v[:, 0::2]  # coupled: every marginal exactly uniform, consecutive pairs identical
    rows = [s.evaluate(1e-3, 0.99, 1e-3) for s in plan_pit_value_tests(v)]
    assert rows[0].pvalue > 1e-4 and rows[-2].pvalue < 1e-10  # only the pair test sees it
    with pytest.raises(ValueError, match="`u`"):
        plan_pit_value_tests(u[:, :1])
