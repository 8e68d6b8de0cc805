"""Verdicts: one row per run (``runs.csv``), judged from the Holm-adjusted table of tests.

A run is *lossy* when one of its loss tests rejects.  Whether that passes depends on its role
(:mod:`harness.verify.runs`): a buggy control must be caught, everything else must not be; the
reference sampler must also match the exact acceptance law (a rejected acceptance test makes it
*inefficient* or *over-accepting*); a peer is reported, not judged.  :class:`RunVerdict` is the row;
fields a kind of run does not report stay NaN / None / "".
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Optional

import pandas as pd

from harness.realmodel import REAL_MODEL_SCENARIO
from harness.verify.runs import MUST_BE_CAUGHT, RealRun, RunSet, RunSpec, VonNeumannRun

__all__ = ["RunVerdict", "RUN_COLUMNS", "exact_verdict", "real_verdict", "von_neumann_verdict", "verdict_table",
           "passes"]

NAN = math.nan


@dataclass(frozen=True)
class RunVerdict:
    """One row of ``runs.csv``.  ``tv_*``: TV(sampler, target) estimates and confidence bounds (exact-law
    runs: worst position, joint of the first J tokens, the most certain of all gof tests); ``pit_*``:
    the real-model tests (pooled KS, per position, pair grid); ``expected_acceptance``: 1/M (von Neumann)."""

    run: str
    role: str
    scenario: str
    sequences: int
    tokens: int
    wall_s: float
    error: Optional[str] = None
    n_rejected: Optional[int] = None
    min_p_adjusted: float = NAN
    min_pvalue: float = NAN
    tv_position_max: float = NAN
    tv_position_max_at: Optional[int] = None
    tv_position_lower: float = NAN
    tv_position_upper: float = NAN
    min_p_adjusted_loss: float = NAN
    tv_position_upper_max: float = NAN
    tv_joint: float = NAN
    tv_joint_lower: float = NAN
    tv_joint_upper: float = NAN
    mde_position_tv: float = NAN
    efficiency: str = ""
    tv_best: float = NAN
    tv_best_lower: float = NAN
    tv_best_upper: float = NAN
    tv_best_test: str = ""
    verdict: str = ""
    passed: bool = False
    caught_by: str = ""
    acceptance: Optional[float] = NAN
    pit_ks: float = NAN
    pit_ks_p: float = NAN
    pit_ks_p_adjusted: float = NAN
    pit_ks_detectable: float = NAN
    pit_kolmogorov_upper: float = NAN
    pit_position_worst: Optional[int] = None
    pit_position_min_p: float = NAN
    pit_position_min_p_adjusted: float = NAN
    pit_position_detectable: float = NAN
    pit_pairs_tv_hat: float = NAN
    pit_pairs_min_p: float = NAN
    pit_pairs_min_p_adjusted: float = NAN
    pit_pairs_detectable: float = NAN
    pit_pairs_cells: Optional[int] = None
    expected_acceptance: float = NAN


RUN_COLUMNS = tuple(f.name for f in fields(RunVerdict))  # the columns of runs.csv, in order


def passes(role: str, lossy: bool, inefficient: bool = False) -> bool:
    """Whether a run with this outcome passes in this role."""
    if role in MUST_BE_CAUGHT:
        return lossy
    if role == "peer":
        return True
    return not lossy and not (role == "reference" and inefficient)


def _rows_of(table: pd.DataFrame, run: str, scenario: str) -> pd.DataFrame:
    return table[(table.run == run) & (table.scenario == scenario)]


def _caught_by(loss: pd.DataFrame) -> tuple[int, str]:
    """(number of rejected loss tests, the first four as 'family.test[position]', most significant first)."""
    rej = loss[loss.reject].sort_values("p_adjusted")
    caught = [f"{f}.{t}" + (f"[{p}]" if p >= 0 else "") for f, t, p in zip(rej.family, rej.test, rej.position)]
    return len(caught), ", ".join(caught[:4]) + (f" (+{len(caught) - 4})" if len(caught) > 4 else "")


def _min(col: pd.Series) -> float:
    return float(col.min()) if len(col) else NAN


def _max(col: pd.Series) -> float:
    return float(col.max()) if len(col) else NAN


def _efficiency(acc: pd.DataFrame) -> str:
    """'' (as exact), 'inefficient', 'over-accepting' or 'acceptance not instrumented' from the run's
    acceptance tests."""
    rejected = acc[acc.reject]
    if len(rejected):
        return "inefficient" if (rejected.direction < 0).any() else "over-accepting"
    return "acceptance not instrumented" if len(acc) == 0 else ""


def _tv_summary(sub: pd.DataFrame) -> dict:
    """The TV fields of an exact-law run from its gof tests."""
    gof = sub[sub.family == "gof"]
    out = {}
    if len(gof):  # the most clearly non-zero TV: largest certified lower bound (ties: largest estimate)
        best = gof.sort_values(["tv_lower", "tv_hat"], ascending=False).iloc[0]
        out.update(tv_best=float(best.tv_hat), tv_best_lower=float(best.tv_lower), tv_best_upper=float(best.tv_upper),
                   tv_best_test=f"{best.test}" + (f"[{int(best.position)}]" if best.position >= 0 else ""))
    pos = gof[gof.test == "position"]
    joint = gof[gof.test.str.startswith("joint")]
    worst = pos.loc[pos.tv_hat.idxmax()] if len(pos) else None
    out.update(tv_position_max=float(worst.tv_hat) if worst is not None else NAN,
               tv_position_max_at=int(worst.position) if worst is not None else -1,
               tv_position_lower=float(worst.tv_lower) if worst is not None else NAN,
               tv_position_upper=float(worst.tv_upper) if worst is not None else NAN,
               tv_position_upper_max=_max(pos.tv_upper),
               tv_joint=float(joint.tv_hat.iloc[0]) if len(joint) else NAN,
               tv_joint_lower=float(joint.tv_lower.iloc[0]) if len(joint) else NAN,
               tv_joint_upper=float(joint.tv_upper.iloc[0]) if len(joint) else NAN,
               mde_position_tv=_max(pos.min_detectable))
    return out


def exact_verdict(r: RunSpec, table: pd.DataFrame) -> RunVerdict:
    """The verdict of an exact-law run."""
    who = dict(run=r.label, role=r.role, scenario=r.scenario.name, sequences=r.acc.n if r.acc else 0,
               tokens=r.tokens, wall_s=r.wall_s, error=r.error)
    if r.error is not None:
        return RunVerdict(**who, verdict=f"error: {r.error}", passed=False, n_rejected=0, tv_position_max_at=-1)
    sub = _rows_of(table, r.label, r.scenario.name)
    loss = sub[sub.loss_test]
    lossy = bool(loss.reject.any())
    eff = _efficiency(sub[~sub.loss_test])
    n_rejected, caught_by = _caught_by(loss)
    return RunVerdict(**who, verdict=("lossy" if lossy else "lossless") + (f", {eff}" if eff else ""),
                      passed=passes(r.role, lossy, inefficient=eff in ("inefficient", "over-accepting")),
                      caught_by=caught_by, n_rejected=n_rejected, min_p_adjusted=_min(sub.p_adjusted),
                      min_pvalue=_min(sub.pvalue), min_p_adjusted_loss=_min(loss.p_adjusted),
                      efficiency=eff or "as exact", **_tv_summary(sub))


def real_verdict(rr: RealRun, table: pd.DataFrame) -> RunVerdict:
    """The verdict of a real-model run, with its PIT figures."""
    who = dict(run=rr.label, role=rr.role, scenario=REAL_MODEL_SCENARIO, sequences=rr.n_sequences, tokens=rr.tokens,
               wall_s=rr.wall_s, error=rr.error, n_rejected=0,
               acceptance=rr.draw.acceptance_rate if rr.draw is not None else NAN)
    if rr.error is not None:
        return RunVerdict(**who, verdict=f"error: {rr.error}", passed=False)
    sub = _rows_of(table, rr.label, REAL_MODEL_SCENARIO)
    lossy = bool(sub.reject.any())
    n_rejected, caught_by = _caught_by(sub)
    return RunVerdict(**{**who, "n_rejected": n_rejected}, verdict="lossy" if lossy else "lossless",
                      passed=passes(rr.role, lossy), caught_by=caught_by, min_p_adjusted=_min(sub.p_adjusted),
                      min_pvalue=_min(sub.pvalue), min_p_adjusted_loss=_min(sub.p_adjusted),
                      efficiency="acceptance law unknown (no exact law)", **_pit_summary(sub))


def _pit_summary(sub: pd.DataFrame) -> dict:
    """The PIT fields of a real-model run from its tests."""
    pooled = sub[sub.test == "pooled"].iloc[0]
    pos = sub[sub.test == "position"]
    pairs = sub[sub.test.str.startswith("pairs")]
    worst = pos.loc[pos.pvalue.idxmin()]
    return dict(pit_ks=float(pooled.statistic), pit_ks_p=float(pooled.pvalue),
                pit_ks_p_adjusted=float(pooled.p_adjusted), pit_ks_detectable=float(pooled.min_detectable),
                pit_kolmogorov_upper=float(pooled.kolmogorov_upper), pit_position_worst=int(worst.position),
                pit_position_min_p=float(worst.pvalue), pit_position_min_p_adjusted=_min(pos.p_adjusted),
                pit_position_detectable=_max(pos.min_detectable), pit_pairs_tv_hat=_max(pairs.tv_hat),
                pit_pairs_min_p=_min(pairs.pvalue), pit_pairs_min_p_adjusted=_min(pairs.p_adjusted),
                pit_pairs_detectable=_max(pairs.min_detectable), pit_pairs_cells=int(pairs.cells.max()))


def von_neumann_verdict(v: VonNeumannRun, table: pd.DataFrame) -> RunVerdict:
    """The verdict of a von Neumann run: proposals as sequences, accepted points as tokens."""
    sub = _rows_of(table, v.label, v.scenario)
    lossy = bool(sub.reject.any())
    return RunVerdict(run=v.label, role=v.role, scenario=v.scenario, sequences=v.draw.proposed,
                      tokens=v.draw.accepted, wall_s=v.wall_s, verdict="lossy" if lossy else "lossless",
                      passed=passes(v.role, lossy), caught_by=", ".join(sub[sub.reject].test) if lossy else "",
                      min_p_adjusted=_min(sub.p_adjusted), acceptance=v.draw.acceptance,
                      expected_acceptance=1.0 / v.M, efficiency="")


def verdict_table(rs: RunSet, table: pd.DataFrame) -> pd.DataFrame:
    """One :class:`RunVerdict` per run of ``rs`` (exact-law, real-model, von Neumann), as ``runs.csv``."""
    rows = [exact_verdict(r, table) for r in rs.runs] + [real_verdict(rr, table) for rr in rs.real_runs] + \
        [von_neumann_verdict(v, table) for v in rs.vn]
    return pd.DataFrame([vars(v) for v in rows], columns=list(RUN_COLUMNS))
