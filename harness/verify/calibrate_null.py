"""`python -m harness calibrate --null`: the battery's statistics calibrated without the sampler.

Under H0 every count-based statistic of the battery is a function of multinomial count vectors whose law is
known exactly: the pooled cells of a position, a pair of positions or the first-J joint are
Multinomial(n, pooled P) (:class:`harness.laws.ngram.ExactLaw`), a two-sample table is two such rows, a PIT pair
grid is Multinomial(n_pairs, uniform).  So this module draws the
count vectors directly (numpy's multinomial, millions of replicates a second) at the run's draw sizes and
computes each p-value with the battery's own functions (:func:`harness.stats.chi2_gof_pvalues`,
:func:`harness.stats.chi2_homogeneity_pvalues`) — each
statistic is computed in one place — then reports, per kind of test, the share of p-values at or below
1e-2 … 1e-6 with Clopper–Pearson intervals.

The gate's own level (≈ 2.9e-8 per test) is out of reach of simulation; there the pooled χ² is checked by
exact enumeration of multinomials with two and three cells (:func:`exact_size`), the configurations where
the asymptotic tail is lightest (one small cell of expected count ``min_expected``): the asymptotic and the
lattice-corrected (:func:`harness.stats.chi2_pvalue`) sizes are both written to ``exact_tails.csv``.

Not covered here (they need the sampler): the acceptance tests and the two-sample KS / AD on log-probabilities;
``python -m harness calibrate`` (end to end) covers them.  The binned PIT KS is valid by construction (the grid
statistic is ≤ the continuous one, whose exact null or the DKW–Massart bound gives the p-value) and not
simulated here (a replicate is a 65,536-cell histogram: thousands a second, not millions).
"""
from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
from scipy import special
from scipy.stats import binom as binom_dist, chi2 as chi2_dist

from harness import stats
from harness.stats import clopper_pearson
from harness.laws.scenarios import scenario_law
from harness.core.atomic import staged_report
from harness.core.provenance import atomic_write_csv, atomic_write_text, metadata
from harness.core.options import check_option

__all__ = ["NullCase", "null_cases", "simulate", "exact_size", "exact_tails", "calibrate_null", "NULL_LEVELS",
           "GATE_LEVEL"]

NULL_LEVELS = (1e-2, 1e-3, 1e-4, 1e-5, 1e-6)
GATE_LEVEL = 2.9e-8  # the per-test Bonferroni level of `make verify`: Holm's 9e-5 (1e-4 less the sequential share) over 3,072 tests
CONFIDENCE = 0.95
CHUNK = 1 << 15  # replicates drawn at once
REPORT_FILES = ("per_kind.csv", "exact_tails.csv", "summary.md")


@dataclass(frozen=True)
class NullCase:
    """One test of the battery and its exact null: ``pvalues(rng, R)`` draws R replicates under H0 and returns
    their p-values (R,), computed by the battery's own functions."""

    kind: str
    scenario: str
    label: str
    pvalues: Callable[[np.random.Generator, int], np.ndarray]


def _pooled_probs(probs: np.ndarray, n: int) -> np.ndarray:
    labels = stats.pool_cells(probs, n)
    G = int(labels.max() + 1) if labels.max() >= 0 else 0
    return np.bincount(labels[labels >= 0], weights=probs[labels >= 0], minlength=G)


def _gof(kind, scenario, label, probs, n):
    pp = _pooled_probs(np.asarray(probs, np.float64), n)
    if pp.size < 2:
        return None  # a single possible cell: p = 1 always (support check only)
    return NullCase(kind, scenario, label,
                    lambda rng, R: stats.chi2_gof_pvalues(rng.multinomial(n, pp, size=R), pp, n)[1])


def _homog(kind, scenario, label, probs, n):
    pp = _pooled_probs(np.asarray(probs, np.float64), n)
    if pp.size < 2:
        return None
    return NullCase(kind, scenario, label, lambda rng, R: stats.chi2_homogeneity_pvalues(
        rng.multinomial(n, pp, size=R), rng.multinomial(n, pp, size=R))[1])


