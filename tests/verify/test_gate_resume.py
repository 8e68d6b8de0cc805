"""Honest resume and determinism (issue 45, item 5, first half): a helper module that the sampler imports *inside*
its call is recorded with the draws it made and checked before a resumed run reuses them; a sampler whose output
does not follow from its `generator` ends in exit 3 with one line, before its draws are used."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.laws.scenarios import load_scenario, load_settings
from harness.verify import draw as drawmod
from harness.verify.pipeline import verify
from harness.verify.sampler import load_sampler

REPO = Path(__file__).resolve().parents[2]

SAMPLER = """
    import os
    import sys

    def fn(target, draft, prompts, *, k, max_new_tokens, config, eos_token_id=None, generator=None):
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import gate_late_helper  # imported inside the call: not seen when the sampler is fingerprinted
        return gate_late_helper.gen(target, draft, prompts, k=k, max_new_tokens=max_new_tokens, config=config,
                                    eos_token_id=eos_token_id, generator=generator)
"""

GOOD = """
    from specimpl import speculative_generate

    def gen(target, draft, prompts, **kw):
        return speculative_generate(target, draft, prompts, **kw)
"""

LOSSY = """
    import torch
    from specimpl import SpeculativeSampler

    class AcceptAll(SpeculativeSampler):
        def uniforms(self, B, generator, dtype, device):
            u_draft, u_acc, u_fin = super().uniforms(B, generator, dtype, device)
            return u_draft, torch.zeros_like(u_acc), u_fin

    def gen(target, draft, prompts, *, k, max_new_tokens, config, eos_token_id, generator):
        return AcceptAll(target, draft, k, config).generate(prompts, max_new_tokens, eos_token_id, generator)
"""


def _run(src, out):
    sys.modules.pop("gate_late_helper", None)  # a new command is a new process: the helper is imported afresh
    return verify(sampler=load_sampler(f"{src}:fn"), sampler_label="s.py:fn", scenarios=[load_scenario("base")],
                  settings=load_settings(), draws=4000, controls=False, out=out, figures=False, progress=False,
                  von_neumann=False)


def test_helper_imported_inside_the_call_is_checked_on_resume(tmp_path, monkeypatch, capsys):
    """Was: "reused 2 saved draw shards from an earlier run of the same code", and the old verdict."""
    src, helper = tmp_path / "s.py", tmp_path / "gate_late_helper.py"
    src.write_text(textwrap.dedent(SAMPLER))
    helper.write_text(textwrap.dedent(GOOD))
    monkeypatch.setattr(drawmod.RunState, "clear", lambda self: None)  # keep the state, as an interrupted run does
    try:
        first = _run(src, tmp_path / "out")
        assert first.verdicts.verdict.iloc[0] != "lossy"
        helper.write_text(textwrap.dedent(LOSSY))
        os.utime(helper, ns=(1, 1))  # a new mtime whatever the clock's resolution
        capsys.readouterr()
        second = _run(src, tmp_path / "out")
        err = capsys.readouterr().err
    finally:
        sys.modules.pop("gate_late_helper", None)
        sys.path[:] = [p for p in sys.path if p != str(tmp_path)]
    assert second.meta["resume"]["stale_shards_redrawn"] == 1  # the sampler's run (the baseline does not call it)
    assert "changed: gate_late_helper.py" in err
    assert not second.passed and second.verdicts.verdict.iloc[0] == "lossy"  # redrawn with the helper as it is now


GLOBAL_RNG = """
    from specimpl import speculative_generate

    def fn(target, draft, prompts, *, k, max_new_tokens, config, eos_token_id=None, generator=None):
        return speculative_generate(target, draft, prompts, k=k, max_new_tokens=max_new_tokens, config=config,
                                    eos_token_id=eos_token_id, generator=None)  # ignores its generator
"""


@pytest.mark.parametrize("workers", ["1", pytest.param("2", marks=pytest.mark.slow)])  # 2: ~65 s at load 12
def test_sampler_ignoring_its_generator_is_exit_3(tmp_path, workers):
    src = tmp_path / "s.py"
    src.write_text(textwrap.dedent(GLOBAL_RNG))
    cmd = [sys.executable, "-m", "harness", "verify", "--sampler", f"{src}:fn", "--scenario", "base", "--draws",
           "2000", "--no-real-model", "--no-progress", "--no-figures", "--workers", workers, "--out",
           str(tmp_path / "out")]
    r = subprocess.run(cmd, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 3, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, r.stderr
    assert "s.py:fn's output does not follow from its `generator`" in lines[0] and "worker count" in lines[0]


def test_determinism_check_passes_a_sampler_that_uses_its_generator():
    from harness.verify.shards import PilotTask, draw_pilot, sampler_recipe
    from specimpl import speculative_generate
    sc = load_scenario("base")
    t = PilotTask("reference", sc, sampler_recipe(speculative_generate, "reference"), 7)
    assert draw_pilot(t) == ("same", 0, t.B * sc.max_new_tokens)
