"""Tokens per second of speculative sampling on toy n-gram pairs, next to a per-sequence Python loop.

Workload (issue 2, section 6): V = 16, k = 4, 16 new tokens per sequence, an order-2 target with
a noisy draft (q = 0.55 p + 0.45 r) whose exact per-position acceptance is alpha ~ 0.76.

* ``test_speculative``: ``speculative_generate`` on B = 1,000,000 sequences (both models are n-gram
  tables, so it opts in to the lookup-table loop of ``specimpl.tabular``; it reproduces the generic
  loop bit for bit, see tests/specimpl/test_speculative.py);
* ``test_speculative_generic``: the same sampler on the generic model-interface loop
  (``tabular=False``, the sampler's default) at B = 100,000, for reference;
* ``test_autoregressive``: target-only sampling of the same tokens (B = 1,000,000);
* ``test_loop``: benchmarks/loop_reference.py, the same algorithm as a plain per-sequence
  Python/numpy loop, on B = 2,000 sequences (its tokens/s does not depend on B);
* ``test_finite_check_cost``: the per-round finiteness check of the warped laws
  (:func:`specimpl.inputs.check_finite_laws`), on vs off, on the generic loops where it runs every
  round (the tabular loops check their tables once): speculative at B = 100,000 and B = 64, and
  autoregressive at B = 100,000.  On and off calls alternate within each repeat (time.perf_counter,
  one warm-up pair discarded); the conftest prints each median's tokens/s, the ratio on / off, and
  the share of one call's wall time spent inside the checks (timed in place: robust to load).

Tokens counted are the tokens actually generated (``lengths.sum()``).  The conftest prints
tokens/s of each (wall clock, the benchmark's median) and tokens per CPU-second (process CPU
time over all threads, median over the same calls: a figure that depends less on other load on
a shared machine), and the ratio speculative / loop.  Every call uses a fresh generator with a
fixed seed, so each round repeats identical work.
"""
import os
import time

import numpy as np
import pytest
import torch

from loop_reference import LoopTables, loop_speculative
from specimpl.autoregressive import autoregressive_generate
from specimpl.ngram import exact_acceptance, noisy_draft, random_ngram
from specimpl.speculative import SpeculativeSampler, speculative_generate

