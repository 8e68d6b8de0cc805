"""What the log-likelihood and lagged statistics add to a verify draw, side by side.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_accumulator.py [--scenario base] [--batch 3125]
                                                                     [--repeats 15] [--threads 1]

For one sampler call of the scenario (``--batch`` sequences, the size of a 100 000-draw run's calls),
each repeat times, in shuffled order: the reference sampler's call, ``Accumulator.add`` as verify runs it
(with the whole-sequence log-likelihood sums of :mod:`harness.stats.loglik` and the lagged PIT pairs / tail
joint of :mod:`harness.stats.lagged`), and ``Accumulator.add`` with those two switched off (no-op stand-ins).
One warm-up repeat is discarded; medians (perf_counter) and the paired ratio are printed.  The PIT
uniforms are drawn the same way in both accumulators, so their cost is in both.
"""
from __future__ import annotations

import argparse
import random
import statistics
import time

import numpy as np
import torch

from harness import stats
from harness.verify.battery import Accumulator
from harness.laws.ngram import ExactLaw
from harness.laws.scenarios import load_scenario
from specimpl.speculative import speculative_generate


class _Off:
    """Stand-in for the new statistics: adds nothing."""

    def add(self, *args) -> None:
        pass


def _timed(fn) -> float:
    tic = time.perf_counter()
    fn()
    return time.perf_counter() - tic


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", default="base")
    ap.add_argument("--batch", type=int, default=3125)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    sc = load_scenario(a.scenario)
    target, draft = sc.build()
    law = ExactLaw(target, draft, list(sc.prompt), sc.max_new_tokens, sc.config, sc.eos_token_id)
    bins = stats.pit_pair_bins(100_000 * (sc.max_new_tokens // 2))
    on = Accumulator(law, sc.joint_tokens, 65536, bins, 1_000_000, np.random.default_rng(0), pit_max_lag=sc.k + 1)
    off = Accumulator(law, sc.joint_tokens, 65536, bins, 1_000_000, np.random.default_rng(0), pit_max_lag=sc.k + 1)
    off.loglik, off.lagged = _Off(), _Off()
    prompts = torch.tensor([list(sc.prompt)] * a.batch, dtype=torch.long)
    g = torch.Generator().manual_seed(0)
    times = {"sampler call": [], "add (with loglik + lagged)": [], "add (without)": []}
    for rep in range(a.repeats + 1):
        res = None

        def call():
            nonlocal res
            res = speculative_generate(target, draft, prompts, k=sc.k, max_new_tokens=sc.max_new_tokens,
                                       config=sc.config, eos_token_id=sc.eos_token_id, generator=g)
        t_call = _timed(call)
        work = [("add (with loglik + lagged)", lambda: on.add(res.tokens, res.stats)),
                ("add (without)", lambda: off.add(res.tokens, res.stats))]
        random.Random(rep).shuffle(work)
        t = {name: _timed(fn) for name, fn in work}
        if rep:  # the first repeat warms up
            times["sampler call"].append(t_call)
            for name in t:
                times[name].append(t[name])
    med = {k: statistics.median(v) for k, v in times.items()}
    extra = [w - wo for w, wo in zip(times["add (with loglik + lagged)"], times["add (without)"])]
    share = [e / (c + wo) for e, c, wo in zip(extra, times["sampler call"], times["add (without)"])]
    print(f"scenario {sc.name}, {a.batch} sequences x {sc.max_new_tokens} positions a call, k {sc.k}, "
          f"lags 2..{sc.k + 1}, {a.repeats} repeats (medians)")
    for k, v in med.items():
        print(f"  {k:28s} {v * 1e3:9.2f} ms")
    print(f"  extra per call               {statistics.median(extra) * 1e3:9.2f} ms "
          f"({statistics.median(extra) / a.batch * 1e6:.2f} us a sequence)")
    print(f"  extra / (call + add without) {statistics.median(share):9.3f} (paired, median; range "
          f"{min(share):.3f}..{max(share):.3f})")


if __name__ == "__main__":
    main()
