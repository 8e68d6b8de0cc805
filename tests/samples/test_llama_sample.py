"""`sample --engine llama-cpp` (harness/samples/engines/llama_sample.py) and the fixed-draft rule check
(harness/samples/rules.fixed_draft_fit).  The step layout and the rule check are tested always; the engine run
needs the ``llama`` extra and is ``slow`` (``make engine-check``)."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.cli import main
from harness.samples.engines.llama_sample import spec_steps
from harness.samples.format import parse_record
from harness.samples.rules import fixed_draft_fit, judged_states

from experiment_script import load_experiment

REPO = Path(__file__).resolve().parents[2]
MARKOV = str(REPO / "specimpl/assets/exact_pair/markov_target")
HAVE = importlib.util.find_spec("llama_cpp") is not None and importlib.util.find_spec("gguf") is not None


def test_spec_steps_rebuild_the_engine_steps_from_the_proposals():
    # prompt of 3; output 0..5: token 0 from the prefill, a proposal at output index 1 of [1, 2, 9] (2 stand,
    # the sample 3 replaces 9), none at 4, a proposal at 5 of [5] (stands, the completion ends)
    out = [0, 1, 2, 3, 4, 5]
    steps = spec_steps([(3 + 1, [1, 2, 9]), (3 + 5, [5])], 3, out)
    assert steps == {"drafted": [3, 0, 1], "accepted": [2, 0, 1], "draft_tokens": [[1, 2, 9], [], [5]]}
    rec = parse_record({"format": "specverify.samples/1", "request_id": "r", "prompt_id": "p", "prompt_ids": [7, 7, 7],
                        "output_ids": out, "finish_reason": "length", "x_spec": steps, "engine": {"name": "t"}, "logprobs": None,
                        "controls": {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "max_new_tokens": 6}})
    st, pos, acc, tok = judged_states(rec, steps)
    assert st.tolist() == [0, 1, 2, 4] and pos.tolist() == [0, 1, 2, 0] and tok.tolist() == [1, 2, 9, 5]
    assert acc.tolist() == [True, True, False, True]


def test_spec_steps_drop_drafted_tokens_past_the_end_of_the_completion():
    """Generation stops at max_new_tokens: a proposal reaching past the end was judged only inside it (a draft
    beyond the last token, counted, would be a rejection that never happened)."""
    out = [0, 1, 2, 3]
    steps = spec_steps([(2 + 1, [1, 2, 7, 8])], 2, out)  # drafts at output 1..4; output ends at index 3
    assert steps == {"drafted": [3], "accepted": [2], "draft_tokens": [[1, 2, 7]]}
    steps = spec_steps([(2 + 1, [1, 2, 3, 8])], 2, out)  # every draft inside the completion stood
    assert steps == {"drafted": [3], "accepted": [3], "draft_tokens": [[1, 2, 3]]}


def _records(P, n, accept, rng):
    """Synthetic one-step records: state c, a fixed draft d, accepted with probability accept(c, d)."""
    recs = []
    for i in range(n):
        c, d = int(rng.integers(3)), int(rng.integers(3))
        a = rng.random() < accept(c, d)
        out = [c, d if a else (d + 1) % 3]
        recs.append(parse_record({"format": "specverify.samples/1", "request_id": f"r{i}", "prompt_id": "p",
                                  "prompt_ids": [0], "output_ids": out, "finish_reason": "length", "engine": {"name": "t"}, "logprobs": None,
                                  "x_spec": {"drafted": [1], "accepted": [int(a)], "draft_tokens": [[d]]},
                                  "controls": {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "max_new_tokens": 2}}))
    return recs


def test_fixed_draft_fit_accepts_p_of_d_and_names_an_accept_always_rule():
    """|z| < 5 under the lossless rule (two-sided false alarm ~6e-7); accepting 0.2 more often gives z ~ 28
    at 4000 judged drafts (power ~1)."""
    P = np.array([[0.5, 0.3, 0.2], [0.1, 0.6, 0.3], [0.3, 0.3, 0.4]])
    rng = np.random.default_rng(0)
    *_, z = fixed_draft_fit(_records(P, 4000, lambda c, d: P[c, d], rng), P)
    assert abs(z) < 5
    *_, z = fixed_draft_fit(_records(P, 4000, lambda c, d: min(1.0, P[c, d] + 0.2), rng), P)
    assert z > 5


@pytest.mark.slow
@pytest.mark.skipif(not HAVE, reason="llama-cpp-python / gguf not installed (pip install -e '.[llama]')")
def test_llama_cpp_prompt_lookup_against_the_exact_markov_law(tmp_path):
    """3,000 completions with prompt lookup: not lossy against the exact law (family-wise false alarm 1e-4), the
    engine's acceptances consistent with p(d | c) (|z| < 5), x_spec on every record."""
    out = tmp_path / "s.jsonl"
    cmd = [sys.executable, "-m", "harness", "sample", "--engine", "llama-cpp", "--target", MARKOV, "--prompt-vocab",
           "13", "--prompt-lengths", "4", "4", "--n-prompts", "1", "--n-per-prompt", "3000", "--max-new-tokens", "8",
           "--spec", "ngram", "--k", "4", "--llama-workers", "2", "--no-progress", "--out", str(out)]
    subprocess.run(cmd, cwd=REPO, check=True, capture_output=True)
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(recs) == 3000 and all(r["x_spec"] and len(r["output_ids"]) == 8 for r in recs)
    v = subprocess.run([sys.executable, "-m", "harness", "verify-samples", "--samples", str(out), "--target", MARKOV,
                        "--exact", "--no-progress", "--out", str(tmp_path / "rep")], cwd=REPO, capture_output=True,
                       text=True)
    assert v.returncode in (0, 4) and "lossy" not in v.stdout.lower().split("inconclusive")[0], v.stdout + v.stderr
    r = subprocess.run([sys.executable, "-m", "harness.samples.rules", str(out), MARKOV, MARKOV], cwd=REPO,
                       capture_output=True, text=True, check=True)
    assert r.stdout.startswith("consistent with: lossless verification of fixed drafts"), r.stdout


