"""Is my speculative sampler lossless?  A pytest file to copy into your own test suite.

    python -m pytest examples/test_my_sampler.py -s

``assert_lossless`` runs the harness's battery on the sampler (any function with the signature of
``specimpl.speculative_generate``) on the exact-law scenarios named, sizes the run itself so that a lossless
sampler certifies TV(sampler, target) <= EPSILON (per position; pairs 2x, windows of 3 tokens 4x) with
probability >= 0.999, refuses up front (ValueError) when that cannot fit BUDGET_S, and raises an AssertionError
unless the sampler is certified: ``Lossy`` (the scenario, the estimated loss, where, which tokens) or
``Inconclusive`` (how many draws would decide).  See docs/api.md.

Here "my sampler" is the reference sampler of specimpl; ``over_accepting_generate`` is a bug to show what a
failure looks like: it accepts each draft with probability min(1, 1.03 p/q), 3 % too often, which moves the
output law by a TV of about 0.02 per position on ``eos_order3``.
"""
import pytest

from harness import Lossy, assert_lossless
from specimpl import SamplingConfig, SpeculativeSampler, speculative_generate
from specimpl.speculative import verify_block

EPSILON = 0.01  # the certificate's per-position TV (default.toml's 5e-3 needs ~4x the draws)
SCENARIOS = ["eos_order3"]  # trigram over V=6 with EOS, tempered draft, k=5 (harness/configs/verify/)
BUDGET_S = 300  # seconds; the planner's estimate must fit, else ValueError before the run


def my_generate(target, draft, prompts, *, k, max_new_tokens, config=SamplingConfig(), eos_token_id=None,
                generator=None):
    """The sampler under test: replace with yours (same signature)."""
    return speculative_generate(target, draft, prompts, k=k, max_new_tokens=max_new_tokens, config=config,
                                eos_token_id=eos_token_id, generator=generator)


class OverAccepting(SpeculativeSampler):
    """A bug: accepts draft x with probability min(1, 1.03 p(x)/q(x)) instead of min(1, p(x)/q(x))."""

    def verify(self, p, q, x, u_accept, u_final):  # p (B, k+1, V), q (B, k, V), x (B, k)
        return verify_block(p, q, x, u_accept / 1.03, u_final)  # u < 1.03 p/q  <=>  u / 1.03 < p/q


def over_accepting_generate(target, draft, prompts, *, k, max_new_tokens, config=SamplingConfig(),
                            eos_token_id=None, generator=None):
    return OverAccepting(target, draft, k, config).generate(prompts, max_new_tokens, eos_token_id, generator)


def test_my_sampler_is_lossless():
    result = assert_lossless(my_generate, scenarios=SCENARIOS, epsilon=EPSILON, budget_s=BUDGET_S)
    print(result)


def test_over_accepting_sampler_is_caught():
    with pytest.raises(Lossy) as caught:
        assert_lossless(over_accepting_generate, scenarios=SCENARIOS, epsilon=EPSILON, budget_s=BUDGET_S)
    print(caught.value)
    assert "eos_order3" in str(caught.value)
