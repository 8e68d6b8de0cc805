"""verify-samples' exact-law mode (harness/samples/exact.py) on the shipped exact pair.

Completions are drawn here straight from the enumerated law (numpy, seeded) or from a law moved by a known TV,
so the checks are fast and their error rates are those of the family: a lossless file is judged lossy with
probability <= the family's alpha (1e-4); the lossy files sit far above their tests' detectable deviation
(stated per test below), so a miss has probability < 1 - power = 1e-2 per test, and the seeds are fixed.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from harness.cli import main
from harness.laws.transformer import markov_marginal, transition_matrix, load_model
from harness.samples.exact import exact_laws, prompt_table
from harness.samples.format import FORMAT, parse_record, read_samples
from specimpl.sampling import SamplingConfig

EXACT = Path(__file__).resolve().parents[2] / "specimpl" / "assets" / "exact_pair"
MARKOV, TARGET = EXACT / "markov_target", EXACT / "target"
PROMPTS = [[13, 0, 4, 2, 7], [13, 5, 5, 1]]
T = 6


def _record(i: int, j: int, out: list[int], temperature: float = 1.0) -> dict:
    return {"format": FORMAT, "request_id": f"p{i}-s{j}", "prompt_id": f"p{i}", "prompt_ids": PROMPTS[i],
            "output_ids": [int(x) for x in out], "finish_reason": "length",
            "controls": {"temperature": temperature, "top_k": 0, "top_p": 1.0, "max_new_tokens": T, "seed": j},
            "logprobs": None, "engine": {"name": "numpy"}}


def _markov_file(path: Path, n: int, seed: int, tilt: float = 0.0) -> Path:
    """``n`` completions per prompt drawn from the Markov target's law; ``tilt`` > 0 moves each step's law
    toward token 0 by that mixture weight (a lossy engine whose per-step TV is about ``tilt``)."""
    P = transition_matrix(load_model(MARKOV), SamplingConfig())  # (V, V)
    V = P.shape[0]
    bad = (1 - tilt) * P + tilt * np.eye(V)[0][None, :]
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        for i, pr in enumerate(PROMPTS):
            x = np.full(n, pr[-1])
            toks = []
            for _ in range(T):
                u = rng.random(n)[:, None]
                x = (u > np.cumsum(bad[x], axis=1)).sum(1).clip(max=V - 1)
                toks.append(x)
            for j, out in enumerate(np.stack(toks, 1)):
                rec = _record(i, j, out)
                parse_record(rec)
                f.write(json.dumps(rec) + "\n")
    return path


def _verify(tmp_path, samples, *extra) -> int:
    return main(["verify-samples", "--samples", str(samples), "--target", str(MARKOV), "--exact", "--no-progress",
                 "--out", str(tmp_path / "rep"), *extra])


def test_markov_laws_are_exact_at_every_position():
    cfg = SamplingConfig()
    laws = exact_laws(str(MARKOV), PROMPTS, T, cfg)
    assert laws.kind == "markov" and laws.n_positions == T and set(laws.windows) == set(range(T - 2))
    P = transition_matrix(load_model(MARKOV), cfg)
    assert np.allclose(laws.marginals[:, 3], markov_marginal(P, PROMPTS, 3), atol=1e-15)
    assert np.allclose(laws.pairs.sum(-1), 1) and np.allclose(laws.marginals.sum(-1), 1)
    assert laws.floor < 1e-5  # float32 vs float64 law of the model: measured ~3e-7


def test_an_enumerated_target_is_tested_on_its_first_positions():
    laws = exact_laws(str(TARGET), PROMPTS, T, SamplingConfig())
    assert laws.kind == "enumerated" and laws.n_positions == 4  # V = 16: 16**4 cells
    assert np.allclose(laws.windows[0].sum(-1), 1)


def test_a_lossless_file_is_certified(tmp_path):
    # 20k completions per prompt: the planner asks a few thousand for epsilon 0.05 (false "lossy": <= 1e-4)
    path = _markov_file(tmp_path / "ok.jsonl", 20000, seed=1)
    assert _verify(tmp_path, path, "--epsilon", "0.05") == 0
    assert "certified: token TV" in (tmp_path / "rep" / "summary.md").read_text()
    # the completions it plans are those of the bound that certifies (battery.tv_interval's own planner)
    from harness.verify.battery import tv_interval_n_for
    b = json.loads((tmp_path / "rep" / "meta.json").read_text())["bounds"]
    laws = exact_laws(str(MARKOV), PROMPTS, T, SamplingConfig())
    assert b["completions_needed"] == max(tv_interval_n_for(laws.marginals[i, t], 0.05, b["delta_each"])
                                          for i in range(len(PROMPTS)) for t in range(T))


def test_a_tilted_engine_is_lossy(tmp_path):
    # tilt 0.05: per-position TV ~0.05, 8x the position test's detectable TV at 5k completions (~6e-3)
    path = _markov_file(tmp_path / "bad.jsonl", 5000, seed=2, tilt=0.05)
    assert _verify(tmp_path, path) == 1
    assert "lossy" in (tmp_path / "rep" / "summary.md").read_text().splitlines()[0]


def test_a_completion_cut_at_eos_is_refused(tmp_path):
    path = _markov_file(tmp_path / "cut.jsonl", 3, seed=3)
    lines = path.read_text().splitlines()
    rec = json.loads(lines[0])
    rec["output_ids"], rec["finish_reason"] = rec["output_ids"][:2] + [14], "eos"
    lines[0] = json.dumps(rec)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(Exception, match="exact mode needs every completion whole"):
        prompt_table(read_samples(path), path)
    assert _verify(tmp_path, path) == 2


def test_exact_needs_a_target(tmp_path):
    path = _markov_file(tmp_path / "x.jsonl", 2, seed=4)
    assert main(["verify-samples", "--samples", str(path), "--baseline", str(path), "--exact",
                 "--out", str(tmp_path / "r")]) == 2


def test_duplicated_completions_are_caught_wherever_they_sit(tmp_path):
    # every completion written twice under a new request id (issue 26's false certificate): each marginal keeps
    # its law, but every count and its variance double, so each chi2 statistic doubles (~2x its df): at 10k
    # completions per prompt (20k with the copies) the window tests reject at the family's level (z ~ sqrt(df / 2))
    path = _markov_file(tmp_path / "d.jsonl", 10000, seed=5)
    lines = path.read_text().splitlines()
    dup = [json.dumps({**json.loads(x), "request_id": json.loads(x)["request_id"] + "-b"}) for x in lines]
    path.write_text("\n".join(lines + dup) + "\n")
    assert _verify(tmp_path, path, "--epsilon", "0.5") == 1
    assert "lossy" in (tmp_path / "rep" / "summary.md").read_text().splitlines()[0]