def null_cases(scenarios, settings, draws: int | None = None) -> list[NullCase]:
    """Every count-based test of the battery on ``scenarios`` at the run's sizes (``draws`` sequences per
    scenario before its weight; default: default.toml's ``draws``)."""

    cases = []
    for sc in scenarios:
        law, _ = scenario_law(sc)
        n = max(2, round((draws or settings.draws) * sc.weight))
        N = law.N
        marg, pairm = law.marginals(), law.pair_marginals()
        cases += [_gof("gof.position", sc.name, f"position {t}", marg[t], n) for t in range(N)]
        cases += [_gof("gof.pair", sc.name, f"pair {t}", pairm[t], n) for t in range(N - 1)]
        cases += [_homog("two_sample.position", sc.name, f"position {t}", marg[t], n) for t in range(N)]
        if sc.joint_tokens >= 2:
            joint = law.joint(sc.joint_tokens)
            cases += [_gof("gof.joint", sc.name, f"joint[0:{sc.joint_tokens}]", joint, n),
                      _homog("two_sample.joint", sc.name, f"joint[0:{sc.joint_tokens}]", joint, n)]
        n_pairs = n * (N // 2)
        m = stats.pit_pair_bins(n_pairs)
        cases.append(_gof("pit.pairs", sc.name, f"{m}x{m} grid", np.full(m * m, 1.0 / (m * m)), n_pairs))
    return [c for c in cases if c is not None]


def simulate(cases: list[NullCase], replicates: int, seed: int, progress: bool = False) -> pd.DataFrame:
    """Per kind of test: ``replicates`` p-values under H0 split evenly over the kind's cases, and the share at or
    below each of :data:`NULL_LEVELS` with its interval."""
    rng = np.random.default_rng(seed)
    rows = []
    kinds = sorted({c.kind for c in cases})
    for kind in kinds:
        group = [c for c in cases if c.kind == kind]
        per_case = max(1, replicates // len(group))
        hits = np.zeros(len(NULL_LEVELS), np.int64)
        n_total, tic = 0, time.perf_counter()
        for case in group:
            for s in range(0, per_case, CHUNK):
                p = case.pvalues(rng, min(CHUNK, per_case - s))
                hits += (p[:, None] <= np.asarray(NULL_LEVELS)).sum(0)
                n_total += p.size
        rows.append(_rate_row(kind, len(group), n_total, hits, time.perf_counter() - tic))
        if progress:
            print(f"calibrate --null: {kind}: {n_total:,} replicates over {len(group)} tests", file=sys.stderr)
    return pd.DataFrame(rows)


def _rate_row(kind: str, n_tests: int, n: int, hits: np.ndarray, wall: float) -> dict:
    row = {"kind": kind, "tests": n_tests, "replicates": n, "wall_s": round(wall, 1)}
    for a, k in zip(NULL_LEVELS, hits):
        lo, hi = clopper_pearson(int(k), n, 1 - CONFIDENCE)
        row[f"rate@{a:g}"], row[f"ci_low@{a:g}"], row[f"ci_high@{a:g}"] = k / n, lo, hi
        row[f"ratio@{a:g}"] = k / n / a
    return row


# --------------------------------------------------------------------------- exact enumeration
def exact_size(expected, n: int, alpha: float, width: float = 13.0) -> tuple[float, float, float]:
    """Exact sizes at level ``alpha`` of the pooled Pearson χ² of Multinomial(``n``, ``expected`` / n), whose
    last cell is the rest: (asymptotic size, lattice-corrected size, mass left out).  The first G − 1 cells are
    enumerated within ``width`` standard deviations of their means (the mass left out is returned; it bounds the
    error of both sizes: a union bound over the cells' binomial margins).  Feasible for G ≤ 3 at any n, G = 4 for small cells."""
    e = np.asarray(list(expected) + [n - float(np.sum(expected))], dtype=np.float64)
    p = e / n
    grids = [np.arange(max(0, int(ei - width * math.sqrt(ei))), int(ei + width * math.sqrt(ei)) + 1) for ei in e[:-1]]
    ks = [g.ravel() for g in np.meshgrid(*grids, indexing="ij")]
    last = n - sum(ks)
    ok = last >= 0
    ks = [k[ok] for k in ks] + [last[ok]]
    logpmf = special.gammaln(n + 1) + sum(k * np.log(pi) - special.gammaln(k + 1) for k, pi in zip(ks, p))
    pmf = np.exp(logpmf)
    obs = np.stack(ks, axis=-1)  # (M, G)
    stat, corrected = stats.chi2_gof_pvalues(obs, p, n)
    asymptotic = chi2_dist.sf(stat, e.size - 1)
    # mass outside the enumerated box (union bound over the cells' binomial margins; the last cell is never < 0
    # inside the box for the configurations enumerated here, and a negative one is impossible anyway)
    left = sum(binom_dist.cdf(g[0] - 1, n, pi) + binom_dist.sf(g[-1], n, pi) for g, pi in zip(grids, p[:-1]))
    return float(pmf[asymptotic <= alpha].sum()), float(pmf[corrected <= alpha].sum()), float(left)


EXACT_CONFIGS = ((10_000, (100.0,)), (100_000, (100.0,)), (10_000, (100.0, 100.0)), (100_000, (100.0, 100.0)),
                 (10_000, (100.0, 1000.0)), (100_000, (300.0, 300.0)))  # (n, expected counts of all but the last cell)


def exact_tails(levels=(1e-2, 1e-4, 1e-6, GATE_LEVEL)) -> pd.DataFrame:
    """Exact size / nominal of the asymptotic and the lattice-corrected pooled χ² (:func:`exact_size`) on
    :data:`EXACT_CONFIGS`, at each of ``levels``."""
    rows = []
    for n, e in EXACT_CONFIGS:
        for a in levels:
            asym, corr, left = exact_size(e, n, a)
            rows.append({"n": n, "cells": len(e) + 1, "expected_small": " ".join(f"{x:g}" for x in e), "level": a,
                         "asymptotic_ratio": asym / a, "corrected_ratio": corr / a, "mass_left_out": left})
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------------- report
def calibrate_null(settings, scenarios, *, replicates: int, draws: int | None, seed: int, out: Path,
                   progress: bool = True) -> dict:
    """Simulate every count-based test's null (:func:`simulate`), enumerate the exact tails
    (:func:`exact_tails`) and write ``per_kind.csv``, ``exact_tails.csv`` and ``summary.md`` to ``out``."""

    tic = time.perf_counter()
    cases = null_cases(scenarios, settings, draws)
    per_kind = simulate(cases, replicates, seed, progress)
    exact = exact_tails()
    wall = time.perf_counter() - tic
    config = {"mode": "null", "replicates_per_kind": replicates, "draws": draws or settings.draws,
              "scenarios": [s.name for s in scenarios], "levels": NULL_LEVELS, "gate_level": GATE_LEVEL,
              "wall_s": wall}
    meta = metadata(config, seed)
    summary = _summary(per_kind, exact, config, meta)
    with staged_report(out, "calibrate-null", REPORT_FILES) as staged:
        atomic_write_csv(staged.dir / "per_kind.csv", per_kind, meta)
        atomic_write_csv(staged.dir / "exact_tails.csv", exact, meta)
        atomic_write_text(staged.dir / "summary.md", summary)
    worst = float((per_kind[[f"ci_low@{a:g}" for a in NULL_LEVELS]].to_numpy() / np.asarray(NULL_LEVELS)).max())
    console = (f"calibrate --null: {len(cases)} tests, {replicates:,} replicates per kind in {wall:.0f} s; "
               f"largest lower CI bound / level {worst:.3g}; report {out}/summary.md")
    return {"per_kind": per_kind, "exact": exact, "summary": summary, "console": console, "meta": meta,
            "consistent": worst <= 1.0}


def _summary(per_kind: pd.DataFrame, exact: pd.DataFrame, config: dict, meta: dict) -> str:
    L = ["# Null calibration of the battery's statistics (no sampler)", ""]
    L.append(f"{config['replicates_per_kind']:,} replicates per kind of test drawn from the exact laws of "
             f"{', '.join(config['scenarios'])} at {config['draws']:,} sequences per scenario (× weight); "
             f"{config['wall_s']:.0f} s; commit `{(meta.get('commit') or 'unknown')[:12]}`, seed {meta.get('seed')}.")
    L += ["", "## False-alarm rate per kind of test (rate / nominal, 95 % Clopper–Pearson interval)", ""]
    L.append("| test | tests | replicates | " + " | ".join(f"≤ {a:g}" for a in NULL_LEVELS) + " |")
    L.append("|---|---|---|" + "---|" * len(NULL_LEVELS))
    for _, r in per_kind.iterrows():
        cells = " | ".join(f"{r[f'rate@{a:g}']:.3g} [{r[f'ci_low@{a:g}']:.2g}, {r[f'ci_high@{a:g}']:.2g}]"
                           for a in NULL_LEVELS)
        L.append(f"| {r.kind} | {int(r.tests)} | {int(r.replicates):,} | {cells} |")
    L += ["", f"## Exact size / nominal of the pooled Pearson χ² (enumeration; gate level {GATE_LEVEL:g})", ""]
    L.append("| n | cells | small cells' expected counts | level | asymptotic χ² | lattice-corrected | mass left out |")
    L.append("|---|---|---|---|---|---|---|")
    for _, r in exact.iterrows():
        L.append(f"| {int(r.n):,} | {int(r.cells)} | {r.expected_small} | {r.level:g} | {r.asymptotic_ratio:.3f} | "
                 f"{r.corrected_ratio:.3f} | {r.mass_left_out:.1e} |")
    L += ["", "A ratio above 1 is an anti-conservative tail.  The battery's χ² p-values are the corrected ones "
          "(harness.stats.chi2_pvalue); the asymptotic column shows what motivated the correction."]
    return "\n".join(L) + "\n"


def run(args, settings, scenarios) -> int:
    """`calibrate --null`: exit 0 when no kind's rate is above its level beyond its interval, 1 otherwise."""
    check_option(1000 <= args.replicates <= 10 ** 8, "--replicates", args.replicates,
                     "an integer in [1000, 100,000,000] (replicates per kind of test: the default 2,000,000 already "
                     "take minutes; probe 48: 10^13 ran until killed)")
    res = calibrate_null(settings, scenarios, replicates=args.replicates, draws=args.null_draws,
                         seed=settings.seed + 500, out=args.out, progress=not args.no_progress)
    print(res["console"], file=sys.stderr)
    return 0 if res["consistent"] else 1
