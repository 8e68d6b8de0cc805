"""vLLM's n-gram drafts rebuilt from the tokens (harness/samples/lookup_drafts.py) and the rule line they give
(harness/samples/rules._ngram_line).  A simulated engine runs the n-gram proposer on a small Markov law with
vLLM's counters (only the steps that drafted are listed, no drafted tokens), verified by a lossless rule or by a
lossy one: the line must say "consistent" for the first and "NOT consistent" for the second."""
from __future__ import annotations

import numpy as np
import pytest

from harness.samples.format import parse_record
from harness.samples.lookup_drafts import lookup_draft, rebuild_steps
from harness.samples.rules import Z_CONSISTENT, fixed_draft_fit

SPEC = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 4}


def test_the_longest_suffix_match_wins_then_its_earliest_occurrence():
    #            0  1  2  3  4  5  6  7  8  9
    assert lookup_draft([1, 2, 3, 9, 1, 2, 3, 8, 1, 2, 3], 2, 4, 2) == [9, 1]  # "1 2 3" at 0 (earliest), then 9 1
    assert lookup_draft([5, 2, 3, 7, 1, 2, 3], 2, 4, 3) == [7, 1, 2]  # "1 2 3" not earlier; "2 3" at 1
    assert lookup_draft([1, 2, 3, 4], 2, 4, 3) == []  # no earlier occurrence
    assert lookup_draft([1, 1, 1], 2, 4, 3) == [1]  # "1 1" at 0 overlaps the suffix; the draft stops at the end
    assert lookup_draft([4], 2, 4, 3) == []  # shorter than min_n
    # n is capped at max_n: a 5-long repeat is matched by its last 2 tokens (max_n = 2), earliest occurrence first
    assert lookup_draft([1, 2, 3, 4, 5, 6, 2, 3, 4, 5], 2, 2, 1) == [6]


def _record(prompt, out, x_spec, i=0):
    return parse_record({"format": "specverify.samples/1", "request_id": f"r{i}", "prompt_id": "p",
                         "prompt_ids": list(prompt), "output_ids": list(out), "finish_reason": "length",
                         "engine": {"name": "sim", "speculative": SPEC}, "logprobs": None, "x_spec": x_spec,
                         "controls": {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "max_new_tokens": len(out)}})


def _simulate(P, prompt, n_new, accept, rng):
    """One completion of a simulated n-gram engine over the Markov law P (state = the last token): vLLM's
    counters (the drafting steps only).  ``accept(p_d)`` is the acceptance probability of a draft d with
    target probability p_d; a rejection resamples from norm(max(0, p - δ_d)) (the lossless residual)."""
    ctx, out, drafted, accepted = list(prompt), [], [], []
    out.append(int(rng.choice(len(P), p=P[ctx[-1]])))  # the prefill's token
    while len(out) < n_new:
        d = lookup_draft(ctx + out, 2, 4, 4)[:n_new - len(out)]
        if not d:
            out.append(int(rng.choice(len(P), p=P[out[-1]])))
            continue
        a = 0
        for tok in d:
            p = P[out[-1]]
            if rng.random() < accept(p[tok]):
                out.append(tok), None
                a += 1
                continue
            r = p.copy()
            r[tok] = 0.0
            out.append(int(rng.choice(len(P), p=r / r.sum())))
            break
        else:
            if len(out) < n_new:
                out.append(int(rng.choice(len(P), p=P[out[-1]])))  # the bonus token
        drafted.append(len(d)), accepted.append(a)
    return out[:n_new], {"drafted": drafted, "accepted": accepted}


@pytest.fixture(scope="module")
def P():
    rng = np.random.default_rng(5)
    M = rng.dirichlet(np.full(4, 0.6), size=4)  # (V, V) peaked rows: n-grams repeat often
    return M


def _run(P, accept, n, seed):
    rng = np.random.default_rng(seed)
    recs, steps = [], []
    for i in range(n):
        prompt = [int(x) for x in rng.integers(0, 4, size=6)]
        out, x = _simulate(P, prompt, 8, accept, rng)
        rec = _record(prompt, out, x, i)
        recs.append(rec)
        steps.append(rebuild_steps(prompt, out, x, k=4, min_n=2, max_n=4))
    return fixed_draft_fit(recs, P, steps)


def test_rebuild_matches_the_engine_counters_and_the_lossless_rule_is_consistent(P):
    n, k, exp, z = _run(P, lambda p_d: p_d, 1500, 0)
    assert n > 2000 and abs(z) < Z_CONSISTENT


def test_an_over_accepting_rule_is_not_consistent(P):
    """Accepting with min(1, 1.3 p(d)) (a 30 % over-acceptance) is named at 1,500 completions: z > 5."""
    *_, z = _run(P, lambda p_d: min(1.0, 1.3 * p_d), 1500, 1)
    assert z > Z_CONSISTENT


def test_counters_that_disagree_with_the_lookup_are_refused():
    prompt, out = [1, 2, 1, 2], [1, 2, 1, 2]  # after the prefill's 1: "1 2 1" occurs at 0 -> drafts [2, 1]
    good = rebuild_steps(prompt, out, {"drafted": [2], "accepted": [2]}, k=4, min_n=2, max_n=4)
    assert good == {"drafted": [2], "accepted": [2], "draft_tokens": [[2, 1]]}
    with pytest.raises(ValueError, match="drafts 2 token"):
        rebuild_steps(prompt, out, {"drafted": [3], "accepted": [2]}, k=4, min_n=2, max_n=4)
    with pytest.raises(ValueError, match="not the lookup's draft"):
        rebuild_steps(prompt, [1, 3, 1, 2], {"drafted": [2], "accepted": [2]}, k=4, min_n=2, max_n=4)
    with pytest.raises(ValueError, match="counters list 2 drafting steps"):
        rebuild_steps(prompt, out, {"drafted": [2, 1], "accepted": [2, 0]}, k=4, min_n=2, max_n=4)
    with pytest.raises(ValueError, match="no step left"):
        rebuild_steps(prompt, out, {"drafted": [], "accepted": []}, k=4, min_n=2, max_n=4)
