"""The von Neumann rejection sampler's verification: its output law and its acceptance count.

Notation as in :mod:`harness.stats`.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from specimpl.errors import check_arg
from harness.stats.common import DEFAULT_ALPHA, DEFAULT_POWER
from harness.stats.results import ADResult, BinomialResult, KSResult, VonNeumannVerdict
from harness.stats.continuous import ad_1samp, ks_1samp
from harness.stats.binomial import binomial_test
from harness.stats.multiple import holm

__all__ = ["von_neumann_tests", "verify_von_neumann"]


def von_neumann_tests(samples, cdf: Callable, proposed: int, accepted: int, M: float, *,
                      alpha: float = DEFAULT_ALPHA, power: float = DEFAULT_POWER
                      ) -> tuple[KSResult, ADResult, BinomialResult]:
    """The von Neumann battery, each test planned at level ``alpha``: KS and AD of ``samples`` against the
    target ``cdf``, and an exact binomial test of ``accepted`` of ``proposed`` against 1/``M``.  The
    verify runner puts the three into its own family; :func:`verify_von_neumann` judges them alone."""
    check_arg(isinstance(M, (int, float)) and M >= 1, "M", M, "an envelope constant >= 1")
    return (ks_1samp(samples, cdf, alpha=alpha, power=power), ad_1samp(samples, cdf, alpha=alpha, power=power),
            binomial_test(int(accepted), int(proposed), 1.0 / M, alpha=alpha, power=power))


def verify_von_neumann(samples, cdf: Callable, proposed: int, accepted: int, M: float, *,
                       alpha: float = DEFAULT_ALPHA, power: float = DEFAULT_POWER) -> VonNeumannVerdict:
    """The battery of :func:`von_neumann_tests` for a rejection sampler, judged alone: the family-wise
    budget ``alpha`` is split over the three tests by Holm; planners get alpha/3 each."""
    ks, ad, acc = von_neumann_tests(samples, cdf, proposed, accepted, M, alpha=alpha / 3, power=power)
    adj = holm([ks.pvalue, ad.pvalue, acc.pvalue])
    return VonNeumannVerdict(ks, ad, acc, tuple(float(x) for x in adj), alpha, bool(np.all(adj > alpha)))
