"""Issue 45, items 3, 4 and 6: sizes and names checked before any work, loopback servers, and the smaller
rows that ended in a traceback or a silent acceptance.

The size probes run as child processes under a 4 GB address-space limit (RLIMIT_AS, as ``ulimit -v``) and
a time limit: each must end in exit 2 with one line naming the option (or ``file: key``) -- before the fix
they allocated 8-75 GB (MemoryError, exit 3), or grew until the OOM killer, or generated for minutes.
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.cli import main
from harness.samples.format import FORMAT

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "specimpl" / "assets" / "tiny_pair"
SCENARIOS = REPO / "harness" / "configs" / "verify"
MEMORY_LIMIT = 4 * 2 ** 30  # bytes of address space each probe may map
PROBE_TIMEOUT = 90  # seconds: far above the few seconds a refusal takes (torch's import included), far below the
                    # minutes a run takes


def _limit_memory():  # in the child, before exec
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def _harness(tmp_path, *args) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    return subprocess.run([sys.executable, "-m", "harness", *map(str, args)], cwd=tmp_path, env=env, text=True,
                          capture_output=True, timeout=PROBE_TIMEOUT, preexec_fn=_limit_memory)


def _scenario_dir(tmp_path, body: str) -> Path:
    d = tmp_path / "sd"
    d.mkdir()
    (d / "default.toml").write_text((SCENARIOS / "default.toml").read_text())
    (d / "bad.toml").write_text(body)
    return d


QUIET = ("--no-real-model", "--no-figures", "--no-progress", "--workers", "1", "--no-controls")
SCENARIO_PROBES = {  # scenario file -> the key the refusal names
    "joint_tokens = 8\n": "`joint_tokens`",
    "max_new_tokens = 100000\n": "`max_new_tokens`",
    "[target]\norder = 10\n": "`target.order`",
    "[target]\nvocab_size = 100000\n": "`target.vocab_size`",
    "prompt = [" + "1," * 1_000_000 + "1]\n": "`prompt` length",  # 12 GB of prompts per call (was exit 3, probe45)
}


def _assert_refused(p: subprocess.CompletedProcess, needle: str) -> None:
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2, (p.returncode, p.stderr[-800:])
    assert "Traceback" not in p.stderr and needle in lines[-1], p.stderr[-800:]
    assert "error:" in lines[-1]


@pytest.mark.slow  # ~5 eachs: a child interpreter per run; make test-slow (CI) runs it
@pytest.mark.parametrize("body", list(SCENARIO_PROBES), ids=lambda b: b[:24])
def test_scenario_sizes_refused_before_any_table(tmp_path, body):
    d = _scenario_dir(tmp_path, body)
    p = _harness(tmp_path, "verify", "--scenario-dir", d, "--scenario", "bad", "--draws", "20000", "--out", "o", *QUIET)
    _assert_refused(p, f"bad.toml: {SCENARIO_PROBES[body]}")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("args, needle", [
    (["verify", "--draws", "100000000000000", "--scenario", "base", "--out", "o", *QUIET], "`--draws`"),
    (["sample", "--engine", "ours", "--n-per-prompt", "1000000000", "--out", "s.jsonl", "--no-progress"],
     "`--n-per-prompt`"),
    (["sample", "--engine", "ours", "--n-prompts", "1000000000000", "--out", "s.jsonl", "--no-progress"],
     "`--n-prompts` must be at most"),  # was named `--n-per-prompt` must be at most 0 (probe45)
    (["sample", "--engine", "ours", "--max-new-tokens", "100000", "--out", "s.jsonl", "--no-progress"],
     "`--max-new-tokens` must be at most"),
    (["tune", "--target", TINY / "target", "--draft", TINY / "draft", "--batch", "1000000000", "--context", "64",
      "--out", "t"], "`--batch` must be at most"),
    (["verify", "--threads", "1000000000", "--scenario", "base", "--out", "o", *QUIET], "`--threads` must be an integer in"),
    # was exit 1 (lossy's status) on libgomp's "Out of memory allocating 216000001344 bytes" (probe45)
], ids=["verify-draws", "sample-n-per-prompt", "sample-n-prompts", "sample-max-new-tokens", "tune-batch", "verify-threads"])
@pytest.mark.slow  # ~5-9 eachs: a child interpreter per run; make test-slow (CI) runs it
def test_option_sizes_refused_under_a_memory_limit(tmp_path, args, needle):
    p = _harness(tmp_path, *args)
    _assert_refused(p, needle)
    assert sorted(x.name for x in tmp_path.iterdir()) == []  # nothing written


@pytest.mark.parametrize("body, needle", [
    ("k = 1000000000\n", "bad.toml: `k` = 1000000000 needs about"),  # named `target.order` (the kernel's k + 1 factor)
    ("[target]\norder = 7\n", "bad.toml: `target.order` = 7 needs about"),  # the contexts alone, at any k
    ("weight = 1e12\n", "bad.toml: `weight` must be a number in (0, 5e+09]"),  # was "`--draws` must be at most 0"
])
def test_scenario_refusal_names_the_key_to_blame(tmp_path, capsys, body, needle):
    d = _scenario_dir(tmp_path, body)
    assert main(["verify", "--scenario-dir", str(d), "--scenario", "bad", "--draws", "2000", "--out",
                 str(tmp_path / "o"), *QUIET]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "o").exists()


def test_draws_in_default_toml_capped(tmp_path):
    d = _scenario_dir(tmp_path, "")
    text = (d / "default.toml").read_text().replace("draws = 1_000_000 ", "draws = 100_000_000_000 ", 1)
    (d / "default.toml").write_text(text)
    (d / "base.toml").write_text((SCENARIOS / "base.toml").read_text())
    assert main(["verify", "--scenario-dir", str(d), "--scenario", "base", "--out", str(tmp_path / "o"), *QUIET]) == 2


# ------------------------------------------------------------------------------------------ sweep files
@pytest.mark.parametrize("body, needle", [
    ('name = ".."\n', "`name` must be a folder name"),
    ('name = "."\n', "`name` must be a folder name"),
    ("[grid]\nk_max = 0\n", "`grid.k_max`"),
    ("[grid]\nalpha = [0.0, 1.5, 10]\n", "`grid.alpha`"),
    ("[synthetic]\nalpha = [-0.1]\n", "`synthetic.alpha`"),
    ("[synthetic]\nmax_new_tokens = 0\n", "`synthetic.max_new_tokens`"),
    ("[real]\nmax_new_tokens = 100000\n", "`real.max_new_tokens`"),
    ("threads = 1000000000\n", "`threads` must be an integer in [1, "),  # was unbounded (libgomp's OOM at run time)
])
def test_sweep_file_refused_in_validation(tmp_path, capsys, body, needle):
    f = tmp_path / "sw.toml"
    f.write_text(body)
    assert main(["sweep", "--config", str(f), "--list"]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err
    assert not (tmp_path / "results").exists()


# --------------------------------------------------------------------------------------------- sample
@pytest.mark.parametrize("args, needle", [
    (["--target", str(TINY / "target")], "`--draft` must be a draft checkpoint with --target"),
    (["--draft", str(TINY / "draft")], "`--draft` must be given with --target"),
    (["--draft", "no/such/draft"], "`--draft` must be a model folder or a shipped model name"),  # checked first
    (["--method", "autoregressive", "--target", "no/such/target"], "`--target` must be a model folder or a shipped"),
    (["--prompt-vocab", "100000"], "`--prompt-vocab` must be an integer in [2, 259]"),
])
def test_sample_model_options(tmp_path, capsys, args, needle):
    out = tmp_path / "s.jsonl"
    assert main(["sample", "--engine", "ours", "--out", str(out), "--no-progress", *args]) == 2
    assert needle in capsys.readouterr().err
    assert not out.exists()


def test_sample_autoregressive_needs_no_draft(tmp_path):
    out = tmp_path / "s.jsonl"
    assert main(["sample", "--engine", "ours", "--method", "autoregressive", "--target", str(TINY / "target"),
                 "--n-prompts", "2", "--n-per-prompt", "2", "--max-new-tokens", "3", "--out", str(out),
                 "--no-progress"]) == 0
    assert len(out.read_text().splitlines()) == 4


def test_unwritable_out_and_bad_port(tmp_path, capsys):
    assert main(["verify", "--out", "/proc/x", "--scenario", "base", "--draws", "1000", *QUIET]) == 2
    assert "`--out` must be a folder that can be written" in capsys.readouterr().err
    assert main(["sample", "--engine", "openai", "--url", "http://127.0.0.1:notaport/v1", "--model", "m",
                 "--out", str(tmp_path / "o.jsonl")]) == 2
    assert "`--url` must be a URL whose port" in capsys.readouterr().err


def test_dedupe_refuses_a_read_only_file_in_place(tmp_path, capsys):
    f = _samples(tmp_path / "ro.jsonl")
    f.chmod(0o444)
    before = f.read_text()
    assert main(["samples-dedupe", "--samples", str(f)]) == 2
    assert "read-only" in capsys.readouterr().err
    assert f.read_text() == before
    assert main(["samples-dedupe", "--samples", str(f), "--out", str(tmp_path / "copy.jsonl")]) == 0
    assert (tmp_path / "copy.jsonl").read_text() == before


# ------------------------------------------------------------------------------------- verify-samples
def _samples(path: Path, n_prompts: int = 6, per_prompt: int = 2, T: int = 4, edit=None) -> Path:
    rng = np.random.default_rng(0)
    recs = []
    for i in range(n_prompts):
        for j in range(per_prompt):
            recs.append({"format": FORMAT, "request_id": f"p{i}-s{j}", "prompt_id": f"p{i}", "prompt_ids": [256, 65 + i],
                         "output_ids": [int(x) for x in rng.integers(97, 123, size=T)], "finish_reason": "length",
                         "controls": {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "seed": None,
                                      "max_new_tokens": T, "greedy": False, "stop": []},
                         "logprobs": None, "engine": {"name": "synthetic"}})
    if edit is not None:
        edit(recs)
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def _two_prompts_one_id(recs):
    recs[1]["prompt_ids"] = [256, 99]


def _two_eos_policies(recs):
    recs[0]["output_ids"][-1], recs[0]["finish_reason"] = 257, "eos"
    recs[2]["output_ids"][1] = 257  # runs on past EOS


@pytest.mark.parametrize("edit, extra, needle", [
    (None, ["--eos-token-id", "999"], "`--eos-token-id` must be a token id in [0, 259)"),
    (_two_prompts_one_id, [], "prompt_id 'p0' holds two different prompts"),
    (_two_eos_policies, [], "completions follow two EOS policies"),
], ids=["eos-out-of-vocab", "prompt-id-two-prompts", "two-eos-policies"])
def test_verify_samples_refusals(tmp_path, capsys, edit, extra, needle):
    f = _samples(tmp_path / "s.jsonl", edit=edit)
    code = main(["verify-samples", "--samples", str(f), "--target", str(TINY / "target"), "--out",
                 str(tmp_path / "r"), "--no-progress", *extra])
    assert code == 2
    assert needle in capsys.readouterr().err


def test_two_eos_policies_refused_in_two_sample_mode(tmp_path, capsys):
    f = _samples(tmp_path / "s.jsonl", edit=_two_eos_policies)
    b = _samples(tmp_path / "b.jsonl")
    assert main(["verify-samples", "--samples", str(f), "--baseline", str(b), "--out", str(tmp_path / "r"),
                 "--no-progress"]) == 2
    assert "two EOS policies" in capsys.readouterr().err


def test_openai_logprobs_of_the_wrong_length_refuse_the_record():
    from harness.samples.format import Controls
    from harness.samples.openai import EndpointSpec, parse_choice
    from harness.samples.producers import Request
    spec = EndpointSpec(url="http://127.0.0.1:1/v1", model="m", controls=Controls(1.0, 0, 1.0, 3), eos_token_id=257)
    req = Request("p0-s0", "p0", (256, 1))
    choice = {"finish_reason": "length", "logprobs": {"tokens": ["token_id:5", "token_id:6", "token_id:7"],
                                                     "token_logprobs": [-1.0, -2.0, -3.0]}}
    assert parse_choice(spec, req, {"choices": [choice]}, None).logprobs == (-1.0, -2.0, -3.0)
    choice["logprobs"]["token_logprobs"] = [-1.0, -2.0]
    with pytest.raises(ValueError, match="'token_logprobs' holds 2 values for the 3 output tokens"):
        parse_choice(spec, req, {"choices": [choice]}, None)


# ------------------------------------------------------------------------------------------- loopback
def test_openai_stub_listens_on_loopback_only():
    """The project's own completions server binds 127.0.0.1 (every listening socket of this process)."""
    from listening import listening, non_loopback
    from harness.samples.openai_stub import OpenAIStub
    from harness.verify.realmodel import tiny_pair
    target, draft = tiny_pair()
    with OpenAIStub(target, draft):
        rows = listening(os.getpid())
    assert rows and non_loopback(rows) == [], rows


