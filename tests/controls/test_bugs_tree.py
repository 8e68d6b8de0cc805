"""Controls for block and tree verification (harness.controls.tree): every buggy sampler differs from the
target in law, every lossless one does not, each changes one step.

One fixed-seed run per control (60,000 sequences; 150,000 for the subtle token-residual bug) of the
small trigram scenario of :func:`harness.controls.tree.control_scenario`, χ² of every position and of the
joint of 3 tokens against the exact law, Bonferroni at a family level of 1e-6: a lossless control
fails with probability <= 1e-6.
"""
import re

import pytest

from harness.controls.tree import BUGGY, CATALOGUE, LOSSLESS, get_control, quick_law_check
from specimpl.block import BlockSampler
from specimpl.tree import TreeSampler

FAMILY_LEVEL = 1e-6
BLOCK_HOOKS = ("warp_target", "warp_draft", "draw_draft", "uniforms", "verify", "__init__")
TREE_HOOKS = ("warp_target", "warp_draft", "draw_children", "uniforms", "proposal_laws", "verify", "__init__")


def test_catalogue():
    assert len(BUGGY) >= 6 and len(LOSSLESS) >= 4
    names = [c.name for c in CATALOGUE]
    assert len(set(names)) == len(names)
    for c in CATALOGUE:
        assert c.kind in ("lossy", "lossless") and c.family in ("block", "tree") and c.root_cause and c.seen_in
        if c.must_be_caught:  # a real issue or pull request: repository and number
            assert re.search(r"#\d+", c.seen_in), c.name
    assert get_control("tree_causal_mask").scenario == "base"
    with pytest.raises(ValueError, match="`control` must be one of"):
        get_control("nope")


@pytest.mark.parametrize("control", CATALOGUE, ids=lambda c: c.name)
def test_each_control_changes_one_step(control):
    base = BlockSampler if control.family == "block" else TreeSampler
    hooks = BLOCK_HOOKS if control.family == "block" else TREE_HOOKS
    assert issubclass(control.cls, base)
    changed = [h for h in hooks if getattr(control.cls, h) is not getattr(base, h)]
    allowed = {"tree_top_n_one_hot": {"draw_children", "proposal_laws"}}  # EAGLE-2: top-n *and* point masses
    assert len(changed) <= 1 or set(changed) == allowed.get(control.name), (control.name, changed)


@pytest.mark.parametrize("control", BUGGY, ids=lambda c: c.name)
def test_buggy_control_differs_from_the_target_law(control):
    r = quick_law_check(control.sampler, draws=control.quick_draws, seed=123, family_alpha=FAMILY_LEVEL)
    assert r.pvalue < FAMILY_LEVEL, r


@pytest.mark.parametrize("control", LOSSLESS, ids=lambda c: c.name)
def test_lossless_control_passes(control):
    r = quick_law_check(control.sampler, draws=60_000, seed=123, family_alpha=FAMILY_LEVEL)
    assert r.pvalue > FAMILY_LEVEL, r
