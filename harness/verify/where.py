"""Where a loss is: the cells of one goodness-of-fit test whose observed share departs most from the exact law.

A gof test of an exact-law run (``tests.csv``: family ``gof``) compares the run's counts of one statistic with
the target's exact law: ``position`` (the symbol at position t), ``pair`` (the symbols at t, t+1) or
``joint[a:b]`` (the J symbols of the window [a, b)).  :func:`top_cells` names the cells (as token tuples;
``END`` for the symbol after EOS / the end) with the largest |observed share - exact probability|, the
tokens that carry the loss.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from harness.verify.verdicts import _gof_law

__all__ = ["Cell", "observed_counts", "top_cells", "END"]

END = "END"  # the symbol V: PAD, after EOS or past the sequence's end


@dataclass(frozen=True)
class Cell:
    """One cell of a gof test: its tokens (ids; ``END`` for the ended symbol), observed share and exact
    probability."""

    tokens: tuple
    observed: float
    expected: float

    def __str__(self) -> str:
        toks = ",".join(str(t) for t in self.tokens)
        return f"({toks}) {self.observed:.4f} observed vs {self.expected:.4f} exact"


def observed_counts(acc, test: str, position: int) -> Optional[np.ndarray]:
    """The run's counts behind gof test ``test`` at ``position`` (None for a window the accumulator keeps
    elsewhere, e.g. the lagged last window)."""
    if test == "position":
        return acc.counts[position]
    if test == "pair":
        return acc.pairs[position]
    if test.startswith("joint["):
        a, b = (int(x) for x in test[len("joint["):-1].split(":"))
        if a == 0 and b - a == acc.joint_tokens:
            return acc.joint
        if b - a == acc.joint_tokens and 1 <= a <= acc.windows.shape[0]:
            return acc.windows[a - 1]
    return None


def _tokens(cell: int, n_tokens: int, W: int) -> tuple:
    """Cell index (row-major, base W) -> its tokens, the symbol W - 1 named END."""
    digits = []
    for _ in range(n_tokens):
        cell, d = divmod(cell, W)
        digits.append(END if d == W - 1 else int(d))
    return tuple(reversed(digits))


def top_cells(acc, test: str, position: int, k: int = 3) -> list[Cell]:
    """The ``k`` cells of gof test ``test`` (at ``position``) of the run ``acc`` with the largest
    |observed share - exact probability|, largest first ([] when the counts are not at hand)."""
    counts = observed_counts(acc, test, position)
    if counts is None or acc.n <= 0:
        return []
    probs = np.asarray(_gof_law(acc.law, acc.joint_tokens)(test, position), dtype=np.float64)  # (cells,)
    share = np.asarray(counts, dtype=np.float64) / float(counts.sum())  # (cells,)
    W = acc.law.n_symbols
    n_tokens = int(round(np.log(len(probs)) / np.log(W)))
    order = np.argsort(-np.abs(share - probs))[:k]
    return [Cell(_tokens(int(i), n_tokens, W), float(share[i]), float(probs[i])) for i in order]
