"""What :func:`harness.api.verify_sampler` returns: the verdict, its certificate, the estimated loss and the tables.

The verdict is the ``verify`` command's (:func:`harness.verify.outcome.command_verdict` over the rows of
``runs.csv``, the words of :mod:`harness.core.verdict`); without bug controls (the default) its runs are the
sampler's, one per scenario:

    certified     no loss test rejects and every TV upper bound of every scenario lies below its ε
    lossy         a loss test of some scenario rejects after Holm (the family-wise false-alarm budget holds)
    inconclusive  neither: more draws would decide (``certify_draws`` says how many)

With ``controls=True`` the controls count as in the command: a lossless control found lossy or a buggy control
certified makes it lossy, a buggy control neither caught nor certified inconclusive.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Optional

import pandas as pd

from harness.core.verdict import VERDICTS

__all__ = ["Verdict", "Loss", "Verification", "VERDICTS"]

Verdict = Literal["certified", "lossy", "inconclusive"]  # harness.core.verdict.VERDICTS


@dataclass(frozen=True)
class Loss:
    """The estimated TV between the sampler's law and the target's, and where: the scenario, the test
    (``position``, ``pair``, ``joint[a:b]``) and its position, the point estimate with its simultaneous
    confidence interval [lower, upper] (``runs.csv``'s ``tv_best*`` for a lossy run, ``tv_position_*``
    otherwise), and the cells (:class:`harness.verify.outcome.Cell`: tokens, observed share, exact probability)
    whose observed share departs most from the exact law (:func:`harness.verify.outcome.top_cells`)."""

    scenario: str
    test: str
    position: Optional[int]
    estimate: float
    lower: float
    upper: float
    cells: tuple = ()

    @property
    def where(self) -> str:
        return self.test + (f"[{self.position}]" if self.position is not None and not self.test.startswith("joint")
                            else "")

    def __str__(self) -> str:
        cells = "; " + "; ".join(str(c) for c in self.cells) if self.cells else ""
        return (f"TV ≈ {self.estimate:.3g} [{self.lower:.3g}, {self.upper:.3g}] at {self.where} of scenario "
                f"{self.scenario!r}{cells}")


@dataclass(frozen=True)
class Verification:
    """The outcome of :func:`harness.api.verify_sampler`.

    ``verdict``       "certified", "lossy" or "inconclusive"
    ``epsilon``       the tolerances of the certificate, {"position", "pair", "joint"} -> ε (the largest over the
                      scenarios where they differ; ``runs`` has each run's)
    ``confidence``    1 - δ: every TV bound of the run holds simultaneously with it
    ``tv_hat``        the estimated loss (:class:`Loss`): for lossy, the scenario that rejected and its most clearly
                      non-zero TV; otherwise the largest per-position estimate over the scenarios
    ``runs``          one row per run (the columns of ``runs.csv``)
    ``tests``         one row per test (the columns of ``tests.csv``)
    ``certify_draws`` draws per scenario at which a lossless sampler certifies with probability ≥ 1 - the
                      ``inconclusive_rate`` asked for (None when certified or lossy)
    ``draws``         the draws per scenario of this run (x each scenario's weight); ``planned``: whether the
                      planner chose them
    ``scenarios``, ``seed``, ``wall_s`` (the whole call), ``estimate_s`` (the planner's estimate of the run,
                      None when ``draws`` was given), ``out`` (report folder, None: none written), ``meta`` (provenance)
    ``caught_by``     the rejected loss tests of the lossy run, most significant first ("" otherwise)
    """

    verdict: Verdict
    epsilon: dict
    confidence: float
    tv_hat: Optional[Loss]
    runs: pd.DataFrame
    tests: pd.DataFrame
    certify_draws: Optional[int]
    draws: int
    planned: bool
    scenarios: tuple
    seed: int
    wall_s: float
    out: Optional[Path] = None
    meta: dict = field(default_factory=dict, repr=False)
    caught_by: str = ""
    sampler: str = ""
    estimate_s: Optional[float] = None  # the planner's time estimate of the run (pilot and plan excluded)

    @property
    def passed(self) -> bool:
        """True when certified."""
        return self.verdict == "certified"

    @property
    def lossy_scenario(self) -> Optional[str]:
        """The scenario whose run was judged lossy (None unless lossy)."""
        return self.tv_hat.scenario if self.verdict == "lossy" and self.tv_hat is not None else None

    def headline(self) -> str:
        """One line: the verdict, what it states, and on what."""
        eps = ", ".join(f"{k} {v:g}" for k, v in self.epsilon.items())
        where = f"{', '.join(self.scenarios)}, {self.draws:,} draws per scenario, seed {self.seed}"
        if self.verdict == "certified":
            return (f"certified: TV(sampler, target) <= epsilon ({eps}) at confidence {self.confidence:g} "
                    f"[{where}]")
        if self.verdict == "lossy":
            return f"lossy: {self.tv_hat} [{where}]"
        need = f"; about {self.certify_draws:,} draws per scenario would certify" if self.certify_draws else ""
        return f"inconclusive: nothing rejected, but not every TV bound fell below epsilon ({eps}){need} [{where}]"

    def __str__(self) -> str:
        lines = [f"{self.sampler or 'sampler'}: {self.headline()}"]
        if self.verdict == "lossy" and self.caught_by:
            lines.append(f"  rejected by: {self.caught_by}")
        cols = ["scenario", "sequences", "certificate", "cert_worst", "tv_position_max", "tv_position_max_at"]
        under = self.runs[self.runs.role.isin(("sampler", "reference"))]
        for r in under[cols].itertuples(index=False):
            lines.append(f"  {r.scenario}: {r.certificate or 'no certificate'} at {r.sequences:,} sequences; "
                         f"largest bound / epsilon: {r.cert_worst}; largest position TV estimate "
                         f"{r.tv_position_max:.3g} at {r.tv_position_max_at}")
        run_s = self.meta.get("timing", {}).get("wall_total_s")
        run = f"; the run {run_s:.1f} s" if run_s is not None else ""
        est = f" (estimated {self.estimate_s:.0f} s before it)" if self.estimate_s is not None else ""
        lines.append(f"  wall {self.wall_s:.1f} s{run}{est}" + (f"; report {self.out}" if self.out else ""))
        return "\n".join(lines)
