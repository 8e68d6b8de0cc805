"""Sharded verification (issue 11): shard statistics merge exactly, and a verification gives the same
statistics and p-values in this process, on a local pool of 2 workers, after a worker is SIGKILLed,
and on Ray (tests/verify/test_shards_ray.py); bad backend options exit 2 naming the option."""
import os

import numpy as np
import pandas as pd
import pytest
import torch

from harness import stats
from harness.core.backends import LocalPool, SerialBackend, TaskLost, check_backend_options, make_backend
from harness.verify.battery import Accumulator, pit_of_codes, state_symbol_codes
from harness.cli import main
from harness.core.errors import UsageError
from harness.laws.scenarios import SCENARIO_DIR, load_scenario, load_settings
from harness.verify import pipeline
from harness.laws.scenarios import scenario_law
from harness.verify.shards import resolve_sampler, sampler_recipe
from specimpl.speculative import speculative_generate

SETTINGS = load_settings(SCENARIO_DIR)


def _calls(name, sizes, seed=0):
    sc = load_scenario(name, SCENARIO_DIR)
    law, (t, d) = scenario_law(sc)
    out = []
    for i, B in enumerate(sizes):
        g = torch.Generator().manual_seed(seed + i)
        res = speculative_generate(t, d, torch.tensor([list(sc.prompt)] * B), k=sc.k, max_new_tokens=sc.max_new_tokens,
                                   config=sc.config, eos_token_id=sc.eos_token_id, generator=g)
        out.append(res)
    return sc, law, out


def _acc(sc, law, rng, logprob_max=2500):
    return Accumulator(law, sc.joint_tokens, 512, 6, logprob_max, rng)


@pytest.mark.parametrize("name", ["base", "eos_order3"])
def test_shards_merged_in_order_equal_one_accumulator_fed_the_same_calls(name):
    sc, law, calls = _calls(name, [700, 1100, 900])
    whole = _acc(sc, law, None)
    parts = []
    for i, res in enumerate(calls):
        whole.rng = np.random.default_rng(i)  # the PIT stream of call i, as a shard seeds it
        whole.add(res.tokens, res.stats)
        part = _acc(sc, law, np.random.default_rng(i))
        part.add(res.tokens, res.stats)
        parts.append(part)
    merged = _acc(sc, law, None)
    for p in parts:
        merged.merge(p)
    a, b = whole.statistics(), merged.statistics()
    assert a.keys() == b.keys()
    for k in ("n", "counts", "pairs", "joint", "pit_hist", "pit_pairs", "n_logprob", "calls_without_stats"):
        assert np.array_equal(a[k], b[k]), k
    assert merged.n_logprob == 2500 and merged.logprobs().size == 2500  # truncated inside the second shard
    assert np.array_equal(whole.logprobs(), merged.logprobs())
    assert len(merged.chunks) == 3 and all(np.array_equal(x[1], y[1]) for x, y in zip(whole.chunks, merged.chunks))
    assert merged.pit_hist.sum() == 2700 * sc.max_new_tokens


def test_compact_shards_with_logprob_room_merge_to_the_same_statistics():
    """What a shard sends (counts in the smallest unsigned type; only the log-probabilities its run still keeps)
    merges into exactly what the full int64 statistics give."""
    from harness.verify.battery import compact_counts
    sc, law, calls = _calls("base", [700, 1100, 900])
    full, sent = _acc(sc, law, None), _acc(sc, law, None)
    first = 0
    for i, res in enumerate(calls):
        a = _acc(sc, law, np.random.default_rng(i))
        b = _acc(sc, law, np.random.default_rng(i), logprob_max=max(0, 2500 - first))  # ShardTask.logprob_room
        a.add(res.tokens, res.stats)
        b.add(res.tokens, res.stats)
        shipped = b.statistics(compact=True)
        assert shipped["pit_hist"].dtype == np.uint8 and shipped["counts"].dtype != np.int64
        full.merge(a)
        sent.merge(shipped)
        first += len(res.tokens)
    x, y = full.statistics(), sent.statistics()
    for k in ("n", "counts", "pairs", "joint", "pit_hist", "pit_pairs", "n_logprob"):
        assert np.array_equal(x[k], y[k]) and np.asarray(y[k]).dtype == np.asarray(x[k]).dtype, k
    assert np.array_equal(full.logprobs(), sent.logprobs()) and sent.logprobs().size == 2500
    assert compact_counts(np.array([-1, 3])).dtype == np.int64  # not counts: left alone
    assert compact_counts(np.array([70_000])).dtype == np.uint32


