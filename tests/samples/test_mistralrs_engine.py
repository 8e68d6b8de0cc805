"""mistral.rs end to end on this CPU (``make mistralrs-check``): the shipped exact pair's target (transformer: real
attention and RoPE, V = 16) exported by our own code, sampled by mistral.rs's Python API (plain decoding: its only
speculative path needs PagedAttention, which CPU lacks) and judged by ``verify-samples --exact`` against the float64
law over the first four tokens.

The engine runs in its own environment (``make mistralrs-venv``: .venv-mistralrs); the engine tests find its Python
in ``$SPECVERIFY_MISTRALRS_PYTHON`` and are skipped without it (marked ``mistralrs``: not on ``make test``'s path).
The export, the option checks and the resume rule need no engine and run everywhere.

Error rates: a lossless engine is judged lossy with probability <= alpha + 0.001 (the family's 1e-4 and the
dependence stage's 1e-3).  At 2,000 completions the position tests detect a TV of ~0.07 at power 0.99 (the
report's ``min_detectable``): a wrong RoPE base or a float16 softmax of the kind seen elsewhere moves the law by
more.  The determinism test fails if mistral.rs starts seeding its CPU generator from entropy (then the resume
replay is unnecessary and docs/engines.md must change).  Measured here: `make mistralrs-check` 34 s in all on
the quiet machine (install included; the 2,000-completion test 12.7 s).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from harness.cli import main
from harness.core.errors import UsageError
from harness.samples.engines import mistralrs_worker
from harness.samples.engines.mistralrs_engine import ALPHABET, STAMP, export, replayed
from harness.samples.format import FORMAT, read_samples
from harness.samples.producers import make_requests

REPO = Path(__file__).resolve().parents[2]
PAIR = REPO / "specimpl" / "assets" / "exact_pair"
PY = os.environ.get("SPECVERIFY_MISTRALRS_PYTHON")
PY = str(Path(PY).absolute()) if PY else None
needs_mistralrs = pytest.mark.skipif(not PY or not Path(PY).exists(), reason="no mistral.rs environment "
                                     "(SPECVERIFY_MISTRALRS_PYTHON; make mistralrs-check sets it)")
COMMON = ["--engine", "mistralrs", "--target", "exact", "--prompt-vocab", "13", "--prompt-lengths", "4", "4",
          "--n-prompts", "1", "--max-new-tokens", "4", "--no-progress"]


def test_the_worker_writes_this_sample_format():
    assert mistralrs_worker.FORMAT == FORMAT


def test_the_export_spells_every_id_as_one_ordinary_character(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECVERIFY_MISTRALRS_CACHE", str(tmp_path / "cache"))
    out = export(PAIR / "target")
    config = json.loads((out / "config.json").read_text())
    tok = json.loads((out / "tokenizer.json").read_text())
    assert config["rope_theta"] == config["rope_parameters"]["rope_theta"]
    assert tok["added_tokens"] == [] and tok["model"]["vocab"] == {ALPHABET[i]: i for i in range(16)}
    assert (out / "model.safetensors").read_bytes() == (PAIR / "target" / "model.safetensors").read_bytes()
    assert export(PAIR / "target") == out and (out / STAMP).exists()  # cached by content
    assert export(PAIR / "draft") != out


def test_the_export_refuses_a_vocabulary_it_cannot_spell(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECVERIFY_MISTRALRS_CACHE", str(tmp_path / "cache"))
    with pytest.raises(UsageError, match="at most 62 tokens"):
        export(REPO / "specimpl" / "assets" / "tiny_pair" / "target")


def test_a_resumed_run_replays_exactly_the_prefix_its_file_holds():
    reqs = make_requests(1, 5, (4, 4), 0, 13)
    ids = [r.request_id for r in reqs]
    assert replayed(reqs, set()) == 0 and replayed(reqs, set(ids[:3])) == 3
    with pytest.raises(UsageError, match="not the first 2 requests"):
        replayed(reqs, {ids[0], ids[2]})


@pytest.mark.parametrize("extra, opt", [(["--spec", "draft"], "--spec"), (["--kv-precision", "u8"], "--kv-precision"),
                                        (["--mistralrs-python", "/nonexistent/python"], "--mistralrs-python")])
def test_options_mistralrs_cannot_take_are_named(tmp_path, capsys, extra, opt):
    rc = main(["sample", *COMMON, "--n-per-prompt", "2", "--out", str(tmp_path / "s.jsonl"), *extra])
    assert rc == 2 and opt in capsys.readouterr().err
    assert not (tmp_path / "s.jsonl").exists()


@pytest.mark.mistralrs
@needs_mistralrs
def test_plain_decoding_is_not_lossy_against_the_exact_law(tmp_path):
    out = tmp_path / "s.jsonl"
    assert main(["sample", *COMMON, "--n-per-prompt", "2000", "--mistralrs-python", PY, "--out", str(out)]) == 0
    recs = read_samples(out)
    assert len(recs) == 2000 and {r.controls.seed for r in recs} == {None}
    assert recs[0].engine["name"] == "mistralrs" and recs[0].engine["kv_cache"] == "f32"
    rc = main(["verify-samples", "--samples", str(out), "--target", "exact", "--exact", "--epsilon", "0.05",
               "--no-progress", "--out", str(tmp_path / "r")])
    assert rc in (0, 4)  # not lossy: certified or inconclusive at this size
    meta = json.loads((tmp_path / "r" / "meta.json").read_text())
    assert "none found" in json.dumps(meta)  # the dependence stage found no shared stream


@pytest.mark.mistralrs
@needs_mistralrs
def test_the_engine_replays_one_stream_and_a_resumed_file_continues_it(tmp_path):
    """Two processes draw the same completions (mistral.rs refuses a seed on CPU); a file resumed after 25
    completions equals one drawn in one go."""
    once, again, resumed = (tmp_path / f"{n}.jsonl" for n in ("once", "again", "resumed"))
    for f in (once, again):
        assert main(["sample", *COMMON, "--n-per-prompt", "60", "--mistralrs-python", PY, "--out", str(f)]) == 0
    assert main(["sample", *COMMON, "--n-per-prompt", "25", "--mistralrs-python", PY, "--out", str(resumed)]) == 0
    assert main(["sample", *COMMON, "--n-per-prompt", "60", "--mistralrs-python", PY, "--out", str(resumed)]) == 0
    outs = [[(r.request_id, r.output_ids) for r in read_samples(f)] for f in (once, again, resumed)]
    assert outs[0] == outs[1] == outs[2]
    assert len({o for _, o in outs[0]}) > 20  # not one completion repeated: a stream, the same in every process
