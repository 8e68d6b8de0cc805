"""Scenario files are checked against a schema before any work: unknown keys, wrong types and values out of
range raise UsageError (exit 2 from the CLI) with one line naming the file, the dotted key and the value."""
import shutil

import pytest

from harness.cli import main
from harness.core.config import VERIFY_DIR
from harness.core.errors import UsageError
from harness.laws.scenarios import list_scenarios, load_scenario, load_settings


def _dir(tmp_path, text, default_extra=""):
    d = tmp_path / "sd"
    d.mkdir()
    (d / "default.toml").write_text((VERIFY_DIR / "default.toml").read_text() + default_extra)
    (d / "bad.toml").write_text(text)
    return d


def test_every_shipped_scenario_passes_the_schema():
    load_settings()
    names = list_scenarios()
    assert len(names) >= 9
    for name in names:
        load_scenario(name)


BAD = [
    ('[draft]\nkind = "bogus"\n', "`draft.kind` must be one of 'same', 'noisy'", "'bogus'"),
    ("eos_token_id = 99\n", "`eos_token_id` must be a token id in [0, vocab_size = 8)", "99"),
    ("eos_token_id = -2\n", "`eos_token_id`", "-2"),
    ("[target]\norder = 0\n", "`target.order` must be an integer >= 1", "got 0"),
    ("prompt = []\n", "`prompt` must be a non-empty list", "[]"),
    ("prompt = [0, 8]\n", "`prompt` must be a non-empty list of token ids in [0, vocab_size = 8)", "[0, 8]"),
    ("prompt = [0.7]\n", "`prompt`", "0.7"),
    ("[sampling]\ntemprature = 0.5\n", "key `sampling.temprature` is not a known setting; known: ['greedy'", ""),
    ("[target]\nvocab_sise = 8\n", "key `target.vocab_sise` is not a known setting", ""),
    ("kk = 3\n", "key `kk` is not a known setting", ""),
    ('k = "4"\n', "`k` must be an integer >= 1", "'4'"),
    ("k = 0\n", "`k` must be an integer >= 1", "got 0"),
    ("k = true\n", "`k`", "True"),
    ("max_new_tokens = 1\n", "`max_new_tokens` must be an integer >= 2", "1"),
    ("joint_tokens = 9\n", "`joint_tokens` must be an integer in [0, max_new_tokens = 8]", "9"),
    ("weight = 0\n", "`weight` must be a number > 0", "0"),
    ("[sampling]\ntop_p = 1.5\n", "`sampling.top_p` must be a number in (0, 1]", "1.5"),
    ("[sampling]\ngreedy = 1\n", "`sampling.greedy` must be true or false", "1"),
    ("[sampling]\ntemperature = -1.0\n", "`sampling.temperature`", "-1.0"),
    ('[draft]\nkind = "tempered"\n', "`draft.tau` must be set for draft.kind = 'tempered'", ""),
    ("[draft]\neps = 2.0\n", "`draft.eps` must be a number in [0, 1]", "2.0"),
    ('[draft]\nkind = "disjoint"\n', "support < vocab_size", ""),
    ("[target]\nsupport = 9\n", "`target.support`", "9"),
    ("sampling = 3\n", "`sampling` must be a table", "3"),
    ('builder = "nocolon"\n', "`builder` must be 'ngram' or 'package.module:function'", "'nocolon'"),
]


@pytest.mark.parametrize("text, words, value", BAD)
def test_a_bad_scenario_file_names_file_key_and_value(tmp_path, text, words, value):
    d = _dir(tmp_path, text)
    with pytest.raises(UsageError) as e:
        load_scenario("bad", d)
    msg = str(e.value)
    assert msg.startswith(str(d / "bad.toml") + ": "), msg
    assert words in msg and value in msg, msg
    assert "\n" not in msg


def test_a_bad_default_file_is_named_too(tmp_path):
    d = _dir(tmp_path, "", default_extra="")
    text = (d / "default.toml").read_text().replace("power = 0.99", "powr = 0.99")
    (d / "default.toml").write_text(text)
    with pytest.raises(UsageError, match=r"default\.toml: key `run\.powr` is not a known setting"):
        load_settings(d)


def test_a_real_model_builder_keeps_its_own_tables_unchecked(tmp_path):
    d = _dir(tmp_path, 'builder = "mypkg.models:pair"\n[target]\npath = "models/t"\n[draft]\npath = "models/d"\n')
    sc = load_scenario("bad", d)
    assert not sc.exact and sc.target["path"] == "models/t"


@pytest.mark.parametrize("text, key, value", [
    ('[draft]\nkind = "bogus"\n', "kind", "bogus"),
    ("eos_token_id = 99\n", "eos_token_id", "99"),
    ("[sampling]\ntemprature = 0.5\n", "temprature", ""),
])
def test_the_cli_exits_2_with_one_line_before_any_work(tmp_path, monkeypatch, capsys, text, key, value):
    monkeypatch.chdir(tmp_path)
    d = _dir(tmp_path, text)
    rc = main(["verify", "--scenario-dir", str(d), "--scenario", "bad", "--draws", "2000", "--no-real-model",
               "--no-figures", "--no-progress", "--out", "out"])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1
    assert "bad.toml" in err and key in err and value in err
    assert not (tmp_path / "out").exists()


def test_a_copy_of_the_shipped_folder_still_runs_its_checks(tmp_path):
    d = tmp_path / "copy"
    shutil.copytree(VERIFY_DIR, d)
    assert [load_scenario(n, d).name for n in list_scenarios(d)] == list_scenarios(d)
