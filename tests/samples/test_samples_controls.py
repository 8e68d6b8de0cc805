"""Engine-level controls (harness.samples.controls) at small size: bugs caught, lossless controls not lossy.

Sizes: each bug is caught with a wide margin at the size used (temperature_ignored: pooled PIT p ~ 1e-9 at
64 completions x 32 tokens; shared_stream and stop_truncation are caught by tests that cannot fire under
H0 or whose p-value is ~0.5^pairs); the lossless controls must never be judged lossy (at these sizes they
are inconclusive: the planner's completions needed are reported in the summary)."""
import json

import pytest

from harness.cli import main

TARGET = "specimpl/assets/tiny_pair/target"


def _sample(out, *args, n_prompts=8, per=2, T=16, seed=0):
    code = main(["sample", "--engine", "ours", "--n-prompts", str(n_prompts), "--n-per-prompt", str(per),
                 "--max-new-tokens", str(T), "--seed", str(seed), "--out", str(out), "--no-progress", *args])
    assert code == 0
    return out


def _scored(tmp_path, f):
    rep = tmp_path / ("rep_" + f.stem)
    code = main(["verify-samples", "--samples", str(f), "--target", TARGET, "--out", str(rep), "--no-progress"])
    return code, json.loads((rep / "meta.json").read_text())


def _two_sample(tmp_path, f, base):
    rep = tmp_path / ("rep2_" + f.stem)
    code = main(["verify-samples", "--samples", str(f), "--baseline", str(base), "--out", str(rep), "--no-progress"])
    return code, json.loads((rep / "meta.json").read_text())


def test_temperature_ignored_caught_scored(tmp_path):
    f = _sample(tmp_path / "temp.jsonl", "--control", "temperature_ignored", "--temperature", "0.5", "--no-eos",
                n_prompts=32, T=32)
    code, meta = _scored(tmp_path, f)
    assert code == 1 and meta["verdict"] == "lossy" and "pit/" in meta["headline"]


def test_shared_stream_caught_both_modes(tmp_path):
    f = _sample(tmp_path / "shared.jsonl", "--control", "shared_stream", "--batch-size", "2", n_prompts=32)
    base = _sample(tmp_path / "base.jsonl", "--method", "autoregressive", n_prompts=32, seed=1)
    code, meta = _scored(tmp_path, f)
    assert code == 1 and meta["verdict"] == "lossy" and "independence/duplicates" in meta["headline"]
    code, meta = _two_sample(tmp_path, f, base)
    assert code == 1 and meta["verdict"] == "lossy" and "independence/duplicates" in meta["headline"]


def test_stop_truncation_caught_both_modes(tmp_path):
    f = _sample(tmp_path / "stop.jsonl", "--control", "stop_truncation", n_prompts=64)
    base = _sample(tmp_path / "base.jsonl", "--method", "autoregressive", n_prompts=64, seed=1)
    code, meta = _scored(tmp_path, f)
    assert code == 1 and meta["verdict"] == "lossy" and "ending/unexplained_ends" in meta["headline"]
    code, meta = _two_sample(tmp_path, f, base)
    assert code == 1 and meta["verdict"] == "lossy"


@pytest.mark.parametrize("control", ["speculative", "hf_assisted"])
def test_lossless_controls_not_lossy(tmp_path, control):
    f = _sample(tmp_path / f"{control}.jsonl", "--control", control, n_prompts=8 if control == "speculative" else 4)
    code, meta = _scored(tmp_path, f)
    assert code == 4 and meta["verdict"] == "inconclusive", meta["headline"]
    assert meta["bounds"]["completions_needed"] > meta["completions"]


def test_hf_prompt_lookup_producer(tmp_path):
    """transformers' prompt-lookup decoding through `sample --engine hf`: records carry the method, not lossy."""
    f = tmp_path / "pl.jsonl"
    assert main(["sample", "--engine", "hf", "--hf-mode", "prompt_lookup", "--k", "3", "--n-prompts", "3",
                 "--n-per-prompt", "2", "--max-new-tokens", "8", "--out", str(f), "--no-progress"]) == 0
    from harness.samples.format import read_samples
    recs = read_samples(f)
    assert len(recs) == 6 and recs[0].engine["name"] == "transformers"
    assert recs[0].engine["speculative"] == {"method": "prompt_lookup", "k": 3}
    code, meta = _scored(tmp_path, f)
    assert meta["verdict"] != "lossy", meta["headline"]


@pytest.mark.parametrize("option, value", [("--prompt-seed", "1"), ("--method", "autoregressive"),
                                           ("--control", "shared_stream"), ("--k", "2")])
def test_resume_with_other_settings_is_refused(tmp_path, capsys, option, value):
    """Issue 26, finding 5: resuming `sample` with another --prompt-seed, --method or --control mixed
    prompt sets or engines in one file.  The resume exits 2 naming the option and writes nothing."""
    f = _sample(tmp_path / "s.jsonl", n_prompts=2, per=1, T=4)
    before = f.read_text()
    capsys.readouterr()
    code = main(["sample", "--engine", "ours", "--n-prompts", "3", "--n-per-prompt", "1", "--max-new-tokens", "4",
                 "--out", str(f), "--no-progress", option, value])
    err = capsys.readouterr().err
    assert code == 2 and option in err and str(f) in err, err
    assert f.read_text() == before
    assert main(["sample", "--engine", "ours", "--n-prompts", "3", "--n-per-prompt", "1", "--max-new-tokens", "4",
                 "--out", str(f), "--no-progress"]) == 0  # the same options resume
