"""Lagged dependence of a run's output: PIT pairs k + 1 apart and the joint law at a later offset.

Round-structured bugs couple tokens that sit a round apart (k + 1 positions for k drafts a round), and a
bug that only shows once the chain has run a while is invisible in the first J tokens.  :class:`LaggedTables`
holds, for one exact-law run, the sufficient statistics of two groups of tests planned by
:func:`harness.verify.battery.plan_tests`:

* PIT pairs (U_t, U_t+L) at lags L = 2..max_lag on the run's m × m grid, two tables of non-overlapping
  pairs per lag (:func:`harness.stats.pit_pair_phases`; lag 1 stays in ``Accumulator.pit_pairs``).  The
  PIT values are the accumulator's own (one uniform per token, drawn once): no extra randomness.
* the counts of the symbols at positions [N − J, N) (the ``tail`` joint; none when N ≤ J, where it would
  repeat the first-J joint), tested against :meth:`harness.laws.ngram.ExactLaw.joint_at`.

Mergeable (:meth:`LaggedTables.merge`), so sharded runs can add their parts.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from harness.stats.pit import pit_grid_cells, pit_pair_counts

__all__ = ["LaggedTables"]


@dataclass
class LaggedTables:
    """lags (L,) the PIT pair lags (≥ 2); bins m; pit_pairs (L, 2, m²) counts per lag and phase; tail_offset
    and tail_tokens the later-offset joint's window [offset, offset + J) (tail_tokens 0: none); tail_joint
    ((V+1)^J,) its counts."""

    lags: tuple
    bins: int
    n_symbols: int
    tail_offset: int
    tail_tokens: int
    pit_pairs: np.ndarray
    tail_joint: np.ndarray

    @classmethod
    def for_law(cls, law, max_lag: int, bins: int, joint_tokens: int) -> "LaggedTables":
        """Empty tables for ``law`` (N positions, V + 1 symbols): lags 2..min(max_lag, N − 1), the tail
        joint of the last ``joint_tokens`` positions when N > J ≥ 2."""
        N, W = law.N, law.n_symbols
        lags = tuple(range(2, min(int(max_lag), N - 1) + 1))
        J = int(joint_tokens) if 2 <= joint_tokens < N else 0
        return cls(lags, int(bins), W, N - J if J else 0, J, np.zeros((len(lags), 2, bins * bins), np.int64),
                   np.zeros(W ** J if J else 0, np.int64))

    def add(self, sym: np.ndarray, u: Optional[np.ndarray], cells: Optional[np.ndarray] = None) -> None:
        """Fold one call's symbols (B, N) and, unless None, its PIT values (B, N) in; ``cells``: their grid
        cells (:func:`harness.stats.pit_grid_cells` on this table's bins), when the caller has them."""
        if u is not None:
            g = pit_grid_cells(np.asarray(u, np.float64), self.bins) if cells is None else cells
            for i, lag in enumerate(self.lags):
                for ph, table in enumerate(pit_pair_counts(g, self.bins, lag)):
                    self.pit_pairs[i, ph] += table
        if self.tail_tokens:
            idx = np.zeros(sym.shape[0], np.int64)
            for t in range(self.tail_offset, self.tail_offset + self.tail_tokens):
                idx = idx * self.n_symbols + sym[:, t]
            self.tail_joint += np.bincount(idx, minlength=self.tail_joint.size)

    def merge(self, other: "LaggedTables") -> "LaggedTables":
        """Add ``other``'s counts (same layout) to these (in place; returns self)."""
        if (other.lags, other.bins, other.tail_offset, other.tail_tokens) != \
                (self.lags, self.bins, self.tail_offset, self.tail_tokens):
            raise ValueError(f"`other` has layout lags {other.lags}, bins {other.bins}, tail "
                             f"[{other.tail_offset}:+{other.tail_tokens}]; these tables have lags {self.lags}, bins "
                             f"{self.bins}, tail [{self.tail_offset}:+{self.tail_tokens}]")
        self.pit_pairs += other.pit_pairs
        self.tail_joint += other.tail_joint
        return self
