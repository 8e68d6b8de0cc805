"""`verify --stop-at-need` (harness.verify.stopping, issue 42 item 1): the look reads the very bounds the verdict
reads; the sampler calls end at every look; a lossless run stops at its first certified look, certified, its TV
bounds at the look's share of δ and its p-values x the number of looks; a lossy run is still caught.

False-failure rates: the end-to-end run is deterministic at its seed (a lossless run whose bounds at ε x 10 fail
at every look would need the bounds to be ~10x their expected size); the rest is exact."""
import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from harness.controls.chain import CATALOGUE
from harness.core.backends import SerialBackend
from harness.laws.scenarios import SCENARIO_DIR, load_scenario, load_settings
from harness.verify import pipeline
from harness.verify.simcommand import _empty_acc, default_command, fill_accumulator, judge_command, window_counts
from harness.verify.stopping import CAP_FACTOR, CAP_SHARE, largest_ratio, look_chunks, need, stop_rule

SETTINGS = load_settings(SCENARIO_DIR)
BUG = {c.name: c for c in CATALOGUE}["accept_everything"]


@pytest.fixture(scope="module")
def plan():
    return default_command(SETTINGS, SCENARIO_DIR, 3343, with_controls=False)


@pytest.mark.parametrize("name", ["base", "k1_long", "greedy"])
def test_the_look_reads_the_verdicts_bounds(plan, name):
    """largest_ratio (what a look decides on) is the verdict's cert_worst_ratio on the same counts and δ."""
    run = next(r for r in plan.runs if r.spec.scenario.name == name)
    sc = run.spec.scenario
    acc = fill_accumulator(_empty_acc(run.law, sc), window_counts(run.law, sc.joint_tokens, 20_000,
                                                                  np.random.default_rng(5)))
    v, _ = judge_command(replace(plan, runs=[run]), [acc])
    mine = largest_ratio(acc, plan.certifier.of(sc.name), plan.levels.delta_each)
    assert mine == pytest.approx(float(v.cert_worst_ratio.iloc[0]), rel=1e-12)


def test_stop_rule_grid_and_shares(plan):
    run = next(r for r in plan.runs if r.spec.scenario.name == "base")
    sc, eps = run.spec.scenario, plan.certifier.of("base")
    rule = stop_rule(run.law, sc.joint_tokens, eps, plan.levels.delta_each, 1_000_000)
    sizes, shares = rule.looks.sizes, rule.looks.deltas
    assert sizes[0] == need(run.law, sc.joint_tokens, eps, plan.levels.delta_each)
    assert sizes[-1] == math.ceil(CAP_FACTOR * 1_000_000) and math.isclose(sum(shares), 1.0)
    assert shares[-1] == CAP_SHARE
    assert rule.share_at(sizes[3]) == shares[3] and rule.share_at(sizes[3] + 1) == min(shares)


def test_look_chunks_end_at_every_look():
    sizes = (1000, 1100, 1210, 2000)
    chunks = look_chunks(sizes, 8, 10_000)
    ends = set(np.cumsum(chunks).tolist())
    assert set(sizes) <= ends and sum(chunks) == 2000
    assert len([c for c in np.cumsum(chunks) if c <= 1000]) == 8  # the first look alone: min_chunks calls
    assert max(look_chunks((10_000,), 2, 1000)) == 1000  # max_chunk holds


def _verify(sampler, label, settings, draws):
    return pipeline.verify(sampler=sampler, sampler_label=label, scenarios=[load_scenario("base", SCENARIO_DIR)],
                           settings=settings, draws=draws, controls=False, out=None, figures=False, progress=False,
                           von_neumann=False, backend=SerialBackend())


def test_a_lossless_run_stops_at_its_first_certified_look():
    """ε x 10 (need ~5 k sequences): the reference run stops below its cap, certified there; its bounds carry the
    look's share of δ and its fixed-n p-values the number of looks."""
    s = replace(SETTINGS, stop_at_need=True, epsilon_override={"position": 0.05, "pair": 0.1, "joint": 0.2})
    res = _verify(None, "reference", s, 8_000)
    ref = next(r for r in res.runs if r.label == "reference")
    assert ref.certified_at is not None and ref.acc.n == ref.certified_at < ref.stop.looks.cap
    assert ref.certified_at in ref.stop.looks.sizes
    v = res.verdicts.set_index("run").loc["reference"]
    assert v.certificate == "certified"
    t = res.table[(res.table.run == "reference") & (res.table.family == "gof")]
    L = len(ref.stop.looks.sizes)
    assert t.tv_method.str.contains("union bound over a fixed grid of looks").all()
    assert t.method.str.contains(f"p x {L}").all()
    others = [r for r in res.runs if r.label != "reference"]  # block / tree references: control-sized, fixed n
    assert all(getattr(r, "stop", None) is None and r.acc.n == r.draws for r in others)