def test_engine_servers_are_started_on_loopback():
    """vllm serve and llama_cpp.server are started with --host 127.0.0.1 (read from the commands built)."""
    for mod in ("harness/samples/engines/vllm_engine.py", "harness/samples/engines/llama_cpp.py"):
        src = (REPO / mod).read_text()
        assert '"--host", "127.0.0.1"' in src, mod
        assert "0.0.0.0" not in src, mod


def test_listing_sees_a_wildcard_listener():
    """The instrument: a socket bound to 0.0.0.0 is reported as non-loopback (a check that can fail)."""
    import socket
    from listening import listening, non_loopback
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen(1)
        port = s.getsockname()[1]
        rows = listening(os.getpid())
    assert any(r[3] == port for r in non_loopback(rows)), rows


def test_a_sample_file_larger_than_memory_is_refused_before_reading(tmp_path):
    """probe45: a 2 GB (sparse) file was read whole and ended in MemoryError (exit 3) under the 4 GB limit."""
    with open(tmp_path / "big.jsonl", "wb") as f:
        f.truncate(2 * 2 ** 30)
    p = _harness(tmp_path, "verify-samples", "--samples", "big.jsonl", "--target", TINY / "target", "--out", "o",
                 "--no-progress")
    _assert_refused(p, "`--samples` = 'big.jsonl' needs about")


