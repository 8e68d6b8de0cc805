"""`verify --until-certified` (issue 10, item 5): doubling rounds until certified, each round on its share of the
false-alarm and confidence budgets (their sums stay below the command's); a lossy sampler ends at round 1; a
budget below the first round exits 2 naming the option."""
import json

import pytest

from harness.cli import main
from harness.laws.scenarios import SCENARIO_DIR, load_settings
from harness.verify.until import round_draws, round_seed, round_settings

LOOSE = ("--epsilon", "position=0.3,pair=0.5,joint=0.5,real=0.5")  # what ~120+ tiny-scenario sequences certify
HERE = __file__


def accept_everything_generate(target, draft, prompts, *, k, max_new_tokens, config, eos_token_id, generator):
    """Lossy: the draft's law (every draft accepted)."""
    from specimpl.speculative import speculative_generate
    from specimpl.sampling import SamplingConfig  # noqa: F401 - the signature's types
    return speculative_generate(draft, draft, prompts, k=k, max_new_tokens=max_new_tokens, config=config,
                                eos_token_id=eos_token_id, generator=generator)


def _run(scen_dir, out, *extra):
    return main(["verify", "--scenario-dir", str(scen_dir), "--scenario", "tiny", "--out", str(out), "--no-progress",
                 "--no-figures", "--no-real-model", "--workers", "1", *extra])


def test_round_budgets_sum_below_the_commands():
    s = load_settings(SCENARIO_DIR)
    rounds = [round_settings(s, i) for i in range(40)]
    assert sum(r.family_alpha for r in rounds) < s.family_alpha
    assert sum(r.sequential_alpha for r in rounds) < s.sequential_alpha
    assert sum(1 - r.tv_confidence for r in rounds) < 1 - s.tv_confidence
    assert round_draws(30, 1000) == [30, 60, 120, 240, 480, 960] and round_draws(30, 30) == [30]
    assert len({round_seed(7, i) for i in range(6)}) == 6 and round_seed(7, 0) == 7


def test_an_inconclusive_start_ends_certified_in_a_later_round(scen_dir, tmp_path, capsys):
    rc = _run(scen_dir, tmp_path / "u", "--draws", "30", "--until-certified", "2000", "--no-controls", *LOOSE)
    err = capsys.readouterr().err
    assert rc == 0 and "until-certified: round 2 of at most 7" in err
    meta = json.loads((tmp_path / "u" / "meta.json").read_text())
    note = meta["config"]["until_certified"]
    assert note["round"] >= 1 and meta["config"]["draws"] == 30 * 2 ** note["round"]
    assert meta["config"]["family_alpha"] == pytest.approx(1e-4 / 2 ** (note["round"] + 1))
    stated = 1 - 1e-3 * (1 - 0.5 ** (note["round"] + 1))  # the union over rounds 0..i, not the round's own 1 - δ_i
    assert meta["config"]["tv_confidence"] == pytest.approx(stated) and stated > 0.999
    import pandas as pd
    runs = pd.read_csv(tmp_path / "u" / "runs.csv")
    assert runs.cert_confidence.iloc[0] == pytest.approx(stated)


def test_a_lossy_sampler_ends_at_the_first_round(scen_dir, tmp_path, capsys):
    rc = _run(scen_dir, tmp_path / "l", "--draws", "500", "--until-certified", "100000", *LOOSE,
              "--sampler", f"{HERE}:accept_everything_generate")
    err = capsys.readouterr().err
    assert rc == 1 and "round 1 of" in err and "round 2 of" not in err


def test_a_budget_below_the_first_round_exits_2(scen_dir, tmp_path, capsys):
    rc = _run(scen_dir, tmp_path / "b", "--draws", "500", "--until-certified", "100")
    err = capsys.readouterr().err
    assert rc == 2 and "--until-certified" in err and "100" in err
