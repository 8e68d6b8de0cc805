"""The real-model certificate on the exact transformer pair (harness.verify.exactmodel, issue 24 item 1).

Fast tests use a synthetic enumerated law (V = 4, J = 3), so their error rates are those of the bounds and tests:
a lossless sample fails only if a χ² test rejects at its Bonferroni level or a TV bound reaches its ε (planned
below at P <= 1e-6); the lossy samples sit far beyond the detectable deviation (stated per test).  The slow test
runs the real samplers on the shipped exact pair (`make verify` runs the same at full size).
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from harness.laws.transformer import TransformerLaw, marginals_from_joint, pairs_from_joint
from harness.verify.battery import TEST_COLUMNS, tv_interval_inconclusive
from harness.verify.epsilon import Epsilons
from harness.verify.exactmodel import (EXACT_FAMILY, ExactModelDraw, ExactModelLaw, ExactModelSpec,
                                       load_exact_model_spec, plan_exact_model_tests, remember_law, sequences_per_shard)
from harness.verify.verdicts import Certifier, _real_certificate
from specimpl.sampling import SamplingConfig

V, J, W = 4, 3, 2
ALPHA, DELTA = 1e-4 / 40, 1e-3 / 40  # Bonferroni over this file's 2 prompts x (3 + 2 + 2) tests, as a family would
EPS = Epsilons(0.3, 0.6, 0.6, real=0.05, real_pair=0.08, real_joint=0.08)


SPEC = ExactModelSpec(prompts=((0,), (1,)), n_tokens=J, window=W)  # the key the synthetic law is kept under


def _law_from(joints) -> ExactModelLaw:
    law = TransformerLaw(np.stack(joints), np.stack([marginals_from_joint(j, V, J) for j in joints]),
                         np.stack([pairs_from_joint(j, V, J) for j in joints]), V, J, ((0,), (1,)), SamplingConfig())
    return ExactModelLaw(law, 0.0, W)


def _law(seed: int) -> ExactModelLaw:
    rng = np.random.default_rng(seed)
    return _law_from([rng.dirichlet(np.full(V ** J, 2.0)) for _ in range(2)])  # two prompts, each a law of J tokens


def _draw(law: ExactModelLaw, n: int, seed: int, bug=None, share: float = 0.5) -> ExactModelDraw:
    """n sequences per prompt (rows alternate the prompts) from the law; ``bug`` (a joint (V**J,)): each
    sequence is bugged with probability ``share`` and then drawn whole from it (its tokens dependent through the
    bug)."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(2):
        idx = rng.choice(V ** J, size=n, p=law.law.joint[i])
        if bug is not None:
            bugged = rng.random(n) < share
            idx[bugged] = rng.choice(V ** J, size=int(bugged.sum()), p=bug)
        rows.append(np.stack([(idx // V ** (J - 1 - t)) % V for t in range(J)], 1))  # (n, J), x_0 most significant
    tokens = np.empty((2 * n, J), np.int16)
    tokens[0::2], tokens[1::2] = rows
    return ExactModelDraw("s", tokens, (np.arange(2 * n) % 2).astype(np.int16), 2)


def _table(draw, law) -> pd.DataFrame:
    rows = []
    for s in plan_exact_model_tests(draw, law):
        r = s.evaluate(ALPHA, 0.99, DELTA)
        rows.append({**{c: getattr(r, c) for c in TEST_COLUMNS if hasattr(r, c)}, "family": s.family,
                     "test": s.test, "position": s.position, "reject": r.pvalue <= ALPHA})
    return pd.DataFrame(rows)


def _certifier() -> Certifier:
    return Certifier({}, EPS, DELTA, 0.999)


def _cert(table, law=None, lossy=False, role="reference"):
    rr = SimpleNamespace(role=role, label="reference")
    spec = None
    if law is not None:  # the planner's law: the synthetic one, kept under SPEC's key
        remember_law(SPEC, SamplingConfig(), law)
        spec = SimpleNamespace(exact=SPEC, config=SamplingConfig())
    return _real_certificate(rr, table.assign(run="reference", scenario="real_model"), lossy, _certifier(), spec)


def test_the_planned_epsilons_leave_a_lossless_sample_inconclusive_rarely():
    law = _law(0)
    n = 20_000
    rate = sum(tv_interval_inconclusive(law.of(t, i, q), n, DELTA, EPS.for_real_test(t)) for i in range(2)
               for t, q in [("position", 0), ("position", 1), ("position", 2), ("pair", 0), ("pair", 1),
                            ("joint", 0), ("joint", 1)])
    assert rate <= 1e-6  # rigorous bound on P(some bound >= its ε) for the lossless sample below


def test_a_lossless_sample_is_certified_and_worded_by_its_laws():
    law = _law(0)
    t = _table(_draw(law, 20_000, seed=1), law)
    assert len(t) == 2 * (3 + 2 + 2) and set(t.family) == {f"{EXACT_FAMILY}.p0", f"{EXACT_FAMILY}.p1"}
    assert not t.reject.any()  # false alarm <= 14 x ALPHA = 3.5e-5
    c = _cert(t, law)
    assert c["certificate"] == "certified" and c["cert_worst_ratio"] < 1
    assert c["cert_scope"] == ("token TV ≤ 0.05 for the marginal at each of the first 3 positions, ≤ 0.08 for each "
                               "consecutive pair, ≤ 0.08 for every window of 2 tokens, after each of 2 prompts "
                               "(20,000 sequences each), on the exact transformer pair")
    assert c["cert_strongest"].startswith("token TV ≤ 0.08 for every window of 2 tokens")
    assert "the sequence the independent unit" in c["cert_method"] and "float32" in c["cert_method"]
    assert 0 < c["certify_draws"] < 20_000 and c["cert_inconclusive_rate"] <= 1e-6


def test_a_per_sequence_bug_is_not_certified_and_the_bounds_cover_its_true_tv():
    """Half the sequences drawn whole from another law: the tokens of one sequence are dependent.  The counts of
    whole sequences are still multinomial, so each bound covers the true TV of the mixture (miss probability
    <= DELTA each) and the χ² tests reject (true position TV ~0.1-0.2 vs a detectable ~0.03 at this size)."""
    law = _law(0)
    bug = _law(7).law.joint[0]
    t = _table(_draw(law, 20_000, seed=2, bug=bug), law)
    assert t.reject.any()
    c = _cert(t, law, lossy=bool(t.reject.any()))
    assert c["certificate"] == "lossy" and c["cert_strongest"] == "none (lossy)"
    mix = _law_from([(j + bug) / 2 for j in law.law.joint])  # the lossy sampler's true law, per prompt
    for r in t.itertuples():
        i, kind = int(r.family.rsplit(".p", 1)[1]), "joint" if r.test.startswith("joint") else r.test
        tv = 0.5 * np.abs(mix.of(kind, i, r.position) - law.of(kind, i, r.position)).sum()
        assert r.tv_lower <= tv <= r.tv_upper  # each misses w.p. <= DELTA; 14 of them: <= 3.5e-4


def test_without_a_draw_on_the_exact_pair_there_is_no_certificate():
    """The old certificate: a pooled-PIT DKW bound below ε certified the run.  It is no longer a certificate (the
    pooled PIT values are independent only under H0): a run with PIT rows alone is inconclusive."""
    pooled = pd.DataFrame([{"family": "pit", "test": "pooled", "position": -1, "kolmogorov_upper": 0.001,
                            "reject": False}])
    c = _cert(pooled)
    assert c["certificate"] == "inconclusive" and "certify nothing" in c["cert_method"]


def test_spec_errors_name_the_key_and_shards_keep_the_prompts_alternating():
    with pytest.raises(ValueError, match="real_model.exact.window"):
        load_exact_model_spec({"n_tokens": 3, "window": 4})
    with pytest.raises(ValueError, match="real_model.exact.prompts"):
        load_exact_model_spec({"prompts": [[]]})
    with pytest.raises(ValueError, match="real_model.exact"):
        load_exact_model_spec({"no_such_key": 1})
    spec = ExactModelSpec(shard_sequences=1000)
    parts = sequences_per_shard(spec, 1001)
    assert sum(parts) == 2002 and all(p % 2 == 0 and p <= 1000 for p in parts)


@pytest.mark.slow
def test_on_the_exact_pair_the_reference_is_certified_and_the_controls_are_caught():
    """The real samplers on the shipped exact pair (J = 4, windows of 3) at the default.toml control sizes: the
    KV-cache and leaky-mask bugs are caught (measured: p = 0 and 2e-15 at 4,096 per prompt, Bonferroni level
    ~2e-7 here), the reference at 12,288 per prompt has every position bound below 0.05."""
    from harness.controls import hf as hfb
    from harness.verify.exactmodel import exact_model_draw, exact_model_law
    from specimpl.speculative import speculative_generate
    spec = ExactModelSpec()
    law = exact_model_law(spec, SamplingConfig())
    assert law.floor < 1e-5  # float32 vs float64 law of the first 4 tokens: measured 3.5e-7
    for fn, n, lossy in ((hfb.no_rollback_generate, 4096, True), (hfb.leaky_mask_generate, 4096, True),
                         (speculative_generate, 12_288, False)):
        t = _table(exact_model_draw(fn, spec, n_sequences=2 * n, seed=3), law)
        assert bool(t.reject.any()) == lossy
        if not lossy:
            assert t[t.test == "position"].tv_upper.max() < 0.05


@pytest.mark.slow
def test_on_the_exact_pair_a_three_percent_over_acceptance_is_caught_at_the_default_size():
    """Issue 42's certificate with teeth: a sampler accepting with probability min(1, 1.03 p/q) (3 % too often;
    examples/test_my_sampler.py) moves the first token's law by TV 0.0046 and 0.0079 after the two prompts
    (computed from the models' float64 next-token laws); the default size of ``[real_model.exact]`` (294,912
    sequences per prompt, certifying epsilon_real = 0.01 per position) rejects it (measured: `make verify ARGS=
    "--sampler examples/test_my_sampler.py:over_accepting_generate --scenario real_model --no-controls"` at
    278,528 per prompt: exit 1, loss TV 0.0073 [0.0011, 0.0111] on p1.position[0]; this test passed at that size and at
    294,912, in 2 min 37 s on a quiet machine)."""
    import sys
    import tomllib
    from pathlib import Path
    from harness.laws.scenarios import SCENARIO_DIR
    from harness.verify.exactmodel import exact_model_draw, exact_model_law
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    from test_my_sampler import over_accepting_generate
    spec = load_exact_model_spec(tomllib.loads((SCENARIO_DIR / "default.toml").read_text())["real_model"]["exact"])
    assert spec.n_sequences == 294_912
    law = exact_model_law(spec, SamplingConfig())
    t = _table(exact_model_draw(over_accepting_generate, spec, n_sequences=2 * spec.n_sequences, seed=5), law)
    assert t.reject.any(), t.sort_values("pvalue").head(3)
