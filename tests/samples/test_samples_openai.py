"""The OpenAI-compatible producer against a local stub server (127.0.0.1, started and stopped here)."""
import json

import pytest

from harness.cli import main
from harness.verify.realmodel import tiny_pair
from harness.samples.format import Controls, SampleWriter, read_samples
from harness.samples.openai import EndpointSpec, produce_openai, request_body
from harness.samples.openai_stub import OpenAIStub
from harness.samples.producers import make_requests


@pytest.fixture(scope="module")
def pair():
    return tiny_pair()


def _spec(url, controls=Controls(1.0, 0, 1.0, 8), **kw):
    return EndpointSpec(url=url, model="tiny", controls=controls, eos_token_id=257, concurrency=2, backoff=0.01, **kw)


def test_body_sends_every_control_explicitly():
    from harness.samples.producers import Request
    b = request_body(_spec("http://x/v1"), Request("p0-s0", "p0", (256, 1)), 7)
    assert b["prompt"] == [256, 1] and b["seed"] == 7 and b["logprobs"] == 1
    assert (b["temperature"], b["top_k"], b["top_p"], b["min_p"], b["max_tokens"]) == (1.0, 0, 1.0, 0.0, 8)


def test_retries_resume_and_never_redo(pair, tmp_path):
    target, draft = pair
    reqs = make_requests(5, 2, seed=3)
    out = tmp_path / "srv.jsonl"
    with OpenAIStub(target, draft, fail_first=2) as srv:
        with SampleWriter(out) as w:
            assert produce_openai(reqs[:6], _spec(srv.url), w, progress=False) == 6
        assert srv.requests == 8 and srv.served == 6  # two 503s retried
        with SampleWriter(out) as w:
            assert produce_openai(reqs, _spec(srv.url), w, progress=False) == 4
        assert srv.served == 10  # the six completed requests were not sent again
    recs = read_samples(out)
    assert sorted(r.request_id for r in recs) == sorted(r.request_id for r in reqs)
    assert all(r.logprobs is not None and len(r.logprobs) == len(r.output_ids) for r in recs)
    assert all(r.engine["token_source"] == "token_id" for r in recs)


def test_client_error_is_exit_3_and_keeps_nothing_half_written(pair, tmp_path, capsys):
    target, draft = pair
    out = tmp_path / "bad.jsonl"
    with OpenAIStub(target, draft) as srv:
        code = main(["sample", "--engine", "openai", "--url", srv.url, "--model", "tiny", "--min-p", "0.1",
                     "--n-prompts", "2", "--n-per-prompt", "1", "--max-new-tokens", "4", "--out", str(out),
                     "--no-progress"])
    assert code == 3
    assert "HTTP 400" in capsys.readouterr().err
    assert not out.exists() or out.read_text() == ""


def test_server_samples_verify_scored(pair, tmp_path):
    """The stub serves our sampler: scored mode must not call it lossy, and its logprobs agree with the scorer."""
    target, draft = pair
    out = tmp_path / "srv.jsonl"
    with OpenAIStub(target, draft) as srv:
        assert main(["sample", "--engine", "openai", "--url", srv.url, "--model", "tiny", "--n-prompts", "8",
                     "--n-per-prompt", "2", "--max-new-tokens", "8", "--out", str(out), "--no-progress",
                     "--eos-token-id", "257", "--concurrency", "3"]) == 0
    code = main(["verify-samples", "--samples", str(out), "--target", "specimpl/assets/tiny_pair/target",
                 "--out", str(tmp_path / "rep"), "--no-progress"])
    meta = json.loads((tmp_path / "rep" / "meta.json").read_text())
    assert code == 4 and meta["verdict"] == "inconclusive"  # 16 completions: too few to certify 0.05
    agree = meta["info"]["engine_logprobs"]
    assert agree["tokens"] == sum(len(r.output_ids) for r in read_samples(out)) and agree["max_abs_diff"] < 1e-3


