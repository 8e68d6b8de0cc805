"""The Python API (docs/api.md): ``from harness import assert_lossless, verify_sampler, verify_samples``.

The example a user copies (examples/test_my_sampler.py) runs as a user runs it, in a subprocess: the reference
sampler certifies at the example's epsilon, and a sampler that accepts 3 % too often fails as lossy, the
AssertionError naming the scenario.  A run too small to certify is inconclusive, and says so with its own
exception; a budget the planned run cannot fit is refused before the run.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness import Inconclusive, Lossy, assert_lossless, verify_sampler, verify_samples
from harness.core.models import resolve_model
from harness.laws.transformer import load_model, transition_matrix
from harness.samples.format import FORMAT
from harness.verify.outcome import command_verdict
from specimpl import speculative_generate
from specimpl.sampling import SamplingConfig

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "test_my_sampler.py"


def _run_example(select: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "pytest", str(EXAMPLE), "-k", select, "-q", "-s",
                           "-p", "no:cacheprovider"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow  # ~35s: a child interpreter per run; make test-slow (CI) runs it
def test_example_reference_sampler_is_certified():
    proc = _run_example("my_sampler_is_lossless")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "certified: TV(sampler, target) <= epsilon (position 0.01" in out, out


@pytest.mark.slow
def test_example_over_accepting_sampler_is_lossy():
    proc = _run_example("over_accepting")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "over_accepting_generate is lossy: TV" in out and "of scenario 'eos_order3'" in out, out


@pytest.fixture(scope="module")
def small_run():
    """The reference sampler at 2,000 draws on base, epsilon 0.02: too few to certify (the planner asks ~54 k)."""
    return verify_sampler(speculative_generate, scenarios=["base"], epsilon=0.02, draws=2000, seed=3)


def test_too_few_draws_is_inconclusive(small_run):
    r = small_run
    assert r.verdict == "inconclusive" and not r.passed and not r.planned
    assert r.verdict == command_verdict(r.runs)  # the command's verdict, from the same rows
    assert r.epsilon == {"position": 0.02, "pair": 0.04, "joint": 0.08} and r.confidence == pytest.approx(0.999)
    assert r.certify_draws is not None and r.certify_draws > 10 * r.draws
    assert set(r.runs.role) == {"sampler"} and len(r.runs) == 1  # no bug controls for a user's sampler
    assert set(r.tests.run) == {"speculative_generate"} and r.tv_hat is not None and r.tv_hat.scenario == "base"
    assert "inconclusive" in str(r) and f"{r.certify_draws:,}" in str(r)


def test_inconclusive_raises_its_own_exception(small_run):
    with pytest.raises(Inconclusive, match="would certify") as caught:
        assert_lossless(small_run)
    assert not isinstance(caught.value, Lossy) and isinstance(caught.value, AssertionError)
    assert caught.value.result is small_run
    with pytest.raises(pytest.skip.Exception):
        assert_lossless(small_run, on_inconclusive="skip")
    with pytest.raises(pytest.xfail.Exception):
        assert_lossless(small_run, on_inconclusive="xfail")


def test_a_budget_the_plan_cannot_fit_is_refused():
    """Default epsilon (5e-3) on base: the planner asks ~865 k draws, far more than 1 s."""
    with pytest.raises(ValueError, match=r"`budget_s` = 1 s cannot fit .* draws per scenario, estimated \d+ s"):
        verify_sampler(speculative_generate, scenarios=["base"], budget_s=1)


@pytest.mark.parametrize("kwargs, name", [
    ({"scenarios": ["nope"]}, "scenarios"), ({"scenarios": "base"}, "scenarios"), ({"epsilon": 2.0}, "epsilon"),
    ({"epsilon": {"positon": 0.1}}, "epsilon"), ({"draws": 1}, "draws"), ({"budget_s": 0}, "budget_s"),
    ({"seed": -1}, "seed"), ({"workers": 0}, "workers"), ({"inconclusive_rate": 1.5}, "inconclusive_rate"),
])
def test_bad_arguments_name_themselves(kwargs, name):
    with pytest.raises(ValueError, match=f"`{name}` must be"):
        verify_sampler(speculative_generate, **kwargs)


def test_a_non_sampler_is_refused():
    with pytest.raises(TypeError, match="`fn` must"):
        verify_sampler(lambda x: x)
    with pytest.raises(ValueError, match="`on_inconclusive` must be"):
        assert_lossless(speculative_generate, on_inconclusive="ignore")


def test_import_harness_stays_cheap():
    """``import harness`` loads neither torch nor pandas (the names resolve on first use: this module's imports)."""
    code = ("import sys, harness; assert 'torch' not in sys.modules and 'pandas' not in sys.modules; "
            "assert {'assert_lossless', 'verify_sampler', 'verify_samples'} <= set(dir(harness))")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT,
                   env={**os.environ, "PYTHONPATH": str(ROOT)})


