"""The numerics floor: how far a sampler's output law moves when its arithmetic runs in a lower precision.

Notation as in :mod:`specimpl.speculative`: p the target's warped law, q the draft's, both from logits by
:func:`specimpl.sampling.warp`.  The samplers of this project draw a token by inverse CDF
(:func:`specimpl.sampling.sample_categorical`: the smallest i with u * sum(probs) < cdf[i]), accept a draft
x when u * q(x) < p(x), and at the first rejection draw from the residual max(0, p - q).  In float64 each
of these steps is exact to ~1e-16; in float32, bfloat16 or float16 every one of them rounds:

* the **softmax / warp** (logits cast to the dtype, then exp, sum, divide in it),
* the **draw**: the CDF is a cumulative sum in the dtype, the uniform is quantised to the dtype's grid, the
  product u * total rounds, and mass that rounds past the last CDF step goes to the last positive token,
* the **acceptance test** u * q(x) < p(x) in the dtype (u quantised),
* the **residual** max(0, p - q) in the dtype (small differences cancel), then its draw.

Every law here is computed **exactly** (no sampling): the uniform of a dtype is a known discrete law
(:class:`UniformLaw`: ``torch.rand``'s own grid, checked against ``torch.rand`` itself in the tests), the
token a uniform maps to is nondecreasing in it, so the law of a draw is a difference of the uniform's CDF at
the CDF steps (:func:`draw_law`), and an acceptance probability is the uniform's CDF at the largest u that
passes the test (:func:`accept_prob`, a binary search on the grid).  The speculative output law of one
position is then q_d-draw law x acceptance + rejection mass x residual-draw law (:func:`speculative_law`),
and its total variation from the float64 target law p is the floor a certificate for that arithmetic can
promise (:func:`step_tvs`).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

from specimpl.sampling import SamplingConfig, warp

__all__ = ["DTYPES", "STEPS", "UniformLaw", "uniform_law", "draw_law", "accept_prob", "speculative_law",
           "step_tvs", "tv"]

DTYPES = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16,
          "float16": torch.float16}

# The steps of the floor table: which parts of the arithmetic run in the low dtype (the rest in float64).
STEPS = {
    "softmax": "target-only: the warp (softmax) in the dtype, the draw exact",
    "draw": "target-only: the float64 law cast to the dtype, drawn by inverse CDF in the dtype",
    "target_only": "target-only: warp and draw in the dtype",
    "accept": "speculative: only the acceptance test u*q(x) < p(x) in the dtype (uniform quantised)",
    "residual": "speculative: only the residual max(0, p - q) and its draw in the dtype",
    "speculative": "speculative: warps, draft draw, acceptance, residual and final draw in the dtype",
}


def tv(a: np.ndarray, b: np.ndarray) -> float:
    """Total variation between two laws on the same cells."""
    return 0.5 * float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).sum())


# ------------------------------------------------------------------------------------- uniforms
@dataclass(frozen=True)
class UniformLaw:
    """The law of ``torch.rand(..., dtype=dtype)`` on the CPU: ``values`` (n,) ascending, in the dtype, and
    ``cdf`` (n + 1,) float64 with cdf[j] = P(u < values[j]) (cdf[0] = 0, cdf[n] = 1).

    float32: the 2^24 multiples of 2^-24, equally likely.  bfloat16 / float16: torch draws a 24-bit
    uniform, rounds it to the nearest value of the dtype, and maps a result of 1.0 to 0.0 (measured; the
    tests check this model against ``torch.rand`` with a chi-square test).  float64 is the reference and has
    no table (its 2^53-point grid is treated as continuous)."""

    dtype: torch.dtype
    values: torch.Tensor
    cdf: np.ndarray

    @property
    def n(self) -> int:
        return int(self.values.numel())

    def value(self, j: torch.Tensor) -> torch.Tensor:
        """The j-th smallest value (j (V,) long, 0 <= j < n), in the dtype; float32 by arithmetic (its grid is
        j * 2^-24, exact), the others from the table."""
        if self.dtype == torch.float32:
            return (j.to(torch.float64) / 2 ** 24).to(torch.float32)
        return self.values[j]


@lru_cache(maxsize=None)
def uniform_law(dtype: torch.dtype) -> UniformLaw:
    """The :class:`UniformLaw` of ``dtype`` (float32, bfloat16 or float16)."""
    grid = torch.arange(2 ** 24, dtype=torch.float64) / 2 ** 24  # (2^24,) the 24-bit uniform, exact
    if dtype == torch.float32:
        return UniformLaw(dtype, grid.to(torch.float32), np.arange(2 ** 24 + 1, dtype=np.float64) / 2 ** 24)
    if dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"dtype={dtype}: a uniform law is tabulated for float32, bfloat16 and float16 only")
    u = grid.to(torch.float32).to(dtype)  # (2^24,) round to nearest
    u = torch.where(u == 1, torch.zeros((), dtype=dtype), u)
    values, counts = torch.unique(u.to(torch.float64), return_counts=True)  # ascending
    cdf = np.concatenate([[0.0], np.cumsum(counts.numpy()) / 2 ** 24])
    return UniformLaw(dtype, values.to(dtype), cdf)


# ---------------------------------------------------------------------------------- exact laws

def _count_below(U: UniformLaw, a: torch.Tensor, b: torch.Tensor) -> np.ndarray:
    """Per element, how many grid values u of ``U`` satisfy u * a < b with the product rounded in the
    dtype (a, b (V,) in U's dtype).  The rounded product is nondecreasing in u, so the passing values are
    a prefix of the grid: a binary search on its length, vectorised over the elements."""
    lo = torch.zeros(a.shape, dtype=torch.long)  # values known to pass
    hi = torch.full(a.shape, U.n, dtype=torch.long)  # values not known to fail
    while bool((lo < hi).any()):
        mid = (lo + hi + 1) // 2  # (V,) candidate count in (lo, hi]
        passes = (U.value((mid - 1).clamp(min=0)) * a) < b  # (V,) the test at the mid-th value, in the dtype
        open_ = lo < hi
        lo = torch.where(passes & open_, mid, lo)
        hi = torch.where(~passes & open_, mid - 1, hi)
    return lo.numpy()

def draw_law(probs: torch.Tensor) -> np.ndarray:
    """Exact law (float64, (V,)) of ``sample_categorical(probs, u)`` with u ~ ``torch.rand`` in probs' dtype.

    The token is count(cdf <= t) with t = u * cdf[-1] rounded in the dtype, so token <= i iff t < cdf[i]:
    P(token <= i) is the uniform's mass where the rounded product stays below cdf[i] (the product is
    nondecreasing in u, so that set is a prefix of the grid).  Mass past the last step goes to the last
    token with positive probability, as sample_categorical clamps it."""
    if probs.dtype == torch.float64:
        p = probs.numpy()
        return p / p.sum()
    U = uniform_law(probs.dtype)
    cdf = torch.cumsum(probs, dim=-1)  # (V,) in the dtype, as sample_categorical computes it
    below = _count_below(U, cdf[-1].expand_as(cdf), cdf)  # (V,) #{u: u * cdf[-1] < cdf[i]} on the grid
    at_most = U.cdf[below]  # (V,) P(token <= i) before clamping
    law = np.diff(np.concatenate([[0.0], at_most]))
    positive = np.flatnonzero(probs.to(torch.float64).numpy() > 0)
    law[positive[-1]] += 1.0 - at_most[-1]  # rounded past the last step: the last positive token
    return law


def accept_prob(p: torch.Tensor, q: torch.Tensor) -> np.ndarray:
    """Exact P(u * q(x) < p(x) and q(x) > 0) per token x (float64, (V,)), u ~ ``torch.rand`` in the dtype
    of p and q (float64: min(1, p/q), the continuous limit)."""
    if p.dtype == torch.float64:
        pn, qn = p.numpy(), q.numpy()
        return np.where(qn > 0, np.minimum(1.0, pn / np.where(qn > 0, qn, 1.0)), 0.0)
    U = uniform_law(p.dtype)
    lo = _count_below(U, q, p)  # (V,) grid values u with u * q(x) < p(x)
    return np.where(q.to(torch.float64).numpy() > 0, U.cdf[lo], 0.0)


def speculative_law(p: torch.Tensor, q: torch.Tensor, *, accept_dtype: torch.dtype = None,
                    residual_dtype: torch.dtype = None) -> np.ndarray:
    """Exact output law of one speculative position: draft x ~ q (drawn in q's dtype), accepted with
    :func:`accept_prob` (computed in ``accept_dtype``, default p's), else y ~ max(0, p - q) computed and
    drawn in ``residual_dtype`` (default p's; p itself when the residual rounds to zero, as verify_block
    does).  p, q (V,) warped laws."""
    a_dt, r_dt = accept_dtype or p.dtype, residual_dtype or p.dtype
    Q = draw_law(q)  # (V,) law of the draft token
    alpha = accept_prob(p.to(a_dt), q.to(a_dt))  # (V,)
    p_r, q_r = p.to(r_dt), q.to(r_dt)
    res = (p_r - q_r).clamp(min=0)  # (V,) unnormalised residual in its dtype
    R = draw_law(res if bool(res.sum() > 0) else p_r)  # (V,)
    accepted = Q * alpha  # (V,)
    return accepted + (1.0 - accepted.sum()) * R


def step_tvs(logits_p: torch.Tensor, logits_q: torch.Tensor, config: SamplingConfig, dtype: torch.dtype) -> dict:
    """TV from the float64 target law p of each step of :data:`STEPS` run in ``dtype``, for one row of
    target and draft logits (V,) (float64).  Also the float64 acceptance rate (key ``alpha``)."""
    f64 = torch.float64
    p64, q64 = warp(logits_p.to(f64), config), warp(logits_q.to(f64), config)  # (V,) reference laws
    p_d, q_d = warp(logits_p.to(dtype), config), warp(logits_q.to(dtype), config)  # (V,) in the dtype
    ref = p64.numpy()
    soft = p_d.to(f64).numpy()
    out = {
        "softmax": tv(soft / soft.sum(), ref),
        "draw": tv(draw_law(p64.to(dtype)), ref),
        "target_only": tv(draw_law(p_d), ref),
        "accept": tv(speculative_law(p64, q64, accept_dtype=dtype), ref),
        "residual": tv(speculative_law(p64, q64, residual_dtype=dtype), ref),
        "speculative": tv(speculative_law(p_d, q_d), ref),
        "alpha": float(np.minimum(p64.numpy(), q64.numpy()).sum()),
    }
    return out
