"""Sequential stopping (issue 10, item 5): a clearly lossy run stops early, at the same shard on any number
of workers; a lossless run is never stopped and its row passes; the averaged e-process keeps its level under
H0 over many looks (simulation) and crosses fast under a real deviation; the budget splits as documented.

False-failure rates (over seeds; deterministic at the fixed seeds): the level check (crossed / 600 <= 0.1 + 3 sd)
1.7e-3 for an e-process of level exactly 0.1 (less for a conservative one); a lossless run not stopped, at most its
level; the crossing check under TV >= 0.2 fails only for lack of power."""
import math

import numpy as np
import pytest

from harness.core.backends import LocalPool, SerialBackend
from harness.controls.chain import CATALOGUE
from harness.cli import main
from harness.core.errors import UsageError
from harness.laws.scenarios import SCENARIO_DIR, load_scenario, load_settings
from harness.verify import pipeline
from harness.verify.sequential import FAMILY, RunEProcess, sequential_level

SETTINGS = load_settings(SCENARIO_DIR)
BUG = {c.name: c for c in CATALOGUE}["accept_everything"]  # q != p everywhere: a large deviation at every position


def _verify(backend, sampler, label, draws):
    return pipeline.verify(sampler=sampler, sampler_label=label, scenarios=[load_scenario("base", SCENARIO_DIR)],
                           settings=SETTINGS, draws=draws, controls=False, out=None, figures=False, progress=False,
                           von_neumann=False, backend=backend)


def _rows(res, family=None):
    t = res.table
    return t[t.family == family] if family else t


@pytest.fixture(scope="module")
def serial_bug():
    return _verify(SerialBackend(), BUG.sampler, BUG.name, 100_000)


def test_a_lossy_run_stops_early_and_is_lossy_by_its_eprocess(serial_bug):
    run = serial_bug.runs[0]
    assert run.sequential.stopped_at is not None and run.acc.n == run.sequential.stopped_at < run.draws // 4
    seq = _rows(serial_bug, FAMILY)
    assert len(seq) == 1 and bool(seq.reject.iloc[0]) and seq.pvalue.iloc[0] <= run.sequential.level
    fixed = serial_bug.table[(serial_bug.table.family != FAMILY) & (serial_bug.table.run == BUG.name)]
    assert len(fixed) > 0 and (fixed.verdict == "not judged (run stopped early)").all() and not fixed.reject.any()
    v = serial_bug.verdicts.set_index("run").loc[BUG.name]
    assert v.verdict.startswith("lossy") and v.caught_by == "sequential.eprocess"


def test_the_stop_is_the_same_on_two_workers(serial_bug):
    with LocalPool(2) as pool:
        res = _verify(pool, BUG.sampler, BUG.name, 100_000)
    a, b = serial_bug.runs[0], res.runs[0]
    assert (a.sequential.stopped_at, a.tokens, a.sequential.max_log_e) == (b.sequential.stopped_at, b.tokens,
                                                                          b.sequential.max_log_e)
    cols = ["test", "position", "statistic", "pvalue", "verdict"]
    assert serial_bug.table[cols].equals(res.table[cols])


def test_a_lossless_run_is_not_stopped_and_its_row_passes():
    res = _verify(SerialBackend(), None, "reference", 20_000)
    ref = next(r for r in res.runs if r.label == "reference")
    assert ref.sequential.stopped_at is None and ref.acc.n == ref.draws
    seq = _rows(res, FAMILY)
    assert len(seq) == len(res.runs) and not seq.reject.any() and (seq.p_adjusted > SETTINGS.family_alpha).all()
    assert all(r.sequential.stopped_at is None for r in res.runs)  # the block / tree reference runs too
    holm = res.table[res.table.family != FAMILY]
    assert not holm.verdict.str.startswith("not judged").any()
    assert holm.alpha_bonferroni.iloc[0] == pytest.approx((SETTINGS.family_alpha - SETTINGS.sequential_alpha) / len(holm))