def _sample_file(path: Path, probs, rng, n: int, T: int = 2) -> Path:
    controls = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "seed": None, "max_new_tokens": T,
                "greedy": False, "stop": []}
    rows = [{"format": FORMAT, "request_id": f"r{i}", "prompt_id": f"p{i}", "prompt_ids": [9, i],
             "output_ids": [int(x) for x in rng.choice(len(probs), size=T, p=probs)], "finish_reason": "length",
             "controls": controls, "logprobs": None, "engine": {"name": "synthetic"}} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_verify_samples_two_sample_mode(tmp_path):
    P = np.array([0.5, 0.3, 0.2])
    a = _sample_file(tmp_path / "a.jsonl", P, np.random.default_rng(1), 400)
    b = _sample_file(tmp_path / "b.jsonl", P, np.random.default_rng(2), 400)
    same = verify_samples(a, baseline=b, epsilon=0.05)
    assert same.verdict == "inconclusive" and same.mode == "two-sample" and same.certify_completions > 400
    c = _sample_file(tmp_path / "c.jsonl", np.array([0.2, 0.3, 0.5]), np.random.default_rng(3), 400)
    shifted = verify_samples(c, baseline=b, epsilon=0.05, out=tmp_path / "rep")
    assert shifted.verdict == "lossy" and not shifted.passed and (tmp_path / "rep" / "tests.csv").is_file()
    with pytest.raises(ValueError, match="exactly one of `target` and `baseline`"):
        verify_samples(a)


def _markov_file(path: Path, n: int, seed: int, T: int = 4) -> Path:
    """``n`` completions of ``T`` tokens after each of two prompts, drawn from the shipped Markov target's law."""
    P = transition_matrix(load_model(Path(resolve_model("exact-markov"))), SamplingConfig())  # (V, V)
    rng = np.random.default_rng(seed)
    controls = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "max_new_tokens": T, "seed": None}
    rows = []
    for i, prompt in enumerate([[13, 0, 4, 2, 7], [13, 5, 5, 1]]):
        x = np.full(n, prompt[-1])
        toks = []
        for _ in range(T):
            x = (rng.random(n)[:, None] > np.cumsum(P[x], axis=1)).sum(1).clip(max=P.shape[0] - 1)  # (n,)
            toks.append(x)
        rows += [{"format": FORMAT, "request_id": f"p{i}-s{j}", "prompt_id": f"p{i}", "prompt_ids": prompt,
                  "output_ids": [int(t) for t in out], "finish_reason": "length", "controls": controls,
                  "logprobs": None, "engine": {"name": "numpy"}} for j, out in enumerate(np.stack(toks, 1))]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_verify_samples_takes_shipped_model_names(tmp_path, monkeypatch):
    """``target`` takes the short names of ``python -m harness models`` as ``--target`` does: the same verdict and
    tests as with the folder; an unknown name is a ValueError naming ``target``; out=None writes nothing."""
    monkeypatch.chdir(tmp_path)
    path = _markov_file(tmp_path / "m.jsonl", 300, seed=5)
    by_name = verify_samples(path, target="exact-markov", exact=True)
    by_path = verify_samples(path, target=resolve_model("exact-markov"), exact=True)
    assert by_name.mode == "exact" and by_name.verdict == by_path.verdict != "lossy"
    pd.testing.assert_frame_equal(by_name.tests, by_path.tests)
    scored = verify_samples(path, target="exact-markov")
    assert scored.mode == "scored" and scored.verdict != "lossy" and scored.completions == 600
    assert not (tmp_path / "runs").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["m.jsonl"]
    with pytest.raises(ValueError, match="`target` must be a model folder or a shipped model name .*'no-such-model'"):
        verify_samples(path, target="no-such-model")
