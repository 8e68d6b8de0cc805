"""Saved state is keyed on content (harness.core.fingerprint): a verify run reuses saved draw shards only when
the sampler's source, the project's code, the scenario, the seed and the draw counts are the same, and
says so; a changed sampler file is redrawn."""
import json
import textwrap

import pandas as pd
import pytest

from harness.core import fingerprint as fpmod
from harness.laws.scenarios import load_scenario, load_settings
from harness.verify import draw as drawmod
from harness.verify.pipeline import verify
from harness.verify.sampler import load_sampler

GOOD = """
    from specimpl import SamplingConfig, speculative_generate

    def fn(target, draft, prompts, *, k, max_new_tokens, config=SamplingConfig(), eos_token_id=None,
           generator=None):
        return speculative_generate(target, draft, prompts, k=k, max_new_tokens=max_new_tokens, config=config,
                                    eos_token_id=eos_token_id, generator=generator)
"""

LOSSY = """
    import torch
    from specimpl import SamplingConfig, SpeculativeSampler

    class AcceptAll(SpeculativeSampler):
        def uniforms(self, B, generator, dtype, device):
            u_draft, u_acc, u_fin = super().uniforms(B, generator, dtype, device)
            return u_draft, torch.zeros_like(u_acc), u_fin

    def fn(target, draft, prompts, *, k, max_new_tokens, config=SamplingConfig(), eos_token_id=None,
           generator=None):
        return AcceptAll(target, draft, k, config).generate(prompts, max_new_tokens, eos_token_id, generator)
"""


def _run(path, out, capsys=None):
    settings = load_settings()
    res = verify(sampler=load_sampler(f"{path}:fn"), sampler_label="my.py:fn", scenarios=[load_scenario("base")],
                 settings=settings, draws=4000, controls=False, out=out, figures=False, progress=False,
                 von_neumann=False)
    err = capsys.readouterr().err if capsys is not None else ""
    return res, err


@pytest.fixture
def keep_state(monkeypatch):
    """A completed run keeps its _tmp_state (as an interrupted one does)."""
    monkeypatch.setattr(drawmod.RunState, "clear", lambda self: None)


def test_edited_sampler_is_redrawn(tmp_path, keep_state, capsys):
    src = tmp_path / "my.py"
    src.write_text(textwrap.dedent(GOOD))
    first, _ = _run(src, tmp_path / "out", capsys)
    assert first.verdicts.verdict.iloc[0] in ("certified", "inconclusive")  # not lossy (too few draws to certify)
    assert len(list((tmp_path / "out" / "_tmp_state").glob("*.npz"))) == 2  # sampler + target-only baseline
    src.write_text(textwrap.dedent(LOSSY))
    second, err = _run(src, tmp_path / "out", capsys)
    assert not second.passed  # redrawn with the lossy code and caught, not PASSed from the old draws
    assert second.meta["resume"]["stale_shards_redrawn"] == 1
    assert second.meta["resume"]["reused_shards"] == 1  # the baseline: same code, same scenario
    assert "ignored 1 saved draw shard made by other code" in err


def test_reuse_is_announced(tmp_path, keep_state, capsys):
    src = tmp_path / "my.py"
    src.write_text(textwrap.dedent(GOOD))
    first, err1 = _run(src, tmp_path / "out", capsys)
    assert first.meta["resume"]["reused_shards"] == 0 and "reused" not in err1
    second, err2 = _run(src, tmp_path / "out", capsys)
    fp = fpmod.short(second.meta["resume"]["fingerprint"])
    line = f"reused 2 saved draw shards from an earlier run of the same code (fingerprint {fp})"
    assert line in err2
    assert line in (tmp_path / "out" / "summary.md").read_text()
    assert json.loads((tmp_path / "out" / "meta.json").read_text())["resume"]["reused_shards"] == 2
    assert second.table.pvalue.tolist() == first.table.pvalue.tolist()


