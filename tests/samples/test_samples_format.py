"""The sample file format: strict reader (FILE:LINE: field 'X'), append-only writer with resume."""
import json

import pytest

from harness.samples.format import (FORMAT, Controls, SampleFormatError, SampleRecord, SampleWriter, parse_record,
                                    read_samples)


def _rec(i=0, **over):
    d = {"format": FORMAT, "request_id": f"p0-s{i}", "prompt_id": "p0", "prompt_ids": [256, 10],
         "output_ids": [1, 2, 3], "finish_reason": "length",
         "controls": {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "seed": None,
                      "max_new_tokens": 3, "greedy": False, "stop": []},
         "logprobs": [-1.0, -2.0, -0.5], "engine": {"name": "test"}}
    d.update(over)
    return d


def _write(tmp_path, objs, name="s.jsonl"):
    p = tmp_path / name
    p.write_text("".join(json.dumps(o) + "\n" for o in objs))
    return p


def test_round_trip(tmp_path):
    p = _write(tmp_path, [_rec(0), _rec(1, logprobs=None)])
    recs = read_samples(p)
    assert [r.request_id for r in recs] == ["p0-s0", "p0-s1"]
    assert recs[0].logprobs == (-1.0, -2.0, -0.5) and recs[1].logprobs is None
    assert recs[0].controls == Controls(1.0, 0, 1.0, 3)
    assert parse_record(json.loads(recs[0].line())) == recs[0]


@pytest.mark.parametrize("over, field", [
    ({"format": "specverify.samples/2"}, "format"),
    ({"request_id": ""}, "request_id"),
    ({"prompt_ids": []}, "prompt_ids"),
    ({"output_ids": [1, -2, 3]}, "output_ids"),
    ({"output_ids": [1, 2.5, 3]}, "output_ids"),
    ({"finish_reason": "done"}, "finish_reason"),
    ({"finish_reason": "eos", "output_ids": [], "logprobs": None}, "finish_reason"),
    ({"output_ids": [1, 2], "logprobs": [-1.0, -1.0]}, "finish_reason"),  # 'length' but short
    ({"logprobs": [-1.0, -2.0]}, "logprobs"),
    ({"logprobs": [-1.0, 0.5, -1.0]}, "logprobs"),
    ({"engine": {}}, "engine"),
    ({"tempreature": 1.0}, "tempreature"),
])
def test_reader_names_line_and_field(tmp_path, over, field):
    p = _write(tmp_path, [_rec(0), _rec(1, **over)])
    with pytest.raises(SampleFormatError, match=rf"s\.jsonl:2: field '{field}'"):
        read_samples(p)


@pytest.mark.parametrize("key, value", [("temperature", -1), ("top_k", 1.5), ("top_p", 0), ("min_p", 1.0),
                                        ("greedy", 1), ("stop", ["", "x"]), ("topk", 3)])
def test_reader_controls(tmp_path, key, value):
    r = _rec(0)
    r["controls"][key] = value
    with pytest.raises(SampleFormatError, match=rf"s\.jsonl:1: field 'controls\.{key}'"):
        read_samples(_write(tmp_path, [r]))


def test_missing_control_and_field(tmp_path):
    r = _rec(0)
    del r["controls"]["max_new_tokens"]
    with pytest.raises(SampleFormatError, match=r":1: field 'controls.max_new_tokens': missing"):
        read_samples(_write(tmp_path, [r]))
    r = _rec(0)
    del r["prompt_id"]
    with pytest.raises(SampleFormatError, match=r":1: field 'prompt_id': missing"):
        read_samples(_write(tmp_path, [r]))


def test_duplicate_request_id_and_bad_json(tmp_path):
    with pytest.raises(SampleFormatError, match=r":2: field 'request_id': 'p0-s0' repeats line 1"):
        read_samples(_write(tmp_path, [_rec(0), _rec(0)]))
    p = tmp_path / "bad.jsonl"
    p.write_text(json.dumps(_rec(0)) + "\n{not json\n")
    with pytest.raises(SampleFormatError, match=r"bad\.jsonl:2: field '<line>': not valid JSON"):
        read_samples(p)


