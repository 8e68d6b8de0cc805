"""Issue 45, the small rows left open at stop 47: values that reached deep code (exit 3) or were ignored are
refused up front, exit 2, one line naming the option or the file (each probe as a new user would type it)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.core import jsonfile

SCENARIOS = Path(__file__).resolve().parents[1] / "harness" / "configs" / "verify"
QUIET = ("--no-real-model", "--no-figures", "--no-progress", "--workers", "1", "--no-controls")


def _last(capsys) -> str:
    return [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()][-1]


@pytest.mark.parametrize("value", ["1e-300", "1e-7", "0", "nan"])
def test_verify_refuses_an_epsilon_no_run_can_certify(tmp_path, capsys, value):
    """--epsilon 1e-300 was an OverflowError in the planner (exit 3)."""
    assert main(["verify", "--scenario", "base", "--draws", "2000", "--epsilon", value, *QUIET,
                 "--out", str(tmp_path / "o")]) == 2
    last = _last(capsys)
    assert "`--epsilon`" in last and "[1e-06, 1]" in last and repr(value) in last
    assert not (tmp_path / "o").exists()


def test_a_scenario_file_epsilon_below_the_floor_names_the_file(tmp_path, capsys):
    from harness.core.errors import UsageError
    from harness.laws.scenarios import load_scenario
    for name in ("default", "base"):
        (tmp_path / f"{name}.toml").write_text((SCENARIOS / f"{name}.toml").read_text())
    with open(tmp_path / "base.toml", "a") as f:
        f.write("\nepsilon_position = 1e-300\n")
    with pytest.raises(UsageError) as e:
        load_scenario("base", tmp_path)
    assert "base.toml" in str(e.value) and "epsilon_position" in str(e.value) and "1e-06" in str(e.value)


@pytest.mark.parametrize("args, option", [
    (["--temperature", "1e-300"], "--temperature"), (["--temperature", "nan"], "--temperature"),
    (["--k", "0"], "--k"), (["--max-new-tokens", "1"], "--max-new-tokens")])
def test_pit_names_its_own_option_not_default_toml(tmp_path, capsys, args, option):
    """pit --temperature 1e-300 was blamed on default.toml's `temperature`."""
    assert main(["pit", *args, "--out", str(tmp_path / "o")]) == 2
    last = _last(capsys)
    assert f"`{option}`" in last and "default.toml" not in last


def test_sample_refuses_a_nan_timeout_for_every_engine(tmp_path, capsys):
    """--timeout nan was accepted (and ignored) by --engine ours."""
    assert main(["sample", "--engine", "ours", "--n-prompts", "2", "--timeout", "nan",
                 "--out", str(tmp_path / "s.jsonl")]) == 2
    assert "`--timeout`" in _last(capsys) and not (tmp_path / "s.jsonl").exists()


def test_a_record_temperature_below_the_floor_is_bad_input(tmp_path, capsys):
    """controls.temperature = 1e-320 reached the law's warp (ValueError, exit 3)."""
    rec = {"format": "specverify.samples/1", "request_id": "r0", "prompt_id": "p0", "prompt_ids": [1, 2],
           "output_ids": [3, 4], "finish_reason": "length",
           "controls": {"temperature": 1e-320, "top_k": 0, "top_p": 1.0, "max_new_tokens": 2},
           "engine": {"name": "x"}}
    (tmp_path / "s.jsonl").write_text(json.dumps(rec) + "\n")
    assert main(["verify-samples", "--samples", str(tmp_path / "s.jsonl"), "--target", "exact-markov", "--exact",
                 "--out", str(tmp_path / "o")]) == 2
    last = _last(capsys)
    assert "s.jsonl:1" in last and "controls.temperature" in last and "1e-06" in last


def test_json_nested_too_deep_is_a_decode_error_and_report_names_the_file(tmp_path, capsys):
    """A 300,000-deep meta.json given to `report` was a RecursionError (exit 3)."""
    deep = "[" * 300_000 + "]" * 300_000
    with pytest.raises(json.JSONDecodeError):
        jsonfile.loads(deep)
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "meta.json").write_text(deep)
    assert main(["report", "--results", str(tmp_path / "r"), "--out", str(tmp_path / "o")]) == 2
    last = _last(capsys)
    assert "`--results`" in last and "meta.json" in last and "nested too deeply" in last


def test_sample_blames_prompt_lengths_when_no_token_fits(tmp_path, capsys):
    """probe 47 case 39: `sample --prompt-lengths 5000 6000` named --n-prompts, then --max-new-tokens."""
    assert main(["sample", "--engine", "ours", "--n-prompts", "2", "--prompt-lengths", "5000", "6000",
                 "--out", str(tmp_path / "s.jsonl")]) == 2
    last = _last(capsys)
    assert "`--prompt-lengths`" in last and "[5000, 6000]" in last


@pytest.mark.parametrize("key", ["pit_bins", "max_chunk"])
def test_a_huge_run_key_names_default_toml_not_the_scenario(tmp_path, capsys, key):
    """probe 47 cases 41, 42: a huge `pit_bins` / `max_chunk` in default.toml named the scenario's max_new_tokens."""
    import re
    for name in ("default", "base"):
        (tmp_path / f"{name}.toml").write_text((SCENARIOS / f"{name}.toml").read_text())
    text = (tmp_path / "default.toml").read_text()
    (tmp_path / "default.toml").write_text(re.sub(rf"(?m)^{key} = .*$", f"{key} = 100000000000", text))
    assert main(["verify", "--scenario-dir", str(tmp_path), "--scenario", "base", "--draws", "2000", *QUIET,
                 "--out", str(tmp_path / "o")]) == 2
    last = _last(capsys)
    assert f"default.toml: `run.{key}` = 100000000000" in last and "max_new_tokens" not in last
