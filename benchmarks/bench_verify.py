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
"""
import os

import pytest

from harness.core.backends import default_workers, make_backend
from harness.laws.scenarios import SCENARIO_DIR, load_scenario, load_settings
from harness.verify import pipeline
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
    benchmark.extra_info.update(tokens=res.meta["timing"]["tokens_total"], role="verify", workers=workers,
                                what=f"verify, default battery at {DRAWS:,} draws, {workers} worker(s)")
    if len(TABLES) == 2:
        a, b = TABLES.values()
        assert a.equals(b), "the tables of 1 worker and every core differ"
