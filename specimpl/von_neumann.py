"""The von Neumann (1951) rejection sampler, and the two-peaked demo target of the seed article.

Notation: ``p`` — the target density; ``q`` — the proposal density; ``M`` — the envelope constant,
``M q(x) ≥ p(x)`` for every x.  One round draws x ~ q and u ~ U(0, 1) and accepts x when
``u < p(x) / (M q(x))``.  Accepted points follow p exactly; each proposal is accepted with probability
``∫ p / M = 1/M``, independently, so with a fixed number of proposals the accepted count is
Binomial(proposals, 1/M) — which is what :func:`harness.stats.verify_von_neumann` tests.

An envelope that fails — somewhere on a check grid at construction, or at any drawn point — raises a
``ValueError`` naming ``M``; a violated envelope is never silently accepted.

The demo target (:class:`TwoPeakDensity`) is an equal mixture of two normals, means 0.3 and 0.7,
truncated to [0, 1] and renormalised, with the common σ tuned (root finding, at first use) so that
sup p = 2.8 exactly: with the uniform proposal q = 1 on [0, 1] the snug envelope is M = 2.8 (acceptance
1/2.8 ≈ 35.7 %); doubling it to M = 5.6 halves the acceptance (≈ 17.9 %).  σ ≈ 0.07124.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Optional

import numpy as np
import torch
from scipy import optimize, special

from specimpl.errors import check_arg

__all__ = ["TwoPeakDensity", "VonNeumannSampler", "VonNeumannDraw", "VonNeumannDemo", "uniform_proposal",
           "two_peak_sampler", "von_neumann_demo", "SNUG_M"]

SNUG_M = 2.8  # sup of the demo target on [0, 1] (uniform proposal): the snug envelope


# ------------------------------------------------------------------------------- demo target
def _ndtr(x):
    return torch.special.ndtr(x) if isinstance(x, torch.Tensor) else special.ndtr(x)


def _exp(x):
    return torch.exp(x) if isinstance(x, torch.Tensor) else np.exp(x)


@dataclass(frozen=True)
class TwoPeakDensity:
    """Mixture Σ w_i N(mu_i, sigma²) truncated to [0, 1]; ``pdf`` and exact ``cdf`` take numpy arrays or
    float64 tensors and return the same kind."""

    means: tuple = (0.3, 0.7)
    weights: tuple = (0.5, 0.5)
    sigma: float = 0.07

    def __post_init__(self):
        check_arg(len(self.means) == len(self.weights) >= 1, "weights", self.weights, "one weight per mean")
        check_arg(all(w > 0 for w in self.weights) and abs(sum(self.weights) - 1) < 1e-12, "weights",
                  self.weights, "positive weights summing to 1")
        check_arg(self.sigma > 0 and math.isfinite(self.sigma), "sigma", self.sigma, "a finite number > 0")

    @property
    def _mass(self) -> float:
        s = self.sigma
        return float(sum(w * (special.ndtr((1 - m) / s) - special.ndtr(-m / s))
                         for m, w in zip(self.means, self.weights)))

    def pdf(self, x):
        s, Z = self.sigma, self._mass
        out = 0.0 * x
        for m, w in zip(self.means, self.weights):
            out = out + w * _exp(-0.5 * ((x - m) / s) ** 2) / (s * math.sqrt(2 * math.pi))
        inside = (x >= 0) & (x <= 1)
        return out * inside / Z

    def cdf(self, x):
        s, Z = self.sigma, self._mass
        xc = x.clamp(0, 1) if isinstance(x, torch.Tensor) else np.clip(x, 0.0, 1.0)
        out = 0.0 * xc
        for m, w in zip(self.means, self.weights):
            out = out + w * (_ndtr((xc - m) / s) - special.ndtr(-m / s))
        return out / Z

    def sup(self) -> float:
        """max of the density on [0, 1] (bounded search around each mean)."""
        best = 0.0
        for m in self.means:
            r = optimize.minimize_scalar(lambda t: -float(self.pdf(np.float64(t))),
                                         bounds=(max(0.0, m - 0.2), min(1.0, m + 0.2)), method="bounded",
                                         options={"xatol": 1e-12})
            best = max(best, -r.fun)
        return best

    @classmethod
    @lru_cache(maxsize=8)
    def with_peak(cls, peak: float = SNUG_M, means: tuple = (0.3, 0.7), weights: tuple = (0.5, 0.5)):
        """The mixture whose σ makes sup p = ``peak`` (bisection on σ; sup p decreases in σ)."""
        check_arg(peak > 1, "peak", peak, "a number > 1 (a density on [0, 1] has sup >= 1)")
        sigma = optimize.brentq(lambda s: cls(means, weights, s).sup() - peak, 0.01, 0.5, xtol=1e-14, rtol=1e-14)
        return cls(means, weights, float(sigma))


# ------------------------------------------------------------------------------------ sampler
@dataclass(frozen=True)
class VonNeumannDraw:
    """``samples`` (accepted,) float64 tensor; ``proposed`` and ``accepted`` counts."""

    samples: torch.Tensor
    proposed: int
    accepted: int

    @property
    def acceptance(self) -> float:
        return self.accepted / self.proposed if self.proposed else float("nan")


def uniform_proposal(low: float = 0.0, high: float = 1.0):
    """(pdf, sampler) of U(low, high) for :class:`VonNeumannSampler`."""
    check_arg(high > low, "high", high, f"a number > low = {low}")
    width = high - low

    def pdf(x: torch.Tensor) -> torch.Tensor:
        return ((x >= low) & (x <= high)).to(x.dtype) / width

    def draw(n: int, generator: Optional[torch.Generator]) -> torch.Tensor:
        return low + width * torch.rand(n, generator=generator, dtype=torch.float64)  # (n,)

    return pdf, draw


class VonNeumannSampler:
    """Rejection sampler for density ``target_pdf`` with proposal (``proposal_pdf``, ``proposal_draw``)
    and envelope ``M``.

    target_pdf, proposal_pdf : float64 tensor (n,) -> tensor (n,)
    proposal_draw            : (n, generator) -> float64 tensor (n,) of proposals
    check_points             : points where ``p ≤ M q`` is checked at construction (default: 10,001
                               points spread over [0, 1]); every drawn point is checked as well.

    Override :meth:`accept_probability` to build a (deliberately) wrong sampler for negative controls.
    """

    def __init__(self, target_pdf: Callable, proposal_pdf: Callable, proposal_draw: Callable, M: float,
                 check_points=None, rtol: float = 1e-9):
        check_arg(isinstance(M, (int, float)) and not isinstance(M, bool) and math.isfinite(M) and M > 0, "M", M,
                  "a finite envelope constant > 0")
        self.p, self.q, self.draw_q, self.M, self.rtol = target_pdf, proposal_pdf, proposal_draw, float(M), rtol
        pts = torch.linspace(0, 1, 10001, dtype=torch.float64) if check_points is None else \
            torch.as_tensor(np.asarray(check_points, dtype=np.float64))
        self._check_envelope(pts, "on the check grid")

    def _check_envelope(self, x: torch.Tensor, where: str) -> tuple[torch.Tensor, torch.Tensor]:
        px, qx = self.p(x), self.q(x)  # (n,), (n,)
        bad = px > self.M * qx * (1 + self.rtol)
        if bool(bad.any()):
            i = int(torch.nonzero(bad)[0])
            ratio = float(px[i] / qx[i]) if float(qx[i]) > 0 else math.inf
            raise ValueError(f"`M` must satisfy M q(x) >= p(x) everywhere; got M = {self.M!r}, but {where} at "
                             f"x = {float(x[i])!r}: p(x) = {float(px[i])!r} > M q(x) = {self.M * float(qx[i])!r} "
                             f"(p/q = {ratio!r}; M must be at least sup p/q)")
        return px, qx

    def accept_probability(self, px: torch.Tensor, qx: torch.Tensor) -> torch.Tensor:
        """p(x) / (M q(x)): the probability of keeping proposal x."""
        return px / (self.M * qx)

    def propose(self, n_proposals: int, generator: Optional[torch.Generator] = None) -> VonNeumannDraw:
        """Draw exactly ``n_proposals`` proposals and keep the accepted ones (accepted count is
        Binomial(n_proposals, 1/M) for a correct envelope)."""
        check_arg(isinstance(n_proposals, int) and n_proposals >= 1, "n_proposals", n_proposals, "an integer >= 1")
        x = self.draw_q(n_proposals, generator)  # (n,)
        u = torch.rand(n_proposals, generator=generator, dtype=torch.float64)  # (n,)
        px, qx = self._check_envelope(x, "at a drawn point")
        keep = u < self.accept_probability(px, qx)  # (n,)
        return VonNeumannDraw(x[keep], n_proposals, int(keep.sum()))


def two_peak_sampler(M: float = SNUG_M, density: Optional[TwoPeakDensity] = None) -> VonNeumannSampler:
    """The demo: two-peaked target on [0, 1] (sup p = 2.8), uniform proposal, envelope ``M``."""
    d = density or TwoPeakDensity.with_peak(SNUG_M)
    q, draw = uniform_proposal()
    return VonNeumannSampler(d.pdf, q, draw, M)


@dataclass(frozen=True)
class VonNeumannDemo:
    """Measured acceptance per envelope: rows (M, proposed, accepted, measured rate, 1/M)."""

    rows: tuple
    seed: int
    sigma: float

    def table(self) -> str:
        lines = ["M      proposed  accepted  measured  1/M"]
        lines += [f"{M:<6g} {n:>8d}  {a:>8d}  {r:8.4f}  {1 / M:.4f}" for M, n, a, r, _ in self.rows]
        return "\n".join(lines)


def von_neumann_demo(n_proposals: int = 260, seed: int = 0, envelopes: tuple = (SNUG_M, 2 * SNUG_M)) -> VonNeumannDemo:
    """The seed article's demo, measured: ``n_proposals`` proposals per envelope (snug M = 2.8 and the
    doubled M = 5.6), one generator seeded with ``seed``."""
    g = torch.Generator().manual_seed(seed)
    d = TwoPeakDensity.with_peak(SNUG_M)
    rows = []
    for M in envelopes:
        r = two_peak_sampler(M, d).propose(n_proposals, g)
        rows.append((float(M), r.proposed, r.accepted, r.acceptance, 1.0 / M))
    return VonNeumannDemo(tuple(rows), seed, d.sigma)


if __name__ == "__main__":  # python -m specimpl.von_neumann [n_proposals] [seed]
    import sys

    args = [int(a) for a in sys.argv[1:3]]
    print(von_neumann_demo(*args).table())
