"""harness.stats.collisions: repeats anywhere in a sample, their false-alarm rate and their power."""
import math

import numpy as np

from harness.stats.collisions import BOOSTS, matched_identity_permutation_test, repeat_test, within_collision_test

V = 12
LAW = np.random.default_rng(0).dirichlet(np.ones(V))


def _sample(rng, groups=8, per=8):
    return [(i // per, int(x)) for i, x in enumerate(rng.choice(V, size=groups * per, p=LAW))]


def test_repeat_test_level_under_h0_and_power_against_copies():
    """Short completions collide often under H0; the rejection rate at 0.05 stays <= 0.05 (+ 3 sd of 400
    runs); a file holding each improbable completion twice (the copies far from the originals) rejects
    at any level the family uses."""
    rng = np.random.default_rng(1)
    ps = []
    for _ in range(400):
        s = _sample(rng)
        ps.append(repeat_test([g for g, _ in s], [v for _, v in s], [math.log(LAW[v]) for _, v in s]).pvalue)
    assert np.mean(np.array(ps) <= 0.05) <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 400)
    groups, values = list(range(64)) * 2, list(range(64)) * 2
    r = repeat_test(groups, values, [-70.0] * 128)  # completions of probability e^-70
    assert r.statistic == 64 and r.pvalue < 1e-100
    one = repeat_test([0, 1, 0], [5, 6, 5], [-70.0] * 3)  # a single repeat of an improbable completion
    assert one.statistic == 1 and one.pvalue <= len(BOOSTS) / 2.0 ** 40  # 4.5e-12
    probable = repeat_test([0] * 20, [0] * 20, [math.log(0.9)] * 20)  # repeats the law expects cost nothing
    assert probable.pvalue == 1.0


def test_within_collision_test_level_power_and_empty_arm():
    rng = np.random.default_rng(2)
    ps = [within_collision_test(_sample(rng), _sample(rng)).pvalue for _ in range(300)]
    assert np.mean(np.array(ps) <= 0.05) <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 300)
    a = [(i % 16, i) for i in range(64)] * 2  # each completion twice
    b = [(i % 16, 1000 + i) for i in range(64)]
    assert within_collision_test(a, b).pvalue < 1e-15
    s = _sample(rng, groups=16)
    assert within_collision_test(s, []).pvalue == 1.0  # no baseline: no evidence, no rejection
    assert within_collision_test(s, [(g, 0) for g in range(16)]).pvalue > 1e-3  # one baseline completion each


def test_matched_identity_flags_a_shared_file_only():
    rng = np.random.default_rng(3)
    a = {f"r{i}": (i % 4, int(x)) for i, x in enumerate(rng.choice(V, size=64, p=LAW))}
    b = {f"r{i}": (i % 4, int(x)) for i, x in enumerate(rng.choice(V, size=64, p=LAW))}
    assert matched_identity_permutation_test(a, b).pvalue > 1e-3
    assert matched_identity_permutation_test(a, dict(a)).pvalue <= 1e-3
