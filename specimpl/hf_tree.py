"""Tree attention for :class:`specimpl.hf.HFModel`: a whole token tree scored in one forward pass.

The tree's T tokens are written to the ragged KV cache at slots ``lengths[b] .. lengths[b] + T - 1``
in node order, exactly where a plain ``forward`` of T tokens would write them; what changes is

    position_ids[b, t] = lengths[b] + depth[t]                     (depth 0 for a -1 node)
    mask[b, t, s]      = s < lengths[b]                            (the committed tokens)
                         or s = lengths[b] + a, a an ancestor of t or t itself

so node t sees the committed prefix and its own path only, at the positions a sequential run along
that path would give it (a sliding window compares positions, not slots).  Nothing is committed.
``commit_path`` then copies the keys/values of the chosen path's nodes (computed with the right
positions and the right visible context, hence identical to a sequential run's) to consecutive slots
``lengths[b] + i`` and advances ``lengths``: the rejected branches stay past the end, invisible and
overwritten later — the same O(1) rollback the plain wrapper uses.

Uses these internals of :class:`specimpl.hf.HFModel` (same package): ``model``, ``_cache_kw``,
``_mask_kind``, ``max_positions`` and the :class:`RaggedKVCache` fields ``offset``, ``write_index``,
``kv_len``, ``seq_length`` and its layers' ``keys`` / ``values``.
"""
from __future__ import annotations

import torch

from specimpl.errors import check_arg
from specimpl.tree_models import TreeAdapter, check_parents, tree_structure

__all__ = ["HFTreeModel"]


class HFTreeModel(TreeAdapter):
    """An :class:`specimpl.hf.HFModel` with ``forward_tree`` (tree attention) and ``commit_path``."""

    def __init__(self, inner):
        super().__init__(inner)
        self._shapes = {}

    def _structure(self, parents: torch.Tensor):
        key = tuple(parents.tolist())
        if key not in self._shapes:
            depth, anc = tree_structure(parents)
            self._shapes[key] = (depth.to(self.device), anc.to(self.device))
        return self._shapes[key]

    @torch.inference_mode()
    def forward_tree(self, state, tokens: torch.Tensor, parents) -> torch.Tensor:
        m = self.inner
        B, T = tokens.shape
        depth, anc = self._structure(check_parents(parents, T))  # (T,), (T, T)
        need = state.max_len + T
        if m.max_positions is not None and need > m.max_positions:
            raise ValueError(f"sequence length {need} exceeds the model's maximum of {m.max_positions} positions "
                             f"(`max_position_embeddings` of {m.name}); shorten the prompt or max_new_tokens")
        cache = state.cache
        cache.seq_length, cache.kv_len = state.max_len, need
        slots = state.lengths.unsqueeze(1) + torch.arange(T, device=self.device)  # (B, T) where nodes are written
        if state.uniform:
            cache.offset, cache.write_index = state.max_len, None
        else:
            cache.offset, cache.write_index = None, slots
        pos = state.lengths.unsqueeze(1) + depth  # (B, T)
        mask = self._tree_mask(state.lengths, depth, anc, need)
        out = m.model(input_ids=tokens.clamp(min=0), attention_mask=mask, position_ids=pos, use_cache=True,
                      logits_to_keep=0, **{m._cache_kw: cache})
        return out.logits.to(m.dtype)  # (B, T, V)

    def _tree_mask(self, lengths: torch.Tensor, depth: torch.Tensor, anc: torch.Tensor, kv_len: int):
        """4D additive mask(s) (B, 1, T, kv_len) in the format :class:`HFModel` hands to the model."""
        T = depth.numel()
        s = torch.arange(kv_len, device=self.device)  # (S,)
        rel = s.unsqueeze(0) - lengths.unsqueeze(1)  # (B, S) slot relative to the row's first tree slot
        in_tree = (rel >= 0) & (rel < T)
        relc = rel.clamp(0, T - 1)
        sees_node = anc[:, relc].permute(1, 0, 2)  # (B, T, S): slot s holds an ancestor-or-self of t
        visible = (rel < 0).unsqueeze(1) | (in_tree.unsqueeze(1) & sees_node)  # (B, T, S)
        full = self._additive(visible)
        kind = self.inner._mask_kind
        if kind is None:
            return full
        window, per_type = kind
        kv_pos = torch.where(rel < 0, s.unsqueeze(0), lengths.unsqueeze(1) + depth[relc])  # (B, S) token positions
        q_pos = (lengths.unsqueeze(1) + depth).unsqueeze(-1)  # (B, T, 1)
        windowed = self._additive(visible & (kv_pos.unsqueeze(1) > q_pos - window))
        if not per_type:
            return windowed
        return {"full_attention": full, "sliding_attention": windowed, "chunked_attention": full}

    def _additive(self, visible: torch.Tensor) -> torch.Tensor:
        dt = self.inner.model.dtype
        m = torch.zeros(visible.shape, dtype=dt, device=self.device)
        return m.masked_fill_(~visible, torch.finfo(dt).min).unsqueeze(1)  # (B, 1, T, S)

    @torch.inference_mode()
    def commit_path(self, state, tokens: torch.Tensor, path: torch.Tensor, n: torch.Tensor) -> None:
        """Move the keys/values of nodes path[b, :n[b]] to slots lengths[b] + 0.., then lengths += n."""
        B, P = path.shape
        n = torch.as_tensor(n, dtype=torch.long, device=self.device)
        check_arg(bool(((n >= 0) & (n <= P)).all()), "n", n.tolist(), f"integers in [0, {P}]")
        L = state.lengths.unsqueeze(1)  # (B, 1)
        dst = L + torch.arange(P, device=self.device)  # (B, P)
        src = torch.where(torch.arange(P, device=self.device) < n.unsqueeze(1), L + path.clamp(min=0), dst)
        for layer in state.cache.layers:
            if getattr(layer, "keys", None) is None:
                continue
            for buf in (layer.keys, layer.values):  # (B, H, S, Dh)
                H, Dh = buf.shape[1], buf.shape[3]
                moved = buf.gather(2, src.view(B, 1, P, 1).expand(B, H, P, Dh))  # read all before writing
                buf.scatter_(2, dst.view(B, 1, P, 1).expand(B, H, P, Dh), moved)
        state.lengths = state.lengths + n
        if B == 1:
            state.max_len, state.uniform = int(state.lengths[0]), True
        else:
            lo, hi = torch.aminmax(state.lengths)
            state.max_len, state.uniform = int(hi), int(lo) == int(hi)
