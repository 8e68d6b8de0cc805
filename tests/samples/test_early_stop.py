"""An engine that stops early against the requested controls is a finding, never our crash (issue 40, item 6).

The reproduction: transformers' assisted generation on the shipped exact Markov pair with ``--no-eos``.
transformers fills an unset ``eos_token_id`` from the checkpoint's generation config (EOS 14), so before the fix
a completion that drew token 14 ended there; the producer wrote it as finish_reason 'length' with fewer tokens,
the writer's check raised (exit 3), and a resume redrew the same batch into the same crash.  At temperature 1
token 14 has probability ~1e-4 a step (the issue's run met it after 3,321 completions of 8 tokens); at
temperature 5, eight completions of seed 0 show it: before the fix the eighth stops at [4, 14]; with the fix
(which also changes the assistant's drafting, so the streams differ) two of them draw 14 mid-way and go on.
"""
from __future__ import annotations

import contextlib
import json

import pytest

from harness.cli import main
from harness.samples.format import Controls, SampleRecord, parse_record
from harness.samples.producers import early_stop, finish_reason
import specimpl.hf_assisted as hf_assisted

EOS = 14  # the exact pair's generation-config EOS
SAMPLE = ["sample", "--engine", "hf", "--hf-mode", "assistant", "--target", "exact-markov", "--draft",
          "exact-markov-draft", "--prompt-vocab", "13", "--n-prompts", "1", "--n-per-prompt", "8",
          "--max-new-tokens", "8", "--temperature", "5", "--no-eos", "--no-progress"]


def _records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_hf_assisted_ignores_the_checkpoint_eos_when_asked(tmp_path):
    """With the EOS cleared (the fix), the completion that draws token 14 goes on to all 8 tokens."""
    out = tmp_path / "hf.jsonl"
    assert main(SAMPLE + ["--out", str(out)]) == 0
    recs = _records(out)
    assert [r["finish_reason"] for r in recs] == ["length"] * 8
    assert all(len(r["output_ids"]) == 8 and "early_stop" not in r for r in recs)
    assert any(EOS in r["output_ids"][:-1] for r in recs), "the reproduction no longer draws the EOS token mid-way"


def test_an_engine_early_stop_is_recorded_resumed_and_judged_lossy(tmp_path, monkeypatch, capsys):
    """transformers as it was before the fix (the EOS left in the generation configs): the early stop is written
    as drawn (finish_reason 'stop', early_stop at token 14), a rerun resumes without redrawing it, and
    verify-samples --exact reports it as a violation of the requested controls (lossy, exit 1)."""
    monkeypatch.setattr(hf_assisted, "_eos_cleared", lambda models, eos: contextlib.nullcontext())
    out = tmp_path / "hf.jsonl"
    assert main(SAMPLE + ["--out", str(out)]) == 0
    recs = _records(out)
    stopped = [r for r in recs if r["finish_reason"] == "stop"]
    assert [r["request_id"] for r in stopped] == ["p0-s7"]
    assert stopped[0]["output_ids"] == [4, EOS] and stopped[0]["early_stop"]["token_id"] == EOS
    capsys.readouterr()
    assert main(SAMPLE + ["--out", str(out)]) == 0  # resume: nothing redrawn, no crash
    assert "0 new completions written (8 already there)" in capsys.readouterr().err
    assert _records(out) == recs
    report = tmp_path / "report"
    code = main(["verify-samples", "--samples", str(out), "--target", "exact-markov", "--exact", "--no-progress",
                 "--out", str(report)])
    err = capsys.readouterr().err
    meta = json.loads((report / "meta.json").read_text())
    assert code == 1 and meta["verdict"] == "lossy" and "ending/early_stops" in meta["headline"]
    assert meta["info"]["early_stops"]["completions"] == 1
    assert "1 of 8 completions stopped early" in err and "not the requested law" in err


def test_finish_reason_and_early_stop_of_a_short_row():
    assert finish_reason([1, 2, 3], 3, None) == "length" and early_stop([1, 2, 3], 3, None) is None
    assert finish_reason([1, EOS], 3, EOS) == "eos" and early_stop([1, EOS], 3, EOS) is None
    assert finish_reason([1, EOS], 3, None) == "stop"
    assert early_stop([1, EOS], 3, None)["token_id"] == EOS
    assert early_stop([1, 5], 3, EOS)["token_id"] == 5  # another stop than the requested EOS


def _record(**kw):
    base = dict(request_id="p0-s0", prompt_id="p0", prompt_ids=(1,), output_ids=(4, EOS), finish_reason="stop",
                controls=Controls(1.0, 0, 1.0, 8), engine={"name": "x"}, early_stop={"token_id": EOS, "reason": "r"})
    base.update(kw)
    return SampleRecord(**base)


def test_the_format_reads_an_early_stop_back_and_refuses_a_wrong_one():
    rec = _record()
    assert parse_record(json.loads(rec.line())) == rec
    for bad, match in ((dict(early_stop={"token_id": 3}), "early_stop.token_id"),
                       (dict(finish_reason="eos"), "early_stop"),
                       (dict(early_stop={"token_id": EOS, "why": 1}), "early_stop"),
                       (dict(output_ids=(1,) * 8, finish_reason="stop", early_stop={"token_id": 1}), "early_stop")):
        with pytest.raises(ValueError, match=match):
            parse_record(json.loads(_record(**bad).line()))


def test_a_server_that_stops_although_ignore_eos_was_sent_is_recorded_as_an_early_stop():
    from harness.samples.openai import EndpointSpec, parse_choice
    from harness.samples.producers import Request
    req = Request("p0-s0", "p0", (13, 2))
    resp = {"choices": [{"token_ids": [4, EOS], "finish_reason": "stop"}]}
    spec = EndpointSpec(url="http://x/v1", model="m", controls=Controls(1.0, 0, 1.0, 8), eos_token_id=EOS,
                        ignore_eos=True)
    rec = parse_choice(spec, req, resp, None)
    assert rec.finish_reason == "stop" and rec.output_ids == (4, EOS) and rec.early_stop["token_id"] == EOS
    assert parse_record(json.loads(rec.line())) == rec
    plain = parse_choice(EndpointSpec(url="http://x/v1", model="m", controls=Controls(1.0, 0, 1.0, 8),
                                      eos_token_id=EOS), req, resp, None)
    assert plain.finish_reason == "eos" and plain.early_stop is None  # EOS allowed: an ordinary end
