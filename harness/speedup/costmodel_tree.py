"""The cost model extended to block and tree verification, and synthetic-cost models that score trees.

A round of tree verification with n chains of k drafts (a tree of N = n k nodes) costs one target call
that scores the pending token and every node, n k + 1 tokens, and k draft calls, one per depth:

    t_round = T_target(n k + 1) + sum_{d=1..k} T_draft(m_d)
    S       = E[tokens per round] T_target(1) / t_round          (speedup over target-only decoding)

with T(m) = t1 (1 + token_slope (m - 1)) the per-call cost of :class:`harness.speedup.synthetic.CallCost`.
The draft's m_d depends on how it drafts: ``cached`` (a draft that keeps the tree's keys/values
scores only the new level: m_1 = 1, the pending token, then m_d = n) or ``rescored`` (what
:class:`specimpl.tree.TreeSampler` does: each level's ``forward_tree`` scores the pending token and
every node drawn so far, m_d = 1 + n (d - 1)).  Chain and block verification are n = 1 with the draft
cached (the reference round loop feeds its draft one token per call); block verification changes the
acceptance, not the calls.  E[tokens per round] = 1 + E[accepted drafts]
comes from the exact laws (:mod:`harness.laws.rounds`) or from measurement.  Overheads (prefill, the
sampler's own work) are left out: this is the model the measured speedups are compared with.

:class:`TimedTreeModel` gives a :class:`harness.speedup.synthetic.TimedModel` over an n-gram table the two tree
methods, ``forward_tree`` charged T(tokens scored) on the model's clock like ``forward``, and
``commit_path`` free (moving accepted keys/values, no forward pass).
"""
from __future__ import annotations

import numpy as np

from harness.speedup.synthetic import CallCost, TimedModel
from specimpl.errors import check_arg
from specimpl.tree_models import NGramTreeModel, TreeAdapter

__all__ = ["DRAFTING", "draft_tokens_per_call", "round_seconds", "tree_speedup", "TimedTreeModel"]

DRAFTING = ("cached", "rescored")


def draft_tokens_per_call(n: int, k: int, drafting: str = "rescored") -> np.ndarray:
    """(k,) tokens the draft scores at each depth d = 1..k of a round of n chains of k drafts."""
    check_arg(drafting in DRAFTING, "drafting", drafting, f"one of {list(DRAFTING)}")
    d = np.arange(1, k + 1)
    if drafting == "cached":
        return np.where(d == 1, 1, n)
    return 1 + n * (d - 1)


def round_seconds(target: CallCost, draft: CallCost, n: int, k: int, batch: int = 1,
                  drafting: str = "rescored") -> float:
    """Seconds of one round's model calls: T_target(n k + 1) + sum_d T_draft(m_d)."""
    m = draft_tokens_per_call(n, k, drafting)
    return target(n * k + 1, batch) + float(sum(draft(int(x), batch) for x in m))


def tree_speedup(tokens_per_round: float, target: CallCost, draft: CallCost, n: int, k: int, batch: int = 1,
                 drafting: str = "rescored") -> float:
    """Predicted speedup over target-only decoding: E[tokens per round] T_target(1) / t_round."""
    return tokens_per_round * target(1, batch) / round_seconds(target, draft, n, k, batch, drafting)


class TimedTreeModel(TreeAdapter):
    """A :class:`TimedModel` over an n-gram table with ``forward_tree`` (charged its set cost for the
    tokens scored, like ``forward``) and ``commit_path`` (free)."""

    def __init__(self, timed: TimedModel):
        check_arg(isinstance(timed, TimedModel), "timed", type(timed).__name__, "a harness.speedup.synthetic.TimedModel")
        super().__init__(timed)
        self.lookup = NGramTreeModel(timed.inner)  # the table's tree scoring (no cost)

    def forward_tree(self, state, tokens, parents):
        timed = self.inner
        start = timed.clock.now()
        out = self.lookup.forward_tree(state, tokens, parents)  # (B, T, V)
        timed.clock.wait_until(start + timed.cost(int(tokens.shape[1]), int(tokens.shape[0])))
        return out

    def commit_path(self, state, tokens, path, n) -> None:
        self.lookup.commit_path(state, tokens, path, n)
