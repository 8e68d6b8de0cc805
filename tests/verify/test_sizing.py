"""The Python API's planner (harness/verify/sizing.py): the draws at which a lossless sampler certifies."""
from dataclasses import replace
import pytest

from harness.laws.scenarios import load_scenario, load_settings
from harness.verify.pipeline import verify
from harness.verify.sizing import GROWTH, estimate_seconds, inconclusive_rate, plan_draws
from specimpl import speculative_generate


@pytest.fixture(scope="module")
def pilot():
    s = replace(load_settings(), epsilon_override={"position": 0.05, "pair": 0.1, "joint": 0.2})
    res = verify(sampler=speculative_generate, sampler_label="mine", scenarios=[load_scenario("base")], settings=s,
                 draws=2000, controls=False, progress=False, figures=False, out=None)
    return res, s


def test_plan_reaches_its_rate_and_no_earlier(pilot):
    res, s = pilot
    plan = plan_draws(res, s, 1e-3)
    run = res.verdicts.iloc[0]
    assert plan.half_certify == int(run.certify_draws)  # the pipeline's own planner figure (weight 1)
    assert plan.reaches_target and plan.inconclusive_rate <= 1e-3 and plan.draws >= plan.half_certify
    assert plan.delta_each == pytest.approx(res.meta["config"]["tv_delta_each"])
    tighter = plan_draws(res, s, 1e-6)
    assert tighter.draws >= plan.draws and tighter.inconclusive_rate <= 1e-6
    assert inconclusive_rate(res, s, plan.draws) == pytest.approx(plan.inconclusive_rate)
    if plan.draws > plan.half_certify:  # the search stops at its first size under the rate: one step less misses it
        assert inconclusive_rate(res, s, int(plan.draws / GROWTH) - 1) > 1e-3
    assert inconclusive_rate(res, s, plan.half_certify // 4) > 1e-3  # far fewer draws: a lossless run rarely certifies


def test_estimate_scales_draws_and_tests_only():
    timing = {"wall_total_s": 10.0, "wall_draw_s": 4.0, "wall_tests_s": 2.0}
    assert estimate_seconds(timing, 1000, 1000) == pytest.approx(10.0)
    assert estimate_seconds(timing, 1000, 10_000) == pytest.approx(4.0 + 60.0)
