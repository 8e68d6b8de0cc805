"""The dependence stage of verify-samples (harness/samples/dependence.py) on files drawn from the exact Markov law.

Completions are drawn here straight from the enumerated law of specimpl/assets/exact_pair/markov_target (numpy,
seeded, inverse-CDF), so a file's dependence is exactly what the test puts in it: independent draws, copies under
new request ids, the n completions of one request from one seed, rows of two prompts that share a random stream.
Error rates: the stage's false alarm is measured here by simulation (200 seeds at a level of 0.1, asserted under
the binomial's 1e-4 upper quantile); the dependent files sit far above their planner's detectable share (stated
per test), so a miss has probability < 1 - 0.95 per test at the planned share and far less at these.  The two
power measurements at the larger sizes are marked slow (make test-slow).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import binom

from harness.cli import main
from harness.laws.transformer import load_model, transition_matrix
from harness.samples import dependence
from harness.samples.exact import exact_laws, prompt_table
from harness.samples.format import FORMAT, parse_record, read_samples
from specimpl.sampling import SamplingConfig

EXACT = Path(__file__).resolve().parents[2] / "specimpl" / "assets" / "exact_pair"
MARKOV = EXACT / "markov_target"
PROMPTS = [[13, 0, 4, 2, 7], [13, 5, 5, 1]]
T = 6


@pytest.fixture(scope="module")
def P() -> np.ndarray:
    return transition_matrix(load_model(MARKOV), SamplingConfig())  # (V, V)


def draw(P: np.ndarray, prompt: list, u: np.ndarray) -> np.ndarray:
    """(n, T) completions of ``prompt`` from the Markov law, one row per row of uniforms ``u`` (n, T)."""
    x = np.full(u.shape[0], prompt[-1])
    out = []
    for t in range(u.shape[1]):
        x = (u[:, t:t + 1] > np.cumsum(P[x], axis=1)).sum(1).clip(max=P.shape[0] - 1)
        out.append(x)
    return np.stack(out, 1)


def rec(i: int, rid: str, out, seed=None) -> dict:
    r = {"format": FORMAT, "request_id": rid, "prompt_id": f"p{i}", "prompt_ids": PROMPTS[i],
         "output_ids": [int(x) for x in out], "finish_reason": "length",
         "controls": {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "max_new_tokens": T, "seed": seed},
         "logprobs": None, "engine": {"name": "numpy"}}
    parse_record(r)
    return r


def independent(P, n: int, seed: int) -> list[dict]:
    """``n`` independent completions of each prompt, the prompts interleaved (p0, p1, p0, ...)."""
    rng = np.random.default_rng(seed)
    outs = [draw(P, pr, rng.random((n, T))) for pr in PROMPTS]
    return [rec(i, f"p{i}-s{j}", outs[i][j]) for j in range(n) for i in range(len(PROMPTS))]


def write(path: Path, recs: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


_LAWS: dict = {}


def stage(path: Path, level: float = dependence.LEVEL, plan: bool = False) -> dependence.DependenceResult:
    """The stage as verify-samples' exact mode runs it (the laws enumerated once per prompt order)."""
    recs = read_samples(path)
    prompts, rows, toks = prompt_table(recs, path)
    key = tuple(map(tuple, prompts))
    if key not in _LAWS:
        _LAWS[key] = exact_laws(str(MARKOV), prompts, T, SamplingConfig())
    laws = _LAWS[key]
    values, lp = dependence.exact_completion_log_probs(laws, rows, toks)
    return dependence.check(recs, level, keys=[(r.prompt_ids, v) for r, v in zip(recs, values)], log_probs=lp,
                            plan=plan)


def verify(tmp_path, path, *extra) -> tuple[int, dict]:
    out = tmp_path / f"rep-{path.stem}"
    rc = main(["verify-samples", "--samples", str(path), "--target", str(MARKOV), "--exact", "--no-progress",
               "--epsilon", "0.5", "--out", str(out), *extra])
    return rc, json.loads((out / "meta.json").read_text())


def test_the_exact_log_probabilities_are_the_laws(P):
    laws = exact_laws(str(MARKOV), PROMPTS, T, SamplingConfig())
    toks = np.array([[3, 1, 4, 1, 5, 9], [2, 7, 1, 8, 2, 8]])
    _, lp = dependence.exact_completion_log_probs(laws, np.array([0, 1]), toks)
    for i, row in enumerate(toks):
        prev, want = PROMPTS[i][-1], 0.0
        for x in row:
            want, prev = want + np.log(P[prev, x]), x
        assert lp[i] == pytest.approx(want, rel=1e-12)


def test_independent_completions_pass(tmp_path, P):
    path = write(tmp_path / "ok.jsonl", independent(P, 1500, seed=11))
    rc, meta = verify(tmp_path, path)
    dep = meta["info"]["dependence"]
    assert rc == 0 and dep["finding"] is None, dep["line"]
    d, s = dep["tests"]
    assert 0 < d["detects"] < 0.1 and 0 < s["detects"] < 0.1  # the planner's shares at 3,000 completions


