"""The draft law of a lookup proposer: vLLM's n-gram drafts, rebuilt from the tokens of each completion.

An n-gram ("prompt lookup") proposer has no draft model.  vLLM 0.32's ``NgramProposer`` takes the longest
suffix of the context c (prompt + output so far) of length n in [prompt_lookup_min, prompt_lookup_max] that also
occurs earlier in c (ending before c's last token), takes its earliest occurrence, and proposes the (up to) k
tokens that follow it.  The draft is a function of the context, so at each position the draft law is a point
mass q = δ_d, and every lossless verification accepts the drafted token d in state c with probability

    Σ_x min(p(x|c), δ_d(x)) = p(d | c)

(the fixed-draft rule of :func:`harness.samples.rules.fixed_draft_fit`).  The three expectations of
:mod:`harness.samples.rules` use the draft *model's* q, which an n-gram run never consults: that is why the fixed
vLLM n-gram row read "consistent with: none of the three" (standard z = -926) although it is certified.

vLLM's per-request counters (``per_step_drafted`` / ``per_step_accepted``) list only the steps that verified a
draft (a step whose context has no match drafts nothing and is not observed) and not the drafted tokens, so
both are rebuilt here from the prompt and the output, and checked against the counters: each listed step must
draft no more than the lookup proposes, its accepted tokens must be the output's tokens, and every listed step
must be used.  A run whose counters disagree with the rebuild raises (the proposer is not the one described).
"""
from __future__ import annotations

from typing import Sequence

__all__ = ["lookup_draft", "rebuild_steps"]


def lookup_draft(context: Sequence[int], min_n: int, max_n: int, k: int) -> list[int]:
    """The tokens an n-gram proposer drafts after ``context``: the longest suffix n-gram (min_n <= n <= max_n)
    with an earlier occurrence ending before the last token, its earliest occurrence, the <= k tokens after it."""
    c = list(context)
    last = len(c)
    for n in range(min(max_n, last - 1), min_n - 1, -1):
        suffix = c[last - n:]
        for j in range(last - n):  # an occurrence c[j:j+n] ending at j + n - 1 <= last - 2
            if c[j:j + n] == suffix:
                return c[j + n:j + n + k]
    return []


def rebuild_steps(prompt: Sequence[int], out: Sequence[int], engine_steps: dict, *, min_n: int, max_n: int,
                  k: int) -> dict:
    """Every step of one completion in the layout of :func:`harness.samples.rules.judged_states` (token 0 comes from
    the prefill; a step starting at output index s emits accepted + 1 tokens; a step without a match drafts 0),
    with the drafted tokens, from the engine's counters of the steps that drafted.  ValueError when the counters
    and the rebuilt drafts disagree."""
    listed = list(zip(engine_steps.get("drafted") or [], engine_steps.get("accepted") or []))
    out = list(out)
    drafted, accepted, tokens = [], [], []
    s, used = 1, 0
    while s < len(out):
        d = lookup_draft(list(prompt) + out[:s], min_n, max_n, k)
        if not d:
            drafted.append(0), accepted.append(0), tokens.append([])
            s += 1
            continue
        if used == len(listed):
            raise ValueError(f"output index {s}: the lookup drafts {d}, but the engine's counters list no step left")
        n_d, n_a = listed[used]
        used += 1
        if not 0 < n_d <= len(d) or n_a > n_d:
            raise ValueError(f"output index {s}: the lookup drafts {len(d)} token(s) {d}; the engine's step {used} "
                             f"drafted {n_d} and accepted {n_a}")
        d = d[:n_d]
        if out[s:s + n_a] != d[:n_a][:len(out) - s]:
            raise ValueError(f"output index {s}: the engine accepted {n_a} draft(s) but the output {out[s:s + n_a]} "
                             f"is not the lookup's draft {d[:n_a]}")
        drafted.append(n_d), accepted.append(n_a), tokens.append(d)
        s += n_a + 1
    if used != len(listed):
        raise ValueError(f"the engine's counters list {len(listed)} drafting steps; the lookup rebuilt {used}")
    return {"drafted": drafted, "accepted": accepted, "draft_tokens": tokens}
