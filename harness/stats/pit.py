"""The randomized probability integral transform and its tests: pooled, per position, consecutive pairs.

Notation as in :mod:`harness.stats`.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from specimpl.errors import check_arg
from harness.stats.common import DEFAULT_ALPHA, DEFAULT_MIN_EXPECTED, DEFAULT_POWER, _rng
from harness.stats.results import KSResult, PairResult
from harness.stats.chi2 import chi2_min_detectable_tv, chi2_pvalue
from harness.stats.continuous import ks_1samp

__all__ = ["randomized_pit", "pit_from_probs", "pit_uniformity_test", "pit_position_tests", "pit_pair_bins", "pit_pair_phases", "pit_pair_tables", "pit_grid_cells", "pit_pair_counts", "pit_pair_test"]


def randomized_pit(cdf_below, pmf, v) -> np.ndarray:
    """Randomized PIT U = F(x − 1) + V p(x) from the two quantities F(x − 1) (probability of tokens
    below x under the target's conditional) and p(x), and uniforms V ~ U(0, 1) (all same shape).
    Under H0 (sampler = target) the U are iid U(0, 1)."""
    F = np.asarray(cdf_below, dtype=np.float64)
    p = np.asarray(pmf, dtype=np.float64)
    V = np.asarray(v, dtype=np.float64)
    check_arg(F.shape == p.shape == V.shape, "pmf", f"shapes {F.shape}, {p.shape}, {V.shape}",
              "cdf_below, pmf and v of one shape")
    return np.clip(F + V * p, 0.0, 1.0)


def pit_from_probs(probs, tokens, generator=None, pad_mask=None) -> np.ndarray:
    """Randomized PIT of emitted ``tokens`` (N, T) under the target's conditionals ``probs`` (N, T, V)
    given the emitted prefix; ``generator`` (torch.Generator, numpy Generator or seed) draws V.

    ``pad_mask`` (N, T) bool marks an absorbing pad after EOS: there the target's conditional is one-hot
    on the pad, so U = V exactly.  Returns U (N, T) float64.
    """
    import torch

    if isinstance(probs, torch.Tensor):
        P = probs.detach().to(torch.float64)
        X = torch.as_tensor(tokens, device=P.device).long()
    else:
        P = torch.as_tensor(np.asarray(probs, dtype=np.float64))
        X = torch.as_tensor(np.asarray(tokens)).long()
    check_arg(P.dim() == 3, "probs", f"tensor of shape {tuple(P.shape)}", "a (N, T, V) tensor")
    check_arg(tuple(X.shape) == tuple(P.shape[:2]), "tokens", f"shape {tuple(X.shape)}",
              f"shape (N, T) = {tuple(P.shape[:2])}")
    mask = None
    if pad_mask is not None:
        mask = torch.as_tensor(np.asarray(pad_mask) if not isinstance(pad_mask, torch.Tensor) else pad_mask,
                               device=P.device).bool()
        check_arg(tuple(mask.shape) == tuple(X.shape), "pad_mask", f"shape {tuple(mask.shape)}",
                  f"shape (N, T) = {tuple(X.shape)}")
    valid = X if mask is None else X.masked_fill(mask, 0)
    V = P.shape[-1]
    check_arg(bool(((valid >= 0) & (valid < V)).all()), "tokens", "ids outside [0, V) off the pad mask",
              f"token ids in [0, {V})")
    idx = valid.unsqueeze(-1)  # (N, T, 1)
    px = P.gather(-1, idx).squeeze(-1)  # (N, T)
    F_below = (P.cumsum(-1).gather(-1, idx).squeeze(-1) - px).clamp_min(0.0)  # (N, T)
    if isinstance(generator, torch.Generator):
        v = torch.rand(X.shape, generator=generator, dtype=torch.float64, device=generator.device).to(P.device)
    else:
        v = torch.as_tensor(_rng(generator).random(tuple(X.shape)), device=P.device)
    u = (F_below + v * px).clamp(0.0, 1.0)  # (N, T)
    if mask is not None:
        u = torch.where(mask, v, u)
    return u.cpu().numpy()


def _uniform_cdf(x):
    return np.clip(x, 0.0, 1.0)


def pit_uniformity_test(u, *, alpha: float = DEFAULT_ALPHA, power: float = DEFAULT_POWER) -> KSResult:
    """KS of all PIT values pooled against U(0, 1) (iid under H0 by construction)."""
    return ks_1samp(np.asarray(u).ravel(), _uniform_cdf, alpha=alpha, power=power)


def pit_position_tests(u, *, alpha: float = DEFAULT_ALPHA, power: float = DEFAULT_POWER) -> list[KSResult]:
    """:func:`pit_uniformity_test` of each position's PIT values (columns of ``u`` (N, T))."""
    a = np.asarray(u, dtype=np.float64)
    check_arg(a.ndim == 2, "u", f"array of shape {a.shape}", "an (N, T) array")
    return [pit_uniformity_test(a[:, t], alpha=alpha, power=power) for t in range(a.shape[1])]


def pit_pair_bins(n_pairs, max_bins: int = 16, min_expected: float = DEFAULT_MIN_EXPECTED) -> int:
    """Cells per axis m of the PIT pair grid: the largest m ≤ ``max_bins`` (and ≥ 2) whose m² equally
    likely cells keep an expected count ≥ ``min_expected`` with ``n_pairs`` pairs in a table."""
    return int(max(2, min(max_bins, math.floor(math.sqrt(n_pairs / max(min_expected, 1e-9))))))


def pit_pair_phases(T: int, lag: int = 1) -> list[np.ndarray]:
    """Offsets t of the non-overlapping pairs (U_t, U_t+lag) of a length-``T`` sequence, one array per
    table: phase 0 holds the t with ⌊t / lag⌋ even, phase 1 those with ⌊t / lag⌋ odd (t + lag < T).  In
    each table every index is used at most once, so under H0 its pairs are iid; for lag 1 these are the
    even and odd offsets.  Empty phases are left out."""
    check_arg(isinstance(lag, (int, np.integer)) and lag >= 1, "lag", lag, "an integer >= 1")
    t = np.arange(max(T - lag, 0))
    return [ts for ts in (t[(t // lag) % 2 == ph] for ph in (0, 1)) if ts.size]


def pit_pair_tables(u, bins: Optional[int] = None, *, max_bins: int = 16,
                    min_expected: float = DEFAULT_MIN_EXPECTED, lag: int = 1) -> tuple[int, list[np.ndarray]]:
    """The tables of :func:`pit_pair_test`: ``(m, [even, odd])``, each table the counts (m²,) of
    non-overlapping pairs (U_t, U_t+lag) of ``u`` (N, T) on the m × m grid, cell
    ``m · bin(U_t) + bin(U_t+lag)``; the two tables are the phases of :func:`pit_pair_phases` (lag 1:
    ``even`` holds the pairs at offsets t = 0, 2, 4, …, ``odd`` those at 1, 3, 5, …; absent when T = 2).
    ``bins`` defaults to :func:`pit_pair_bins` of the smaller table."""
    a = np.asarray(u, dtype=np.float64)
    check_arg(isinstance(lag, (int, np.integer)) and lag >= 1, "lag", lag, "an integer >= 1")
    check_arg(a.ndim == 2 and a.shape[1] >= lag + 1, "u", f"array of shape {a.shape}",
              f"an (N, T) array with T >= lag + 1 = {lag + 1}")
    check_arg(bool(np.all((a >= 0) & (a <= 1))), "u", "values outside [0, 1]", "PIT values in [0, 1]")
    phases = pit_pair_phases(a.shape[1], lag)
    if bins is None:
        bins = pit_pair_bins(min(a.shape[0] * ts.size for ts in phases), max_bins, min_expected)
    check_arg(isinstance(bins, (int, np.integer)) and bins >= 2, "bins", bins, "an integer >= 2")
    return int(bins), pit_pair_counts(pit_grid_cells(a, bins), bins, lag)


def pit_grid_cells(u: np.ndarray, bins: int) -> np.ndarray:
    """The cell (0..bins-1) of each PIT value of ``u`` (any shape, in [0, 1]) on a grid of ``bins`` per axis."""
    g = (u * bins).astype(np.int64)
    return np.minimum(g, bins - 1, out=g)


def pit_pair_counts(g: np.ndarray, bins: int, lag: int = 1) -> list[np.ndarray]:
    """The tables of :func:`pit_pair_tables` from grid cells ``g`` (N, T) (:func:`pit_grid_cells`, unchecked):
    counts (bins²,) of cell ``bins · g_t + g_t+lag`` per phase of :func:`pit_pair_phases`."""
    return [np.bincount((g[:, ts] * bins + g[:, ts + lag]).ravel(), minlength=bins * bins)
            for ts in pit_pair_phases(g.shape[1], lag)]


def pit_pair_test(u, *, bins: Optional[int] = None, max_bins: int = 16,
                  min_expected: float = DEFAULT_MIN_EXPECTED, alpha: float = DEFAULT_ALPHA,
                  power: float = DEFAULT_POWER) -> PairResult:
    """Serial test of consecutive PIT values (U_t, U_{t+1}) of ``u`` (N, T), T ≥ 2.

    Each pair is binned on an m × m grid; under H0 the cells are equally likely.  Non-overlapping pairs
    (offsets 0, 2, 4, … in one table; 1, 3, 5, … in another, :func:`pit_pair_tables`) make each table's
    counts exactly multinomial; each table gets a Pearson χ² with df = m² − 1 and ``pvalue`` is the
    Bonferroni combination.  ``bins`` defaults to the largest m ≤ ``max_bins`` with expected count ≥
    ``min_expected`` per cell (:func:`pit_pair_bins`).  Catches coupled bugs whose marginal PIT law is
    exactly uniform.
    """
    bins, tables = pit_pair_tables(u, bins, max_bins=max_bins, min_expected=min_expected)
    K = bins * bins
    pvals, statsv = [], []
    for counts in tables:
        e = int(counts.sum()) / K
        s = float(((counts.astype(np.float64) - e) ** 2 / e).sum())
        statsv.append(s)
        pvals.append(float(chi2_pvalue(s, K - 1, int(counts.sum()), e)))
    m = len(tables)
    p = min(1.0, m * min(pvals))
    n_min = min(int(c.sum()) for c in tables)
    # each table is tested at alpha/m under the Bonferroni combination
    mdt = chi2_min_detectable_tv(n_min, K, alpha / m, power)
    return PairResult(statistic=max(statsv), pvalue=p, df=K - 1, bins=bins, n_pairs=sum(int(c.sum()) for c in tables),
                      pvalues=tuple(pvals), statistics=tuple(statsv), min_detectable_tv=mdt, alpha=alpha, power=power,
                      method=f"pearson on {bins}x{bins} grid, non-overlapping pairs, bonferroni over {m} table(s)")
