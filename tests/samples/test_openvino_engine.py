"""OpenVINO GenAI end to end on this CPU (``make openvino-check``): the shipped exact pair (transformer: real
attention, V = 16) exported by our own command, sampled by ``ContinuousBatchingPipeline`` and judged by
``verify-samples --exact`` against the target's float64 law over the first four tokens.

The engine runs in its own environment (``make openvino-venv``: .venv-openvino); the engine tests find its Python in
``$SPECVERIFY_OPENVINO_PYTHON`` and are skipped without it (marked ``openvino``: not on ``make test``'s path).
The option checks and the export's cache key need no engine and run everywhere.

Error rates and sizes: a lossless engine is judged lossy with probability <= the family's alpha (1e-4 per file).
Plain decoding: the planner asks ~109k completions for epsilon = 0.01 at 4 positions (a 20k draw bounded 0.024);
drawn at 200k the bound sits near 0.007, so a lossless engine ends inconclusive rarely.  Draft-model speculation
with prefix caching off (openvinotoolkit/openvino.genai#4190) moves the law of position 0 by ~0.47 in TV
(10,000 completions, results/engines/openvino/): at 3,000 completions the position-0 test's power against a TV of
even 0.1 is ~1, so the known-lossy configuration is judged lossy unless the engine changed.  Each test draws
fresh (a new export when the cache is cold): 412 s on 2 cores shared with other jobs (load ~7).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from harness.cli import main
from harness.samples.engines import openvino_worker
from harness.samples.engines.openvino_export import content_key, export
from harness.samples.format import FORMAT

REPO = Path(__file__).resolve().parents[2]
PAIR = REPO / "specimpl" / "assets" / "exact_pair"
PY = os.environ.get("SPECVERIFY_OPENVINO_PYTHON")
PY = str(Path(PY).absolute()) if PY else None
needs_openvino = pytest.mark.skipif(not PY or not Path(PY).exists(), reason="no OpenVINO environment "
                                    "(SPECVERIFY_OPENVINO_PYTHON; make openvino-check sets it)")
COMMON = ["--engine", "openvino", "--target", "exact", "--prompt-vocab", "13", "--prompt-lengths", "4", "4",
          "--n-prompts", "1", "--max-new-tokens", "4", "--k", "4", "--no-progress"]


def test_the_worker_writes_this_sample_format():
    assert openvino_worker.FORMAT == FORMAT


def test_the_export_cache_key_follows_the_bytes(tmp_path):
    src = tmp_path / "m"
    src.mkdir()
    for f in (PAIR / "target").iterdir():
        (src / f.name).write_bytes(f.read_bytes())
    key = content_key(src)
    assert key == content_key(PAIR / "target")
    (src / "config.json").write_text((src / "config.json").read_text() + " ")
    assert content_key(src) != key


def test_many_calls_are_pooled_into_one_entry_with_their_totals():
    from harness.samples.engines.openvino_engine import pooled_calls, speculation_summary
    calls = [{"requests": 1, "generate_s": 0.5, "counters": {"draft_tokens": 3, "accepted_tokens": 2,
                                                              "acceptance_rate": 2 / 3}}] * 100
    (one,) = pooled_calls(calls)
    assert one["n_calls"] == 100 and one["requests"] == 100 and one["counters"]["draft_tokens"] == 300
    assert speculation_summary({"calls": [one]}) == speculation_summary({"calls": calls})
    assert pooled_calls(calls[:64]) == calls[:64]


@pytest.mark.parametrize("extra, needle", [(["--spec", "ngram"], "--spec"),
                                           (["--spec", "draft"], "--draft"),
                                           (["--spec", "none", "--openvino-python", "/nonexistent/python"],
                                            "--openvino-python")])
def test_bad_options_exit_2_naming_the_option(tmp_path, capsys, extra, needle):
    rc = main(["sample", *COMMON, "--n-per-prompt", "2", "--out", str(tmp_path / "x.jsonl"), *extra])
    assert rc == 2
    assert needle in capsys.readouterr().err


def _sample(tmp_path, name, per_prompt, *extra) -> Path:
    out = tmp_path / f"{name}.jsonl"
    assert main(["sample", *COMMON, "--openvino-python", PY, "--n-per-prompt", str(per_prompt), "--out", str(out),
                 *extra]) == 0
    return out


def _exact(tmp_path, samples, epsilon=0.01) -> int:
    return main(["verify-samples", "--samples", str(samples), "--target", "exact", "--exact",
                 "--epsilon", str(epsilon), "--no-progress", "--out", str(tmp_path / f"rep-{samples.stem}")])


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A cold export cache: the export is part of what is tested."""
    monkeypatch.setenv("SPECVERIFY_OPENVINO_CACHE", str(tmp_path / "ov-cache"))
    return tmp_path / "ov-cache"


@pytest.mark.openvino
@needs_openvino
def test_our_export_writes_a_stamped_float32_ir_once(cache):
    ir = export(PAIR / "target", PY)
    stamp = json.loads((ir / "specverify-export.json").read_text())
    assert stamp["options"] == ["--task", "text-generation-with-past", "--weight-format", "fp32"]
    assert stamp["versions"]["optimum-intel"] == "2.2.0" and (ir / "openvino_tokenizer.xml").exists()
    assert export(PAIR / "target", PY) == ir and len(list(cache.iterdir())) == 1


@pytest.mark.openvino
@needs_openvino
def test_plain_decoding_is_certified_at_token_tv_001(tmp_path, cache):
    s = _sample(tmp_path, "plain", 200_000, "--spec", "none")
    rec = json.loads(s.read_text().splitlines()[0])
    assert rec["engine"]["name"] == "openvino-genai" and rec["engine"]["properties"]["KV_CACHE_PRECISION"] == "f32"
    assert _exact(tmp_path, s) == 0


@pytest.mark.openvino
@needs_openvino
def test_draft_speculation_without_prefix_caching_is_lossy(tmp_path, cache):
    # the known upstream bug (openvino.genai#4190): if this stops being lossy, the engine changed -- re-measure
    # results/engines/openvino/ and lift the finding, do not loosen this test
    s = _sample(tmp_path, "draft", 3000, "--spec", "draft", "--draft", "exact-draft", "--prefix-caching", "off")
    engine = json.loads(Path(str(s) + ".engine.json").read_text())
    assert sum(c["counters"]["draft_tokens"] for c in engine["calls"]) > 0, "speculation never ran"
    assert _exact(tmp_path, s) == 1
