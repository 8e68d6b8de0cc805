"""The probe table of experiments/gate_probes.py: a well-formed registry, and a few fast probes that run.

The probes measure the harness; these tests only check the instrument (never whether a probe passes:
that is what the table reports, before and after fixes).
"""
import json
import importlib.util
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "experiments" / "gate_probes.py"


@pytest.fixture(scope="module")
def gp():
    spec = importlib.util.spec_from_file_location("gate_probes", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gate_probes"] = mod  # dataclasses look their module up here
    spec.loader.exec_module(mod)
    return mod


ISSUE_PROBES = [  # the issue's list, in its order (library and provenance probes included)
    "resume_swaps_sampler", "calibrate_reuses_seed_across_configs", "few_draws_false_alarm", "k32_short_output",
    "k1000_unreachable_tests", "calibrate_500_inconsistent_exit0", "sampler_raises", "sampler_wrong_signature",
    "sampler_wrong_shapes", "sampler_sys_exit_0", "sampler_keyboard_interrupt", "scenario_draft_kind_bogus",
    "scenario_eos_out_of_vocab", "scenario_target_order_0", "scenario_empty_prompt", "scenario_typo_key",
    "cli_seed_negative", "cli_out_uncreatable", "cli_scenario_repeated", "cli_threads_0", "sweep_empty_suites",
    "sweep_config_unknown_key", "report_missing_results", "stale_figures", "report_grid_only", "lib_nan_logits",
    "lib_inf_logits", "lib_tiny_temperature", "lib_float_prompt", "lib_uint8_prompts", "lib_k_numpy_int",
    "lib_generator_int", "lib_verify_block_checked_short_vocab", "lib_load_pair_empty_dir",
    "lib_load_pair_path_typo", "provenance_dirty",
]


ISSUE26_PROBES = [  # issue 26's findings 1-8, one probe per part, in its order
    "i26_partial_sweep_keeps_tables", "i26_duplicated_renamed_ids_certify", "i26_baseline_is_samples",
    "i26_baseline_one_per_prompt", "i26_sampler_helper_stale", "i26_concurrent_sample_writers",
    "i26_sample_repair_path", "i26_resume_other_settings", "i26_tree_nonfinite_logits", "i26_logits_wrong_width",
    "i26_tune_bandwidth_zero", "i26_openai_dropped_connection", "i26_openai_drop_once_recovers",
    "i26_openai_bad_options", "i26_workers_1000",
    "i26_sampler_uint8_tokens", "i26_sweep_bad_models_up_front", "i26_load_pair_local_absent",
    "i26_tree_numpy_k_tensor_eos",
]

BYHAND_PROBES = [  # what the independent by-hand rerun of issue 26 found beyond its findings (results/gate/by_hand.md)
    "byhand_hub_accepts_never_answers", "byhand_partial_sweep_provenance",
]


ISSUE45_PROBES = [  # issue 45's rows fixed by the branch `limits`: sizes, names, the smaller rows, loopback
    "i45_verify_draws_huge", "i45_sample_n_per_prompt_huge", "i45_tune_batch_huge", "i45_scenario_joint_tokens_8",
    "i45_scenario_max_new_tokens_1e5", "i45_scenario_order_10", "i45_scenario_vocab_1e5",
    "i45_sample_max_new_tokens_1e5", "i45_sweep_name_dots", "i45_sweep_bad_values", "i45_sample_target_without_draft",
    "i45_sample_draft_without_target", "i45_out_proc", "i45_dedupe_read_only", "i45_url_notaport",
    "i45_verify_samples_eos_999", "i45_prompt_vocab_beyond", "i45_prompt_id_two_prompts", "i45_two_eos_policies",
    "i45_openai_logprobs_length", "i45_ray_loopback",
]


def test_registry_is_well_formed(gp):
    names = [p.name for p in gp.REGISTRY]
    assert names == ISSUE_PROBES + ISSUE26_PROBES + BYHAND_PROBES + ISSUE45_PROBES
    assert len(set(names)) == len(names)
    for p in gp.REGISTRY:
        assert re.fullmatch(r"[a-z][a-z0-9_]*", p.name), p.name
        assert isinstance(p.problem, str) and len(p.problem) > 10, p.name
        assert isinstance(p.expected, str) and len(p.expected) > 3, p.name
        assert "\n" not in p.problem and "\n" not in p.expected, p.name
        assert callable(p.fn), p.name
        assert 0 < p.timeout <= 180, p.name
    # the whole table stays within a few minutes even if every probe ran to its timeout but the slow ones (the
    # issue-45 section, refusals of a few seconds each, within its own quarter hour)
    quick = [p for p in gp.REGISTRY if not p.slow]
    assert sum(p.timeout for p in quick if not p.name.startswith("i45_")) < 30 * 60
    assert sum(p.timeout for p in quick if p.name.startswith("i45_")) < 15 * 60


def test_stderr_summary(gp):
    tb = "Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\nValueError: `k` bad\n"
    assert gp.stderr_head(tb) == "traceback; ValueError: `k` bad"
    assert gp.stderr_head("first\n\nsecond\nthird\n") == "first / second"
    assert gp.stderr_head("") == "(no stderr)"
    proc = gp.Proc(rc=2, out="", err="python -m harness verify: error: bad\n", wall=0.1)
    assert gp.describe(proc) == "exit 2: python -m harness verify: error: bad"
    assert gp.describe(gp.Proc(rc=None, out="", err="", wall=5.0, timed_out=True)).startswith("timed out")


@pytest.mark.parametrize("name", ["lib_k_numpy_int", "cli_threads_0"])
def test_fast_probe_runs(gp, name):
    p = next(p for p in gp.REGISTRY if p.name == name)
    row = gp.run_probe(p)
    assert row["probe"] == name and row["probe_error"] == "", row
    assert isinstance(row["ok"], bool)
    assert row["observed"] and len(row["observed"]) <= gp.MAX_TEXT
    if name == "cli_threads_0":
        assert row["observed"].startswith("exit ")
    else:
        assert row["observed"].startswith(("returned", "raises"))


def test_cli_writes_table(gp, tmp_path, capsys):
    rc = gp.main(["--only", "lib_float_prompt", "provenance_dirty", "--out", str(tmp_path), "--stem", "t"])
    assert rc == 0
    md = (tmp_path / "t.md").read_text()
    assert re.search(r"Commit `[0-9a-f]{40}`", md)
    assert "of 2 probes behave correctly" in md
    assert "| 1 | `lib_float_prompt` |" in md and "| 2 | `provenance_dirty` |" in md
    lines = (tmp_path / "t.csv").read_text().splitlines()
    assert lines[0].startswith("n,probe,ok,") and len(lines) == 3  # a plain CSV: header and two rows
    assert json.loads((tmp_path / "t.csv.meta.json").read_text())["command"] == "python experiments/gate_probes.py"
    assert "of 2 probes behave correctly" in capsys.readouterr().out


def test_unknown_probe_is_an_argument_error(gp):
    with pytest.raises(SystemExit) as e:
        gp.main(["--only", "no_such_probe"])
    assert e.value.code == 2


@pytest.mark.slow
def test_interrupt_probe_runs(gp):
    """The SIGINT-and-resume probe reaches its second run (about 10-20 s)."""
    p = next(p for p in gp.REGISTRY if p.name == "resume_swaps_sampler")
    row = gp.run_probe(p)
    assert row["probe_error"] == "" and "rerun with the lossy sampler" in row["observed"], row