def test_changed_scenario_is_redrawn(tmp_path, keep_state, capsys):
    src = tmp_path / "my.py"
    src.write_text(textwrap.dedent(GOOD))
    _run(src, tmp_path / "out", capsys)
    settings = load_settings()
    sc = load_scenario("base")
    import dataclasses
    sc16 = dataclasses.replace(sc, k=sc.k + 1)  # same name, other config
    res = verify(sampler=load_sampler(f"{src}:fn"), sampler_label="my.py:fn", scenarios=[sc16], settings=settings,
                 draws=4000, controls=False, out=tmp_path / "out", figures=False, progress=False, von_neumann=False)
    assert res.meta["resume"] == {**res.meta["resume"], "reused_shards": 0, "stale_shards_redrawn": 2}


def test_sampler_fingerprint_follows_the_source(tmp_path):
    src = tmp_path / "s.py"
    src.write_text(textwrap.dedent(GOOD))
    a = fpmod.sampler_fingerprint(load_sampler(f"{src}:fn"))
    assert fpmod.sampler_fingerprint(load_sampler(f"{src}:fn")) == a
    src.write_text(textwrap.dedent(GOOD) + "\n# a comment changes the source\n")
    assert fpmod.sampler_fingerprint(load_sampler(f"{src}:fn")) != a
    from specimpl import speculative_generate
    from specimpl.speculative import speculative_generate as same
    assert fpmod.sampler_fingerprint(speculative_generate) == fpmod.sampler_fingerprint(same)


def test_canonical_config():
    assert fpmod.canonical({"b": 1, "a": (1, 2)}) == fpmod.canonical({"a": [1, 2], "b": 1})
    sc = load_scenario("base")
    assert fpmod.fingerprint(sc) == fpmod.fingerprint(load_scenario("base"))
    import dataclasses
    assert fpmod.fingerprint(sc) != fpmod.fingerprint(dataclasses.replace(sc, max_new_tokens=sc.max_new_tokens + 1))
    assert len(fpmod.code_fingerprint()) == 64


def test_calibrate_seed_keyed_on_scenario_config(tmp_path):
    import dataclasses

    from harness.verify.calibrate import _pvalues
    settings, sc = load_settings(), load_scenario("base")
    store = tmp_path / "_tmp_seeds"
    store.mkdir()
    a, ra = _pvalues(settings, [sc], seeds=1, draws=1000, store=store, progress=False)
    assert ra["reused_seeds"] == [] and ra["stale_seeds_redrawn"] == []
    b, rb = _pvalues(settings, [sc], seeds=1, draws=1000, store=store, progress=False)
    assert rb["reused_seeds"] == [settings.seed + 1000] and b.pvalue.tolist() == a.pvalue.tolist()
    sc2 = dataclasses.replace(sc, k=sc.k + 9)  # the scenario edited under the same name
    c, rc = _pvalues(settings, [sc2], seeds=1, draws=1000, store=store, progress=False)
    assert rc["reused_seeds"] == [] and rc["stale_seeds_redrawn"] == [settings.seed + 1000]
    (tmp_path / "fresh").mkdir()
    fresh, _ = _pvalues(settings, [sc2], seeds=1, draws=1000, store=tmp_path / "fresh", progress=False)
    assert len(c) == len(fresh) and c.pvalue.tolist() == fresh.pvalue.tolist()