def test_a_lossy_run_is_still_caught():
    res = _verify(BUG.sampler, BUG.name, replace(SETTINGS, stop_at_need=True), 20_000)
    run = res.runs[0]
    assert run.certified_at is None
    assert res.verdicts.set_index("run").loc[BUG.name].verdict.startswith("lossy")


def test_a_stopped_runs_inconclusive_rate_is_the_procedures_at_its_cap():
    """A run of --stop-at-need is inconclusive only if it is not certified at its cap, where its bounds are at the
    cap's share of δ: the report's P(inconclusive) is that rate (before, the fixed-n planner's at the size it stopped
    at: on base at 732,114 sequences ≈ 0.0018, ≤ 0.013, where the procedure measured ≤ 9.2e-4 per command)."""
    from harness.verify.epsilon import epsilons_for
    from harness.verify.verdicts import Certifier, _bounds_of, _planned
    s = replace(SETTINGS, stop_at_need=True, epsilon_override={"position": 0.05, "pair": 0.1, "joint": 0.2})
    res = _verify(None, "reference", s, 8_000)
    ref = next(r for r in res.runs if r.label == "reference")
    assert ref.acc.n < ref.stop.looks.cap and ref.stop.looks.deltas[-1] == CAP_SHARE
    eps = epsilons_for(s, ref.scenario)
    c = Certifier({ref.scenario.name: eps}, eps, 1e-6, 0.999)
    gof, _, e = _bounds_of(ref, res.table[res.table.run == "reference"], c)
    _, at_cap, _ = _planned(ref, gof, e, c)  # the run's own rate: not certified at its cap, at δ / 2
    _, stopped, _ = _planned(ref, gof, e, c, 1.0)  # the fixed-n figure at the size it stopped at
    _, cap_full, _ = _planned(ref, gof, e, c, ref.stop.looks.cap / ref.acc.n)  # the cap at the whole δ
    assert 0 <= cap_full <= at_cap < stopped, (cap_full, at_cap, stopped)  # δ / 2 costs a little, the cap saves more


