"""llama.cpp end to end (harness/engines/llama_cpp.py).  The record logic (ids recovered from the server's
text answer, acceptance counting, seeds, prompts as text) is tested always; the engine itself (laws against
the float64 HF target, the Python API's samples, the server) needs the ``llama`` extra and is ``slow``:
``make engine-check`` runs it; without llama-cpp-python those tests skip with the reason."""
from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from harness.engines import llama_cpp as L

HAVE = importlib.util.find_spec("llama_cpp") is not None and importlib.util.find_spec("gguf") is not None
needs_engine = [pytest.mark.slow, pytest.mark.skipif(not HAVE, reason="llama-cpp-python / gguf not installed "
                                                                      "(pip install -e '.[llama]')")]
ENGINE = {"name": "llama.cpp"}


def _answer(tokens, finish="length", logprobs=None):
    lps = logprobs if logprobs is not None else [-1.0] * len(tokens)
    return {"choices": [{"text": "".join(tokens), "finish_reason": finish,
                         "logprobs": {"tokens": tokens, "token_logprobs": lps}}]}


def _record(ans, max_new=4):
    return L.http_record(ans, request_id="p0-s0", prompt_id="p0", prompt_ids=[256, 97], max_new_tokens=max_new,
                         seed=5, eos=257, engine=ENGINE)


def test_http_record_recovers_ascii_tokens_and_applied_controls():
    r = _record(_answer(["a", "\n", " ", "}"]))
    assert r["output_ids"] == [97, 10, 32, 125] and r["finish_reason"] == "length" and r["logprobs"] == [-1.0] * 4
    assert r["controls"] == {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "seed": 5,
                             "max_new_tokens": 4, "greedy": False, "stop": []}
    assert "x_truncated_at" not in r


def test_http_record_appends_eos_when_the_server_stopped_on_it():
    r = _record(_answer(["a", "b"], finish="stop"))
    assert r["output_ids"] == [97, 98, 257] and r["finish_reason"] == "eos"
    assert r["logprobs"] is None and r["x_token_logprobs"] == [-1.0, -1.0]  # none reported for EOS


def test_http_record_cuts_at_the_first_lost_byte():
    r = _record(_answer(["a", "", "b", "c"]))  # a byte >= 0x80 comes back as ""
    assert r["output_ids"] == [97] and r["finish_reason"] == "stop"
    assert r["x_truncated_at"]["position"] == 1 and r["logprobs"] == [-1.0]
    r = _record(_answer(["a", "é"], finish="stop"))  # a two-byte character is not one byte token either
    assert r["output_ids"] == [97] and r["x_truncated_at"]["position"] == 1


def test_http_record_needs_per_token_logprobs():
    with pytest.raises(L.ServerError, match="per-token logprobs"):
        _record({"choices": [{"text": "ab", "finish_reason": "length", "logprobs": None}]})


def test_count_accepted_stops_at_the_first_mismatch():
    seq = [1, 2, 3, 4, 5, 6]
    assert L.count_accepted([(2, [3, 4, 9, 6]), (5, [6, 7]), (6, [1])], seq) == (3, 7)
    assert L.count_accepted([], seq) == (0, 0)


def test_request_seeds_are_distinct_and_never_llama_cpp_random():
    seeds = {L.request_seed(s, i, j) for s in range(3) for i in range(20) for j in range(20)}
    assert len(seeds) == 1200 and all(0 <= x < 0xFFFFFFFF for x in seeds)


def test_prompt_text_only_for_bos_plus_ascii():
    assert L.prompt_text([256] + list(b"def f():\n\treturn 1"), 256) == "def f():\n\treturn 1"
    assert L.prompt_text([256, 0xC3, 0xA9], 256) is None and L.prompt_text(list(b"ab"), 256) is None


def test_write_jsonl_replaces_the_file_whole(tmp_path):
    path = tmp_path / "s.jsonl"
    assert L.write_jsonl(path, [{"a": 1}, {"a": 2}]) == 2
    with pytest.raises(ZeroDivisionError):
        L.write_jsonl(path, ({"a": 1 / x} for x in (1, 0)))
    assert [json.loads(x) for x in path.read_text().splitlines()] == [{"a": 1}, {"a": 2}]
    assert list(tmp_path.iterdir()) == [path]


def test_bad_options_name_the_argument():
    with pytest.raises(ValueError, match="`kv` must be one of"):
        L.load_llama("x.gguf", kv="bfloat16")
    with pytest.raises(ValueError, match="`draft_k` must be"):
        L.load_llama("x.gguf", draft_k=0)