def test_false_alarm_rate_by_simulation(tmp_path, P):
    # 200 independent files of 2 x 100 completions at a stage level of 0.1 (0.05 per test): the alarms are
    # Binomial(200, <= 0.1); more than binom.isf(1e-4) of them would say the level is not kept
    alarms = {"duplicates": 0, "siblings": 0}
    for seed in range(200):
        path = write(tmp_path / "f.jsonl", independent(P, 100, seed=1000 + seed))
        for t in stage(path, level=0.1).tests:
            alarms[t.name] += t.found
    print(f"false alarms in 200 independent files at level 0.1 (0.05 per test): {alarms}")
    assert sum(alarms.values()) <= binom.isf(1e-4, 200, 0.1), alarms
    assert max(alarms.values()) <= binom.isf(1e-4, 200, 0.05), alarms


def test_completions_copied_under_new_ids_are_caught(tmp_path, P):
    # 10 % of the completions copied under new request ids at the end of the file (the planner detects ~2 % at
    # this size): the copies sit far from their originals, so only the copy e-process sees them
    recs = independent(P, 1500, seed=12)
    copies = [{**r, "request_id": r["request_id"] + "-copy"} for r in recs[::10]]
    rc, meta = verify(tmp_path, write(tmp_path / "copied.jsonl", recs + copies))
    dep = meta["info"]["dependence"]
    assert rc == 1 and meta["verdict"] == "lossy"
    assert dep["tests"][0]["pvalue"] <= dependence.LEVEL / 2
    assert "repeat an earlier completion of the same prompt" in dep["finding"] and dep["finding"] in meta["headline"]


def test_a_file_copied_ten_times_is_caught(tmp_path, P):
    # the example: each completion written 10 times (each copy right after its original); marginals intact
    base = independent(P, 100, seed=13)
    recs = [{**r, "request_id": f"{r['request_id']}-c{c}"} for r in base for c in range(10)]
    d, s = stage(write(tmp_path / "x10.jsonl", recs)).tests
    assert d.found and s.found


def test_completions_of_one_request_sharing_a_seed_are_caught(tmp_path, P):
    # n = 2 completions per request (vLLM's "<rid>-n<c>" ids), both drawn from the request's seed: one stream, so
    # the two are identical; every request of the file does it
    rng = np.random.default_rng(14)
    recs = []
    for j in range(300):
        for i, pr in enumerate(PROMPTS):
            out = draw(P, pr, rng.random((1, T)))[0]
            recs += [rec(i, f"p{i}-r{j}-n{c}", out, seed=1000 * i + j) for c in range(2)]
    rc, meta = verify(tmp_path, write(tmp_path / "seeded.jsonl", recs))
    assert rc == 1
    names = {t["name"] for t in meta["info"]["dependence"]["tests"] if t["pvalue"] <= t["level"]}
    assert names == {"duplicates", "siblings"}


def test_rows_of_two_prompts_sharing_a_stream_are_caught(P, tmp_path):
    # each request of p0 and one of p1 draw from the same uniforms (one random stream, one seed): their completions
    # differ (other prompts) but agree far more often than independent ones; no completion repeats within a prompt
    # beyond chance, so only the sibling test can see it
    rng = np.random.default_rng(15)
    u = rng.random((400, T))
    a, b = draw(P, PROMPTS[0], u), draw(P, PROMPTS[1], u)
    recs = [r for j in range(400) for r in (rec(0, f"p0-s{j}", a[j], seed=j), rec(1, f"p1-s{j}", b[j], seed=j))]
    d, s = stage(write(tmp_path / "stream.jsonl", recs)).tests
    assert not d.found and s.found, (d.what, s.what)


def test_designated_pairs_follow_seed_then_request_then_file_order():
    class R:
        def __init__(self, rid, seed):
            self.request_id, self.controls = rid, type("C", (), {"seed": seed})()
    recs = [R("a", 7), R("b-n0", None), R("c", None), R("b-n1", None), R("d", 7), R("e", None)]
    pairs, counts = dependence.designated_pairs(recs)
    assert pairs == [(0, 4), (1, 3), (2, 5)]
    assert counts == {"same seed": 1, "same request": 1, "file neighbours": 1}


def test_the_copy_evalue_is_the_likelihood_ratio():
    # two steps by hand: prompt g, values x (P = 0.1) then x again (ratio c / ((j - 1) P) = 1 / (1 * 0.1) = 10)
    lr, lpi, rep = dependence.copy_walk(["g", "g"], ["x", "x"], [np.log(0.1), np.log(0.1)])
    assert np.allclose(np.exp(lr), [10.0]) and rep.tolist() == [True] and np.allclose(np.exp(lpi), [0.1])
    f = np.asarray(dependence.COPY_SHARES)
    assert dependence.copy_pvalue(lr) == pytest.approx(1 / np.mean(1 - f + 10 * f))