V, K, N_NEW = 16, 4, 16
B = int(os.environ.get("BENCH_B", "1000000"))
B_GENERIC = max(1, B // 10)
B_LOOP = 2000
TARGET = random_ngram(V, 2, concentration=0.5, seed=0)
DRAFT = noisy_draft(TARGET, 0.45, seed=1)


def timed(benchmark, fn, rounds, warmup_rounds=1):
    """benchmark.pedantic(fn) that also records the median process CPU time of the timed calls."""
    cpu = []

    def call():
        c0 = time.process_time()
        out = fn()
        cpu.append(time.process_time() - c0)
        return out

    out = benchmark.pedantic(call, rounds=rounds, warmup_rounds=warmup_rounds, iterations=1)
    benchmark.extra_info["cpu_s"] = float(np.median(cpu[warmup_rounds:]))
    return out


@pytest.fixture(scope="module")
def prompts():
    return torch.randint(0, V, (B, 1), generator=torch.Generator().manual_seed(0))


def test_speculative(benchmark, prompts):
    alpha = exact_acceptance(TARGET, DRAFT, [0], N_NEW)  # exact per-position acceptance of the workload
    assert 0.7 <= alpha.min() and alpha.max() <= 0.8, alpha

    def call():
        return speculative_generate(TARGET, DRAFT, prompts, k=K, max_new_tokens=N_NEW,
                                    generator=torch.Generator().manual_seed(1))

    res = timed(benchmark, call, rounds=3)
    assert SpeculativeSampler(TARGET, DRAFT, K, tabular=True).uses_tabular_path  # what speculative_generate runs
    tot = res.stats.totals()
    benchmark.extra_info.update(role="speculative", tokens=int(res.lengths.sum()), B=B,
                                what=f"speculative_generate, B={B:,}, alpha per position "
                                     f"{np.round(tot['alpha_per_position'], 3).tolist()}",
                                rounds=tot["rounds"], timings={k: round(v, 4) for k, v in res.timings.items()})
    assert int(res.lengths.sum()) == B * N_NEW


def test_speculative_generic(benchmark, prompts):
    p = prompts[:B_GENERIC]
    sampler = SpeculativeSampler(TARGET, DRAFT, K, tabular=False)

    def call():
        return sampler.generate(p, N_NEW, None, torch.Generator().manual_seed(1))

    res = timed(benchmark, call, rounds=2)
    benchmark.extra_info.update(role="generic", tokens=int(res.lengths.sum()), B=B_GENERIC,
                                what=f"generic model-interface path, B={B_GENERIC:,}")


def test_autoregressive(benchmark, prompts):
    def call():
        return autoregressive_generate(TARGET, prompts, max_new_tokens=N_NEW, generator=torch.Generator().manual_seed(1))

    res = timed(benchmark, call, rounds=3)
    benchmark.extra_info.update(role="autoregressive", tokens=int(res.lengths.sum()), B=B,
                                what=f"target-only autoregressive_generate, B={B:,}")


def test_loop(benchmark):
    tables = LoopTables(TARGET, DRAFT)
    rng0 = np.random.default_rng(0)
    loop_prompts = [[int(x)] for x in rng0.integers(0, V, B_LOOP)]

    def call():
        return loop_speculative(tables, loop_prompts, K, N_NEW, np.random.default_rng(1))

    outs = timed(benchmark, call, rounds=3)
    benchmark.extra_info.update(role="loop", tokens=sum(map(len, outs)), B=B_LOOP,
                                what=f"per-sequence Python loop (benchmarks/loop_reference.py), B={B_LOOP:,}")
    assert sum(map(len, outs)) == B_LOOP * N_NEW


def _check_cost_workloads(prompts):
    """(name, call(check: bool) -> GenerationResult) for the finiteness-check comparison."""
    big, small = prompts[:B_GENERIC], prompts[:64]
    on, off = SpeculativeSampler(TARGET, DRAFT, K, tabular=False), SpeculativeSampler(TARGET, DRAFT, K, tabular=False)
    off.check_finite = False

    def spec(p):
        return lambda check: (on if check else off).generate(p, N_NEW, None, torch.Generator().manual_seed(1))

    def ar(check):
        return autoregressive_generate(TARGET, big, max_new_tokens=N_NEW, generator=torch.Generator().manual_seed(1),
                                       tabular=False, check_finite=check)

    return [(f"speculative generic B={B_GENERIC:,}", spec(big)), ("speculative generic B=64", spec(small)),
            (f"autoregressive generic B={B_GENERIC:,}", ar)]


def _time_in_check(call):
    """Seconds inside the finiteness check during one call(True) (the laws' sums and their test, timed in
    place), and the call's seconds."""
    import specimpl.autoregressive as ar_mod
    import specimpl.speculative as spec_mod
    names = ("check_finite_laws", "law_sums")
    inner, spent = {n: getattr(spec_mod, n) for n in names}, [0.0]

    def timed(fn):
        def f(*a, **kw):
            tic = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                spent[0] += time.perf_counter() - tic
        return f

    for n in names:
        setattr(spec_mod, n, timed(inner[n]))
        setattr(ar_mod, n, timed(inner[n]))
    try:
        tic = time.perf_counter()
        call(True)
        return spent[0], time.perf_counter() - tic
    finally:
        for n in names:
            setattr(spec_mod, n, inner[n])
            setattr(ar_mod, n, inner[n])


def test_finite_check_cost(benchmark, prompts):
    repeats = int(os.environ.get("BENCH_CHECK_REPEATS", "5"))
    rows = []
    for name, call in _check_cost_workloads(prompts):
        times = {True: [], False: []}
        tokens = int(call(True).lengths.sum())  # warm-up pair, discarded
        call(False)
        for r in range(repeats):
            for check in ((True, False) if r % 2 == 0 else (False, True)):  # alternate which goes first
                tic = time.perf_counter()
                res = call(check)
                times[check].append(time.perf_counter() - tic)
                assert int(res.lengths.sum()) == tokens
        t_on, t_off = float(np.median(times[True])), float(np.median(times[False]))
        in_check, t_call = _time_in_check(call)
        rows.append(dict(workload=name, tokens=tokens, on=tokens / t_on, off=tokens / t_off, ratio=t_off / t_on,
                         share=in_check / t_call))
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)  # the comparison above is the measurement
    benchmark.extra_info.update(role="finite_check", repeats=repeats, rows=rows)
