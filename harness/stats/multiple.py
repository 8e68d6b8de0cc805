"""Multiple testing: Holm's step-down adjustment, splitting a family budget, and a simulator of any
test's false-alarm rate.

Notation as in :mod:`harness.stats`.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import numpy as np
from scipy import stats

from specimpl.errors import check_arg
from harness.stats.common import _check_level
from harness.stats.results import FalseAlarmResult

__all__ = ["holm", "split_budget", "false_alarm_rate"]


def _as_pvalues(pvalues) -> np.ndarray:
    p = np.asarray(pvalues, dtype=np.float64)
    check_arg(p.ndim == 1, "pvalues", f"array of shape {p.shape}", "a 1-D array")
    check_arg(bool(np.all((p >= 0) & (p <= 1))), "pvalues", "values outside [0, 1] or NaN", "p-values in [0, 1]")
    return p


def holm(pvalues) -> np.ndarray:
    """Holm–Bonferroni adjusted p-values (step-down; controls the family-wise error rate under any
    dependence).  Reject test i at family level α iff adjusted[i] ≤ α."""
    p = _as_pvalues(pvalues)
    m = p.size
    if m == 0:
        return p.copy()
    order = np.argsort(p, kind="stable")
    adj = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    out = np.empty(m)
    out[order] = adj
    return out


def split_budget(total_alpha: float, m: int, weights: Optional[Sequence[float]] = None) -> np.ndarray:
    """Per-test levels that spend a family-wise budget ``total_alpha`` over ``m`` tests (weighted
    Bonferroni: alpha_i = total · w_i / Σ w).  These are the levels the planners should be given; Holm
    on the same family rejects at least what these levels reject."""
    _check_level("total_alpha", total_alpha)
    check_arg(isinstance(m, (int, np.integer)) and m >= 1, "m", m, "an integer >= 1")
    if weights is None:
        return np.full(m, total_alpha / m)
    w = np.asarray(weights, dtype=np.float64)
    check_arg(w.shape == (m,) and bool(np.all(w > 0)), "weights", weights, f"{m} positive numbers")
    return total_alpha * w / w.sum()


def false_alarm_rate(test: Callable, draw_null: Callable, *, alpha: float, n_trials: int, seed: int = 0,
                     confidence: float = 0.95, progress: bool = False) -> FalseAlarmResult:
    """Measure how often ``test(draw_null(rng)).pvalue <= alpha`` when H0 holds, over ``n_trials``
    independent trials (``rng`` a numpy Generator spawned from ``seed`` per trial).  Returns the rate,
    its Clopper–Pearson interval and the exact binomial p-value of "rate = alpha"."""
    _check_level("alpha", alpha)
    check_arg(isinstance(n_trials, (int, np.integer)) and n_trials >= 1, "n_trials", n_trials, "an integer >= 1")
    seeds = np.random.SeedSequence(seed).spawn(int(n_trials))
    it = range(int(n_trials))
    if progress:
        from tqdm import tqdm
        it = tqdm(it, desc="false-alarm trials")
    alarms = 0
    for i in it:
        r = test(draw_null(np.random.default_rng(seeds[i])))
        alarms += int(r.pvalue <= alpha)
    b = stats.binomtest(alarms, int(n_trials), alpha)
    ci = b.proportion_ci(confidence_level=confidence, method="exact")
    return FalseAlarmResult(alarms / n_trials, alarms, int(n_trials), alpha, float(ci.low), float(ci.high),
                            confidence, float(b.pvalue))
