"""The planners' one integer search (harness.stats.search): exact on monotone conditions, and the same n as
the hand-written loops it replaced on any condition (their copies below)."""
import numpy as np
import pytest

from harness.stats.search import bisect_n, smallest_n


def _old_doubling(short, lo, hi):
    """The loop of ad_n_for_distance / eprocess_n_for_kl (lo, hi = 1, 2) and the log-likelihood planners (0, 1)."""
    while short(hi):
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if short(mid) else (lo, mid)
    return hi


def _old_guess(short, guess, n_max):
    """The loop of tv_upper_bound_n_for: a bracket from a guess, searched up or down."""
    lo, hi = guess // 2, guess
    while short(hi):
        lo, hi = hi, hi * 2
        if hi > n_max:
            return n_max + 1
    while lo >= 1 and not short(lo):
        lo, hi = lo // 2, lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if short(mid) else (lo, mid)
    return hi


@pytest.mark.parametrize("answer", [1, 2, 3, 7, 8, 9, 1000, 12345, 2**20 + 1])
@pytest.mark.parametrize("start", [1, 2, 5, 64, 10**6])
def test_smallest_n_is_exact_on_a_monotone_condition(answer, start):
    short = lambda n: n < answer  # noqa: E731
    assert smallest_n(short, start, down=True) == max(answer, 1)
    if start <= answer:
        assert smallest_n(short, start) == answer
    assert smallest_n(short, 1, n_max=answer - 1) == answer  # past n_max: n_max + 1


def test_n_max_stops_the_search():
    assert smallest_n(lambda n: True, 3, n_max=1000) == 1001


@pytest.mark.parametrize("seed", range(20))
def test_the_same_n_as_the_loops_it_replaced_on_any_condition(seed):
    rng = np.random.default_rng(seed)
    bits = rng.random(1 << 12) < np.linspace(0.95, 0.0, 1 << 12)  # mostly short, then mostly not: lattice wiggle
    bits[-1] = False
    short = lambda n: bool(bits[min(n, len(bits) - 1)])  # noqa: E731
    assert smallest_n(short, 2) == _old_doubling(short, 1, 2)
    assert smallest_n(short, 1) == _old_doubling(short, 0, 1)
    for guess in (1, 3, 100, 2000, 4000):
        assert smallest_n(short, guess, n_max=10**6, down=True) == _old_guess(short, guess, 10**6)
        assert smallest_n(short, guess, n_max=50, down=True) == _old_guess(short, guess, 50)


def test_arguments_are_checked_and_named():
    with pytest.raises(ValueError, match="start"):
        smallest_n(lambda n: False, 0)
    with pytest.raises(ValueError, match="lo, hi"):
        bisect_n(lambda n: False, 5, 5)
    assert bisect_n(lambda n: n < 37, 0, 64) == 37
