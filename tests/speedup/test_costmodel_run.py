"""The finite call's speedup (harness.speedup.costmodel_run): prefill, the cut last round, ragged batches, the interval."""
import numpy as np
import pytest

from harness.speedup import costmodel as cm
from harness.speedup.costmodel_run import RunCosts, run_grid, run_interval
from harness.speedup.roofline.speedup import PairCosts


def _costs(prefill_s=0.0, verify_slope=0.0, batch_slope=0.0):
    """T_target(n, B) = 1 (1 + verify_slope (n - 1)) (1 + batch_slope (B - 1)); the draft 0.1 per call."""
    def t(n, B, L):
        return (1.0 + verify_slope * (n - 1)) * (1.0 + batch_slope * (B - 1))
    return RunCosts(PairCosts(t, lambda n, B, L: 0.1), lambda role, B, L: prefill_s if role == "target" else 0.0)


def test_conditional_alphas_reproduce_the_histograms_law():
    h = [1, 2, 3, 4, 10]  # rounds with n = 0..4 accepted
    a = cm.conditional_alphas(h)
    survive = np.concatenate([[1.0], np.cumprod(a)])  # P(n >= j)
    law = survive - np.concatenate([survive[1:], [0.0]])
    assert law == pytest.approx(np.asarray(h) / sum(h))
    assert list(cm.conditional_alphas([5, 0, 0])) == [0.0, 0.0]  # never past position 1


def test_predict_run_pays_prefill_and_whole_rounds():
    rounds = cm.simulate_rounds([1.0] * 3, 1, 10, n_sim=4)  # 4 tokens a round: ceil(10 / 4) = 3 rounds
    p = cm.predict_run(lambda A: 2.0, 1.0, (5.0, 0.5), rounds, 10)
    assert p.rounds == 3
    assert p.t_spec_s == pytest.approx(5.0 + 0.5 + 3 * 2.0)  # the last round emits 2 tokens but costs a whole one
    assert p.t_ar_s == pytest.approx(5.0 + 10 * 1.0)


def test_a_long_call_without_prefill_approaches_the_steady_state():
    h = {("chain", 2): np.array([200, 300, 500])}
    g = run_grid("s", _costs(), h, [1], [16], 4000)
    assert g.speedup.iloc[0] == pytest.approx(g.speedup_steady.iloc[0], rel=0.01)


def test_prefill_pulls_s_towards_1_and_ragged_batches_lower_it():
    h = {("chain", 4): np.array([300, 200, 150, 150, 200])}
    base = run_grid("s", _costs(), h, [1, 16], [16], 32)
    pre = run_grid("s", _costs(prefill_s=30.0), h, [1, 16], [16], 32)
    s1, s16 = base.set_index("batch").speedup, pre.set_index("batch").speedup
    assert 1.0 < s16[1] < s1[1]  # a prefill as long as the decode: S nearer 1
    # same per-round costs at every batch, but at B = 16 a call lasts as long as its slowest sequence
    assert s1[16] < s1[1] and base.speedup_steady.nunique() == 1


def test_batch_dependent_verification_can_make_speculation_lose():
    h = {("chain", 4): np.array([300, 200, 150, 150, 200])}
    g = run_grid("s", _costs(verify_slope=0.05), h, [1], [16], 64)
    g16 = run_grid("s", _costs(verify_slope=0.6), h, [1], [16], 64)
    assert g.speedup.iloc[0] > 1.0 > g16.speedup.iloc[0]


def test_interval_brackets_and_shrinks_with_more_rounds():
    few = {("chain", 2): np.array([20, 30, 50])}
    many = {("chain", 2): np.array([2000, 3000, 5000])}
    widths = []
    for h in (few, many):
        g = run_grid("s", _costs(prefill_s=1.0), h, [1, 4], [16], 32)
        gi = run_interval(g, lambda rng: _costs(prefill_s=1.0), h, 32, replicates=40)
        assert ((gi.speedup_lo <= gi.speedup) & (gi.speedup <= gi.speedup_hi)).all()
        widths.append(float((gi.speedup_hi - gi.speedup_lo).mean()))
    assert widths[1] < widths[0] / 3


def test_bad_histograms_name_the_argument():
    with pytest.raises(ValueError, match="`hists` must be"):
        run_grid("s", _costs(), {("chain", 2): [1, 2]}, [1], [16], 8)  # k = 2 needs 3 counts
