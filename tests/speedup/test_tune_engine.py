"""`tune --acceptance`: the engine-counter parsers (good and bad files), the cost fit, the tie logic and the CLI's
exit statuses (harness.speedup.engine_acceptance, harness.speedup.tune_engine)."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from harness.cli import main
from harness.core.errors import UsageError
from harness.speedup.engine_acceptance import read_acceptance
from harness.speedup.tune_engine import EngineCosts, _checked_fit, choose, fit_step, parse_rates, tune_from_counts

PROM = """# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="t"} 1000.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="t"} 3000.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="t",position="0"} 800.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="t",position="1"} 560.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="t",position="2"} 280.0
vllm:num_requests_running{engine="0",model_name="t"} 0.0
"""


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_prometheus_counts_are_conditional_per_position(tmp_path):
    pc = read_acceptance(_write(tmp_path, "m.prom", PROM))
    assert pc.fmt == "prometheus" and pc.counted and pc.k == 3
    np.testing.assert_allclose(pc.tried, [1000, 800, 560])
    np.testing.assert_allclose(pc.alpha, [0.8, 0.7, 0.5])
    f = pc.frame()
    assert (f.alpha_lo < f.alpha).all() and (f.alpha < f.alpha_hi).all()


def test_prometheus_series_of_two_engines_are_summed(tmp_path):
    two = PROM + PROM.replace('engine="0"', 'engine="1"')
    pc = read_acceptance(_write(tmp_path, "m.txt", two))
    np.testing.assert_allclose(pc.tried, [2000, 1600, 1120])


@pytest.mark.parametrize("text,key", [
    (PROM.replace("vllm:spec_decode_num_drafts_total", "x_other"), "vllm:spec_decode_num_drafts"),
    ("\n".join(ln for ln in PROM.splitlines() if "per_pos" not in ln), "per_pos"),
    (PROM.replace('position="1"', 'position="5"'), "positions 0..k-1"),
    (PROM.replace("560.0", "900.0"), "non-increasing"),
    (PROM + "this is not a sample line {\n", "line 9"),
])
def test_bad_prometheus_names_the_file_and_key(tmp_path, text, key):
    p = _write(tmp_path, "m.prom", text)
    with pytest.raises(UsageError) as e:
        read_acceptance(p)
    assert str(p) in str(e.value) and key in str(e.value)


def test_jsonl_of_vllm_per_step_counters_and_x_spec(tmp_path):
    lines = [{"per_step_drafted": [3, 3, 3], "per_step_accepted": [3, 1, 0]},
             {"spec_decode_metrics": {"per_step_drafted": [3, 2], "per_step_accepted": [2, 2]}},
             {"x_spec": {"drafted": [3], "accepted": [0]}}, {"x_spec": None}]
    pc = read_acceptance(_write(tmp_path, "r.jsonl", "\n".join(json.dumps(x) for x in lines) + "\n"))
    # steps (d, a): (3,3) (3,1) (3,0) (3,2) (2,2) (3,0)
    np.testing.assert_allclose(pc.tried, [6, 4, 2])  # position 2: (3,3) (3,2); (2,2) drafted only 2
    np.testing.assert_allclose(pc.accepted, [4, 3, 1])
    assert pc.short_drafts == 1


def test_jsonl_acceptance_histogram(tmp_path):
    line = {"acceptance_histogram": [1, 1, 2], "num_spec_tokens": 2}
    pc = read_acceptance(_write(tmp_path, "r.jsonl", json.dumps(line) + "\n"))
    np.testing.assert_allclose(pc.tried, [4, 3])
    np.testing.assert_allclose(pc.accepted, [3, 2])


@pytest.mark.parametrize("text,key", [
    ('{"per_step_drafted": [3, 3], "per_step_accepted": [1]}\n', "per_step_drafted"),
    ('{"per_step_drafted": [2], "per_step_accepted": [3]}\n', "per_step_accepted"),
    ('{"x_spec": null}\n', "speculation never ran"),
    ('{"foo": 1}\n', "line 1"),
    ('[1, 2]\n', "line 1"),
    ('{"per_step_drafted": [2]\n', "line 1 is not JSON"),
])
def test_bad_jsonl_names_the_file_and_key(tmp_path, text, key):
    p = _write(tmp_path, "r.jsonl", text)
    with pytest.raises(UsageError) as e:
        read_acceptance(p)
    assert str(p) in str(e.value) and key in str(e.value)


def test_csv_counts_and_rates(tmp_path):
    pc = read_acceptance(_write(tmp_path, "a.csv", "position,accepted,drafts\n0,80,100\n1,40,100\n"))
    np.testing.assert_allclose(pc.alpha, [0.8, 0.5])
    assert pc.counted
    pc = read_acceptance(_write(tmp_path, "b.csv", "position,rate\n0,0.8\n1,0.4\n"))
    np.testing.assert_allclose(pc.alpha, [0.8, 0.5])
    assert not pc.counted
    f = pc.frame()
    assert (f.alpha_lo == f.alpha).all()  # no counts: no interval


@pytest.mark.parametrize("text,key", [("pos,rate\n0,0.5\n", "columns"), ("position,rate\n1,0.5\n", "position"),
                                      ("position,rate\n0,1.5\n", "rate"),
                                      ("position,rate,drafts\n0,0.5,10\n1,0.2,20\n", "drafts")])
def test_bad_csv_names_the_file_and_key(tmp_path, text, key):
    p = _write(tmp_path, "a.csv", text)
    with pytest.raises(UsageError) as e:
        read_acceptance(p)
    assert str(p) in str(e.value) and f"`{key}`" in str(e.value)


def test_json_forms(tmp_path):
    pc = read_acceptance(_write(tmp_path, "a.json", '{"num_drafts": 100, "accepted_per_pos": [80, 40]}'))
    np.testing.assert_allclose(pc.alpha, [0.8, 0.5])
    pc = read_acceptance(_write(tmp_path, "b.json", '{"per_position_rate": [0.9, 0.45], "num_drafts": 200}'))
    np.testing.assert_allclose(pc.alpha, [0.9, 0.5])
    assert pc.counted
    for text, key in (('{"accepted_per_pos": [1]}', "num_drafts"), ('{"x": 1}', "keys"), ("[1]", "top level"),
                      ('{"per_position_rate": ["a"]}', "per_position_rate")):
        p = _write(tmp_path, "c.json", text)
        with pytest.raises(UsageError, match=key):
            read_acceptance(p)


def test_fit_step_recovers_fixed_and_per_row_cost():
    B = np.array([1, 4, 16])
    rates = pd.DataFrame({"batch": B, "rate": B / (0.010 + 0.002 * B)})
    a, b = fit_step(rates)
    assert a == pytest.approx(0.010) and b == pytest.approx(0.002)


def test_rates_need_two_batches():
    with pytest.raises(UsageError, match="two or more distinct batch sizes"):
        parse_rates("--target-only-rates", "1:80,1:82")
    with pytest.raises(UsageError, match="BATCH:TOKENS_PER_S"):
        parse_rates("--target-only-rates", "1:80,x")


def test_a_tie_is_called_a_tie_and_a_clear_winner_is_not():
    rng = np.random.default_rng(0)
    common = rng.normal(0, 0.05, size=(400, 1))  # (R, 1) noise shared by every k (paired)
    tie = choose(np.array([1.30, 1.29]), 1.30 + common + rng.normal(0, 0.02, size=(400, 2)), [1, 2])
    assert tie["k"] == 1 and tie["ties"] == [2] and not tie["ties_off"]
    clear = choose(np.array([1.30, 1.10]), np.array([1.30, 1.10]) + common + rng.normal(0, 0.01, (400, 2)), [1, 2])
    assert clear["k"] == 1 and clear["ties"] == []
    off = choose(np.array([1.01, 0.8]), np.array([1.01, 0.8]) + rng.normal(0, 0.05, (400, 2)), [1, 2])
    assert off["ties_off"]


def test_the_interval_narrows_with_more_counts_and_the_tie_goes():
    """Two ks 0.5 % apart in S (1.440, 1.447): a tie on 100 drafts, a clear winner on 10^6 of the same rates."""
    from harness.speedup.engine_acceptance import from_cumulative
    costs = EngineCosts(0.010, 0.0, 0.0, d_frac=0.25)
    tr = pd.DataFrame({"batch": [1, 2], "rate": [100.0, 200.0]})
    verdicts = []
    for n in (100, 10 ** 6):
        pc = from_cumulative(n, [0.8 * n, 0.37 * n], True, "json", "x", "accepted_per_pos")
        rec, grid = tune_from_counts(pc, costs, tr, None, [1, 2], [1], 0, 400, 0)
        verdicts.append(rec.tie.iloc[0])
    assert verdicts[0].startswith("tie within noise with k=") and verdicts[1] == "clear winner"


def _cli(tmp_path, *extra):
    acc = _write(tmp_path, "m.prom", PROM)
    return main(["tune", "--acceptance", str(acc), "--target-only-rates", "1:85,4:250,16:650",
                 "--batch", "1,4", "--replicates", "50", "--out", str(tmp_path / "out"), *extra])


def test_cli_writes_the_pick_per_batch(tmp_path, capsys):
    assert _cli(tmp_path, "--draft", "model", "--draft-rates", "1:155,4:600,16:1700", "--max-new-tokens", "32") == 0
    rec = pd.read_csv(tmp_path / "out" / "recommendation.csv")
    assert list(rec.batch) == [1, 4] and rec.tie.str.len().gt(0).all()
    assert "| batch | chosen | S (95 %) | within noise |" in capsys.readouterr().out
    assert set(pd.read_csv(tmp_path / "out" / "speedups.csv").k) == {1, 2, 3}


@pytest.mark.parametrize("extra,named", [
    (["--draft", "medusa"], "`--draft`"),
    (["--draft", "model"], "`--draft-rates`"),
    (["--draft", "eagle"], "`--target-layers`"),
    (["--draft", "ngram", "--k", "1,5"], "`--k`"),
    (["--draft", "ngram", "--draft-cost", "-1"], "`--draft-cost`"),
    (["--draft", "ngram", "--verify-row-cost", "2"], "`--verify-row-cost`"),
    (["--draft", "ngram", "--target", "tiny"], "`--target`"),
    (["--draft", "ngram", "--confirm", "2"], "`--acceptance`"),
])
def test_cli_bad_options_are_exit_2(tmp_path, capsys, extra, named):
    assert _cli(tmp_path, *extra) == 2
    err = capsys.readouterr().err
    assert named in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_cli_bad_rates_and_files_are_exit_2(tmp_path, capsys):
    acc = _write(tmp_path, "m.prom", PROM)
    base = ["tune", "--acceptance", str(acc), "--draft", "ngram", "--out", str(tmp_path / "out")]
    assert main(base) == 2 and "`--target-only-rates`" in capsys.readouterr().err
    assert main(base + ["--target-only-rates", "1:100,4:50"]) == 2  # step 10 ms at 1, 80 ms at 4: fit a < 0
    assert "`--target-only-rates`" in capsys.readouterr().err
    bad = ["tune", "--acceptance", str(tmp_path / "none.prom"), "--draft", "ngram", "--target-only-rates", "1:1,2:2"]
    assert main(bad) == 2 and "`--acceptance`" in capsys.readouterr().err


def test_cli_model_options_need_a_model_without_acceptance(capsys):
    assert main(["tune", "--draft", "tiny-draft"]) == 2 and "`--target`" in capsys.readouterr().err
    assert main(["tune", "--target", "tiny", "--draft", "tiny-draft", "--target-only-rates", "1:2,2:3"]) == 2
    assert "`--target-only-rates`" in capsys.readouterr().err


def test_eagle_head_cost_from_the_targets_config_counts_its_lm_head(tmp_path, capsys):
    """--draft eagle --target-config: the head's cost per drafted token is its weight read over the target's (one
    layer, an fc of 2 hidden states, the LM head), not 1/--target-layers: on Llama-3-8B the 128256-row LM head
    is 2.4 layers, so 0.104 of a step where 1/32 = 0.031 leaves it out; a smaller --draft-vocab cuts it.  A bad
    config, both --target-config and --target-layers, or --draft-vocab alone are exit 2 naming the option."""
    from harness.speedup.roofline.model import ModelShape
    cfg = {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
           "intermediate_size": 14336, "vocab_size": 128256, "torch_dtype": "bfloat16"}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert _cli(tmp_path, "--draft", "eagle", "--target-config", str(tmp_path / "config.json")) == 0
    md = (tmp_path / "out" / "recommendation.md").read_text()
    t = ModelShape.from_dict(cfg)
    frac = t.draft_head().weight_bytes / t.weight_bytes
    assert frac == pytest.approx(0.104, abs=0.002) and f"{frac:.3g} of the target's weight read" in md
    small = t.draft_head(vocab=32000).weight_bytes / t.weight_bytes
    assert 1 / 32 < small < frac
    capsys.readouterr()
    (tmp_path / "bad").mkdir()
    for extra, named in ((["--target-config", str(tmp_path / "none.json")], "`--target-config`"),
                         (["--target-config", str(tmp_path / "config.json"), "--target-layers", "32"], "`--target-layers`"),
                         (["--target-layers", "32", "--draft-vocab", "32000"], "`--draft-vocab`")):
        assert _cli(tmp_path / "bad", "--draft", "mtp", *extra) == 2
        err = capsys.readouterr().err
        assert named in err and "Traceback" not in err


def test_a_flat_step_time_is_fitted_with_no_per_row_cost_and_a_falling_one_is_refused():
    """Measured on vLLM here (a tiny model: the step is all fixed cost): three rates at B = 1 and 4 whose least-squares
    slope is -7.2e-5 s per row, within its noise, fit b = 0 and a = the mean step time, and say so; a slope far below
    0 beyond its noise is still exit 2, and so is any negative slope with one rate per batch (no noise to judge)."""
    notes = []
    text = "1:113.6,4:471.7,1:93.08,4:454.6,1:143.3,4:465.4"
    rates = parse_rates("--target-only-rates", text)
    a, b = _checked_fit("--target-only-rates", text, rates, notes)
    t = rates.batch / rates.rate
    assert b == 0 and a == pytest.approx(t.mean()) and "flat in B within noise" in notes[0]
    for bad in ("1:100,4:800,1:101,4:790,1:99,4:810", "1:100,4:500"):  # steps 10 ms at B=1, 5 ms at B=4
        with pytest.raises(UsageError, match="--target-only-rates"):
            _checked_fit("--target-only-rates", bad, parse_rates("--target-only-rates", bad), [])
