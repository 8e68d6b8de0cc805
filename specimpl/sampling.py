"""Sampling controls shared by target and draft, and the categorical draw.

One function, :func:`warp`, turns logits into the distribution a token is drawn from.  The
speculative sampler applies it to the target *and* to the draft, so the draft's q is exactly the
distribution its token was drawn from and the warped target p is the reference distribution the
output must follow.  Exact computations (``specimpl.ngram``) apply the same function to the tables.

Randomness is injected: :func:`sample_categorical` takes its uniforms as an argument, so a test
can hand it fixed numbers and check the outcome by hand.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from specimpl.errors import as_int, check_arg

__all__ = ["SamplingConfig", "MIN_TEMPERATURE", "warp", "sample_categorical", "TableSampler", "check_probs"]


# The smallest positive temperature: logits / T must not overflow (float32 max ~3.4e38, so |logits| up
# to ~3e32 are safe); a smaller T is refused rather than silently turning the law into NaN.  T = 0 is greedy.
MIN_TEMPERATURE = 1e-6


def _real(v) -> Optional[float]:
    """A real number (int, float, NumPy or 0-d tensor scalar; not bool, not complex) as a float, else None."""
    if isinstance(v, (bool, np.bool_)) or isinstance(v, (str, bytes)) or getattr(v, "ndim", 0) != 0:
        return None
    if torch.is_tensor(v) and (v.dtype == torch.bool or v.is_complex()):
        return None
    if not isinstance(v, numbers.Real) and not torch.is_tensor(v):
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class SamplingConfig:
    """Sampling controls, applied in this order: temperature, top-k, top-p.

    temperature : 0 (greedy, same as ``greedy=True``) or a float >= MIN_TEMPERATURE (1e-6).
    top_k       : int >= 1 or None (no top-k).
    top_p       : float in (0, 1]. 1 keeps everything.
    greedy      : bool. The distribution becomes one-hot on the argmax (lowest index on ties).
    """

    temperature: float = 1.0
    top_k: Optional[int] = None
    top_p: float = 1.0
    greedy: bool = False

    def __post_init__(self):
        t = _real(self.temperature)
        check_arg(t is not None and math.isfinite(t) and (t == 0 or t >= MIN_TEMPERATURE), "temperature",
                  self.temperature, f"0 (greedy) or a finite number >= {MIN_TEMPERATURE:g} (below that, "
                  "logits / temperature can overflow float32; use temperature=0 for the T -> 0 limit)")
        if self.top_k is not None:
            kk = as_int(self.top_k)
            check_arg(kk is not None and kk >= 1, "top_k", self.top_k, "an integer >= 1, or None")
            if type(self.top_k) is not int:
                object.__setattr__(self, "top_k", kk)
        p = _real(self.top_p)
        check_arg(p is not None and 0 < p <= 1, "top_p", self.top_p, "a number in (0, 1]")
        check_arg(isinstance(self.greedy, (bool, np.bool_)), "greedy", self.greedy, "True or False")
        for name, v in (("temperature", t), ("top_p", p), ("greedy", bool(self.greedy))):
            if type(getattr(self, name)) not in (int, float, bool):  # NumPy / 0-d tensor scalars -> Python
                object.__setattr__(self, name, v)

    @property
    def is_greedy(self) -> bool:
        return self.greedy or self.temperature == 0

    def describe(self) -> str:
        if self.is_greedy:
            return "greedy"
        parts = [f"T={self.temperature:g}"]
        if self.top_k is not None:
            parts.append(f"top_k={self.top_k}")
        if self.top_p < 1:
            parts.append(f"top_p={self.top_p:g}")
        return ",".join(parts)


def warp(logits: torch.Tensor, config: SamplingConfig) -> torch.Tensor:
    """Logits (..., V) -> probabilities (..., V) after temperature, top-k, top-p or greedy.

    ``logits`` may hold -inf (tokens of probability 0, e.g. ``log`` of a table).  The result is
    in the dtype of ``logits`` and sums to 1 over the last axis.  A row with a NaN or +inf logit, or
    with no finite one, comes out with NaN entries (greedy too), never as a plausible law: the
    samplers check the warped laws and raise (:func:`specimpl.inputs.check_finite_laws`).
    """
    if config.is_greedy:
        idx = logits.argmax(dim=-1, keepdim=True)  # (..., 1) first maximum on ties (a NaN wins)
        one = logits.gather(-1, idx) * 0 + 1  # (..., 1) 1, or NaN where the winner is NaN or +-inf
        return torch.zeros_like(logits).scatter_(-1, idx, one)
    x = logits / config.temperature if config.temperature != 1 else logits
    if config.top_k is not None and config.top_k < x.shape[-1]:
        kth = torch.topk(x, config.top_k, dim=-1).values[..., -1:]  # (..., 1)
        x = x.masked_fill(x < kth, float("-inf"))
    probs = torch.softmax(x, dim=-1)
    if config.top_p < 1:
        sorted_p, order = torch.sort(probs, dim=-1, descending=True)
        before = torch.cumsum(sorted_p, dim=-1) - sorted_p  # mass strictly above each token
        drop_sorted = before >= config.top_p  # keep the smallest prefix reaching top_p
        drop = torch.zeros_like(drop_sorted).scatter_(-1, order, drop_sorted)
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def sample_categorical(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF draw: probs (..., V) (need not sum to 1), u (...) in [0, 1) -> index (...).

    Returns the smallest i with u * sum(probs) < cdf[i].  A token of probability 0 is never
    returned (its cdf step is empty); float round-off at the top is clamped to the last token
    with positive probability.  Rows that are all zero return 0 (callers must not pass them).
    """
    cdf = torch.cumsum(probs, dim=-1)  # (..., V) nondecreasing (nonnegative terms)
    target = (u * cdf[..., -1]).unsqueeze(-1)  # (..., 1)
    if cdf.dtype != target.dtype:  # compare in the promoted dtype, as `cdf <= target` would
        cdf = cdf.to(target.dtype)
    idx = torch.searchsorted(cdf, target, right=True).squeeze(-1)  # (...) = count(cdf <= target)
    V = probs.shape[-1]
    if idx.numel() and int(idx.max()) >= V:
        positive = probs > 0
        last = V - 1 - positive.flip(-1).to(torch.int8).argmax(dim=-1)
        idx = torch.where(idx >= V, last, idx)
    return idx