def test_extension_fields_kept(tmp_path):
    recs = read_samples(_write(tmp_path, [_rec(0, x_note="hi")]))
    assert recs[0].extra == {"x_note": "hi"} and '"x_note":"hi"' in recs[0].line()


def test_writer_resumes_and_never_redoes(tmp_path):
    p = tmp_path / "out.jsonl"
    a, b = parse_record(_rec(0)), parse_record(_rec(1))
    with SampleWriter(p) as w:
        assert w.write_all([a]) == 1
    with SampleWriter(p) as w:
        assert w.done == {"p0-s0"}
        assert w.write_all([a, b]) == 1
        with pytest.raises(ValueError, match="already in"):
            w.write(a)
    assert [r.request_id for r in read_samples(p)] == ["p0-s0", "p0-s1"]


def test_writer_drops_cut_short_line(tmp_path, capsys):
    p = tmp_path / "out.jsonl"
    p.write_text(json.dumps(_rec(0)) + "\n" + json.dumps(_rec(1))[:20])
    with SampleWriter(p) as w:
        assert w.done == {"p0-s0"}
        w.write(parse_record(_rec(1)))
    assert "unfinished last line" in capsys.readouterr().err
    assert len(read_samples(p)) == 2


def test_writer_refuses_malformed_existing_file(tmp_path):
    p = _write(tmp_path, [_rec(0, top="x")], "out.jsonl")
    with pytest.raises(SampleFormatError, match=r"out\.jsonl:1: field 'top'"):
        SampleWriter(p).__enter__()


def test_one_writer_per_file(tmp_path):
    """Issue 26, finding 5: two writers of one file at once both appended every request.  The writer holds
    the file's lock; a second writer (here a second open file description, as another process has) is
    refused naming the lock, and the file is writable again once the first is closed."""
    from harness.samples.format import SampleFileLocked
    p = tmp_path / "out.jsonl"
    with SampleWriter(p) as w:
        w.write(parse_record(_rec(0)))
        with pytest.raises(SampleFileLocked, match=r"`--out` '.*out\.jsonl' is locked: another process is writing"):
            SampleWriter(p).__enter__()
    with SampleWriter(p) as w:
        assert w.done == {"p0-s0"}


def test_samples_dedupe_repairs_a_file_with_repeats(tmp_path, capsys):
    """Issue 26, finding 5: a file holding a request id twice had no repair path.  samples-dedupe keeps
    the first line of each request id (whatever the later ones hold) and a torn last line goes; the
    reader's refusal names the command."""
    from harness.cli import main
    p = _write(tmp_path, [_rec(0), _rec(1), _rec(0, output_ids=[3, 2, 1]), _rec(1)], "out.jsonl")
    with pytest.raises(SampleFormatError, match="samples-dedupe --samples"):
        read_samples(p)
    p.write_text(p.read_text() + json.dumps(_rec(2))[:30])
    assert main(["samples-dedupe", "--samples", str(p)]) == 0
    err = capsys.readouterr().err
    assert "dropped 2 repeated line(s), 1 of them with another completion" in err and "unfinished last line" in err
    recs = read_samples(p)
    assert [r.request_id for r in recs] == ["p0-s0", "p0-s1"] and recs[0].output_ids == (1, 2, 3)
    assert main(["samples-dedupe", "--samples", str(p)]) == 0  # nothing left to drop
    bad = _write(tmp_path, [_rec(0), _rec(0, top="x")], "bad.jsonl")
    before = bad.read_text()
    assert main(["samples-dedupe", "--samples", str(bad)]) == 2 and bad.read_text() == before
    assert "bad.jsonl:2: field 'top'" in capsys.readouterr().err
    with SampleWriter(tmp_path / "busy.jsonl"):
        assert main(["samples-dedupe", "--samples", str(tmp_path / "busy.jsonl")]) == 2
    assert "is locked" in capsys.readouterr().err