def _llama_file(path, outs, seeds):
    """A sample file as `sample --engine llama-cpp` writes it (plain mode, one prompt, ids p0-s<j>, the run's
    per-request seeds), holding the completions ``outs`` (n, 8)."""
    engine = {"name": "llama.cpp", "package": "llama-cpp-python", "version": "0.3.36", "workers": 2}
    lines = [json.dumps({"format": "specverify.samples/1", "request_id": f"p0-s{j}", "prompt_id": "p0",
                         "prompt_ids": LLAMA_PROMPT, "output_ids": [int(x) for x in out], "finish_reason": "length",
                         "controls": {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "max_new_tokens": 8, "min_p": 0.0,
                                      "seed": int(s), "greedy": False, "stop": []},
                         "logprobs": None, "engine": engine}) for j, (out, s) in enumerate(zip(outs, seeds))]
    path.write_text("\n".join(lines) + "\n")
    return path


LLAMA_PROMPT = [8, 7, 8, 1]  # the prompt --prompt-vocab 13 --prompt-lengths 4 4 draws at seed 0


def _markov_draws(n: int, seed: int) -> np.ndarray:
    """(n, 8) independent completions of LLAMA_PROMPT from the exact Markov law (inverse CDF, numpy)."""
    from harness.laws.transformer import load_model, transition_matrix
    from specimpl.sampling import SamplingConfig
    P = transition_matrix(load_model(MARKOV), SamplingConfig())  # (V, V)
    u = np.random.default_rng(seed).random((n, 8))  # (n, 8)
    x, out = np.full(n, LLAMA_PROMPT[-1]), []
    for t in range(8):
        x = (u[:, t:t + 1] > np.cumsum(P[x], axis=1)).sum(1).clip(max=P.shape[0] - 1)  # (n,)
        out.append(x)
    return np.stack(out, 1)  # (n, 8)


def _in_process(cmd: list) -> tuple:
    """experiments' ``_run`` for ``python -m harness ...``, in this process (no second torch import)."""
    assert cmd[1:3] == ["-m", "harness"], cmd
    return main(cmd[3:]), 0.0, ""


def test_the_llama_cpp_table_names_copies_from_two_engine_processes_sharing_a_stream(tmp_path, monkeypatch):
    """experiments/llama_cpp_exact.py's judging of a file (no llama.cpp needed): its 2 engine processes take chunks of
    requests in turn; if the second process drew the first's stream (the per-request seed ignored, both starting
    from the load-time seed), every chunk it wrote repeats the chunk before it under new ids and seeds, with the
    marginals intact.  The independent file: no finding; the copied one: lossy, the duplicates test's finding in the
    row and in the dependence table.  Half the completions are copies, ~60 times the planner's detectable share at
    this size (~0.8 %), so a miss is far rarer than the planner's 5 %; a false alarm on the clean file has p <= 1e-3."""
    from harness.samples.engines.llama_cpp import request_seed
    X = load_experiment("llama_cpp_exact")
    monkeypatch.chdir(REPO)  # the experiment names the target relative to the repository
    n, chunk = 1200, 100
    seeds = [request_seed(0, j) for j in range(n)]
    clean = _markov_draws(n, seed=41)
    shared = clean.copy()
    for c in range(1, n // chunk, 2):  # process B's chunks 1, 3, 5, ... repeat process A's 0, 2, 4, ...
        shared[c * chunk:(c + 1) * chunk] = clean[(c - 1) * chunk:c * chunk]
    rows = []
    for name, outs in (("clean", clean), ("shared", shared)):
        d = tmp_path / name
        d.mkdir()
        f = _llama_file(d / "samples.jsonl", outs, seeds)
        rows.append({"engine": "llama.cpp", "mode": name, "completions": n, **X.judge("plain", f, d, 0.5, run=_in_process)})
    ok, bad = rows
    assert ok["verdict"] == "certified" and not ok["dependence_found"] and ok["finding"] == "", ok["dependence"]
    assert ok["pairs_by"] == f"file neighbours {n // 2:,}" and ok["dependence_s"] >= 0
    assert bad["verdict"] == "lossy" and bad["dependence_found"] and bad["duplicates_p"] <= 5e-4
    assert bad["repeats"] >= n // 2 > 10 * bad["repeats_expected"]
    assert "repeat an earlier completion of the same prompt" in bad["finding"]
    md = X.dependence_md(pd.DataFrame(rows))
    assert "| shared | **found** |" in md and "| clean | none found at 0.001 |" in md and bad["finding"][:40] in md
