"""Sequential stopping: an exact-law run stops drawing as soon as it is clearly lossy (issue 10, item 5).

Notation: p the exact law (the target's, float64), one e-process per statistic j of a run — each position
t's symbol (N laws), each consecutive pair (N - 1 laws) and the joint of the first J tokens — the
Dirichlet(1/2)-mixture likelihood ratio of the running counts against p_j (:mod:`harness.stats.eprocess`).
Sequences are iid, so each E_j is a nonnegative martingale with mean 1 under H0 in the filtration of whole
sequences, and so is their mean

    E = (1 / m) Σ_j E_j,        m = 2N - 1 (+ 1 with the joint).

The run is looked at after every shard it folds (in shard order, :class:`harness.verify.draw.ShardedRun`),
and by Ville's inequality P(sup over looks E ≥ R / α_seq) ≤ α_seq / R under H0.  With R the number of
sequential runs of the command and α_seq = ``sequential_alpha`` (default.toml), a run **stops** at the first
look where E ≥ R / α_seq: it is lossy (the ``sequential.eprocess`` row rejects), its unsubmitted shards are
never drawn, and its fixed-n rows (evaluated on the prefix it drew, shown for diagnosis) leave the Holm
family.

Family-wise budget: the Holm family runs at ``family_alpha - sequential_alpha`` and the sequential rows at
``sequential_alpha`` (Bonferroni over the R runs), so the whole command's false-alarm rate stays at most
``family_alpha``.  Dropping a stopped run's fixed-n rows keeps Holm valid: a lossless run is stopped only
in the event already charged to α_seq, and Holm's guarantee counts only the true null hypotheses left in.
The stopping decision depends only on the merged prefix of shards, so it — and every statistic — is the
same for any number of workers or backend.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
from scipy.special import logsumexp

from harness.verify.battery import TestRow, TestSpec
from harness.stats.eprocess import METHOD as EPROCESS_METHOD, MixtureE, eprocess_min_detectable_kl

__all__ = ["RunEProcess", "sequential_level", "sequential_spec", "FAMILY", "TEST"]

FAMILY, TEST = "sequential", "eprocess"


def sequential_level(settings, n_runs: int) -> float:
    """The stopping level of each of ``n_runs`` sequential runs: α_seq / R (0: no sequential stopping)."""
    a = float(getattr(settings, "sequential_alpha", 0.0))
    return a / n_runs if a > 0 and n_runs > 0 else 0.0


@dataclass
class RunEProcess:
    """The e-process of one run: ``laws`` the exact laws of its statistics (positions, pairs, joint), looked
    at with the run's :class:`harness.verify.battery.Accumulator`; ``level``: stop once min(1, 1/max E) ≤ it."""

    laws: list
    level: float
    max_log_e: float = -math.inf
    looks: int = 0
    n: int = 0
    stopped_at: Optional[int] = None  # sequences drawn when the run stopped (None: it did not)
    _mix: list = field(init=False, repr=False, compare=False)  # MixtureE of each law, set up once

    def __post_init__(self):
        self._mix = [MixtureE(p) for p in self.laws]

    @classmethod
    def for_accumulator(cls, acc, level: float) -> "RunEProcess":
        law = acc.law
        laws = list(law.marginals()) + list(law.pair_marginals())
        if acc.joint_tokens >= 2:
            laws.append(law.joint(acc.joint_tokens))
        return cls([np.asarray(p, np.float64) for p in laws], float(level))

    def _statistics(self, acc) -> list:
        out = list(acc.counts) + list(acc.pairs)
        return out + [acc.joint] if len(self.laws) > len(out) else out

    def look(self, acc) -> bool:
        """One look at the run's merged counts; True once the run is to stop (E has crossed 1/level)."""
        logs = [m.log_e(np.asarray(c, np.int64)) for c, m in zip(self._statistics(acc), self._mix)]
        log_e = math.inf if math.inf in logs else float(logsumexp(logs) - math.log(len(logs)))
        self.max_log_e, self.looks, self.n = max(self.max_log_e, log_e), self.looks + 1, int(acc.n)
        if self.stopped_at is None and self.level > 0 and self.pvalue <= self.level:
            self.stopped_at = self.n
        return self.stopped_at is not None

    @property
    def pvalue(self) -> float:
        """min(1, 1 / max E over the looks): anytime-valid."""
        return float(min(1.0, math.exp(-self.max_log_e))) if self.looks else 1.0

    def state(self) -> dict:
        """What a resumed run needs to go on looking (saved with its merged prefix)."""
        return {"max_log_e": self.max_log_e, "looks": self.looks, "n": self.n, "stopped_at": self.stopped_at}

    def restore(self, saved: Optional[dict]) -> None:
        if saved:
            self.max_log_e, self.looks, self.n, self.stopped_at = (saved[k] for k in ("max_log_e", "looks", "n",
                                                                                      "stopped_at"))

    def row(self, power: float) -> TestRow:
        """The ``sequential.eprocess`` row: statistic log max E, the anytime-valid p-value, the smallest KL of
        the joint (or the worst statistic) it detects by now at its level and ``power``."""
        d = int(max((p > 0).sum() for p in self.laws))
        kl = eprocess_min_detectable_kl(self.n, d, self.level, power) if self.level > 0 else math.nan
        stopped = f"; stopped at {self.stopped_at:,} sequences" if self.stopped_at is not None else ""
        return TestRow(statistic=float(self.max_log_e), pvalue=self.pvalue, min_detectable=float(kl),
                       min_detectable_unit=f"KL, nats ({d} cells)", n=float(self.n), cells=float(len(self.laws)),
                       method=f"mean of {len(self.laws)} e-processes: {EPROCESS_METHOD}; {self.looks} looks{stopped}")


def sequential_spec(ep: RunEProcess) -> TestSpec:
    """The run's sequential row as a test of the family (judged apart from Holm, at ``ep.level``)."""
    return TestSpec(FAMILY, TEST, None, True, lambda alpha, power, delta: ep.row(power))
