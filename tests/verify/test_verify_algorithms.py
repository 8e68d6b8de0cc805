"""Block and tree verification inside `python -m harness verify` (issue 12, items 3-4): each algorithm's
reference sampler judged against its own exact acceptance law (lossless, as efficient as exact), and
the block / tree controls of harness.controls.tree in one Holm family (buggy caught, lossless passing).

The small family run (test_small_family_run) draws the reference runs of default.toml's [algorithms]
on `base` (30,000 sequences each) and every block / tree control on its scenario (100,000 sequences),
fixed seed; ~30 s on one core.
"""
import numpy as np
import pytest

from harness.laws.algorithms import Algorithm, acceptance_for
from harness.verify.battery import plan_tests
from harness.controls.tree import CATALOGUE, get_control
from harness.laws.ngram import ExactLaw
from harness.laws.rounds import ExactRounds
from harness.laws.scenarios import SCENARIO_DIR, load_scenario, load_settings
from harness.verify.draw import RunState, draw_all
from harness.verify.family import evaluate_family, plan_family
from harness.verify.runs import (RunSet, Sizes, algorithm_exact_runs, algorithm_runs, baselines_for,
                                 control_algorithm)
from harness.verify.verdicts import verdict_table


def _law(name="base"):
    sc = load_scenario(name, SCENARIO_DIR)
    t, d = sc.build()
    return sc, ExactLaw(t, d, list(sc.prompt), sc.max_new_tokens, sc.config, sc.eos_token_id)


def test_parse_names_and_errors():
    assert Algorithm.parse("tree4-wor") == Algorithm("tree4-wor", "tree", 4, False)
    assert Algorithm.parse("block").kind == "block" and Algorithm.parse("tree2").replacement
    for bad in ("tree0", "trees", "Block", "tree2-wr"):
        with pytest.raises(ValueError, match="`algorithm` must be 'chain', 'block'"):
            Algorithm.parse(bad, "algorithm")


def test_from_law_reuses_the_scenario_tables():
    sc, law = _law("eos_order3")
    r = ExactRounds.from_law(law)
    assert r.P is law.P and r.Q is law.Q and r.nxt is law.nxt
    t, d = sc.build()
    ref = ExactRounds(t, d, list(sc.prompt), sc.max_new_tokens, sc.config, sc.eos_token_id)
    assert (r.start, r.n_tokens, r.eos) == (ref.start, ref.n_tokens, ref.eos)
    np.testing.assert_array_equal(r.block(sc.k).out, ref.block(sc.k).out)


@pytest.mark.parametrize("scenario", ["base", "eos_order3", "k1_long"])
def test_one_chain_is_the_chain_rule(scenario):
    """tree1 (n = 1) must reduce to the token-level law of the reference sampler, exactly."""
    sc, law = _law(scenario)
    a, b = acceptance_for("tree1", law, sc.k), acceptance_for("chain", law, sc.k)
    for f in ("reached", "accepted", "hist", "alpha"):
        np.testing.assert_allclose(getattr(a, f), getattr(b, f), rtol=1e-10, atol=1e-12)


def test_block_accepts_at_least_as_much_as_the_chain():
    sc, law = _law("base")
    blk, ch = acceptance_for("block", law, sc.k), acceptance_for("chain", law, sc.k)
    mean = lambda a: float(a.hist @ np.arange(a.hist.size) / a.hist.sum())  # noqa: E731
    assert mean(blk) > mean(ch) + 1e-3


def test_control_algorithms():
    assert control_algorithm(get_control("block_one_hot_q")) == "block"
    assert control_algorithm(get_control("tree_one_chain")) == "tree1"
    assert control_algorithm(get_control("tree_without_replacement")) == "tree2-wor"
    assert control_algorithm(get_control("tree_causal_mask")) == "tree2"


def test_default_settings():
    a = algorithm_runs(SCENARIO_DIR)
    assert set(a.runs) >= {"block", "tree2", "tree4-wor"} and a.control_scenario == "tree_controls"
    assert set(load_settings(SCENARIO_DIR).scenarios) >= {s for v in a.runs.values() for s in v}


