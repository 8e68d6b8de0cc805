"""Which acceptance rule did the engine run?  Inferred from its own per-step counters on a Markov pair.

    python -m harness.samples.rules vllm.jsonl exact-markov exact-markov-draft

Notation: p(· | c), q(· | c) the target's and the draft's warped next-token laws in state c (a Markov pair:
the state is the current token, :func:`harness.laws.transformer.transition_matrix`).  A speculative step
starts after the token at index s - 1 and drafts up to k tokens; draft position j is judged in the state
c_j = the token at index s - 1 + j (the previous draft, accepted).  Each rule gives the probability that
position j is accepted, given c_j:

    standard     Σ_x min(p(x|c), q(x|c))    the speculative-sampling rule with the draft's probabilities
    one-hot      p(d | c), d = argmax q(·|c) the same rule with a one-hot q (greedy drafts, draft_probs=None)
    exact-match  Σ_x p(x|c) q(x|c)          a target sample must equal a draft sample (lossless, slower)

The records' ``x_spec`` (the engine's per-step drafted / accepted counts, :mod:`harness.samples.engines.vllm_engine`)
place every step in the completion (step i emits accepted_i + 1 tokens), so the observed acceptances can be
compared with each rule's expectation: z = (accepted − Σ a(c_j)) / √Σ a(1 − a) over every judged position
(independent Bernoulli trials given the states, under the rule).  A rule is *consistent* when |z| < 5
(two-sided ~6e-7); the report names the consistent rule(s), so a silent fallback (e.g. "block" verification
running greedy drafts) is named.  n-gram drafts propose by lookup (q is a point mass on the looked-up token, not
the draft model's law): their drafts are rebuilt from the tokens (:mod:`harness.samples.lookup_drafts`) and
judged by the fixed-draft expectation p(d | c).
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass

import numpy as np
import torch

from harness.core.errors import UsageError
from harness.core.models import resolve_model
from harness.laws.transformer import check_markov, load_model, transition_matrix
from harness.samples.format import SampleRecord, read_samples
from harness.samples.lookup_drafts import rebuild_steps
from harness.samples.producers import config_of

__all__ = ["RULES", "rule_acceptance", "judged_states", "fixed_draft_fit", "ngram_fit", "RuleFit", "fit_rules", "main"]

Z_CONSISTENT = 5.0


def rule_acceptance(P: np.ndarray, Q: np.ndarray) -> dict[str, np.ndarray]:
    """Per state c (V,): the acceptance probability of one draft position under each rule."""
    d = Q.argmax(1)  # (V,) greedy draft per state
    return {"standard": np.minimum(P, Q).sum(1), "one-hot": P[np.arange(len(P)), d],
            "exact-match": (P * Q).sum(1)}


RULES = ("standard", "one-hot", "exact-match")


def judged_states(rec: SampleRecord, spec: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(state, draft position, accepted, drafted token or -1 when the record does not list them) of every
    draft position the engine judged in ``rec``."""
    out = rec.output_ids
    listed = spec.get("draft_tokens")
    s, states, pos, acc, tok = 1, [], [], [], []  # token 0 comes from the prefill: the first step starts at index 1
    for i, (drafted, accepted) in enumerate(zip(spec["drafted"], spec["accepted"])):
        for j in range(min(drafted, accepted + 1)):  # positions up to the first rejection are judged
            if s - 1 + j >= len(out):
                break
            states.append(out[s - 1 + j]), pos.append(j), acc.append(j < accepted)
            tok.append(listed[i][j] if listed else -1)
        s += accepted + 1
    return (np.asarray(states, np.int64), np.asarray(pos, np.int64), np.asarray(acc, bool),
            np.asarray(tok, np.int64))


def fixed_draft_fit(records: list[SampleRecord], P: np.ndarray, steps: list[dict] | None = None
                    ) -> tuple[int, int, float, float]:
    """Drafts the engine names token by token (a lookup, e.g. llama.cpp's prompt lookup: ``x_spec.draft_tokens``,
    or vLLM's n-gram drafts rebuilt by :mod:`harness.samples.lookup_drafts`, given as ``steps``, one per record):
    every lossless verification of a fixed draft token d in state c accepts it with probability p(d | c)
    (standard rule with a one-hot q, or exact match).  (judged, accepted, expected, z)."""
    steps = steps if steps is not None else [r.extra.get("x_spec") for r in records]
    parts = [judged_states(r, x) for r, x in zip(records, steps) if x and x.get("draft_tokens") is not None]
    if not parts:
        raise ValueError("no record lists its drafted tokens (x_spec.draft_tokens)")
    st, _, acc, tok = (np.concatenate(x) for x in zip(*parts))
    a = P[st, tok]
    exp, var = float(a.sum()), float((a * (1 - a)).sum())
    return int(acc.size), int(acc.sum()), exp, (int(acc.sum()) - exp) / math.sqrt(max(var, 1e-12))


