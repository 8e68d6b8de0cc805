"""Short names of the shipped models (harness.core.models): resolved inside the installed package, from any directory."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import specimpl
from harness.cli import main
from harness.core.errors import UsageError
from harness.core.models import SHIPPED, model_names, resolve_model
from harness.verify.exactmodel import load_exact_model_spec

NAMES = ["tiny", "tiny-draft", "exact", "exact-draft", "exact-markov", "exact-markov-draft"]


def test_the_names_are_the_interface_and_each_resolves_to_a_shipped_folder():
    assert model_names() == NAMES
    pkg = Path(specimpl.__file__).resolve().parent
    for name in NAMES:
        p = Path(resolve_model(name))
        assert p.is_absolute() and p.is_dir() and (p / "config.json").is_file() and (p / "model.safetensors").is_file()
        assert pkg in p.parents, f"{name} resolves outside the installed specimpl package: {p}"
    assert resolve_model("exact-markov").endswith("exact_pair/markov_target")


def test_a_folder_is_returned_as_given_and_anything_else_is_bad_input(tmp_path):
    assert resolve_model(str(tmp_path)) == str(tmp_path)
    with pytest.raises(UsageError, match=r"`--draft` must be a model folder or a shipped model name \(tiny, .*got "
                                         r"'tiny_draft', which is neither"):
        resolve_model("tiny_draft", "--draft")


def _tiny_samples(path: Path) -> None:
    """Four completions of two byte prompts of the tiny pair, written by hand (the verdict does not matter here)."""
    c = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "max_new_tokens": 4}
    lines = [{"format": "specverify.samples/1", "request_id": f"p{i}-s{j}", "prompt_id": f"p{i}",
              "prompt_ids": [256, 100 + i, 101], "output_ids": [32, 61 + j, 40, 41], "finish_reason": "length",
              "controls": c, "engine": {"name": "hand"}} for i in range(2) for j in range(2)]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_verify_samples_names_the_target_from_a_directory_outside_the_repo(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _tiny_samples(tmp_path / "s.jsonl")
    code = main(["verify-samples", "--samples", "s.jsonl", "--target", "tiny", "--out", "rep", "--no-progress"])
    assert code in (0, 1, 4)  # a verdict (4 spares the rename of 'inconclusive'), not a bad-input or model failure
    meta = json.loads((tmp_path / "rep" / "meta.json").read_text())
    assert meta["info"]["tokens_scored"] == 16


@pytest.mark.parametrize("argv, option", [
    (["verify-samples", "--samples", "s.jsonl", "--target", "tiny-typo"], "--target"),
    (["sample", "--engine", "ours", "--out", "o.jsonl", "--target", "exact-markov", "--draft", "nowhere"], "--draft"),
    (["tune", "--target", "tiny", "--draft", "tinydraft", "--hardware", "h100"], "--draft"),
])
def test_an_unknown_name_exits_2_with_one_line(tmp_path, monkeypatch, capsys, argv, option):
    monkeypatch.chdir(tmp_path)
    _tiny_samples(tmp_path / "s.jsonl")
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"`{option}` must be a model folder or a shipped model name" in err
    assert all(n in err for n in NAMES)
    assert not (tmp_path / "o.jsonl").exists()


def test_models_command_prints_every_name_and_path(capsys):
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    for name in NAMES:
        assert name in out and str(SHIPPED[name].path) in out
    assert "V = 16" in out and "V = 259" in out
    assert main(["models", "--path", "exact-markov"]) == 0
    assert capsys.readouterr().out.strip() == resolve_model("exact-markov")
    assert main(["models", "--path", "nope"]) == 2


def test_the_exact_pair_table_takes_short_names():
    spec = load_exact_model_spec({"target": "exact-markov", "draft": "exact-markov-draft"})
    assert spec.path("target") == SHIPPED["exact-markov"].path and spec.path("draft") == SHIPPED["exact-markov-draft"].path
    assert load_exact_model_spec({}).path("target") == SHIPPED["exact"].path
    with pytest.raises(ValueError, match="real_model.exact.draft"):
        load_exact_model_spec({"draft": "no_such_draft"})