# ------------------------------------------------------------------------------- the exact transformer pair
def _pair_run(n_per_prompt: int, shard_rows: int, eps, delta: float, seed: int, bug=None, share: float = 0.5):
    """A real-model run under test whose exact-pair shards are drawn from the synthetic law of test_exactmodel
    (2 prompts, V = 4, J = 3), with the spec that law is kept under, and every shard of it up to its cap."""
    from types import SimpleNamespace
    from harness.verify.exactmodel import remember_law, sequences_per_shard
    from harness.verify.runs import RealRun
    from harness.verify.stopping import pair_cap
    from specimpl.sampling import SamplingConfig
    from tests.verify.test_exactmodel import SPEC, _draw, _law
    law = _law(11)
    spec = SimpleNamespace(exact=replace(SPEC, shard_sequences=shard_rows), config=SamplingConfig())
    remember_law(spec.exact, spec.config, law)
    rr = RealRun("reference", "reference", None, 8, 0, exact_n=n_per_prompt, stop_delta=delta, stop_eps=eps)
    shards = [_draw(law, rows // 2, seed + i, bug, share) for i, rows in
              enumerate(sequences_per_shard(spec.exact, pair_cap(n_per_prompt)))]
    return rr, spec, law, shards


def _arrive(rr, spec, shards, order) -> list:
    """The shards arriving in ``order``, each looked at as it comes (as the driver does); those that came after
    the run stopped are not kept.  The shards kept."""
    from harness.verify.draw import _pair_look
    for i in order:
        if rr.certified_at is not None or rr.lossy_at is not None:
            continue
        rr.exact_parts[i] = shards[i]
        _pair_look(rr, spec)
    return sorted(rr.exact_parts)


def test_the_exact_pair_stops_at_a_shard_boundary_whatever_order_its_shards_arrive_in():
    """A lossless run on the exact pair stops at the first look its shards *in order* certify, the same look and the
    same shards for any arrival order; the look is a shard boundary; the looks before it do not certify."""
    from tests.verify.test_exactmodel import EPS, DELTA
    rr, spec, law, shards = _pair_run(12_000, 1_000, EPS, DELTA, 7)
    kept = _arrive(rr, spec, shards, range(len(shards)))
    rule, at = rr.stop, rr.certified_at
    assert at is not None and at in rule.looks.sizes and at in rule.ends and at < rule.looks.cap
    assert kept == list(range(rule.shards_at(at))) and rr.exact_drawn == at
    from harness.verify.exactmodel import merge_draws
    for n in rule.looks.sizes[:rule.looks.sizes.index(at)]:
        assert not rule.certified_draw(merge_draws(shards[:rule.shards_at(n)]), law)
    for perm_seed in (1, 2):
        rr2, spec2, _, _ = _pair_run(12_000, 1_000, EPS, DELTA, 7)
        order = np.random.default_rng(perm_seed).permutation(len(shards))
        assert _arrive(rr2, spec2, shards, order) == kept and rr2.certified_at == at


def test_a_lossy_run_on_the_exact_pair_stops_only_beyond_doubt_and_never_as_certified():
    """A sampler whose every sequence comes from another law (the uniform one) is not certified at any look; it stops
    at the first look where some χ² p x L is ≤ LOSSY_P (lossy beyond doubt).  One whose every other sequence does
    (test_exactmodel's per-sequence bug: smallest p 9e-12 at the first look, 2e-17 at the cap) never gets there: it
    draws up to its cap, where it is not certified either."""
    from harness.verify.exactmodel import merge_draws
    from harness.verify.stopping import LOSSY_P, pair_smallest_p
    from tests.verify.test_exactmodel import EPS, DELTA
    bug = np.full(64, 1 / 64)
    rr, spec, law, shards = _pair_run(4_000, 400, EPS, DELTA, 7, bug, share=1.0)
    kept = _arrive(rr, spec, shards, range(len(shards)))
    rule, at = rr.stop, rr.lossy_at
    assert rule.early and rule.early[-1] < rule.looks.sizes[0]  # the lossy side's looks before the need
    assert rr.certified_at is None and at in rule.all_sizes and kept == list(range(rule.shards_at(at)))
    L = rule.n_looks
    assert L == len(rule.early) + len(rule.looks.sizes)
    assert L * pair_smallest_p(merge_draws(shards[:rule.shards_at(at)]), law) <= LOSSY_P
    for n in rule.all_sizes[:rule.all_sizes.index(at)]:
        assert L * pair_smallest_p(merge_draws(shards[:rule.shards_at(n)]), law) > LOSSY_P
    rr, spec, law, shards = _pair_run(4_000, 400, EPS, DELTA, 7, bug)
    assert _arrive(rr, spec, shards, range(len(shards))) == list(range(len(shards)))
    assert rr.certified_at is None and rr.lossy_at is None
    assert rr.exact_drawn == rr.stop.looks.cap == math.ceil(CAP_FACTOR * 4_000)


def _pair_verify(backend, sampler=None, label="reference"):
    """The real-model scenario alone, the real sampler (or ``sampler``) on the shipped exact pair (16,384 sequences
    per prompt in shards of 1,024 per prompt), ε x 5 (the need ~6 k per prompt), stopping at the need, on
    ``backend``."""
    from harness.verify.cli import real_model_spec
    spec = real_model_spec(SCENARIO_DIR / "default.toml")
    spec = replace(spec, exact=replace(spec.exact, n_sequences=16_384, shard_sequences=2_048))
    s = replace(SETTINGS, stop_at_need=True, epsilon_override={"real": 0.05, "real_pair": 0.1, "real_joint": 0.25})
    return pipeline.verify(sampler=sampler, sampler_label=label, scenarios=[], settings=s, controls=False,
                           out=None, figures=False, progress=False, von_neumann=False, backend=backend,
                           real_model=spec, real_model_sequences=4, real_model_controls=False)


@pytest.mark.slow
def test_on_the_exact_pair_the_reference_stops_at_the_need_and_its_rows_say_so():
    """The run stops at a look below its cap, certified there; its exact-pair rows carry the look's share of δ and
    p x the number of looks; the report's stop summary counts it.  On two worker processes, which finish the shards
    in their own order, it stops at the same look with the same table."""
    from harness.core.backends import LocalPool
    res = _pair_verify(SerialBackend())
    with LocalPool(2) as pool:
        there = _pair_verify(pool)
    pd.testing.assert_frame_equal(res.table.reset_index(drop=True), there.table.reset_index(drop=True),
                                  check_exact=True)
    assert there.real_runs[0].certified_at == res.real_runs[0].certified_at
    rr = res.real_runs[0]
    assert rr.certified_at is not None and rr.certified_at in rr.stop.looks.sizes
    v = res.verdicts.set_index("run").loc["reference"]
    assert v.certificate == "certified", v.cert_worst
    t = res.table[res.table.family.str.startswith("exact_pair")]
    assert t.tv_method.str.contains("union bound over a fixed grid of looks").all()
    L = int(t.method.str.extract(r"p x (\d+)")[0].iloc[0])
    assert L > 2 and t.method.str.contains(f"p x {L}").all()
    n = int(t.n.iloc[0])
    assert (t.n == n).all() and n < math.ceil(CAP_FACTOR * 16_384) and n % 1_024 == 0  # a shard boundary, per prompt
    st = res.meta["timing"]["stop_at_need"]["runs"]
    assert [(x["scenario"], x["sequences"]) for x in st] == [("real_model (exact pair)", 2 * n)] and st[0]["look"] >= 1


def test_the_simulations_increments_add_up_to_one_draw_at_the_look():
    """experiments/stop_at_need.py draws the real-model run's counts in increments between its looks: the draw
    at a look holds exactly the sequences of every increment so far (per prompt), rows laid out as a real run's."""
    from tests.experiment_script import load_experiment
    from tests.verify.test_exactmodel import _law
    san = load_experiment("stop_at_need")
    law = _law(3)
    joints = [np.asarray(law.law.joint[i], np.float64).ravel() for i in range(2)]
    rng = np.random.default_rng(0)
    counts = [np.zeros(j.size, np.int64) for j in joints]
    san.real_draw(law, joints, 300, rng, counts)
    d = san.real_draw(law, joints, 200, rng, counts)
    assert d.n_sequences == 1000 and [int(c.sum()) for c in counts] == [500, 500]
    V, J = law.law.vocab_size, law.law.n_tokens
    for i in range(2):
        x = d.tokens[d.prompt == i].astype(np.int64)
        code = sum(x[:, t] * V ** (J - 1 - t) for t in range(J))
        assert np.array_equal(np.bincount(code, minlength=V ** J), counts[i])


def test_a_stopped_exact_pair_run_leaves_the_bar_as_exact_pair_work():
    """When the exact pair stops at a look, the shards it will not draw leave the progress bar as exact-pair work (the
    bar counts expected work by kind: dropped as n-gram work, the bar stopped at 45 % of a finished run); a shard
    arriving after the stop is not counted."""
    from types import SimpleNamespace
    from harness.verify.draw import RunState, _real_arrival
    from harness.verify.shards import ExactTask, RealResult
    from tests.verify.test_exactmodel import EPS, DELTA
    rr, spec, _, shards = _pair_run(12_000, 1_000, EPS, DELTA, 7)
    rs = SimpleNamespace(real_runs=[rr], real_model=spec)
    tasks = [ExactTask(0, "reference", ("name", "x"), i, int(d.n_sequences), 0, spec.exact, spec.config)
             for i, d in enumerate(shards)]
    rr.exact_pending = {t.shard: t.positions for t in tasks}
    calls = []
    bar = SimpleNamespace(update=lambda n, kind, s=None: calls.append(("update", n, kind)),
                          drop=lambda n, kind="law": calls.append(("drop", n, kind)))
    for t in tasks:
        _real_arrival(rs, t, RealResult(0, shards[t.shard], 0.0), RunState(None), bar)
    k = rr.stop.shards_at(rr.certified_at)
    assert [c for c in calls if c[0] == "update"] == [("update", t.positions, "exact") for t in tasks[:k]]
    assert [c for c in calls if c[0] == "drop"] == [("drop", sum(t.positions for t in tasks[k:]), "exact")]


@pytest.mark.slow
def test_on_the_exact_pair_a_gross_bug_stops_lossy_at_its_first_look():
    """A sampler whose target KV cache is never rolled back (TV ~0.3 on a position) is lossy beyond doubt at its
    first look, the lossy side's first (one shard): it stops there, not at its cap, and the verdict (p x L, Holm) is
    lossy."""
    from harness.controls.hf import no_rollback_generate
    res = _pair_verify(SerialBackend(), no_rollback_generate, "kv_bug")
    rr = res.real_runs[0]
    assert rr.certified_at is None and rr.lossy_at == rr.stop.all_sizes[0] and rr.exact_drawn == rr.lossy_at
    v = res.verdicts.set_index("run").loc["kv_bug"]
    assert v.verdict.startswith("lossy")
    st = res.meta["timing"]["stop_at_need"]["runs"][0]
    assert st["lossy"] and st["look"] == 1
