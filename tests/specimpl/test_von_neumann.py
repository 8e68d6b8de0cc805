"""von Neumann rejection sampler: the envelope is enforced, the acceptance is 1/M, the samples follow
the target — and the battery catches broken samplers (the tests can fail).

Stated levels: each verdict uses a family-wise alpha of 1e-4 (``ALPHA``) split by Holm over KS, AD and
the binomial acceptance test; power 0.99 for the printed detectable distances.  Fixed seeds.
"""

import numpy as np
import pytest
import torch
from scipy import integrate

from harness.stats import binomial_test, dkw_min_detectable_distance, verify_von_neumann
from specimpl.von_neumann import (SNUG_M, TwoPeakDensity, VonNeumannSampler, two_peak_sampler, uniform_proposal,
                                  von_neumann_demo)

ALPHA = 1e-4
N_PROPOSALS = 200_000


@pytest.fixture(scope="module")
def density():
    return TwoPeakDensity.with_peak(SNUG_M)


def test_target_is_a_two_peaked_density_with_sup_2_8(density):
    assert density.sup() == pytest.approx(2.8, abs=1e-9)
    mass, _ = integrate.quad(lambda x: float(density.pdf(np.float64(x))), 0, 1, points=[0.3, 0.7], epsabs=1e-12)
    assert mass == pytest.approx(1.0, abs=1e-10)
    x = np.linspace(0, 1, 101)
    num = [integrate.quad(lambda t: float(density.pdf(np.float64(t))), 0, v, epsabs=1e-12)[0] for v in x]
    np.testing.assert_allclose(density.cdf(x), num, atol=1e-9)
    # torch and numpy agree; two peaks with a valley between
    xt = torch.linspace(0, 1, 101, dtype=torch.float64)
    np.testing.assert_allclose(density.pdf(xt).numpy(), density.pdf(x), rtol=1e-12)
    assert density.pdf(np.float64(0.5)) < 0.1 * density.pdf(np.float64(0.3))


def test_envelope_violation_raises(density):
    with pytest.raises(ValueError, match=r"`M` must satisfy .* M = 2\.7"):
        two_peak_sampler(2.7, density)
    # a check grid that misses the peaks: the violation is caught at a drawn point instead
    q, draw = uniform_proposal()
    s = VonNeumannSampler(density.pdf, q, draw, 2.0, check_points=[0.0, 0.5, 1.0])
    with pytest.raises(ValueError, match=r"at a drawn point"):
        s.propose(10_000, torch.Generator().manual_seed(0))
    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="`M` must be"):
            VonNeumannSampler(density.pdf, q, draw, bad)


def test_draws_are_reproducible(density):
    a = two_peak_sampler(SNUG_M, density).propose(1000, torch.Generator().manual_seed(5))
    b = two_peak_sampler(SNUG_M, density).propose(1000, torch.Generator().manual_seed(5))
    assert a.accepted == b.accepted and torch.equal(a.samples, b.samples)


def test_demo_reports_measured_acceptance():
    demo = von_neumann_demo(260, seed=0)
    (M1, n1, a1, r1, e1), (M2, n2, a2, r2, e2) = demo.rows
    assert (M1, M2) == (2.8, 5.6) and n1 == n2 == 260
    assert r1 == a1 / 260 and r2 == a2 / 260
    # measured, then tested against 1/M at a stated level (exact binomial, alpha = 1e-4)
    assert binomial_test(a1, n1, 1 / M1).pvalue > ALPHA and binomial_test(a2, n2, 1 / M2).pvalue > ALPHA
    assert "measured" in demo.table()


@pytest.mark.parametrize("M", [SNUG_M, 2 * SNUG_M])
def test_correct_sampler_passes_the_battery(density, M):
    d = two_peak_sampler(M, density).propose(N_PROPOSALS, torch.Generator().manual_seed(11))
    v = verify_von_neumann(d.samples.numpy(), density.cdf, d.proposed, d.accepted, M, alpha=ALPHA)
    assert v.lossless, v
    assert v.acceptance.pvalue > ALPHA and abs(d.acceptance - 1 / M) < 0.005
    # stated power: the KS's planned detectable Kolmogorov distance at this sample size (DKW)
    assert v.ks.min_detectable_distance == pytest.approx(dkw_min_detectable_distance(d.accepted, ALPHA / 3, 0.99))
    assert v.ks.min_detectable_distance < (0.016 if M == SNUG_M else 0.022)


class ForgetsM(VonNeumannSampler):
    """Accepts with probability p/q (clipped to 1) instead of p/(M q): the classic slip."""

    def accept_probability(self, px, qx):
        return (px / qx).clamp(max=1.0)


class MismatchedProposal(VonNeumannSampler):
    """Draws proposals from a triangular law on [0, 1] but computes the ratio with q = 1 (uniform)."""


def _triangular_draw(n, generator):
    return 0.5 * (torch.rand(n, generator=generator, dtype=torch.float64)
                  + torch.rand(n, generator=generator, dtype=torch.float64))


def test_battery_catches_broken_samplers(density):
    q, draw = uniform_proposal()
    g = torch.Generator().manual_seed(12)
    forget = ForgetsM(density.pdf, q, draw, SNUG_M).propose(N_PROPOSALS, g)
    v = verify_von_neumann(forget.samples.numpy(), density.cdf, forget.proposed, forget.accepted, SNUG_M,
                           alpha=ALPHA)
    assert not v.lossless
    assert v.ks.pvalue < 1e-10 and v.ad.pvalue < 1e-10 and v.acceptance.pvalue < 1e-10

    wrong = MismatchedProposal(density.pdf, q, _triangular_draw, SNUG_M).propose(N_PROPOSALS, g)
    v = verify_von_neumann(wrong.samples.numpy(), density.cdf, wrong.proposed, wrong.accepted, SNUG_M, alpha=ALPHA)
    assert not v.lossless and v.ks.pvalue < 1e-10 and v.ad.pvalue < 1e-10


def test_verdict_rejects_bad_m(density):
    with pytest.raises(ValueError, match="`M` must be"):
        verify_von_neumann(np.array([0.5]), density.cdf, 1, 1, 0.5)