def test_merge_is_generic_over_added_statistics():
    class Sums:  # a statistic another part of the harness may add: merges by its own .merge
        def __init__(self, x):
            self.x = x

        def merge(self, other):
            return Sums(self.x + other.x)

    sc, law, (res,) = _calls("base", [600])
    a, b = _acc(sc, law, np.random.default_rng(0)), _acc(sc, law, np.random.default_rng(1))
    a.add(res.tokens, res.stats)
    b.add(res.tokens, res.stats)
    a.extra, b.extra = Sums(2), Sums(5)
    a.merge(b)
    assert a.extra.x == 7 and a.n == 1200 and a.counts.sum() == 1200 * sc.max_new_tokens


def test_codes_and_pit_pairs_match_the_exact_law_and_stats():
    sc, law, (res,) = _calls("eos_order3", [800])
    sym = law.symbols(res.tokens)
    idx = state_symbol_codes(law, sym)
    assert np.array_equal(idx, law.states(sym) * law.n_symbols + sym)
    v = np.random.default_rng(3).random(sym.shape, dtype=np.float32)
    u = pit_of_codes(law, idx, v)
    assert np.array_equal(u, law.pit(sym, law.states(sym), v))
    acc = Accumulator(law, sc.joint_tokens, 256, 7, 0, None)
    acc._add_pit(u, stats.pit_grid_cells(u, 7))
    _, tables = stats.pit_pair_tables(u, 7)
    for start, table in enumerate(tables):
        assert np.array_equal(acc.pit_pairs[start], table)


def test_sampler_recipes_resolve_to_the_same_function():
    from harness.controls.chain import CATALOGUE
    from harness.controls.tree import CATALOGUE as TREE
    from harness.laws.algorithms import Algorithm
    assert sampler_recipe(speculative_generate, "reference")[0] == "import"
    for c in (CATALOGUE[0], TREE[0]):
        r = sampler_recipe(c.sampler, c.name)
        assert r[0] == "control" and resolve_sampler(r).__code__ is c.sampler.__code__
    assert sampler_recipe(Algorithm.parse("tree2", "a").sampler(), "tree2") == ("algorithm", "tree2")
    local = lambda *a, **k: None  # noqa: E731 - a closure no recipe reproduces: drawn in the driver
    assert sampler_recipe(local, "x")[0] == "object"


# --------------------------------------------------------------------------- whole verifications
def _verify(backend, sampler=None, label="reference", draws=3000):
    res = pipeline.verify(sampler=sampler, sampler_label=label, scenarios=[load_scenario("base", SCENARIO_DIR)],
                          settings=SETTINGS, draws=draws, controls=False, out=None, figures=False, progress=False,
                          von_neumann=False, backend=backend)
    return res.table, res.runs


def _same_tables(a: pd.DataFrame, b: pd.DataFrame):
    pd.testing.assert_frame_equal(a.reset_index(drop=True), b.reset_index(drop=True), check_exact=True)


def _verify_real(backend):
    """The real-model scenario alone (the shipped tiny pair, 6 sequences, no controls) on ``backend``."""
    from harness.verify.realmodel import load_real_model_spec
    return pipeline.verify(sampler=None, sampler_label="reference", scenarios=[], settings=SETTINGS, draws=3000,
                           controls=False, out=None, figures=False, progress=False, von_neumann=False,
                           real_model=load_real_model_spec({}), real_model_sequences=6, backend=backend)


def _same_real_runs(here, there):
    """The real-model runs of two verifications drew the same PIT values and gave the same table."""
    assert len(here.real_runs) == 1 and len(there.real_runs) == 1
    assert there.real_runs[0].draw.error is None
    assert np.array_equal(here.real_runs[0].draw.u, there.real_runs[0].draw.u)
    _same_tables(here.table, there.table)


def test_a_real_model_run_drawn_on_a_worker_equals_one_drawn_in_the_driver():
    """A real-model run is one task on the backend (harness.verify.shards.RealTask): its PIT values, and so its
    rows, are those of the run drawn in this process."""
    here = _verify_real(SerialBackend())
    with LocalPool(2) as pool:
        there = _verify_real(pool)
    _same_real_runs(here, there)


@pytest.fixture(scope="module")
def serial_reference():
    return _verify(SerialBackend())


def test_two_local_workers_give_identical_statistics_and_pvalues(serial_reference):
    with LocalPool(2) as pool:
        table, runs = _verify(pool)
    _same_tables(serial_reference[0], table)
    for a, b in zip(serial_reference[1], runs):
        assert a.tokens == b.tokens and a.acc.n == b.acc.n and np.array_equal(a.acc.pit_hist, b.acc.pit_hist)


@pytest.mark.slow  # 51 s of `make test` (durations of stop 30's run): in `make test-slow`, which CI runs
def test_a_sigkilled_worker_does_not_change_the_result(tmp_path, monkeypatch):
    from shard_samplers import KILL_MARKER, kill_once_generate, marker_pid
    table_serial, _ = _verify(SerialBackend(), kill_once_generate, "kill_once")  # no marker: never kills
    marker = tmp_path / "killed"
    monkeypatch.setenv(KILL_MARKER, str(marker))
    with LocalPool(2) as pool:
        table, runs = _verify(pool, kill_once_generate, "kill_once")
        assert pool.restarts >= 1
    assert marker_pid(marker) != os.getpid()  # a worker died, not this process
    assert all(r.error is None for r in runs)
    _same_tables(table_serial, table)