def _small_run():
    settings = load_settings(SCENARIO_DIR)
    a = algorithm_runs(SCENARIO_DIR)
    base = load_scenario("base", SCENARIO_DIR)
    sizes = Sizes(30_000, 100_000, 0, explicit=True)
    runs = algorithm_exact_runs(a, {"base": base}, {"base": base}, sizes, False, True, SCENARIO_DIR)
    rs = RunSet(runs=runs)
    rs.baselines = baselines_for(runs)
    draw_all(rs, settings.seed, settings, RunState(None), progress=False)
    table, _ = evaluate_family(plan_family(rs), settings)
    return rs, table, verdict_table(rs, table)


def test_small_family_run():
    rs, table, verdicts = _small_run()
    v = verdicts.set_index("run")
    for name in ("block", "tree2", "tree4-wor"):  # lossless and as efficient as their own exact law
        assert v.loc[name, "verdict"] == "lossless" and v.loc[name, "passed"], v.loc[name].to_dict()
        acc = table[(table.run == name) & (table.family == "acceptance")]
        assert len(acc) and not acc.reject.any()
    for c in CATALOGUE:
        assert v.loc[c.name, "passed"], (c.name, v.loc[c.name, "verdict"])
        assert v.loc[c.name, "verdict"].startswith("lossy" if c.must_be_caught else "lossless"), c.name
    # the acceptance tests of the block run are against the block law, not the chain rule's
    law = rs.laws["base"]
    blk = table[(table.run == "block") & (table.family == "acceptance") & (table.test == "position")]
    np.testing.assert_allclose(blk.sort_values("position").expected, acceptance_for("block", law, 4).alpha)


def test_plan_tests_without_an_acceptance_law():
    rs = RunSet()
    sc, law = _law("base")
    from harness.verify.runs import RunSpec
    r = RunSpec("block", "reference", Algorithm.parse("block").sampler(), sc, 2_000, "block")
    rs.runs, rs.baselines = [r], baselines_for([r])
    settings = load_settings(SCENARIO_DIR)
    draw_all(rs, settings.seed, settings, RunState(None), progress=False)
    with_law = plan_tests(r.acc, None, sc.k, acceptance_for("block", law, sc.k))
    without = plan_tests(r.acc, None, sc.k, False)
    assert any(t.family == "acceptance" for t in with_law)
    assert not any(t.family == "acceptance" for t in without)
    assert len(with_law) - len(without) == sum(t.family == "acceptance" for t in with_law)


QUIET = ["--no-real-model", "--no-figures", "--no-progress"]


def _acceptance_expected(out):
    import pandas as pd
    t = pd.read_csv(out / "tests.csv")
    return t[(t.family == "acceptance") & (t.test == "position")].sort_values("position").expected.to_numpy()


def test_cli_algorithm_option(tmp_path, monkeypatch, capsys):
    """--algorithm block: the plug-in block sampler's acceptance rows are the block law's; an
    ``algorithm`` attribute does the same; without either, the chain rule's."""
    from harness.cli import main
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.py").write_text("from specimpl.block import block_generate as fn\n"
                                   "def tagged(*a, **kw):\n    return fn(*a, **kw)\ntagged.algorithm = 'block'\n")
    sc, law = _law("base")
    blk, ch = acceptance_for("block", law, sc.k).alpha, law.acceptance_law(sc.k).alpha
    for extra, sampler, expected in ((["--algorithm", "block"], "s.py:fn", blk), ([], "s.py:tagged", blk),
                                     ([], "s.py:fn", ch)):
        out = tmp_path / f"o{len(extra)}{sampler[-1]}"
        rc = main(["verify", "--sampler", sampler, "--scenario", "base", "--draws", "3000", *QUIET, "--out", str(out),
                   "--epsilon", "position=0.5,pair=0.5,joint=0.9", *extra])  # what 3000 draws certify
        assert rc == 0, capsys.readouterr().err
        np.testing.assert_allclose(_acceptance_expected(out), expected)


@pytest.mark.parametrize("args, msg", [
    (["--algorithm", "block"], "`--algorithm` needs `--sampler`"),
    (["--sampler", "specimpl.block:block_generate", "--algorithm", "blocks"], "`--algorithm` must be 'chain'"),
])
def test_cli_algorithm_usage_errors(args, msg, capsys):
    from harness.cli import main
    assert main(["verify", "--scenario", "base", *QUIET, *args]) == 2
    assert msg in capsys.readouterr().err
