"""A straightforward per-sequence Python loop of the speculative sampling algorithm (the baseline).

One sequence at a time, one round at a time, one token at a time, with numpy rows of the same
warped n-gram tables the vectorised sampler uses.  Nothing in it is slowed down on purpose:
CDFs of the draft and target rows are computed once up front, uniforms are drawn once per round
(2k + 1 of them, like the vectorised sampler), and every step is the plain textbook step:

    x_i ~ q(. | ctx) by inverse CDF;  accept iff u_i q(x_i) < p(x_i);  at the first rejection
    y ~ norm(max(0, p - q));  after k acceptances the bonus y ~ p(. | ctx after x_k).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from specimpl.ngram import NGramModel, context_of, warped_table
from specimpl.sampling import SamplingConfig

__all__ = ["LoopTables", "loop_speculative"]


class LoopTables:
    """Warped target / draft tables at the joint order, with their row CDFs (float64 numpy)."""

    def __init__(self, target: NGramModel, draft: NGramModel, config: SamplingConfig = SamplingConfig()):
        order = max(target.order, draft.order)
        t, d = target.as_order(order), draft.as_order(order)
        self.V, self.C, self.order = target.vocab_size, t.n_contexts, order
        self.p = warped_table(t, config)  # (C, V)
        self.q = warped_table(d, config)  # (C, V)
        self.cdf_p = np.cumsum(self.p, axis=1)
        self.cdf_q = np.cumsum(self.q, axis=1)
        self.model = t

    def start(self, prompt) -> int:
        return context_of(self.model, prompt)


def _draw(cdf: np.ndarray, u: float) -> int:
    """Inverse-CDF draw from one (unnormalised) CDF row."""
    return min(int(np.searchsorted(cdf, u * cdf[-1], side="right")), len(cdf) - 1)


def loop_speculative(tables: LoopTables, prompts, k: int, max_new_tokens: int, rng: np.random.Generator,
                     eos_token_id: Optional[int] = None) -> list[list[int]]:
    """Generate each prompt's continuation with a per-sequence loop; returns token lists."""
    V, C = tables.V, tables.C
    p, q, cdf_p, cdf_q = tables.p, tables.q, tables.cdf_p, tables.cdf_q
    outs = []
    for prompt in prompts:
        ctx = tables.start(prompt)
        out: list[int] = []
        while len(out) < max_new_tokens:
            u = rng.random(2 * k + 1)
            # draft: k proposals, remembering the context before each
            ctxs, xs = [], []
            c = ctx
            for i in range(k):
                x = _draw(cdf_q[c], u[i])
                ctxs.append(c)
                xs.append(x)
                c = (c * V + x) % C
            # verify: accept while u_i q_i(x_i) < p_i(x_i)
            n = 0
            while n < k and u[k + n] * q[ctxs[n], xs[n]] < p[ctxs[n], xs[n]]:
                n += 1
            if n < k:  # resample from the residual at the first rejection
                r = np.maximum(p[ctxs[n]] - q[ctxs[n]], 0.0)
                y = _draw(np.cumsum(r), u[2 * k]) if r.sum() > 0 else _draw(cdf_p[ctxs[n]], u[2 * k])
            else:  # bonus token from the target after x_k
                y = _draw(cdf_p[c], u[2 * k])
            ended = False
            for tok in xs[:n] + [y]:
                out.append(tok)
                if tok == eos_token_id or len(out) == max_new_tokens:
                    ended = True
                    break
            if ended:
                break
            # the context after x_1..x_n, y
            for tok in xs[:n]:
                ctx = (ctx * V + tok) % C
            ctx = (ctx * V + y) % C
        outs.append(out)
    return outs
