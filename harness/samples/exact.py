"""Exact-law mode of ``verify-samples``: an engine's completions against the law the harness enumerates.

    python -m harness verify-samples --samples vllm.jsonl --target exact-markov --exact

Notation: p the target's law (float64), Q the engine's; V the vocabulary, T = ``max_new_tokens``.

When the target is small enough to enumerate (:mod:`harness.laws.transformer`), the engine's output needs no
scoring and no PIT: for each prompt the law of the token at each position, of each consecutive pair and of
each window of J tokens is known exactly, and the tests are those of ``make verify``'s exact-law battery —
a χ² goodness of fit per (prompt, position / pair / window) against p, Holm-adjusted in one family, each
with its finite-sample upper confidence bound on TV(Q, p) (:func:`harness.verify.battery.tv_interval`).

Which law is exact where:

* a **Markov** target (every attention output projection zero, ``markov_*`` of the exact pair) has a
  next-token law that depends on the current token only: the law at *every* position t < T is the prompt's
  initial row times P^t, pairs are exact everywhere, and every window of J tokens is tested;
* any other small transformer is enumerated over its first J generated tokens (V^J ≤ 2^20 cells): the
  positions t < J, their pairs and the J-window are tested; later positions are not (said in the notes).

The certificate is stated per position as **token TV**: "TV(Q_t(· | prompt), p_t(· | prompt)) ≤ ε for every
prompt and every position t", at simultaneous confidence ``tv_confidence`` (the bounds share the family's
δ by Bonferroni).  p is the float64 law of the float32 checkpoint; :func:`numerics_floor` states how far the
model's own float32 law sits from it (the part of ε that float32 arithmetic alone accounts for).

Completions must have all T tokens (``finish_reason`` "length": the engine run with EOS ignored): a
completion cut at EOS changes the law of the positions after it, which is not the law enumerated here.  The
exception is a completion the engine ended early *against* the requested controls (``early_stop``):
``verify-samples`` tests the whole ones and adds the deterministic row ``ending/early_stops`` (lossy).
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import torch

from harness.core.errors import UsageError
from harness.laws.transformer import (check_markov, enumerate_law, load_model, markov_joint_at, markov_marginal,
                                      numerics_floor, transition_matrix, vocab_size_of)
from harness.samples.certificate import PositionBounds
from harness.samples.format import SampleRecord
from harness.verify.battery import TestSpec, gof_evaluator, tv_interval_n_for
from specimpl.sampling import SamplingConfig

__all__ = ["ExactLaws", "exact_laws", "prompt_table", "plan_exact", "exact_bounds", "WINDOW"]

WINDOW = 3  # J of the window tests (V = 16: 4,096 cells)
MAX_ENUMERATED = 1 << 16  # V**J cells of an enumerated (non-Markov) law: J = 4 at V = 16


@dataclass(frozen=True)
class ExactLaws:
    """Exact laws per prompt (row i of every array is ``prompts[i]``), all float64.

    marginals (n, T', V)       law of the token at position t < T'
    pairs (n, T' - 1, V * V)   law of (x_t, x_{t+1}), flattened x_t * V + x_{t+1}
    windows {s: (n, V**J)}     law of the J tokens at positions s .. s + J - 1
    """

    kind: str  # "markov" (exact at every position) or "enumerated" (the first T' positions)
    prompts: tuple
    marginals: np.ndarray
    pairs: np.ndarray
    windows: dict
    window: int
    vocab_size: int
    floor: float

    @property
    def n_positions(self) -> int:
        return self.marginals.shape[1]


def _is_markov(model) -> bool:
    try:
        check_markov(model)
        return True
    except ValueError:
        return False


def _markov_laws(model, prompts, T: int, config: SamplingConfig, J: int):
    P = transition_matrix(model, config)  # (V, V)
    marg = np.stack([markov_marginal(P, prompts, t) for t in range(T)], axis=1)  # (n, T, V)
    pairs = (marg[:, :-1, :, None] * P[None, None]).reshape(len(prompts), T - 1, -1)  # (n, T-1, V*V)
    windows = {s: markov_joint_at(P, prompts, s, J) for s in range(T - J + 1)}  # each (n, V**J)
    return marg, pairs, windows


def _enumerated_laws(model, prompts, T: int, config: SamplingConfig, V: int):
    J = max(1, min(T, int(math.log(MAX_ENUMERATED) // math.log(V))))
    law = enumerate_law(model, prompts, J, config, max_cells=MAX_ENUMERATED)
    return law.marginals, law.pairs, {0: law.joint}, J


def exact_laws(target: str, prompts: list[list[int]], T: int, config: SamplingConfig,
               window: int = WINDOW) -> ExactLaws:
    """The exact laws of ``target`` (a local HF folder) after each prompt, with its float32 numerics floor."""
    model = load_model(target, torch.float64)
    V = vocab_size_of(model)
    if _is_markov(model):
        J = min(window, T)
        marg, pairs, windows = _markov_laws(model, prompts, T, config, J)
        kind = "markov"
    else:
        marg, pairs, windows, J = _enumerated_laws(model, prompts, T, config, V)
        kind = "enumerated"
    floor = numerics_floor(target, prompts, min(J, 3), config)
    return ExactLaws(kind, tuple(tuple(p) for p in prompts), marg, pairs, windows, J, V, floor)


def prompt_table(records: list[SampleRecord], path) -> tuple[list[list[int]], np.ndarray, np.ndarray]:
    """(prompts, prompt index per completion (N,), tokens (N, T)); every completion must have T tokens."""
    T = records[0].controls.max_new_tokens
    index: dict[tuple, int] = {}
    rows, toks = [], np.empty((len(records), T), np.int64)
    for i, r in enumerate(records):
        if len(r.output_ids) != T:
            raise UsageError(f"{path}: request {r.request_id!r} has {len(r.output_ids)} tokens, not max_new_tokens = "
                             f"{T} (finish_reason {r.finish_reason!r}); exact mode needs every completion whole: "
                             "run the engine with EOS ignored")
        rows.append(index.setdefault(tuple(r.prompt_ids), len(index)))
        toks[i] = r.output_ids
    return [list(p) for p in index], np.asarray(rows), toks


def _counts(x: np.ndarray, k: int) -> np.ndarray:
    return np.bincount(x, minlength=k)


def _prompt_specs(i: int, pid: str, tok: np.ndarray, laws: ExactLaws) -> list[TestSpec]:
    """The tests of one prompt's completions ``tok`` (m, T): positions, pairs, windows."""
    V, J, out = laws.vocab_size, laws.window, []
    for t in range(laws.n_positions):
        out.append(TestSpec("exact", f"{pid}/position", t, True,
                            gof_evaluator(_counts(tok[:, t], V), laws.marginals[i, t], f"{V} tokens"), True))
    for t in range(laws.n_positions - 1):
        out.append(TestSpec("exact", f"{pid}/pair", t, True,
                            gof_evaluator(_counts(tok[:, t] * V + tok[:, t + 1], V * V), laws.pairs[i, t],
                                          f"{V * V} pairs"), True))
    for s, joint in laws.windows.items():
        code = np.zeros(len(tok), np.int64)
        for t in range(s, s + J):
            code = code * V + tok[:, t]
        out.append(TestSpec("exact", f"{pid}/window[{s}:{s + J}]", s, True,
                            gof_evaluator(_counts(code, V ** J), joint[i], f"{V ** J} sequences"), True))
    return out


def plan_exact(records: list[SampleRecord], laws: ExactLaws, rows: np.ndarray, toks: np.ndarray) -> list[TestSpec]:
    """Every exact-law test of the file, prompt by prompt (prompt ids as the records name them)."""
    names: dict[int, str] = {}
    for r, i in zip(records, rows):
        names.setdefault(int(i), r.prompt_id)
    if int(toks.max(initial=0)) >= laws.vocab_size:
        raise UsageError(f"a completion holds token id {int(toks.max())}, outside the target's vocabulary "
                         f"(V = {laws.vocab_size})")
    specs = []
    for i in range(len(laws.prompts)):
        specs += _prompt_specs(i, names[i], toks[rows == i], laws)
    return specs


def exact_bounds(table, laws: ExactLaws, rows: np.ndarray, epsilon: float, delta_each: float):
    """Per position: the largest upper bound over prompts (tests.csv's ``tv_upper`` of the position rows) and
    the completions per prompt that would certify (the planner at the family's δ per bound)."""
    pos = table[table["test"].str.endswith("/position")]
    by_t = defaultdict(list)
    for r in pos.itertuples():
        by_t[int(r.position)].append((float(r.tv_upper), float(r.tv_hat), int(r.n)))
    T = laws.n_positions
    upper = tuple(max(u for u, _, _ in by_t[t]) for t in range(T))
    hat = tuple(max(h for _, h, _ in by_t[t]) for t in range(T))
    n = tuple(min(m for _, _, m in by_t[t]) for t in range(T))
    needed = max(tv_interval_n_for(laws.marginals[i, t], epsilon, delta_each)  # the certificate's own bound's planner
                 for i in range(len(laws.prompts)) for t in range(T))
    return PositionBounds("token TV of each position's law from the exact float64 law, per prompt "
                          "(finite-sample)", n, hat, upper, delta_each, int(needed))
