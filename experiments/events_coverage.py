"""The union-of-events Clopper–Pearson TV bound (harness.stats.events) beside the bounds it replaces on few cells:
width on the gate's marginals, coverage by simulation, and coverage computed exactly at the gate's δ (issue 24).

    python experiments/events_coverage.py [--reps 2000] [--out results/calibrate/events]

Writes ``widths.csv``, ``coverage.csv``, ``exact.csv`` and ``summary.md`` (each with its provenance line).
- widths: per scenario of ``make verify`` (its marginals: 3 to 8 cells), the bound today's gate took before
  (the smaller planning figure of the plug-in and cross U-statistic bounds) and the events bound, at the
  scenario's default draws and the gate's per-side δ: mean and the 1 - 1e-4 quantile (normal) of the largest
  position's bound over 200 lossless count vectors, and the draws each needs to certify ε = 0.005.
- coverage: misses of the bound against a known TV at δ = 1e-2 and 1e-3 (Clopper–Pearson 95 % interval of the
  miss rate), over laws chosen to be hard (Q moved along P's worst event to about the bound, mass onto a cell of
  P = 0, one tiny cell); ``halved_misses``: the same draws with the bound's width halved.
- exact: the miss probability summed exactly over every count vector of a 3-cell law at n = 150..600, at the
  gate's δ and at 1e-3 (no simulation), for Q moved far from P in three directions (TV 0.25-0.38), where the
  worst event's own miss (about δ / 6) is the whole miss.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's harness: its provenance is this checkout's

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from scipy import stats as sps  # noqa: E402

from harness.core.figures import md_table  # noqa: E402
from harness.core.provenance import atomic_write_csv, atomic_write_json, atomic_write_text, metadata  # noqa: E402
from harness.laws.scenarios import load_scenario, scenario_law  # noqa: E402
from harness.stats import clopper_pearson, crossu  # noqa: E402
from harness.stats.bounds import tv_upper_bound, tv_upper_bound_expected, tv_upper_bound_n_for  # noqa: E402
import harness.stats.events as events_mod  # noqa: E402
from harness.stats.events import (tv_upper_bound_events,  # noqa: E402
                                  tv_upper_bound_events_many, tv_upper_bound_events_n_for)

GATE_DELTA = 8.3e-7 / 2  # make verify's per-bound delta (0.001 over its bounds), delta/2 on the upper side
SCENARIOS = ("base", "power", "alpha_zero", "alpha_one", "temperature_topk", "top_p", "eos_order3", "k1_long")
EPSILON = 0.005  # the per-position tolerance of every scenario but power (5e-4)


DRAWS = 1_000_000  # default.toml's draws per scenario (x the scenario's weight): make verify's sizes


def _draws(name: str) -> int:
    return max(2, round(DRAWS * load_scenario(name).weight))


def _old(P: np.ndarray, n: int, delta: float) -> tuple[str, float]:
    fs, cu = tv_upper_bound_expected(P, n, delta), crossu.tv_upper_bound_crossu_expected(P, n, delta)
    return ("crossu", cu) if cu < fs else ("plugin", fs)


def widths(reps: int = 200) -> pd.DataFrame:
    rows = []
    for name in SCENARIOS:
        law, _ = scenario_law(load_scenario(name))
        n = _draws(name)
        eps = 5e-4 if name == "power" else EPSILON
        margs = [np.asarray(P, dtype=np.float64) for P in law.marginals() if int((np.asarray(P) > 0).sum()) >= 2]
        rng = np.random.default_rng(2)
        old_max, new_max = np.zeros(reps), np.zeros(reps)
        old_n = new_n = 0
        for P in margs:
            C = rng.multinomial(n, P, size=reps)
            choice, _ = _old(P, n, delta=GATE_DELTA)
            f = crossu.tv_upper_bound_crossu if choice == "crossu" else tv_upper_bound
            old_max = np.maximum(old_max, [f(c, P, delta=GATE_DELTA).upper for c in C])
            new_max = np.maximum(new_max, tv_upper_bound_events_many(C, P, GATE_DELTA))
            old_n = max(old_n, min(tv_upper_bound_n_for(P, eps, GATE_DELTA), crossu.tv_upper_bound_crossu_n_for(P, eps, GATE_DELTA)))
            new_n = max(new_n, tv_upper_bound_events_n_for(P, eps, GATE_DELTA))
        z = sps.norm.isf(1e-4)
        rows.append(dict(scenario=name, sequences=n, positions=len(margs), epsilon=eps,
                         before_mean=old_max.mean(), events_mean=new_max.mean(),
                         before_q9999=old_max.mean() + z * old_max.std(ddof=1),
                         events_q9999=new_max.mean() + z * new_max.std(ddof=1),
                         ratio_mean=new_max.mean() / old_max.mean(), draws_to_certify_before=old_n,
                         draws_to_certify_events=new_n, draws_ratio=new_n / old_n))
    return pd.DataFrame(rows)


def laws() -> dict:
    P3 = np.array([0.5, 0.3, 0.2])
    P8 = np.array([0.3, 0.2, 0.15, 0.12, 0.1, 0.08, 0.05, 0.0])
    tiny = np.array([0.6, 0.3, 0.098, 0.002])
    return {"3 cells, Q moved along the worst event": (P3, np.array([0.48, 0.31, 0.21]), 5000),
            "8 cells (one of P = 0), Q along the worst event": (P8, np.array([0.29, 0.19, 0.16, 0.13, 0.1, 0.08, 0.05, 0.0]), 20_000),
            "8 cells, mass onto the cell of P = 0": (P8, np.array([0.3, 0.2, 0.15, 0.12, 0.1, 0.08, 0.04, 0.01]), 20_000),
            "4 cells, the tiny cell tripled": (tiny, np.array([0.596, 0.3, 0.098, 0.006]), 20_000),
            "lossless (Q = P), 8 cells": (P8, P8, 20_000)}


def coverage(reps: int) -> pd.DataFrame:
    rows = []
    for name, (P, Q, n) in laws().items():
        tv = 0.5 * float(np.abs(P - Q).sum())
        for delta in (1e-2, 1e-3):
            rng = np.random.default_rng(1)
            C = rng.multinomial(n, Q, size=reps)
            ups = np.array([tv_upper_bound_events(c, P, delta).upper for c in C])
            tv_hat = 0.5 * np.abs(C / n - P).sum(axis=1)
            miss = int((ups < tv).sum())
            half = int((tv_hat + (ups - tv_hat) / 2 < tv).sum())
            lo, hi = clopper_pearson(miss, reps, 0.05)
            rows.append(dict(law=name, n=n, tv=tv, delta=delta, reps=reps, misses=miss, miss_rate=miss / reps,
                             cp95_low=lo, cp95_high=hi, mean_bound=float(ups.mean()), halved_misses=half))
    return pd.DataFrame(rows)


def exact_miss(P: np.ndarray, Q: np.ndarray, n: int, delta: float) -> float:
    """P_Q(bound < TV(Q, P)), summed over every count vector of 3 cells (no simulation)."""
    tv = 0.5 * float(np.abs(P - Q).sum())
    E, PA = events_mod._events(P)  # every event priced exactly (the certificate's computation, all vectors at once)
    total = 0.0
    for x0 in range(n + 1):
        x1 = np.arange(n - x0 + 1)
        C = np.stack([np.full(x1.size, x0), x1, n - x0 - x1], axis=1)  # (m, 3)
        ups = np.clip(np.max(events_mod._cp_upper(C @ E.T, n, delta / len(PA)) - PA, axis=1), 0, 1)
        total += float(sps.multinomial.pmf(C[ups < tv], n, Q).sum()) if (ups < tv).any() else 0.0
    return total


def exact() -> pd.DataFrame:
    """Q far from P (TV 0.25-0.38) in three directions: there the worst event's own Clopper-Pearson miss, about
    delta / M, is the whole miss (nearer P another event covers for it and the miss is 0)."""
    P = np.array([0.5, 0.3, 0.2])
    rows = []
    for delta in (GATE_DELTA, 1e-3):
        for n in (150, 300, 600):
            for t in (0.25, 0.32, 0.38):
                for name, d in (("onto cell 0", [1, -0.5, -0.5]), ("off cell 0", [-1, 0.5, 0.5]),
                                ("cell 0 to cell 1", [-1, 1, 0])):
                    m = exact_miss(P, P + t * np.array(d), n, delta)
                    rows.append(dict(n=n, delta=delta, direction=name, tv=t, exact_miss=m,
                                     delta_over_events=delta / 6, within_delta=bool(m <= delta)))
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=2000)
    ap.add_argument("--out", type=Path, default=Path("results/calibrate/events"))
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    meta = metadata({"script": "experiments/events_coverage.py", "reps": a.reps, "gate_delta": GATE_DELTA}, seed=1)
    w, c, e = widths(), coverage(a.reps), exact()
    for name, df in (("widths", w), ("coverage", c), ("exact", e)):
        atomic_write_csv(a.out / f"{name}.csv", df, meta)
    atomic_write_json(a.out / "meta.json", meta)
    L = ["# The union-of-events Clopper–Pearson TV bound (issue 24)", "",
         f"commit `{(meta.get('commit') or 'unknown')[:12]}`{' (dirty tree)' if meta.get('dirty') else ''}, "
         f"`{meta['command']}`; {meta['machine'].get('cpu')}, {meta['created_utc']}", "",
         f"## The gate's marginals: largest position bound per scenario at its default draws (δ = {GATE_DELTA:.3g} per side)",
         "", "`before`: the bound the gate took on these cells before (plug-in or cross U-statistic, by planning "
         "figure); mean and the 1 - 1e-4 quantile (normal) over 200 lossless count vectors; draws to certify: the "
         "planners' figure for the largest-needing position.", "",
         md_table(w.to_dict("records"), list(w.columns)), "",
         f"## Coverage by simulation ({a.reps} replicates per row; Clopper-Pearson 95 % interval of the miss rate)", "",
         "Misses must stay below δ; `halved_misses`: the same draws with the bound's width (bound - TV(Q̂, P)) halved.",
         "", md_table(c.to_dict("records"), list(c.columns)), "",
         "## Coverage computed exactly at the gate's δ (3 cells, every count vector summed)", "",
         md_table(e.to_dict("records"), list(e.columns)), ""]
    atomic_write_text(a.out / "summary.md", "\n".join(L))
    print("\n".join(L))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
