"""What a certificate costs (harness/verify/cost.py, harness/core/cputime.py): the two figures on hand-computed
cases, which run a baseline's CPU seconds go to, and the clocks (a thread's, the process tree's) against work of
known CPU time.  The columns of a real report: tests/verify/cost_columns.py, called by test_verify.py's runs."""
import math
import subprocess
import sys
import threading
import time
from types import SimpleNamespace as NS

import pytest

from harness.core.cputime import task_clock, tree_cpu_s
from harness.verify.cost import baseline_cpu, console_cost, cost_figures, cost_part
from harness.verify.runs import RunSet

import pandas as pd


def _burn(seconds: float) -> None:
    t = time.process_time()
    while time.process_time() - t < seconds:
        pass


def test_figures_by_hand():
    """1,000 sequences at 4 ms each (4 CPU-s), largest bound 0.01, the planner's 2,500 sequences to certify:
    0.01 x sqrt(4) = 0.02 at one CPU-second, 2,500 x 4 ms = 10 CPU-s to certify (+ a fixed 3 s: 13)."""
    assert cost_figures(0.01, 2500, 1000, 0.004) == pytest.approx((0.02, 10.0), rel=1e-12)
    assert cost_figures(0.01, 2500, 1000, 0.004, fixed_s=3.0)[1] == pytest.approx(13.0, rel=1e-12)
    # constant in n: 4x the sequences at the same cost each, the bound halves (1/sqrt(n)), the figure stays
    assert cost_figures(0.005, 2500, 4000, 0.004)[0] == pytest.approx(0.02, rel=1e-12)
    assert cost_figures(0.0, 10, 1000, 0.004)[0] == 0.0  # a one-hot target's bound of 0
    for bad in (dict(n=0), dict(per_sequence_s=0.0), dict(per_sequence_s=math.nan), dict(bound=math.nan)):
        args = {"bound": 0.01, "certify_draws": 2500, "n": 1000, "per_sequence_s": 0.004, **bad}
        assert math.isnan(cost_figures(**args)[0]), bad
    assert math.isnan(cost_figures(0.01, math.nan, 1000, 0.004)[1])  # a lossy run has no planner's draws


@pytest.mark.parametrize("certificate", ["lossy", "inconclusive", ""])
def test_figures_only_for_certified_runs(certificate):
    part = cost_part(certificate, 4.0, 0.01, 2500, 1000, 0.004, baseline_s=1.0)
    assert math.isnan(part.cert_eps_sqrt_cpu) and math.isnan(part.certify_cpu_s)
    assert (part.cpu_s, part.cpu_baseline_s, part.cpu_per_sequence_us) == (4.0, 1.0, pytest.approx(4000.0))
    certified = cost_part("certified", 4.0, 0.01, 2500, 1000, 0.004, baseline_s=1.0)
    assert (certified.cert_eps_sqrt_cpu, certified.certify_cpu_s) == (pytest.approx(0.02), pytest.approx(10.0))


def _run(label, role, scenario, draws, cpu=0.0):
    return NS(label=label, role=role, scenario=NS(name=scenario), draws=draws, cpu_s=cpu, error=None,
              acc=NS(n=draws))


def test_each_baseline_goes_to_the_run_it_was_sized_by():
    """base: the sampler under test (1,000 sequences) owns it, not the control drawn first at 1,000 too; tree: no run
    under test, the first run of the baseline's size; a failed baseline goes to no one."""
    runs = [_run("ctl", "lossless", "base", 1000), _run("ref", "reference", "base", 1000),
            _run("small", "lossless", "tree", 10), _run("big", "lossless", "tree", 50), _run("big2", "lossless", "tree", 50),
            _run("x", "reference", "eos", 100)]
    failed = _run("target-only", "baseline", "eos", 100, 9.0)
    failed.error = "boom"
    rs = RunSet(runs=runs, baselines={"base": _run("target-only", "baseline", "base", 1000, 2.5),
                                      "tree": _run("target-only", "baseline", "tree", 50, 0.5), "eos": failed})
    assert baseline_cpu(rs) == {1: (2.5, 1000), 3: (0.5, 50)}


def test_console_line_names_the_certified_scenarios_of_the_sampler():
    v = pd.DataFrame({"run": ["ref", "ref", "ctl"], "scenario": ["base", "power", "base"],
                      "certify_cpu_s": [2.0, math.nan, 1.0], "cert_eps_sqrt_cpu": [0.0071, math.nan, 0.1]})
    line = console_cost(v, {"wall_total_s": 12.3, "cpu_total_s": 20.0}, "ref")
    assert line == "cost: 12.3 s wall, 20 CPU-s; CPU-s to certify ε (bound × √CPU-s): base 2 (0.0071)"


def test_thread_clock_counts_the_calling_thread_alone():
    """In the driver a real-model run may draw in a second thread beside the shards: a task's clock there is its
    thread's (the other thread's 0.3 CPU-s are not the task's); a worker's is its process's (both threads)."""
    here, proc = task_clock(False), task_clock(True)
    h0, p0 = here(), proc()
    t = threading.Thread(target=_burn, args=(0.3,))
    t.start()
    t.join()
    assert here() - h0 < 0.1 and proc() - p0 >= 0.29


def test_tree_clock_counts_live_and_ended_children():
    """A child that burns 0.3 CPU-s counts while it lives (read from /proc) and once waited for (os.times)."""
    code = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\nprint(1, flush=True)\n" \
           "time.sleep(60)"
    c0 = tree_cpu_s()
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        child.stdout.readline()  # it has burnt its 0.3 s and sleeps
        live = tree_cpu_s() - c0
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
    assert live >= 0.29 and tree_cpu_s() - c0 >= 0.29
