"""The cost columns of a verify report checked against their definitions (harness/verify/cost.py), for the tests that
already run a small `verify` (tests/verify/test_verify.py: a certified, a lossy and an inconclusive report): no
verification of its own, so the check costs nothing extra."""
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from harness.verify.cost import COST_COLUMNS
from harness.verify.stopping import CAP_FACTOR


def check_cost_columns(out: Path) -> pd.DataFrame:
    """Every run's CPU seconds finite and positive, no more than its wall seconds (a task runs on one thread here);
    the two figures finite, positive and as defined for certified runs, NaN for the others; the runs' CPU seconds add
    up to the command's draws, which its total covers.  Returns runs.csv."""
    runs = pd.read_csv(out / "runs.csv")
    timing = json.loads((out / "meta.json").read_text())["timing"]
    assert set(COST_COLUMNS) | {"cert_worst_bound"} <= set(runs.columns)
    exact = runs[~runs.scenario.str.startswith("von_neumann") & runs.error.isna()]
    assert len(exact)
    assert np.isfinite(exact.cpu_s).all() and (exact.cpu_s > 0).all(), exact.cpu_s
    assert (exact.cpu_s <= exact.wall_s * 1.05 + 0.05).all(), exact[["cpu_s", "wall_s"]]  # CPU of one thread <= wall
    assert (exact.cpu_baseline_s >= 0).all() and (exact.cpu_per_sequence_us > 0).all()
    figures = ["cert_eps_sqrt_cpu", "certify_cpu_s"]
    cert = runs[runs.certificate == "certified"]
    other = runs[runs.certificate != "certified"]
    assert other[figures].isna().all().all(), other[["run", "certificate", *figures]]
    for _, r in cert.iterrows():
        per = r.cpu_per_sequence_us / 1e6  # seconds per sequence of the certificate
        if r.scenario == "real_model":  # per exact-pair sequence per prompt, the tiny pair fixed: check_real_cost
            continue
        # its own CPU per sequence + its baseline's per baseline sequence; the baseline is drawn at the run's fixed
        # size, which is at least 1 / CAP_FACTOR of what a run stopping at the need draws (its cap)
        own = r.cpu_s / r.sequences
        with_base = own + r.cpu_baseline_s * CAP_FACTOR / r.sequences
        assert own * (1 - 1e-9) <= per <= with_base * (1 + 1e-9), (per, own, with_base)
        assert math.isclose(r.certify_cpu_s, r.certify_draws * per, rel_tol=1e-9) and r.certify_cpu_s > 0
        assert math.isclose(r.cert_eps_sqrt_cpu, r.cert_worst_bound * math.sqrt(r.sequences * per), rel_tol=1e-9)
        assert r.cert_eps_sqrt_cpu > 0
    # every baseline belongs to one run: the rows add up to the draws' CPU seconds, which the command's total covers
    assert math.isclose(float(runs.cpu_s.sum() + runs.cpu_baseline_s.sum()), timing["cpu_draws_s"], rel_tol=1e-9)
    assert timing["cpu_total_s"] >= timing["cpu_draws_s"] > 0
    return runs


def check_real_cost(r, exact_n: int) -> None:
    """A certified real-model row: c per exact-pair sequence per prompt (``exact_n`` of them drawn), the rest of its
    CPU seconds (the tiny pair's draw and PIT scoring) a fixed part of certify_cpu_s and left out of the bound's."""
    per = r.cpu_per_sequence_us / 1e6
    exact_s = per * exact_n
    assert 0 < exact_s < r.cpu_s  # both pairs drew
    assert math.isclose(r.certify_cpu_s, (r.cpu_s - exact_s) + r.certify_draws * per, rel_tol=1e-9)
    assert math.isclose(r.cert_eps_sqrt_cpu, r.cert_worst_bound * math.sqrt(exact_s), rel_tol=1e-9)