def test_shared_stream_server_is_caught(pair, tmp_path):
    """Unseeded requests restarting one random stream: completions of a prompt coincide -> lossy."""
    target, draft = pair
    out = tmp_path / "srv.jsonl"
    with OpenAIStub(target, draft, shared_stream=True) as srv:
        with SampleWriter(out) as w:
            produce_openai(make_requests(8, 2, seed=5), _spec(srv.url, controls=Controls(1.0, 0, 1.0, 16)), w,
                           progress=False)
    code = main(["verify-samples", "--samples", str(out), "--target", "specimpl/assets/tiny_pair/target",
                 "--out", str(tmp_path / "rep"), "--no-progress"])
    meta = json.loads((tmp_path / "rep" / "meta.json").read_text())
    assert code == 1 and meta["verdict"] == "lossy" and "independence/duplicates" in meta["headline"]


def _sample_argv(url, out, *extra):
    return ["sample", "--engine", "openai", "--url", url, "--model", "tiny", "--n-prompts", "3", "--n-per-prompt", "2",
            "--max-new-tokens", "6", "--eos-token-id", "257", "--request-seeds", "--concurrency", "2", "--backoff",
            "0.01", "--out", str(out), "--no-progress", *extra]


def _records(path):
    return sorted((r.to_json() for r in read_samples(path)), key=lambda d: d["request_id"])


def test_a_connection_dropped_mid_response_is_retried_and_changes_nothing(pair, tmp_path, capsys):
    """Issue 26 finding 7: a response cut off halfway (IncompleteRead) failed the run at once (exit 3)."""
    target, draft = pair
    with OpenAIStub(target, draft) as srv:
        assert main(_sample_argv(srv.url, tmp_path / "calm.jsonl")) == 0
        before = srv.requests
        srv.drop_left = 1
        capsys.readouterr()
        assert main(_sample_argv(srv.url, tmp_path / "drop.jsonl")) == 0
        assert srv.requests == before + 7 and srv.drop_left == 0  # six requests, one of them sent twice
    err = capsys.readouterr().err
    assert "IncompleteRead" in err and "retry 1 of 5" in err
    assert _records(tmp_path / "drop.jsonl") == _records(tmp_path / "calm.jsonl")


def test_retries_exhausted_name_the_request_and_the_same_command_resumes(pair, tmp_path, capsys):
    target, draft = pair
    out = tmp_path / "srv.jsonl"
    with OpenAIStub(target, draft) as srv:
        assert main(_sample_argv(srv.url, tmp_path / "calm.jsonl")) == 0
        srv.drop_left = 2
        capsys.readouterr()
        argv = _sample_argv(srv.url, out, "--retries", "1", "--concurrency", "1")
        assert main(argv) == 3
        last = capsys.readouterr().err.strip().splitlines()[-1]
        assert "request p0-s0: failed after 2 attempts (1 retries)" in last and "IncompleteRead" in last
        assert "the same command resumes" in last and str(out) in last
        assert main(argv) == 0  # the server recovered: the same command completes the file
    assert _records(out) == _records(tmp_path / "calm.jsonl")


@pytest.mark.parametrize("extra, says", [
    (("--timeout", "0"), "`--timeout` must be a number of seconds > 0; got 0.0"),
    (("--timeout", "-1"), "`--timeout` must be a number of seconds > 0; got -1.0"),
    (("--timeout", "nan"), "`--timeout` must be a number of seconds > 0; got nan"),
    (("--backoff", "-1"), "`--backoff` must be a number of seconds >= 0; got -1.0"),
    (("--url", "127.0.0.1:9/v1"), "`--url` must be an http:// or https:// URL with a host"),
    (("--url", "ftp://127.0.0.1/v1"), "got 'ftp://127.0.0.1/v1'"),
    (("--url", "http:///v1"), "got 'http:///v1'"),
])
def test_bad_endpoint_options_are_refused_up_front(tmp_path, capsys, extra, says):
    """Issue 26 finding 7: these exited 3, the URL without a scheme after 23 s of retries."""
    out = tmp_path / "o.jsonl"
    argv = ["sample", "--engine", "openai", "--url", "http://127.0.0.1:9/v1", "--model", "m", "--n-prompts", "1",
            "--n-per-prompt", "1", "--max-new-tokens", "2", "--retries", "0", "--out", str(out), "--no-progress", *extra]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1
    assert not out.exists()
