"""The tree extension of the model interface: score a whole token tree in one call, keep one path.

    logits = model.forward_tree(state, tokens, parents)   # tokens (B, T), parents (T,) -> logits (B, T, V)
    model.commit_path(state, tokens, path, n)             # append tokens[b, path[b, :n[b]]] to sequence b

``parents[t]`` is the index of node t's parent in ``tokens`` (``parents[t] < t``), or -1 for a node that
follows the sequence's committed tokens directly (the round's pending token; several -1 nodes make a
forest).  Node t sits at position ``lengths[b] + depth[t]`` (depth 0 for a -1 node) and sees the
committed tokens and its own ancestors only: ``logits[b, t]`` is the next-token law after the
committed tokens followed by the path to t.  ``forward_tree`` commits nothing (``state.lengths`` is
unchanged); ``commit_path`` appends the chosen path (root first), so the state afterwards is that of a
fresh run over the committed tokens plus that path: a KV cache keeps the path's keys/values at
consecutive slots and drops the rejected branches.  A token of -1 (an unused node) is scored as token 0.

:func:`as_tree_model` returns the model itself when it implements both methods, and otherwise an
adapter: a lookup for :class:`specimpl.ngram.NGramModel`, a tree-attention forward for
:class:`specimpl.hf.HFModel` (:mod:`specimpl.hf_tree`), and for any other :class:`LanguageModel` a
sequential fallback that runs ``forward`` once per root-to-leaf path and rolls back (exact, but one
call per leaf instead of one per tree).
"""
from __future__ import annotations

from typing import Optional

import torch

from specimpl.errors import check_arg
from specimpl.model import LanguageModel, ModelState

__all__ = ["as_tree_model", "TreeAdapter", "NGramTreeModel", "SequentialTreeModel", "tree_structure",
           "check_parents"]


def check_parents(parents, n_tokens: Optional[int] = None) -> torch.Tensor:
    """Validate a parent array (parents[t] in [-1, t)) and return it as an int64 tensor (T,)."""
    par = torch.as_tensor(parents, dtype=torch.long).cpu()
    check_arg(par.dim() == 1 and par.numel() >= 1, "parents", list(par.shape), "a 1-D sequence of node indices")
    if n_tokens is not None:
        check_arg(par.numel() == n_tokens, "parents", f"{par.numel()} entries", f"one per token ({n_tokens})")
    bad = (par < -1) | (par >= torch.arange(par.numel()))
    if bool(bad.any()):
        t = int(bad.nonzero()[0, 0])
        check_arg(False, f"parents[{t}]", int(par[t]), f"-1 (the committed prefix) or an earlier node in [0, {t})")
    return par


def tree_structure(parents: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """depth (T,) and ancestor-or-self matrix anc (T, T) bool (anc[t, a]: a is on the path to t)."""
    par = check_parents(parents)
    T = par.numel()
    depth = torch.zeros(T, dtype=torch.long)
    anc = torch.eye(T, dtype=torch.bool)
    for t in range(T):
        a = int(par[t])
        if a >= 0:
            depth[t] = depth[a] + 1
            anc[t] |= anc[a]
    return depth, anc


def _ancestor_steps(parents: torch.Tensor, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """For m = 0..steps-1: up[m, t] node index m steps above t (m = 0: t itself) or -1 above the top;
    above[m, t] how many committed tokens back that is (>= 1) where up is -1."""
    par = check_parents(parents)
    depth, _ = tree_structure(par)
    T = par.numel()
    up = torch.full((steps, T), -1, dtype=torch.long)
    cur = torch.arange(T)
    for m in range(steps):
        up[m] = cur
        cur = torch.where(cur >= 0, par[cur.clamp(min=0)], cur)
    above = (torch.arange(steps).unsqueeze(1) - depth.unsqueeze(0)).clamp(min=0)  # (steps, T)
    return up, above


class TreeAdapter(LanguageModel):
    """A :class:`LanguageModel` wrapped with the two tree methods; the interface calls go to ``inner``."""

    def __init__(self, inner: LanguageModel):
        self.inner = inner
        self.vocab_size = inner.vocab_size
        self.device = inner.device
        self.name = inner.name
        self.dtype = getattr(inner, "dtype", torch.float32)

    def prefill(self, prompts) -> ModelState:
        return self.inner.prefill(prompts)

    def forward(self, state, tokens, n_new=None):
        return self.inner.forward(state, tokens, n_new)

    def rollback(self, state, lengths) -> None:
        self.inner.rollback(state, lengths)

    def select(self, state, index):
        return self.inner.select(state, index)

    def forward_tree(self, state, tokens: torch.Tensor, parents) -> torch.Tensor:
        raise NotImplementedError

    def commit_path(self, state, tokens: torch.Tensor, path: torch.Tensor, n: torch.Tensor) -> None:
        """Append tokens[b, path[b, :n[b]]] through the plain ``forward`` (its logits are discarded)."""
        gathered = tokens.gather(1, path.clamp(min=0)).clamp(min=0)  # (B, P)
        self.inner.forward(state, gathered, n)

    def __repr__(self):
        return f"{type(self).__name__}({self.inner!r})"


class NGramTreeModel(TreeAdapter):
    """Tree scoring of an n-gram table: node t's context is the last order-1 tokens on its path."""

    def forward_tree(self, state, tokens: torch.Tensor, parents) -> torch.Tensor:
        m = self.inner
        B, T = tokens.shape
        n1, V = m.order - 1, m.vocab_size
        if n1 == 0:
            return m.logtable[0].expand(B, T, V)
        up, above = _ancestor_steps(check_parents(parents, T), n1)  # (n1, T) each
        tok = tokens.clamp(min=0).long()  # (B, T)
        slot = n1 + state.lengths.unsqueeze(1)  # (B, 1) buffer slot of a -1 node (left pad n1)
        ctx = torch.zeros(B, T, dtype=torch.long)
        for step in range(n1):  # token `step` back from t weighs V^step (as NGramModel._contexts)
            in_tree = tok[:, up[step].clamp(min=0)]  # (B, T)
            in_buf = state.buffer.gather(1, (slot - above[step]).clamp(min=0)).long()  # (B, T)
            ctx += torch.where(up[step] >= 0, in_tree, in_buf) * V ** step
        return m.logtable.index_select(0, ctx.view(-1)).view(B, T, V)  # (B, T, V)


class SequentialTreeModel(TreeAdapter):
    """Fallback for any LanguageModel: one ``forward`` + ``rollback`` per root-to-leaf path."""

    def forward_tree(self, state, tokens: torch.Tensor, parents) -> torch.Tensor:
        par = check_parents(parents, tokens.shape[1])
        _, anc = tree_structure(par)
        T = par.numel()
        is_leaf = torch.ones(T, dtype=torch.bool)
        is_leaf[par[par >= 0]] = False
        out = None
        before = state.lengths.clone()
        for leaf in is_leaf.nonzero().squeeze(1).tolist():
            nodes = anc[leaf].nonzero().squeeze(1)  # (L,) the path, root first (indices increase)
            logits = self.inner.forward(state, tokens[:, nodes].clamp(min=0))  # (B, L, V)
            self.inner.rollback(state, before)
            if out is None:
                out = logits.new_zeros(tokens.shape[0], T, logits.shape[-1])
            out[:, nodes] = logits
        return out