# ------------------------------------------------------------------- probe 47, class 4: sizes still unchecked
@pytest.mark.parametrize("args, needle", [
    (["pit", "--n-sequences", "100000000000000", "--no-peer"], "`--n-sequences` must be an integer in [2, 10,000,000,000]"),
    (["pit", "--exact-sequences", "100000000000000"], "`--exact-sequences` must be an integer in [0, 10,000,000,000]"),
    (["pit", "--max-new-tokens", "1000000000"], "`--max-new-tokens` must be an integer in [2, 1,995]"),  # was exit 3
    (["tune", "--target", "tiny", "--draft", "tiny-draft", "--repeats", "1000000000000"], "`--repeats` must be at most 1,000"),
    (["tune", "--target", "tiny", "--draft", "tiny-draft", "--replicates", "100000000000"], "`--replicates` must be at most"),
], ids=["pit-n-sequences", "pit-exact-sequences", "pit-max-new-tokens", "tune-repeats", "tune-replicates"])
def test_counts_refused_up_front(tmp_path, capsys, args, needle):
    """Each ran until killed (or, --max-new-tokens, ended in a MemoryError blamed on a correct sampler)."""
    assert main([*args, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("body, needle", [
    ("[synthetic]\nk = [1000000000]\n", "`synthetic.k` must be a non-empty list of at most 1,000 integers in [1, 1,024]"),
    ("[synthetic]\nbatch = [" + ",".join(["1"] * 1001) + "]\n", "got 'a list of 1,001 values'"),
    ("[real]\nrepeats = 1000000000\n", "`real.repeats` must be an integer in [1, 10,000]"),
])
def test_measured_suite_sizes_refused_by_list(tmp_path, capsys, body, needle):
    f = tmp_path / "sw.toml"
    f.write_text(body)
    assert main(["sweep", "--config", str(f), "--list"]) == 2
    assert needle in capsys.readouterr().err


@pytest.mark.parametrize("args, needle", [
    (["calibrate", "--null", "--replicates", "10000000000000"], "`--replicates` must be an integer in [1000, 100,000,000]"),
    (["numerics", "--rows", "1000000000000"], "`--rows` must be an integer in [1, 1,000,000]"),
    (["alpha", "--n-sequences", "1000000000000"], "`--n-sequences` must be an integer in [1, 1,000,000]"),
    (["alpha", "--max-new-tokens", "1000000000"], "`--max-new-tokens` must be an integer in [1, 1,995]"),
    (["alpha", "--k", "1000000000"], "`--k` must be an integer in [1, 64]"),
    (["pit", "--k", "1000000000"], "`--k` must be an integer in [1, 64]"),  # named --max-new-tokens, range negative
], ids=["calibrate-null-replicates", "numerics-rows", "alpha-n-sequences", "alpha-max-new-tokens", "alpha-k", "pit-k"])
def test_probe48_counts_refused_up_front(tmp_path, capsys, args, needle):
    """probe 48: each ran until killed or ended in a MemoryError (exit 3)."""
    out = tmp_path / ("o.csv" if args[0] == "alpha" else "o")
    assert main([*args, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1, err
    assert not out.exists()


def test_a_planted_lock_link_never_truncates_its_target(tmp_path):
    """probe 48: `<out>/.lock` planted as a link to another file: the lock truncated it to the run's pid."""
    from harness.core.outlock import lock_out, lock_path, release_all
    out = tmp_path / "o"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    lock_path(out, False).symlink_to(victim)
    lock_out(out, "--out")
    release_all()
    assert victim.read_text() == "precious"
