"""The ragged KV cache of :class:`specimpl.hf.HFModel`: a transformers ``Cache`` whose rows have their own lengths.

Layout (see :mod:`specimpl.hf` for the masks and positions that go with it): one preallocated
buffer per attention layer, keys and values (B, H, S, D); row b owns slots 0 .. lengths[b] - 1 in
order.  :class:`HFModel` sets, before each forward call, where the T new tokens go (``offset`` when
every row has one length, else ``write_index`` (B, T)), how many slots attention sees (``kv_len``)
and the longest row (``seq_length``); the layers write there and hand attention the first
``kv_len`` slots.  Rolling back is the model's business (it sets lengths); ``select`` gathers rows.

This module imports transformers, after checking its version (:func:`specimpl.hf.require_transformers`);
:mod:`specimpl.hf` imports it on first use.
"""
from __future__ import annotations

from typing import Optional

import torch

from specimpl.hf_version import require_transformers

require_transformers()
from transformers.cache_utils import Cache, CacheLayerMixin  # noqa: E402  (after the version check)

__all__ = ["RaggedLayer", "RaggedKVCache"]


class RaggedLayer(CacheLayerMixin):
    """Keys/values of one attention layer, (B, H, S, D) with per-row lengths held by the parent."""

    is_sliding = False
    is_croppable = False
    is_compileable = False
    supports_early_init = False

    def __init__(self, parent):
        super().__init__()
        self.parent = parent
        self.keys = self.values = None

    def lazy_initialization(self, key_states, value_states):
        self.is_initialized = True

    def _ensure(self, key_states: torch.Tensor, value_states: torch.Tensor, need: int) -> None:
        B, H, _, D = key_states.shape
        Dv = value_states.shape[-1]
        if self.keys is None:
            cap = max(need, self.parent.initial_capacity)
            self.keys = key_states.new_zeros(B, H, cap, D)  # (B, H, S, D)
            self.values = value_states.new_zeros(B, H, cap, Dv)
            self.is_initialized = True
        elif self.keys.shape[2] < need:
            cap = max(need, 2 * self.keys.shape[2])
            grow = cap - self.keys.shape[2]
            self.keys = torch.cat([self.keys, self.keys.new_zeros(B, H, grow, D)], 2)
            self.values = torch.cat([self.values, self.values.new_zeros(B, H, grow, Dv)], 2)

    def update(self, key_states, value_states, *args, **kwargs):
        """key_states (B, H, T, D): write at the parent's slots, return (B, H, kv_len, D) views."""
        p = self.parent
        T = key_states.shape[2]
        self._ensure(key_states, value_states, p.kv_len)
        if p.offset is not None:  # every row at the same length: one slice copy
            self.keys[:, :, p.offset:p.offset + T] = key_states
            self.values[:, :, p.offset:p.offset + T] = value_states
        else:
            _write_rows(self.keys, key_states, p.flat_index(*self.keys.shape[:3]))
            _write_rows(self.values, value_states, p.flat_index(*self.values.shape[:3]))
        return self.keys[:, :, :p.kv_len], self.values[:, :, :p.kv_len]

    def get_seq_length(self) -> int:
        return self.parent.seq_length

    def get_max_length(self) -> int:
        return -1

    def get_mask_sizes(self, query_length: int):
        return self.parent.seq_length + query_length, 0

    def reset(self) -> None:
        self.keys = self.values = None
        self.is_initialized = False

    def select(self, index: torch.Tensor) -> None:
        if self.keys is not None:
            self.keys = self.keys.index_select(0, index)
            self.values = self.values.index_select(0, index)


def _write_rows(buf: torch.Tensor, new: torch.Tensor, flat: torch.Tensor) -> None:
    """Copy ``new`` (B, H, T, D) into ``buf`` (B, H, S, D) at the slots ``flat`` (B * H * T,) of its (B * H * S, D)
    view: one row copy of D numbers per new key, the same bytes as a scatter along the slot axis (which reads
    an index per number and costs 4-6 times as much)."""
    B, H, S, D = buf.shape
    T = new.shape[2]
    if not buf.is_contiguous():  # never so for the buffers this module allocates; kept correct all the same
        buf.scatter_(2, (flat.view(B, H, T) % S).unsqueeze(-1).expand(B, H, T, D), new)
        return
    buf.view(B * H * S, D).index_copy_(0, flat, new.reshape(B * H * T, D))


class RaggedKVCache(Cache):
    """transformers ``Cache`` whose rows have their own lengths; driven by :class:`HFModel`."""

    def __init__(self, num_layers: int, initial_capacity: int = 256):
        super().__init__(layers=[RaggedLayer(self) for _ in range(num_layers)])
        self.initial_capacity = initial_capacity
        self.offset: Optional[int] = None  # shared write offset when all rows are at one length
        self.write_index: Optional[torch.Tensor] = None  # (B, T) slots otherwise
        self.kv_len = 0  # slots handed to attention in the current call
        self.seq_length = 0  # longest row before the current call
        self._flat = None  # (write_index, (B, H, S), rows): flat_index's memo for the current call

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        return self.layers[layer_idx].update(key_states, value_states)

    def flat_index(self, B: int, H: int, S: int) -> torch.Tensor:
        """(B * H * T,) rows of a (B * H * S, D) view of a layer's buffer where the call's new tokens go: row
        (b, h, t) is (b * H + h) * S + write_index[b, t].  Computed once per call and buffer shape (every layer
        of one call shares it)."""
        wi = self.write_index  # (B, T)
        memo = self._flat
        if memo is not None and memo[0] is wi and memo[1] == (B, H, S):
            return memo[2]
        T = wi.shape[1]
        base = torch.arange(B * H, device=wi.device).view(B, H, 1) * S  # (B, H, 1) first row of each (b, h)
        flat = (base + wi.view(B, 1, T)).view(-1)  # (B * H * T,)
        self._flat = (wi, (B, H, S), flat)
        return flat

    def select(self, index: torch.Tensor) -> None:
        for layer in self.layers:
            layer.select(index)