@pytest.mark.parametrize("n", [200, pytest.param(1000, marks=pytest.mark.slow)])
def test_the_planner_share_is_detected(tmp_path, P, n):
    # power at two sizes: files whose completions are copies with the planner's share f (per prompt, at random
    # places) are caught in most of 20 draws (the planner promises 0.95 from the file's own walk; >= 15 of 20
    # fails with probability < 1e-3 when the true power is 0.95)
    path = write(tmp_path / "base.jsonl", independent(P, n, seed=16))
    f = stage(path, plan=True).tests[0].detects
    assert f < 0.2
    rng = np.random.default_rng(17)
    caught = 0
    for k in range(20):
        recs = independent(P, n, seed=100 + k)
        earlier: dict = {}
        for i, r in enumerate(recs):
            rows = earlier.setdefault(r["prompt_id"], [])
            if rows and rng.random() < f:
                recs[i] = {**recs[rows[int(rng.integers(len(rows)))]], "request_id": r["request_id"]}
            rows.append(i)
        caught += stage(write(tmp_path / "c.jsonl", recs)).tests[0].found
    print(f"n = {n} per prompt: planner share {f:.3g}, caught {caught} of 20")
    assert caught >= 15, (f, caught)


@pytest.mark.parametrize("bad", ["0", "1", "-0.1"])
def test_a_bad_dependence_alpha_is_refused(tmp_path, P, bad, capsys):
    path = write(tmp_path / "x.jsonl", independent(P, 3, seed=18))
    rc = main(["verify-samples", "--samples", str(path), "--target", str(MARKOV), "--exact", "--no-progress",
               "--dependence-alpha", bad, "--out", str(tmp_path / "r")])
    assert rc == 2 and "--dependence-alpha" in capsys.readouterr().err


@pytest.mark.slow
def test_the_sibling_planner_share_is_detected(P):
    # n = 500 completions per prompt, each prompt's rows adjacent (file neighbours pair completions of one prompt);
    # a share rho of the pairs made one stream (the second completion a copy of the first) at the planner's rho from
    # an independent file: caught in most of 20 files (>= 15 of 20 fails with probability < 1e-3 at power 0.95)
    from harness.samples.format import parse_record as parse

    def recs_of(seed: int, rho: float) -> list:
        rng = np.random.default_rng(seed)
        out = []
        for i, pr in enumerate(PROMPTS):
            x = draw(P, pr, rng.random((500, T)))
            x[1::2] = np.where(rng.random((250, 1)) < rho, x[0::2], x[1::2])
            out += [parse(rec(i, f"p{i}-s{j}", row)) for j, row in enumerate(x)]
        return out
    level = dependence.LEVEL / 2
    rho = dependence.sibling_test(recs_of(19, 0.0), level).detects
    assert 0 < rho < 0.1
    caught = sum(dependence.sibling_test(recs_of(200 + k, rho), level, seed=k).found for k in range(20))
    print(f"siblings: 2 x 500 completions, planner share {rho:.3g}, caught {caught} of 20")
    assert caught >= 15, (rho, caught)


def test_an_enumerated_target_is_judged_on_its_first_tokens(tmp_path):
    # the small transformer (not Markov): its law is enumerated over the first J = 4 tokens, so duplicates are judged
    # on those; positions J.. are filled at random (no law is tested there).  Independent prefixes: no finding;
    # 20 % of the completions copied under new ids: found
    target = EXACT / "target"
    laws = exact_laws(str(target), PROMPTS, T, SamplingConfig())
    J, V = laws.window, laws.vocab_size
    rng = np.random.default_rng(20)
    recs = []
    for i in range(len(PROMPTS)):
        codes = rng.choice(V ** J, size=300, p=laws.windows[0][i] / laws.windows[0][i].sum())
        for j, c in enumerate(codes):
            prefix = [int(c) // V ** (J - 1 - t) % V for t in range(J)]
            recs.append(rec(i, f"p{i}-s{j}", prefix + rng.integers(0, V, T - J).tolist()))
    prompts, rows, toks = prompt_table([parse_record(r) for r in recs], "x")
    values, lp = dependence.exact_completion_log_probs(laws, rows, toks)
    assert values[0] == tuple(toks[0, :J]) and np.isfinite(lp).all()
    for copy, found in ((False, False), (True, True)):
        extra = [{**r, "request_id": r["request_id"] + "-copy"} for r in recs[::5]] if copy else []
        out = tmp_path / f"rep{copy}"
        rc = main(["verify-samples", "--samples", str(write(tmp_path / f"e{copy}.jsonl", recs + extra)), "--target",
                   str(target), "--exact", "--no-progress", "--epsilon", "0.5", "--out", str(out)])
        dep = json.loads((out / "meta.json").read_text())["info"]["dependence"]
        assert (dep["finding"] is not None) == found and (rc == 1) == found, dep["line"]
