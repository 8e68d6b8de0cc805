"""Verification throughput: tokens verified per second, at 1 worker and at every core (issue 11).

Workload: ``python -m harness verify`` on the default battery (default.toml's scenarios, every control,
the block / tree reference runs and controls) without the real-model scenario and the von Neumann
sampler, at ``BENCH_VERIFY_DRAWS`` sequences per scenario (default 200,000; ``make verify`` uses
1,000,000; controls as many, at most default.toml's).  A call is the whole verification from the
runs to the evaluated family of tests, no files written: drawing, the target-only baselines, the
statistics and every test.  Tokens counted: every token drawn (sampler under test, controls,
target-only baselines; ``timing.tokens_total``).  Two workloads, one round each (the pool's start-up
counted, as a run pays it): ``--workers 1`` (in this process) and ``--workers`` = every core (a
local process pool).  The conftest prints both rates and the scaling efficiency
rate(N) / (N · rate(1)); the two runs must give identical tables (checked here, not timed).

What a certificate costs (issue 42, :mod:`harness.verify.cost`), recorded in ``extra_info`` from the same calls (no
extra work): ``cpu_s``, the command's CPU seconds (this process and its workers, ``timing.cpu_total_s``), and
``certificates``: per scenario of the reference sampler its CPU seconds (run + baseline), CPU µs per sequence, the
largest bound x sqrt(CPU-s) (``eps_sqrt_cpu``: the bound one CPU-second reaches, constant in n) and the CPU seconds
to certify the stated ε (``certify_cpu_s``: the planner's draws to certify x CPU-s per sequence), with whether the
bench's draws certified it.  The figures are computed from the run's columns whether or not it certified (at
200,000 draws most default scenarios are inconclusive; the figures do not depend on the size, runs.csv gives them
for certified runs only); none for a lossy or failed run.
"""
import os

import pytest

from harness.core.backends import default_workers, make_backend
from harness.laws.scenarios import SCENARIO_DIR, load_scenario, load_settings
from harness.verify import pipeline
from harness.verify.cost import cost_figures
from harness.core.threads import with_threads

DRAWS = int(os.environ.get("BENCH_VERIFY_DRAWS", "200000"))
SETTINGS = load_settings(SCENARIO_DIR)
TABLES = {}


def _verify(workers: int):
    with make_backend("local", workers) as backend:
        res = with_threads(1, lambda: pipeline.verify(sampler=None, sampler_label="reference", settings=SETTINGS, draws=DRAWS,
                              scenarios=[load_scenario(n, SCENARIO_DIR) for n in SETTINGS.scenarios],
                              out=None, figures=False, progress=False, von_neumann=False, backend=backend))
    return res


@pytest.mark.parametrize("workers", [1, default_workers()], ids=["1-worker", "all-cores"])
def test_verify_throughput(benchmark, workers):
    res = benchmark.pedantic(_verify, args=(workers,), rounds=1, iterations=1, warmup_rounds=0)
    TABLES[workers] = res.table
    timing = res.meta["timing"]
    benchmark.extra_info.update(tokens=timing["tokens_total"], role="verify", workers=workers,
                                what=f"verify, default battery at {DRAWS:,} draws, {workers} worker(s)",
                                cpu_s=timing["cpu_total_s"], wall_total_s=timing["wall_total_s"],
                                certificates=certificate_costs(res.verdicts))
    if len(TABLES) == 2:
        a, b = TABLES.values()
        assert a.equals(b), "the tables of 1 worker and every core differ"


def certificate_costs(verdicts) -> dict:
    """Scenario -> what the reference sampler's certificate there costs (module docstring), lossy or failed runs left
    out."""
    out = {}
    for _, r in verdicts[verdicts.run == "reference"].iterrows():
        if r.certificate not in ("certified", "inconclusive"):
            continue
        per = r.cpu_per_sequence_us / 1e6
        eps, need = cost_figures(r.cert_worst_bound, r.certify_draws, r.sequences, per)
        out[r.scenario] = {"cpu_s": float(r.cpu_s + r.cpu_baseline_s), "cpu_per_sequence_us": float(r.cpu_per_sequence_us),
                           "eps_sqrt_cpu": eps, "certify_cpu_s": need, "binding": r.cert_worst,
                           "certified": r.certificate == "certified"}
    return out