@dataclass(frozen=True)
class RuleFit:
    """Observed acceptances vs each rule's expectation, overall and per draft position."""

    judged: int
    accepted: int
    expected: dict
    z: dict
    per_position: dict  # j -> (judged, observed rate, {rule: expected rate})

    @property
    def consistent(self) -> list[str]:
        return [r for r in RULES if abs(self.z[r]) < Z_CONSISTENT]

    def line(self) -> str:
        zs = ", ".join(f"{r} z = {self.z[r]:+.1f}" for r in RULES)
        named = " / ".join(self.consistent) or "none of the three"
        return f"consistent with: {named} ({zs}; {self.accepted} of {self.judged} judged drafts accepted)"


def fit_rules(records: list[SampleRecord], P: np.ndarray, Q: np.ndarray) -> RuleFit:
    """Compare the engine's acceptances with each rule's expectation (module docstring)."""
    a = rule_acceptance(P, Q)
    parts = [judged_states(r, r.extra["x_spec"]) for r in records if r.extra.get("x_spec")]
    if not parts:
        raise ValueError("no record carries the engine's speculative counters (x_spec): speculation never ran")
    st, pos, acc, _ = (np.concatenate(x) for x in zip(*parts))
    exp = {r: float(a[r][st].sum()) for r in RULES}
    var = {r: float((a[r][st] * (1 - a[r][st])).sum()) for r in RULES}
    z = {r: (int(acc.sum()) - exp[r]) / math.sqrt(max(var[r], 1e-12)) for r in RULES}
    per = {int(j): (int((pos == j).sum()), float(acc[pos == j].mean()),
                    {r: float(a[r][st[pos == j]].mean()) for r in RULES}) for j in np.unique(pos)}
    return RuleFit(int(acc.size), int(acc.sum()), exp, z, per)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="which acceptance rule an engine ran (Markov pair, x_spec counters)")
    ap.add_argument("samples")
    ap.add_argument("target")
    ap.add_argument("draft")
    args = ap.parse_args(argv)
    try:
        args.target, args.draft = resolve_model(args.target, "target"), resolve_model(args.draft, "draft")
    except UsageError as e:
        print(f"python -m harness.samples.rules: error: {e}", file=sys.stderr)
        return 2
    records = read_samples(args.samples)
    spec = (records[0].engine or {}).get("speculative") or {}
    x0 = next((r.extra["x_spec"] for r in records if r.extra.get("x_spec")), None)
    if x0 is not None and x0.get("draft_tokens") is not None:
        P = transition_matrix(_markov(args.target), config_of(records[0].controls))
        n, k, exp, z = fixed_draft_fit(records, P)
        verdict = "consistent with" if abs(z) < Z_CONSISTENT else "NOT consistent with"
        print(f"{verdict}: lossless verification of fixed drafts, acceptance p(d | c) (z = {z:+.1f}; {k} of {n} "
              f"judged drafts accepted, {exp:.0f} expected)")
        return 0
    if spec.get("method") == "ngram":
        print(_ngram_line(records, spec, _markov(args.target)))
        return 0
    config = config_of(records[0].controls)
    P, Q = (transition_matrix(_markov(m), config) for m in (args.target, args.draft))
    try:
        fit = fit_rules(records, P, Q)
    except ValueError as e:
        print(str(e))
        return 0
    for j, (n, obs, exp) in fit.per_position.items():
        print(f"draft position {j}: {n} judged, accepted {obs:.4f}; "
              + ", ".join(f"{r} {v:.4f}" for r, v in exp.items()))
    print(fit.line())
    return 0


def ngram_fit(records: list[SampleRecord], spec: dict, P: np.ndarray) -> tuple[int, int, float, float]:
    """An n-gram run's fixed-draft fit (:func:`fixed_draft_fit`): its drafts rebuilt from the tokens
    (:mod:`harness.samples.lookup_drafts`) and checked against the engine's counters.  ValueError naming the
    request when a record's counters disagree with the rebuild, or when no record carries counters."""
    kept = [r for r in records if r.extra.get("x_spec")]
    if not kept:
        raise ValueError("no record carries the engine's speculative counters (x_spec): speculation never ran")
    steps = []
    for r in kept:
        try:
            steps.append(rebuild_steps(r.prompt_ids, r.output_ids, r.extra["x_spec"], k=spec["num_speculative_tokens"],
                                       min_n=spec["prompt_lookup_min"], max_n=spec["prompt_lookup_max"]))
        except ValueError as e:
            raise ValueError(f"n-gram drafts not rebuilt from the tokens (request {r.request_id}: {e})") from None
    return fixed_draft_fit(kept, P, steps)


def _ngram_line(records: list[SampleRecord], spec: dict, target: torch.nn.Module) -> str:
    """The rule line of an n-gram run (:func:`ngram_fit`)."""
    try:
        n, k, exp, z = ngram_fit(records, spec, transition_matrix(target, config_of(records[0].controls)))
    except ValueError as e:
        return str(e)
    verdict = "consistent with" if abs(z) < Z_CONSISTENT else "NOT consistent with"
    return (f"{verdict}: lossless verification of n-gram drafts (rebuilt from the tokens, every engine step "
            f"matched), acceptance p(d | c) (z = {z:+.1f}; {k} of {n} judged drafts accepted, {exp:.0f} expected)")


def _markov(path: str) -> torch.nn.Module:
    m = load_model(path, torch.float64)
    check_markov(m)
    return m


if __name__ == "__main__":
    sys.exit(main())
