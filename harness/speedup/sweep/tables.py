"""The sweep's tables, built from stored cells alone: measured rows, predictions, fidelity, profiles.

A stored cell is read back as a :class:`StoredCell` (typed settings of its suite, the payload, the
provenance).  Each measured cell gives one row of ``measured.csv`` (:func:`measured_row`): its settings,
the acceptance metrics of :func:`harness.speedup.costmodel.acceptance_metrics`, the measured speedup and the
predictions of the analytic model, the measured model and the cost accounting, on the cell's own clock
and — for real models on a CPU device — on process CPU time.  :func:`fidelity` summarises
|predicted − measured| / measured.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import pandas as pd

from harness.speedup import costmodel as cm
from harness.speedup.sweep.suites import SUITES, Measurement

__all__ = ["StoredCell", "measured_row", "fidelity", "timings_table", "profiles_table", "PREDICTIONS"]

PREDICTIONS = ("analytic", "measured_model", "accounting")
_CPU_COLUMNS = ("speedup_measured", "speedup_analytic", "speedup_measured_model", "speedup_accounting",
                "c_profiled", "err_analytic", "err_measured_model", "err_accounting", "tokens_per_s_ar",
                "tokens_per_s_spec", "overhead_share_round")


@dataclass(frozen=True)
class StoredCell:
    """A cell's JSON file, read back: ``params`` is its suite's settings record, ``payload`` the rest."""

    id: str
    suite: str
    params: Any
    seconds: float
    loadavg_before_after: list
    meta: dict
    payload: dict
    key: Optional[str] = None  # fingerprint of what computed it (harness.speedup.sweep.cli.cell_key); None: older cell

    @classmethod
    def from_record(cls, rec: dict) -> "StoredCell":
        head = ("id", "suite", "params", "seconds", "loadavg_before_after", "meta", "key")
        return cls(rec["id"], rec["suite"], SUITES[rec["suite"]].params_of(rec["params"]), rec.get("seconds", 0.0),
                   rec.get("loadavg_before_after", []), rec.get("meta", {}),
                   {k: v for k, v in rec.items() if k not in head}, rec.get("key"))

    @property
    def feeds(self) -> frozenset:
        return SUITES[self.suite].feeds

    @property
    def measurement(self) -> Measurement:
        return Measurement.from_record(self.payload)


def _basis(m: Measurement, p, alphas: list, alpha_hat: float, basis: str, n_sim: int) -> dict:
    """Measured and predicted speedups on one time basis: 'clock' (the cell's clock: perf_counter for real
    models and wall-clock synthetic cells, the hybrid clock for hybrid cells) or 'cpu' (process CPU time)."""
    k, B, N, P = p.k, p.batch, p.max_new_tokens, p.prompt_len
    col, val = ("seconds", "mean_s") if basis == "clock" else ("cpu_seconds", "cpu_mean_s")
    t = pd.DataFrame(m.timings)
    # throughput over all repeats (total tokens / total time): the mean run time of each arm
    t_ar, t_spec = float(t.loc[t.arm == "ar", col].mean()), float(t.loc[t.arm == "spec", col].mean())
    costs = cm.CostTable(pd.DataFrame(m.profile), value=val)
    c_prof = costs.c(B)
    pred = cm.predict_measured(costs, alphas, B, N, P, n_sim=n_sim, seed=0)
    acc_runs = [cm.predict_from_counts(costs, k, rb, B, N, P) for rb in m.round_batches]
    s_acc = acc_runs[0].t_ar_s / float(np.mean([r.t_spec_s for r in acc_runs]))
    s_meas = t_ar / t_spec
    s_an = cm.analytic_speedup(alpha_hat, c_prof, k)
    pair = ["rep", "prompt"] if "prompt" in t else ["rep"]  # cells stored before prompt batches: one per pass
    paired = t.pivot_table(index=pair, columns="arm", values=col, aggfunc="first")
    ratio = paired["ar"] / paired["spec"]
    per_pass = t.groupby(["rep", "arm"])[col].sum().unstack()
    s_pass = per_pass["ar"] / per_pass["spec"]  # each pass's speedup over all the cell's prompts
    return {
        "t_ar_mean_s": t_ar, "t_spec_mean_s": t_spec,
        "t_ar_median_s": float(t.loc[t.arm == "ar", col].median()),
        "t_spec_median_s": float(t.loc[t.arm == "spec", col].median()),
        "tokens_per_s_ar": B * N / t_ar, "tokens_per_s_spec": B * N / t_spec,
        "speedup_measured": s_meas, "speedup_paired_median": float(ratio.median()),
        "speedup_spread": float(s_pass.max() - s_pass.min()),
        "t_target_1_s": costs("target.forward", 1, B), "t_target_k1_s": costs("target.forward", k + 1, B),
        "t_draft_1_s": costs("draft.forward", 1, B), "overhead_round_s": costs.get("spec.overhead", k, B),
        "overhead_token_ar_s": costs.get("ar.overhead", 1, B), "c_profiled": c_prof,
        "overhead_share_round": costs.get("spec.overhead", k, B) / costs.round_cost(k, B),
        "speedup_analytic": s_an, "speedup_measured_model": pred.speedup, "speedup_accounting": s_acc,
        "t_spec_pred_s": pred.t_spec_s, "t_ar_pred_s": pred.t_ar_s,
        "err_analytic": abs(s_an - s_meas) / s_meas, "err_measured_model": abs(pred.speedup - s_meas) / s_meas,
        "err_accounting": abs(s_acc - s_meas) / s_meas,
    }


def _settings_columns(cell: StoredCell) -> dict:
    p = cell.params
    return {"suite": cell.suite, "cell": cell.id, "draft": p.label, "clock": p.clock_name, "group": p.group,
            "alpha_set": p.alpha_set, "c_set": p.c_set, "k": p.k, "batch": p.batch,
            "max_new_tokens": p.max_new_tokens, "prompt_len": p.prompt_len, "repeats": p.repeats,
            "prompts": getattr(p, "prompt_batches", 1) * p.batch,
            "prompts_shared": bool(getattr(p, "prompts_shared", False)), "device": p.device_name}


def measured_row(cell: StoredCell, n_sim: int = 400) -> dict:
    """One row of measured.csv: the cell's settings, acceptance metrics, measured and predicted speedups.

    Columns without prefix are on the cell's own clock; ``cpu_*`` repeat them on process CPU time
    (real models on a CPU device only: there CPU time is robust to other processes on the machine,
    wall time is what a user sees).  ``speedup_measured`` is the ratio of summed times over every pass and
    prompt batch (a throughput: what `tune` predicts); ``speedup_paired_median`` the median of the pairs' time
    ratios; ``speedup_spread`` the range over passes of each pass's speedup (its times summed over the cell's
    prompt batches); ``prompts`` how many prompts a cell was timed on, ``prompts_shared`` whether every k and
    draft of the batch was timed on the same ones.
    """
    p, m = cell.params, cell.measurement
    acc = cm.acceptance_metrics(m.accepted_hist, emitted=m.emitted)
    alphas = [a if a == a else 0.0 for a in acc.alpha_per_position]  # never-reached positions: 0
    row = {**_settings_columns(cell),
           "alpha_hat": acc.alpha_hat, "acceptance_rate": acc.acceptance_rate,
           "mean_acceptance_length": acc.mean_acceptance_length, "tokens_per_target_call": acc.tokens_per_target_call,
           "alpha_per_position": json.dumps([round(a, 4) for a in alphas]),
           "rounds": acc.rounds, "target_calls": m.target_calls, "draft_calls": m.draft_calls}
    row.update(_basis(m, p, alphas, acc.alpha_hat, "clock", n_sim))
    cpu = _basis(m, p, alphas, acc.alpha_hat, "cpu", n_sim) if p.cpu_basis else {}
    for key in _CPU_COLUMNS:
        row[f"cpu_{key}"] = cpu.get(key, np.nan)
    row.update({"load_1min": float(np.mean(cell.loadavg_before_after)), "cell_seconds": cell.seconds,
                "commit": cell.meta.get("commit")})
    if p.alpha_set == p.alpha_set:  # alpha and c set by construction: the analytic model at the set values
        row["speedup_analytic_set"] = cm.analytic_speedup(p.alpha_set, p.c_set, p.k)
    return row


def timings_table(cells: list[StoredCell]) -> pd.DataFrame:
    """Every timed run of the measured cells, one row each."""
    return pd.concat([pd.DataFrame(c.measurement.timings).assign(cell=c.id, suite=c.suite) for c in cells],
                     ignore_index=True)


def profiles_table(cells: list[StoredCell]) -> pd.DataFrame:
    """Every profiled (op, n, batch) of the cells, raw samples as JSON lists; None when no cell profiled."""
    profs = []
    for c in cells:
        f = pd.DataFrame(c.payload["profile"]).assign(cell=c.id, suite=c.suite)
        for col in ("samples_s", "cpu_samples_s"):
            if col in f:
                f[col] = f[col].map(json.dumps)
        profs.append(f)
    return pd.concat(profs, ignore_index=True) if profs else None


def fidelity(measured: pd.DataFrame) -> dict:
    """Median and worst |predicted - measured| / measured per model, per group of runs and overall, on the
    runs' own clock ('clock') and, for real models on CPU, on process CPU time ('cpu')."""
    out = {}
    for name, g in [("all", measured)] + [(s, g) for s, g in measured.groupby("group")]:
        out[name] = {"cells": int(len(g))}
        for basis, pre in (("clock", ""), ("cpu", "cpu_")):
            for model in PREDICTIONS:
                e = g[f"{pre}err_{model}"].dropna()
                if len(e):
                    out[name].setdefault(basis, {})[model] = {
                        "median": float(e.median()), "worst": float(e.max()), "cells": int(len(e)),
                        "worst_cell": str(g.loc[e.idxmax(), "cell"])}
    return out
