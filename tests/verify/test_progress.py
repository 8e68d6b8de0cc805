"""The draw's progress bar: an ETA from measured per-kind costs, sane from the first finished task (issue 40: the
token-counted bar's first ETA read 97:41:56 for a two-minute `make verify`)."""
import io

import pytest

from harness.verify.progress import COST_US, CostBar, eta_seconds, kind_of
from harness.verify.shards import ExactTask, RealTask

# the committed `make verify` (results/verify/meta.json timing, runs.csv): tokens per kind, its drawing wall time,
# and the reference real-model run, the first task to finish in the old bar's worst case (13.08 s, 24,576 tokens)
LAW, REAL, EXACT, DRAW_WALL_S = 1_105_829_729, 110_784, 491_520, 117.0
FIRST_REAL_TOKENS, FIRST_REAL_S = 24_576, 13.08


def test_no_eta_before_anything_is_timed():
    assert eta_seconds({"law": 10 ** 9, "real": REAL}, {"law": 0, "real": 0}, {"law": 0.0, "real": 0.0}, 2) is None
    out = io.StringIO()
    bar = CostBar({"law": 1000, "real": 10}, "verify: drawing", True, lanes=2, file=out)
    bar.update(500, "law")  # resumed: not timed
    bar.close()
    assert "ETA ?" in out.getvalue()


def test_first_eta_after_a_real_model_task_is_sane():
    left = {"law": LAW, "real": REAL - FIRST_REAL_TOKENS, "exact": EXACT}
    eta = eta_seconds(left, {"law": 0, "real": FIRST_REAL_TOKENS, "exact": 0},
                      {"law": 0.0, "real": FIRST_REAL_S, "exact": 0.0}, lanes=2)
    truth = DRAW_WALL_S - FIRST_REAL_S
    assert 0.5 * truth < eta < 2 * truth
    tokens_rate_eta = FIRST_REAL_S * (LAW + REAL + EXACT - FIRST_REAL_TOKENS) / FIRST_REAL_TOKENS
    assert tokens_rate_eta > 100 * 3600  # what the token-counted bar said (the bug)


def test_a_kind_measured_enough_uses_its_own_rate():
    # law measured at twice its prior: the ETA doubles the prior's, whatever the other kinds say
    done_t, done_s = {"law": 10 ** 7, "real": 0}, {"law": 2 * COST_US["law"] * 1e-6 * 10 ** 7, "real": 0.0}
    eta = eta_seconds({"law": 10 ** 8, "real": 0}, done_t, done_s, lanes=1)
    assert eta == pytest.approx(2 * COST_US["law"] * 1e-6 * 10 ** 8)


def test_bar_counts_expected_work_and_drops():
    out = io.StringIO()
    bar = CostBar({"law": 10 ** 6, "real": 100}, "verify: drawing", True, lanes=1, file=out)
    total = bar.bar.total
    assert total == pytest.approx((COST_US["law"] * 10 ** 6 + COST_US["real"] * 100) / 1e6)
    bar.update(100, "real", seconds=0.06)
    assert bar.bar.n / total > 0.3  # 100 real-model tokens weigh more than a million law tokens' third
    bar.drop(5 * 10 ** 5, "law")
    assert bar.left == {"law": 5 * 10 ** 5, "real": 0}
    assert bar.eta() == pytest.approx(5 * 10 ** 5 * COST_US["law"] * 1e-6 * (0.06 / (100 * COST_US["real"] * 1e-6)))
    bar.close()
    assert "ETA 00:00, 100/500k tok" in out.getvalue()


def test_kind_of_tasks():
    assert kind_of(object()) == "law"
    assert kind_of(RealTask.__new__(RealTask)) == "real"
    assert kind_of(ExactTask.__new__(ExactTask)) == "exact"
