"""The Python API's planner (harness/verify/sizing.py): the draws at which a lossless sampler certifies."""
from dataclasses import replace
from types import SimpleNamespace
import pytest

from harness.laws.scenarios import load_scenario, load_settings
from harness.verify.pipeline import verify
from harness.verify.sizing import GROWTH, MARGIN, estimate_seconds, inconclusive_rate, plan_draws
from harness.verify.verdicts import PLANNED_RATE
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


def test_the_commands_advice_is_the_apis_plan(pilot):
    """One planner: the size an inconclusive ``verify`` suggests (outcome's needs, at P(inconclusive) <= 0.05) is
    the API's plan at that rate, and it reaches the rate where one step less does not."""
    res, s = pilot
    assert res.verdict == "inconclusive" and len(res.outcome.needs) == 1  # 2,000 draws: the plan at 0.05 asks ~6.6 k
    plan = plan_draws(res, s, PLANNED_RATE)
    assert res.outcome.needs[0].needed == plan.draws == plan.per_scenario["base"][0] > plan.half_certify
    one_step_less = int(plan.draws / GROWTH) - 1
    assert inconclusive_rate(res, s, plan.draws) <= PLANNED_RATE < inconclusive_rate(res, s, one_step_less)


def _pilot(draws: int, draw_s: float, total_s: float):
    run = SimpleNamespace(role="sampler", draws=draws)
    return SimpleNamespace(runs=[run], meta={"config": {"draws": draws},
                                             "timing": {"wall_draw_s": draw_s, "wall_total_s": total_s}})


def test_estimate_fits_a_cost_per_call_and_per_sequence():
    s = load_settings()  # min_chunks 32, calls of >= 500: 2,000 -> 4 calls, 32,000 -> 32, 208,479 -> 32
    c, b = 0.1, 1e-5  # seconds per sampler call, per sequence
    small, large = _pilot(2000, 4 * c + 2000 * b, 9.0), _pilot(32_000, 32 * c + 32_000 * b, 32 * c + 32_000 * b + 2.0)
    assert estimate_seconds(small, large, s, 208_479) == pytest.approx(MARGIN * (2.0 + 32 * c + 208_479 * b))
    noisy = _pilot(2000, 5.0, 9.0)  # a small pilot slower than the large one: proportional at the large one's rate
    rate = (32 * c + 32_000 * b) / 32_000
    assert estimate_seconds(noisy, large, s, 208_479) == pytest.approx(MARGIN * (2.0 + 208_479 * rate))