def test_a_task_lost_too_often_is_reported_not_retried_forever():
    from shard_samplers import die
    with LocalPool(2, retries=1) as pool:
        out = dict(pool.map_unordered(die, [None]))  # every attempt kills its worker
    assert isinstance(out[0], TaskLost) and out[0].attempts == 2


# ------------------------------------------------------------------------------------ bad input: 2
def test_bad_backend_options_name_the_option():
    with pytest.raises(UsageError, match="`--workers` must be an integer >= 1; got 0"):
        check_backend_options("local", 0, None)
    with pytest.raises(UsageError, match="`--backend` must be one of"):
        check_backend_options("dask", None, None)
    with pytest.raises(UsageError, match="`--address` needs `--backend ray`"):
        check_backend_options("local", None, "auto")
    with pytest.raises(UsageError, match="`--address` must be 'auto' or host:port"):
        check_backend_options("ray", None, "nowhere")


def test_more_workers_than_the_machine_runs_are_refused(monkeypatch):
    """Issue 26 finding 7: --workers 1000 on 2 cores spawned dozens of processes and produced nothing in 200 s."""
    from harness.core import backends
    monkeypatch.setattr(backends, "default_workers", lambda: 2)
    assert backends.max_local_workers() == 4
    check_backend_options("local", 4, None)
    for backend, address in (("local", None), ("ray", None)):
        with pytest.raises(UsageError, match=r"`--workers` must be an integer in \[1, 4\] on this machine \(at most 2 "
                                             r"per core; 2 cores here.*got 1000$"):
            check_backend_options(backend, 1000, address)
    monkeypatch.setattr(backends, "default_workers", lambda: 1)
    assert backends.max_local_workers() == 2  # two workers run anywhere (the tests' pools)


def test_backend_ray_without_ray_installed_exits_2(monkeypatch, capsys):
    import sys
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    rc = main(["verify", "--scenario", "base", "--draws", "100", "--no-real-model", "--backend", "ray"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "`--backend` 'ray' needs Ray, which is not installed" in err[0]


@pytest.mark.parametrize("argv, says", [(["--workers", "0"], "`--workers` must be an integer >= 1; got 0"),
                                        (["--workers", "1000"], "on this machine (at most 2 per core;"),
                                        (["--backend", "ray", "--address", "127.0.0.1:1"],
                                         "`--address` must be a reachable Ray head node")])
def test_bad_backend_options_exit_2_with_one_line(argv, says, capsys):
    if "ray" in argv:
        pytest.importorskip("ray")
    rc = main(["verify", "--scenario", "base", "--draws", "100", "--no-real-model", *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and says in err[0]


def test_one_worker_runs_in_this_process():
    assert isinstance(make_backend("local", 1), SerialBackend)


def test_workers_and_the_verify_command_run_one_torch_and_one_blas_thread(monkeypatch):
    """The parallelism is the workers: a pool worker's torch and BLAS pools (numpy's and scipy's OpenBLAS) have
    one thread each, and so does the driver inside ``with_threads(1, ...)``, which puts its own back afterwards.
    The environment asks for two threads everywhere, so the limits, not this machine's defaults, give the ones."""
    from threadpoolctl import threadpool_limits
    from shard_samplers import thread_counts
    from harness.core.threads import with_threads
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.setenv(var, "2")  # the spawned workers inherit it
    with LocalPool(2) as pool:
        counts = [c for _, c in pool.map_unordered(thread_counts, [None, None])]
    assert counts == [(1, [1, 1])] * 2  # torch; numpy's and scipy's OpenBLAS
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with threadpool_limits(limits=2, user_api="blas"):
            outside = thread_counts()
            assert outside == (2, [2, 2])
            assert with_threads(1, thread_counts) == (1, [1, 1])
            assert thread_counts() == outside
    finally:
        torch.set_num_threads(before)


# ------------------------------------------------------------------------------------------- sweeps
def test_a_sweep_on_two_workers_stores_every_cell_as_one_worker_does(tmp_path):
    import json

    from harness.speedup.sweep import cli as sweep
    from test_sweep import TINY, _args
    (tmp_path / "tiny.toml").write_text(TINY)
    stored = {}
    for workers in (1, 2):
        out = tmp_path / f"w{workers}"
        assert sweep.run(_args(tmp_path / "tiny.toml", out, workers=workers)) == 0
        recs = [json.loads(p.read_text()) for p in sorted((out / "cells").rglob("*.json"))]
        stored[workers] = {r["id"]: (r["key"], r["params"]) for r in recs}
    assert stored[1] and stored[1] == stored[2]