def _laws(rng, sizes=(8, 8, 64)):
    return [rng.dirichlet(np.ones(d)) for d in sizes]


class _Acc:
    """The three statistics RunEProcess reads, as an Accumulator holds them (counts, pairs, joint)."""

    def __init__(self, laws):
        self.laws, self.n = laws, 0
        self.counts = np.zeros((1, laws[0].size), np.int64)
        self.pairs = np.zeros((1, laws[1].size), np.int64)
        self.joint = np.zeros(laws[2].size, np.int64)
        self.joint_tokens = 3

    def add(self, rng, B, laws):
        for arr, p in ((self.counts[0], laws[0]), (self.pairs[0], laws[1]), (self.joint, laws[2])):
            arr += rng.multinomial(B, p)
        self.n += B


def test_the_averaged_eprocess_keeps_its_level_over_many_looks():
    """Under H0, P(E ever reaches 1/level over 40 looks) <= level (Ville): at level 0.1 over 600 replicates the
    crossing rate stays below 0.1 + 3 sd (a process that were not a supermartingale would exceed it)."""
    rng = np.random.default_rng(7)
    laws = _laws(rng)
    crossed = 0
    for _ in range(600):
        ep, acc = RunEProcess(laws, 0.1), _Acc(laws)
        for _ in range(40):
            acc.add(rng, 25, laws)
            if ep.look(acc):
                break
        crossed += ep.stopped_at is not None
    assert crossed / 600 <= 0.1 + 3 * math.sqrt(0.1 * 0.9 / 600)


def test_a_deviation_makes_it_cross_within_a_planned_number_of_draws():
    rng = np.random.default_rng(8)
    laws = _laws(rng)
    shifted = [0.8 * p + 0.2 * np.eye(p.size)[0] for p in laws]  # TV >= 0.2 (1 - p_0) on every statistic
    ep, acc = RunEProcess(laws, 1e-7), _Acc(laws)
    while not ep.look(acc) and acc.n < 20_000:
        acc.add(rng, 200, shifted)
    assert ep.stopped_at is not None and ep.stopped_at <= 2_000 and ep.pvalue <= 1e-7


def test_state_round_trip_keeps_a_stop():
    ep = RunEProcess([np.array([0.5, 0.5])], 1e-3, max_log_e=9.0, looks=3, n=300, stopped_at=300)
    other = RunEProcess([np.array([0.5, 0.5])], 1e-3)
    other.restore(ep.state())
    assert other.state() == ep.state() and other.pvalue == pytest.approx(math.exp(-9.0))


def test_level_is_the_share_split_over_the_runs():
    assert sequential_level(SETTINGS, 50) == pytest.approx(SETTINGS.sequential_alpha / 50)
    assert sequential_level(SETTINGS, 0) == 0.0


def test_sequential_alpha_must_be_below_family_alpha(tmp_path):
    text = (SCENARIO_DIR / "default.toml").read_text()
    assert "sequential_alpha = 1e-5" in text
    (tmp_path / "default.toml").write_text(text.replace("sequential_alpha = 1e-5", "sequential_alpha = 1e-4"))
    with pytest.raises(UsageError, match="sequential_alpha"):
        load_settings(tmp_path)


def test_no_sequential_gives_holm_the_whole_budget(tmp_path):
    out = tmp_path / "o"
    rc = main(["verify", "--scenario", "base", "--draws", "3000", "--no-real-model", "--no-controls", "--no-sequential",
               "--no-figures", "--no-progress", "--workers", "1", "--out", str(out)])
    assert rc in (0, 4)  # certified or inconclusive (3,000 draws), never lossy
    import pandas as pd
    t = pd.read_csv(out / "tests.csv")
    assert FAMILY not in set(t.family)
    assert t.alpha_bonferroni.iloc[0] == pytest.approx(SETTINGS.family_alpha / len(t))
