"""`verify --until-certified BUDGET`: draw in rounds of doubling size until the run is certified, found lossy, or
the budget is spent.

Round i (0, 1, ...) is a complete, independent verification at ``draws · 2^i`` sequences per scenario (x its
weight), seeded ``derive_seed(seed, "until-certified", i)`` (round 0: the run seed), with the command's
budgets halved per round: family-wise false-alarm budget α / 2^(i+1) (its sequential share likewise) and
bound miss probability δ / 2^(i+1), δ = 1 - ``tv_confidence``.  Over any number of rounds these sum to less
than α and δ (a union bound), so the round that certifies states "TV ≤ ε at confidence 1 - δ" for the whole
command, and a lossy verdict in any round is a false alarm with probability below α.  The price: each round
is a little more conservative than a fixed-size run, and all rounds together draw at most twice the last.
The controls run in round 0 only (they test the harness, not the sampler's size).
"""
from __future__ import annotations

import sys
from dataclasses import replace
from typing import Callable

from harness.core.config import derive_seed
from harness.verify.runs import UNDER_TEST

__all__ = ["round_settings", "round_draws", "round_seed", "until_certified"]


def round_settings(settings, i: int):
    """``settings`` with round i's share of the budgets: α, α_seq and δ each times 2^-(i+1); the certificate it
    states is at the command's confidence through round i, 1 - δ (1 - 2^-(i+1)) (a union bound over the rounds
    looked at: the round that certifies was chosen by looking)."""
    share = 0.5 ** (i + 1)
    delta = 1.0 - settings.tv_confidence
    return replace(settings, family_alpha=settings.family_alpha * share,
                   sequential_alpha=settings.sequential_alpha * share, tv_confidence=1.0 - delta * share,
                   stated_confidence=1.0 - delta * (1.0 - share))  # rounds 0..i together: δ (1/2 + ... + 2^-(i+1))


def round_draws(first: int, budget: int) -> list[int]:
    """The rounds' sequences per scenario: first, 2 first, 4 first, ... up to ``budget`` (at least one round)."""
    sizes = [int(first)]
    while sizes[-1] * 2 <= budget:
        sizes.append(sizes[-1] * 2)
    return sizes


def round_seed(seed: int, i: int) -> int:
    return int(seed) if i == 0 else derive_seed(int(seed), "until-certified", i)


def _settled(res) -> bool:
    """Certified (passed), or a sampler under test found lossy or failed: no later round can change it."""
    if res.passed or res.verdicts is None:
        return True
    under = res.verdicts[res.verdicts.role.isin(UNDER_TEST)]
    return bool((under.certificate == "lossy").any() or under.error.notna().any())


def until_certified(run_round: Callable, settings, first: int, budget: int, seed: int):
    """``run_round(settings, draws, seed, controls, note)`` -> VerifyResult, round after round (see the module
    docstring); returns the last round's result."""
    sizes = round_draws(first, budget)
    for i, draws in enumerate(sizes):
        note = {"round": i, "rounds_planned": len(sizes), "draws": draws, "budget": budget,
                "method": "doubling rounds, alpha and delta split 2^-(i+1) (union bound)"}
        s = round_settings(settings, i)
        print(f"until-certified: round {i + 1} of at most {len(sizes)}: {draws:,} sequences per scenario, "
              f"alpha {s.family_alpha:.3g}, bounds at confidence {s.tv_confidence:.8g} each round "
              f"(certificate through this round: {s.stated_confidence:.6g})", file=sys.stderr)
        res = run_round(s, draws, round_seed(seed, i), i == 0, note)
        if _settled(res):
            return res
    return res