def test_real_model_shards_are_reused_and_announced(tmp_path, keep_state, capsys):
    """The tiny-pair run and its two exact-pair shards (512 rows each) are saved and reused (``--fixed-n``).  The exact
    table is made small (J = 3, windows of 2) so that 512 sequences per prompt certify at the ε below.  Stopping at
    the need (the default), the run stops at its first look (one shard, 256 per prompt) and the resumed command reads
    the same look from the saved shard."""
    import re
    import shutil
    from harness.cli import main
    from harness.laws.scenarios import SCENARIO_DIR
    d = tmp_path / "scen"
    shutil.copytree(SCENARIO_DIR, d)
    text = (d / "default.toml").read_text()
    for key, v in (("n_tokens", 3), ("window", 2), ("shard_sequences", 512)):
        text = re.sub(rf"\n{key} = \S+", f"\n{key} = {v}", text)
    (d / "default.toml").write_text(text)
    argv = ["pit", "--scenario-dir", str(d), "--out", str(tmp_path / "p"), "--no-progress", "--no-figures", "--no-peer",
            "--only", "reference", "--n-sequences", "8", "--max-new-tokens", "8", "--exact-sequences", "512",
            "--epsilon", "real=0.5,real_pair=0.9,real_joint=0.9"]  # what 512 sequences per prompt certify
    stopping = [a if a != str(tmp_path / "p") else str(tmp_path / "s") for a in argv]
    argv = argv + ["--fixed-n"]
    assert main(argv) == 0
    first = capsys.readouterr().err
    assert "reused" not in first
    assert main(argv) == 0
    assert "reused 3 saved draw shards from an earlier run of the same code" in capsys.readouterr().err
    meta = json.loads((tmp_path / "p" / "meta.json").read_text())
    assert meta["resume"]["reused_shards"] == 3 and meta["resume"]["stale_shards_redrawn"] == 0
    for i in range(2):
        assert main(stopping) == 0
        assert ("reused 2 saved draw shards" in capsys.readouterr().err) == (i == 1)
        t = pd.read_csv(tmp_path / "s" / "tests.csv")
        assert (t[t.family.str.startswith("exact_pair")].n == 256).all()


def test_sampler_fingerprint_follows_the_modules_it_imports(tmp_path, monkeypatch):
    """Issue 26, finding 4: a sampler file doing `from helper import gen` was fingerprinted by its own bytes
    only, so a run resumed after helper.py became lossy reused the old draws.  Every module imported from
    outside the standard library, site-packages and the project now counts; the project's own samplers
    are not keyed on the user's files."""
    import sys
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "helper_i26.py").write_text(textwrap.dedent(GOOD).replace("def fn(", "def gen("))
    src = tmp_path / "s.py"
    src.write_text("from helper_i26 import gen as fn\n")
    from specimpl import speculative_generate
    ref = fpmod.sampler_fingerprint(speculative_generate)
    a = fpmod.sampler_fingerprint(load_sampler(f"{src}:fn"))
    assert fpmod.sampler_fingerprint(load_sampler(f"{src}:fn")) == a
    assert tmp_path / "helper_i26.py" in fpmod.user_module_files()
    (tmp_path / "helper_i26.py").write_text(textwrap.dedent(LOSSY).replace("def fn(", "def gen("))
    monkeypatch.delitem(sys.modules, "helper_i26")
    assert fpmod.sampler_fingerprint(load_sampler(f"{src}:fn")) != a
    assert fpmod.sampler_fingerprint(speculative_generate) == ref


def test_a_stale_shard_names_the_file_that_changed(tmp_path, monkeypatch):
    """By-hand rerun of issue 26 (finding 4): the stale-shard line said "sampler source, project code, ..." where
    helper.py had changed.  A shard now records the fingerprint of each source it was drawn under, and the line
    names the ones that differ (a file by its name, or "settings")."""
    import sys
    from harness.verify.draw import RunState
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "helper_i26b.py").write_text(textwrap.dedent(GOOD).replace("def fn(", "def gen("))
    src = tmp_path / "s2.py"
    src.write_text("from helper_i26b import gen as fn\n")
    state = RunState(tmp_path / "out")
    slot = RunState.slot("base", 0)
    state.save(slot, state.fingerprint(load_sampler(f"{src}:fn"), "base", 1000), {"x": 1})
    (tmp_path / "helper_i26b.py").write_text(textwrap.dedent(LOSSY).replace("def fn(", "def gen("))
    monkeypatch.delitem(sys.modules, "helper_i26b")
    again = RunState(tmp_path / "out")
    fn = load_sampler(f"{src}:fn")
    assert again.load(slot, again.fingerprint(fn, "base", 1000)) is None
    assert "changed: helper_i26b.py)" in again.announcement()[0]
    other = RunState(tmp_path / "out")  # the helper saved again, then only the settings differ
    other.save(slot, other.fingerprint(fn, "base", 1000), {"x": 1})
    assert other.load(slot, other.fingerprint(fn, "base", 2000)) is None
    assert "changed: settings)" in other.announcement()[0]