class TableSampler:
    """:func:`sample_categorical` for rows of a fixed table, in O(1) per draw instead of O(V).

    ``draw(rows, u)`` returns exactly ``sample_categorical(probs[rows], u)`` (bit for bit) without
    gathering (n, V) rows.  The unit interval is cut into M = 2^m buckets per table row; a bucket
    whose lowest and highest uniform give the same token stores that token (the draw is
    nondecreasing in u, so every u in the bucket gives it).  Draws in the at most V - 1 buckets per
    row that contain a CDF step fall back to :func:`sample_categorical` on their rows.

    probs : (R, V) table (rows need not sum to 1, none all-zero).  Draws use uniforms of its dtype.
    """

    def __init__(self, probs: torch.Tensor, max_entries: int = 2 ** 18, max_buckets: int = 2 ** 13):
        check_arg(torch.is_tensor(probs) and probs.dim() == 2 and probs.is_floating_point(), "probs",
                  f"{type(probs).__name__} {tuple(probs.shape) if torch.is_tensor(probs) else ''}",
                  "a floating-point tensor of shape (R, V)")
        R, V = probs.shape
        check_arg(V <= 32767, "probs", f"table with V = {V}", "at most 32767 columns")
        self.probs = probs.contiguous()
        M = 1
        while M * 2 <= max_buckets and R * M * 2 <= max_entries:
            M *= 2
        self.M = M
        dt = probs.dtype
        j = torch.arange(M, dtype=torch.float64)
        u_lo = (j / M).to(dt)  # (M,) exact: multiples of a power of 2
        u_hi = torch.nextafter(((j + 1) / M).to(dt), torch.zeros((), dtype=dt))  # (M,) largest u in the bucket
        # sample_categorical's own arithmetic, row by row: the same cumsum, the same product u * total,
        # and count(cdf <= t) == searchsorted(cdf, t, right=True) on a nondecreasing cdf
        cdf = torch.cumsum(self.probs, dim=-1)  # (R, V)
        last = V - 1 - (self.probs > 0).flip(-1).to(torch.int8).argmax(dim=-1, keepdim=True)  # (R, 1)

        def inv(u):  # (M,) -> (R, M)
            t = u * cdf[:, -1:]  # (R, M)
            idx = torch.searchsorted(cdf, t, right=True)
            return torch.where(idx >= V, last, idx)

        lo, hi = inv(u_lo), inv(u_hi)
        self.lut = torch.where(lo == hi, lo, -1).to(torch.int16).view(-1)  # (R * M,) token, or -1: a CDF step

    def draw(self, rows: torch.Tensor, u: torch.Tensor, dtype=torch.int64) -> torch.Tensor:
        """rows (n,) int32/int64 table rows, u (n,) uniforms in [0, 1) of the table's dtype -> tokens (n,)."""
        b = (u * self.M).to(rows.dtype)  # (n,) bucket: u * 2^m is exact, truncation is floor for u >= 0
        x = self.lut.index_select(0, rows * self.M + b)  # (n,) int16
        amb = (x < 0).nonzero().squeeze(1)  # (a,) draws in a bucket that holds a CDF step
        if amb.numel():
            x[amb] = sample_categorical(self.probs[rows[amb]], u[amb]).to(x.dtype)
        return x.to(dtype)


def check_probs(name: str, probs: torch.Tensor, atol: float = 1e-5) -> None:
    """Reject NaN, negative or unnormalised probability vectors with an error naming ``name``."""
    if not torch.is_tensor(probs) or not probs.is_floating_point():
        raise ValueError(f"`{name}` must be a floating-point tensor of probabilities; got {type(probs).__name__}"
                         + (f" of dtype {probs.dtype}" if torch.is_tensor(probs) else ""))
    if bool(torch.isnan(probs).any()):
        raise ValueError(f"`{name}` contains NaN; probabilities must be finite and >= 0")
    if bool((probs < 0).any()):
        raise ValueError(f"`{name}` contains a negative value (min {probs.min().item():.3g}); "
                         "probabilities must be >= 0")
    s = probs.sum(dim=-1)
    bad = (s - 1).abs() > atol
    if bool(bad.any()):
        worst = s.flatten()[(s - 1).abs().flatten().argmax()].item()
        raise ValueError(f"`{name}` is not normalised: a row sums to {worst:.6g}; every row over the "
                         f"last axis must sum to 1 (tolerance {atol:g})")
