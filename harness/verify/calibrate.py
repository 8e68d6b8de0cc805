"""`python -m harness calibrate`: measure the battery's false-alarm rate on correct samplers.

Runs the whole battery of ``python -m harness verify`` (reference speculative sampler on every default
scenario, target-only baseline, the reference von Neumann sampler; no buggy controls) over ``--seeds``
independent seeds, each with ``--draws`` sequences per scenario, and reports, with exact
(Clopper–Pearson) binomial confidence intervals:

* per kind of test (``family.test``, pooled over scenarios and positions): the share of raw p-values at
  or below nominal levels 0.001, 0.01, 0.05 and 0.1 — a calibrated test shows ≈ the nominal rate, a
  conservative one (discrete statistics, binned KS) less;
* family-wise: the share of seeds in which Holm rejects anything at family levels 1e-4 (the budget of
  ``make verify``), 0.01, 0.05 and 0.2 — Holm guarantees ≤ the level.

What is calibrated, and what is not: the p-values at ``--draws`` per scenario (default 10,000, far
fewer than ``make verify``'s 400,000, so the asymptotic approximations are stressed harder here than in
the gate); rates at the 1e-4 budget itself can only be bounded (zero alarms in S seeds gives an upper
95 % limit of ≈ 3.7/S).  Seeds are ``base_seed + 1000 + i``, disjoint from the verify run's seed.

Each finished seed is stored under ``<out>/_tmp_seeds/`` with the fingerprint of what produced it, so an
interrupted run resumes; a stored seed of other code or scenarios is redrawn (:mod:`harness.core.fingerprint`).
"""
from __future__ import annotations

import dataclasses

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd

from harness.core.atomic import staged_report
from harness.stats import clopper_pearson
from harness.core.forkmap import run_jobs
from harness.core.fingerprint import code_fingerprint, fingerprint, short
from harness.core.provenance import atomic_write_csv, atomic_write_parquet, atomic_write_text, metadata
from harness.laws.scenarios import SCENARIO_DIR, load_scenario, load_settings
from harness.stats import holm
from harness.core.limits import MAX_SEQUENCES
from harness.core.options import check_option, check_unique
from harness.core.outdir import claim_out, own_subfolder
from harness.core.threads import with_threads
from harness.verify.cli import check_common, real_model_spec
from harness.verify.pipeline import verify
from specimpl.speculative import speculative_generate
from harness.verify.realmodel import REAL_MODEL_SCENARIO
from harness.core.provenance import atomic_savefig
from harness.core.figures import pyplot as _plt
from harness.verify import calibrate_inconclusive, calibrate_null

__all__ = ["add_arguments", "run", "calibrate"]

LEVELS = (0.001, 0.01, 0.05, 0.1)
FAMILY_LEVELS = (1e-4, 0.01, 0.05, 0.2)
REPORT_FILES = ("per_test.csv", "family_wise.csv", "ks.csv", "pvalues.parquet", "summary.md")
CONFIDENCE = 0.95  # of the Clopper–Pearson intervals on every rate


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--seeds", type=int, default=20, help="independent repetitions of the battery (default 20)")
    ap.add_argument("--draws", type=int, default=10_000, help="sequences per scenario per seed (default 10,000)")
    ap.add_argument("--scenario", action="append", metavar="NAME", help="scenarios (default: verify's list)")
    ap.add_argument("--scenario-dir", type=Path, default=SCENARIO_DIR)
    ap.add_argument("--out", type=Path, default=None,
                    help="report folder (default: runs/calibrate/<name>-<hash of the options>; the committed "
                         "reference is written only by --out results/calibrate)")
    ap.add_argument("--fresh", action="store_true", help="ignore seeds stored by an interrupted run")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1, as for verify)")
    ap.add_argument("--real-model-sequences", type=int, default=0, metavar="N",
                    help="add the real-model scenario's tests with N sequences per seed (default 0: none)")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes drawing seeds in parallel (default 1)")
    ap.add_argument("--with-algorithms", action="store_true",
                    help="also draw default.toml's block / tree reference runs per seed (slow)")
    ap.add_argument("--null", action="store_true",
                    help="calibrate the statistics without the sampler: count vectors drawn from the exact laws "
                         "(harness.verify.calibrate_null); writes to <out>/null")
    ap.add_argument("--replicates", type=int, default=2_000_000, help="--null: replicates per kind of test")
    ap.add_argument("--null-draws", type=int, default=None, help="--null: sequences per scenario (default: "
                    "default.toml's draws, as make verify)")
    ap.add_argument("--inconclusive", action="store_true",
                    help="measure the false-inconclusive rate of the default verify command: whole commands "
                         "simulated from the exact laws (harness.verify.calibrate_inconclusive); writes to "
                         f"<out>/{calibrate_inconclusive.NAME}")
    ap.add_argument("--commands", type=int, default=3000, help="--inconclusive: simulated commands (default 3,000)")
    ap.add_argument("--control-commands", type=int, default=100,
                    help="--inconclusive: of those, how many also hold the control-sized certified runs (default 100)")
    ap.add_argument("--check-runs", type=int, default=300,
                    help="--inconclusive: real and multinomial runs compared in law (default 300 each)")
    ap.add_argument("--check-scenario", default="base", help="--inconclusive: the check's scenario (default base)")
    ap.add_argument("--check-draws", type=int, default=20_000,
                    help="--inconclusive: sequences per run of the check (default 20,000)")


def run(args) -> int:
    """Exit 0 when every family-wise rate is consistent with its nominal level, 1 when one is not."""
    check_common(args)
    check_option(args.seeds >= 1, "--seeds", args.seeds, "an integer >= 1")
    check_option(500 <= args.draws <= MAX_SEQUENCES, "--draws", args.draws, f"an integer in [500, {MAX_SEQUENCES:,}]")
    check_option(args.seeds <= 10_000, "--seeds", args.seeds, "an integer in [1, 10,000] (one battery a seed)")
    check_option(args.jobs >= 1, "--jobs", args.jobs, "an integer >= 1")
    check_option(args.real_model_sequences >= 0, "--real-model-sequences", args.real_model_sequences,
                 "an integer >= 0")
    check_unique(args.scenario, "--scenario")
    settings = load_settings(args.scenario_dir)
    scenarios = [load_scenario(n, args.scenario_dir) for n in (args.scenario or settings.scenarios)]
    if args.inconclusive:
        calibrate_inconclusive.check_args(args, settings)
        args.out = claim_out(args, "calibrate", ("scenario", "inconclusive")) / calibrate_inconclusive.NAME
        return calibrate_inconclusive.run(args, settings)
    if args.null:
        check_option(1000 <= args.replicates <= 10 ** 8, "--replicates", args.replicates,
                     "an integer in [1000, 100,000,000] (replicates per kind of test: the default 2,000,000 already "
                     "take minutes; probe 48: 10^13 ran until killed)")
        args.out = claim_out(args, "calibrate", ("scenario", "null")) / "null"  # --out or runs/calibrate/...
        return calibrate_null.run(args, settings, scenarios)
    claim_out(args, "calibrate", ("scenario",))  # --out, or runs/calibrate/<name>-<hash>; locked
    real = real_model_spec(Path(args.scenario_dir) / "default.toml") if args.real_model_sequences else None
    if real is not None:  # the tiny pair's PIT tests per seed; the exact-pair certificate (45 k sequences per prompt
        real = dataclasses.replace(real, exact=None)  # at its default) is calibrated by its own bound's guarantee
    res = with_threads(args.threads, lambda: calibrate(
        settings, scenarios, seeds=args.seeds, draws=args.draws, out=args.out, fresh=args.fresh,
        progress=not args.no_progress, real_model=real, real_model_sequences=args.real_model_sequences,
        algorithms=args.with_algorithms, jobs=args.jobs))
    print(res["console"], file=sys.stderr)
    bad = res["family"][~res["family"].consistent.astype(bool)]
    if len(bad):
        levels = ", ".join(f"{a:g}" for a in bad.family_level)
        print(f"python -m harness calibrate: the family-wise false-alarm rate is inconsistent with the nominal "
              f"level at {levels} (summary: consistent: NO); exit 1", file=sys.stderr)
        return 1
    return 0


def _stored_seed(path: Path, fp: str) -> Optional[pd.DataFrame]:
    """The p-values stored for one seed when they were made with fingerprint ``fp`` (else None)."""
    import pyarrow.parquet as pq
    try:
        prov = json.loads((pq.read_schema(path).metadata or {}).get(b"provenance", b"{}"))
    except Exception:  # noqa: BLE001 - an unreadable stored seed is stale, never trusted
        return None
    return pd.read_parquet(path) if isinstance(prov, dict) and prov.get("fingerprint") == fp else None


def _verify_seed(settings, scenarios, draws: int, seed: int, real_model, real_model_sequences: int,
                 algorithms: bool) -> pd.DataFrame:
    """One seed's battery: every test's p-value and Holm-adjusted p-value.  Without ``algorithms`` the
    reference sampler is passed explicitly, so the block / tree reference runs are not drawn."""

    r = verify(sampler=None if algorithms else speculative_generate, sampler_label="reference",
               scenarios=scenarios, settings=settings, draws=draws, seed=seed, controls=False, out=None,
               figures=False, progress=False, von_neumann=True, real_model=real_model,
               real_model_sequences=real_model_sequences or None, real_model_controls=False)
    return r.table[["run", "scenario", "family", "test", "position", "loss_test", "pvalue", "p_adjusted"]].copy()


def _draw_seed(job: tuple) -> tuple[int, str]:
    """Draw one seed's battery and store it (a worker of :func:`_pvalues`; one torch thread)."""
    settings, scenarios, draws, seed, real_model, real_model_sequences, algorithms, path, fp = job
    import torch
    torch.set_num_threads(1)
    t = _verify_seed(settings, scenarios, draws, seed, real_model, real_model_sequences, algorithms)
    t["seed"] = seed
    atomic_write_parquet(Path(path), t, {"fingerprint": fp})
    return seed, str(path)


def _pvalues(settings, scenarios, *, seeds: int, draws: int, store: Path, progress: bool, real_model=None,
             real_model_sequences: int = 0, algorithms: bool = False, jobs: int = 1) -> tuple[pd.DataFrame, dict]:
    """Every test's p-value and Holm-adjusted p-value, per seed, and what was resumed.  Each seed is stored
    in ``store`` as it finishes with the fingerprint of what produced it (project code, every scenario's
    resolved config, settings, draws, the real-model size, seed: :mod:`harness.core.fingerprint`); an interrupted
    run reuses a stored seed only when that fingerprint matches, and redraws it otherwise.  ``jobs`` worker
    processes draw seeds in parallel (each seed's draws depend on its seed alone)."""
    from tqdm import tqdm

    resume = {"reused_seeds": [], "stale_seeds_redrawn": [], "fingerprint": None}
    code = code_fingerprint()
    extra = (real_model_sequences, algorithms)
    resume["fingerprint"] = fingerprint(code, scenarios, settings, draws, extra)
    todo, paths = [], {}
    for i in range(seeds):
        seed = settings.seed + 1000 + i
        path = paths[seed] = store / f"seed{seed}.parquet"
        fp = fingerprint(code, scenarios, settings, draws, extra, seed)
        if path.is_file():
            if _stored_seed(path, fp) is not None:
                resume["reused_seeds"].append(seed)
                continue
            resume["stale_seeds_redrawn"].append(seed)
        todo.append((settings, scenarios, draws, seed, real_model, real_model_sequences, algorithms, str(path), fp))
    bar = tqdm(total=seeds, initial=seeds - len(todo), desc="calibrate: seeds", disable=not progress, file=sys.stderr)
    run_jobs(_draw_seed, todo, jobs, bar)
    bar.close()
    allp = pd.concat([pd.read_parquet(paths[s]) for s in sorted(paths)], ignore_index=True)
    allp["kind"] = _kinds(allp)
    return allp, resume


def _kinds(allp: pd.DataFrame) -> pd.Series:
    """Kind of each test: ``family.test`` without its bracketed range, prefixed ``real_model:`` for the
    real-model scenario's tests (raw PIT values of a scored transformer, not counts under an exact law)."""
    kind = allp.family + "." + allp.test.str.replace(r"\[.*\]", "", regex=True)
    return kind.where(allp.scenario != REAL_MODEL_SCENARIO, "real_model:" + kind)


def resume_lines(resume: dict) -> list[str]:
    """What a calibration reused or redrew, in words (empty when nothing was stored)."""
    fp, lines = short(resume.get("fingerprint")), []
    n, m = len(resume["reused_seeds"]), len(resume["stale_seeds_redrawn"])
    if n:
        lines.append(f"reused {n} saved seed{'s' * (n != 1)} from an earlier run of the same code and "
                     f"scenarios (fingerprint {fp})")
    if m:
        lines.append(f"ignored {m} saved seed{'s' * (m != 1)} made by other code, scenarios or draws; redrawn "
                     f"(fingerprint now {fp})")
    return lines


def _per_kind(allp: pd.DataFrame) -> pd.DataFrame:
    """Per kind of test: the share of raw p-values at or below each of :data:`LEVELS`, with its interval."""
    rows = []
    for kind, g in allp.groupby("kind"):
        p = g.pvalue.to_numpy()
        row = {"kind": kind, "n_pvalues": p.size, "share_p_equal_1": float(np.mean(p >= 1.0))}
        for a in LEVELS:
            k = int((p <= a).sum())
            lo, hi = clopper_pearson(k, p.size, 1 - CONFIDENCE)
            row[f"rate@{a:g}"], row[f"ci_low@{a:g}"], row[f"ci_high@{a:g}"] = k / p.size, lo, hi
        rows.append(row)
    return pd.DataFrame(rows)


def _family_wise(allp: pd.DataFrame) -> pd.DataFrame:
    """Per family level of :data:`FAMILY_LEVELS`: the share of seeds in which Holm rejects anything."""
    by_seed = allp.groupby("seed")
    n_seeds = by_seed.ngroups
    rows = []
    for a in FAMILY_LEVELS:
        alarms = int(sum(bool((holm(g.pvalue.to_numpy()) <= a).any()) for _, g in by_seed))
        lo, hi = clopper_pearson(alarms, n_seeds, 1 - CONFIDENCE)
        rows.append({"family_level": a, "seeds": n_seeds, "alarms": alarms, "rate": alarms / n_seeds,
                     "ci_low": lo, "ci_high": hi, "consistent": lo <= a})
    return pd.DataFrame(rows)


def _ks_per_kind(allp: pd.DataFrame) -> pd.DataFrame:
    """Per kind of test: KS of its raw p-values against U(0, 1), two-sided and one-sided ``greater`` (too many
    small p-values: the anti-conservative direction).  p-values of one seed are dependent (positions of one
    scenario share draws), so these KS p-values are indicative; every seed is independent of the others."""
    from scipy import stats as sps
    rows = []
    for kind, g in allp.groupby("kind"):
        p = g.pvalue.to_numpy()
        two, big = sps.kstest(p, "uniform"), sps.kstest(p, "uniform", alternative="greater")
        rows.append({"kind": kind, "n_pvalues": p.size, "ks": two.statistic, "ks_pvalue": two.pvalue,
                     "ks_greater": big.statistic, "ks_greater_pvalue": big.pvalue})
    return pd.DataFrame(rows)


def qq_figure(out: Path, formats=("png", "pdf")) -> list[str]:
    """Log-scale QQ plot of the stored p-values (``<out>/pvalues.parquet``), one line per kind of test, with
    the diagonal and the ±95 % pointwise band of uniform order statistics: ``<out>/calibrate_qq.<fmt>``.
    Drawn from the stored results only (byte-reproducible: :func:`harness.core.provenance.atomic_savefig`)."""
    import json as _json

    import pyarrow.parquet as pq
    from scipy import stats as sps

    path = Path(out) / "pvalues.parquet"
    meta = _json.loads((pq.read_schema(path).metadata or {}).get(b"provenance", b"{}"))
    allp = pd.read_parquet(path)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.6, 4.4))
    n_max = 1
    colours = plt.get_cmap("tab20").colors
    for j, (kind, g) in enumerate(sorted(allp.groupby("kind"), key=lambda kv: kv[0])):
        p = np.sort(np.clip(g.pvalue.to_numpy(), 1e-300, 1.0))
        n_max = max(n_max, p.size)
        expected = (np.arange(1, p.size + 1) - 0.5) / p.size
        ax.plot(-np.log10(expected), -np.log10(p), lw=0.9, color=colours[j % 20], ls=("-", "--")[j // 20 % 2],
                label=f"{kind} ({p.size})")
    i = np.arange(1, n_max + 1)
    lo, hi = sps.beta.ppf(0.025, i, n_max - i + 1), sps.beta.ppf(0.975, i, n_max - i + 1)
    x = -np.log10((i - 0.5) / n_max)
    ax.fill_between(x, -np.log10(hi), -np.log10(lo), color="0.85", lw=0, label="95 % band (largest kind)")
    ax.plot([0, x.max()], [0, x.max()], color="k", lw=0.6)
    ax.set_xlabel("expected −log10 p (uniform)")
    ax.set_ylabel("observed −log10 p")
    ax.set_title("p-values of correct samplers per kind of test (above the diagonal: too many alarms)")
    ax.legend(fontsize=5, loc="upper left", bbox_to_anchor=(1.01, 1.0), ncol=1)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    paths = [str(atomic_savefig(fig, Path(out) / f"calibrate_qq.{fmt}", meta)) for fmt in formats]
    plt.close(fig)
    return paths


def calibrate(settings, scenarios, *, seeds: int, draws: int, out: Path, fresh: bool = False,
              progress: bool = True, real_model=None, real_model_sequences: int = 0,
              algorithms: bool = False, jobs: int = 1) -> dict:
    """Run the battery over ``seeds`` seeds and write the calibration report to ``out``; returns its
    tables (``per_test``, ``family``), ``summary``, ``console`` line and ``meta``."""
    out = Path(out)
    store = own_subfolder(out / "_tmp_seeds")  # a symbolic link there is removed, never followed (probe 47)
    if fresh:
        for p in store.glob("*.parquet"):
            p.unlink()
    tic = time.perf_counter()
    allp, resume = _pvalues(settings, scenarios, seeds=seeds, draws=draws, store=store, progress=progress,
                            real_model=real_model, real_model_sequences=real_model_sequences, algorithms=algorithms,
                            jobs=jobs)
    for line in resume_lines(resume):
        print(f"calibrate: {line}", file=sys.stderr)
    wall = time.perf_counter() - tic
    per_test, family, ks = _per_kind(allp), _family_wise(allp), _ks_per_kind(allp)
    n_seeds = int(family.seeds.iloc[0])
    tests_per_seed = int(len(allp) / max(n_seeds, 1))
    config = {"seeds": seeds, "draws": draws, "scenarios": [s.name for s in scenarios], "tests_per_seed": tests_per_seed,
              "levels": LEVELS, "family_levels": FAMILY_LEVELS, "wall_s": wall,
              "real_model_sequences": real_model_sequences, "algorithms": algorithms}
    meta = metadata(config, [settings.seed + 1000 + i for i in range(seeds)])
    meta["resume"] = resume
    summary = _summary(per_test, family, config, meta, ks)
    with staged_report(out, "calibrate", REPORT_FILES) as staged:  # the report's files move into out together
        atomic_write_csv(staged.dir / "per_test.csv", per_test, meta)
        atomic_write_csv(staged.dir / "ks.csv", ks, meta)
        atomic_write_csv(staged.dir / "family_wise.csv", family, meta)
        atomic_write_parquet(staged.dir / "pvalues.parquet", allp, meta)
        atomic_write_text(staged.dir / "summary.md", summary)
    qq_figure(out)
    for p in store.glob("*.parquet"):
        p.unlink()
    try:
        store.rmdir()
    except OSError:
        pass
    fw = family.iloc[0]
    console = (f"calibrate: {n_seeds} seeds x {tests_per_seed} tests ({draws:,} sequences per scenario) in {wall:.0f} s; "
               f"family-wise false alarms at {fw.family_level:g}: {int(fw.alarms)}/{n_seeds} "
               f"(95% CI {fw.ci_low:.3g}-{fw.ci_high:.3g}); report {out}/summary.md")
    return {"per_test": per_test, "family": family, "summary": summary, "console": console, "meta": meta}


def _summary(per_test, family, config, meta, ks) -> str:
    L = ["# Calibration of the verification battery", ""]
    L.append(f"{config['seeds']} seeds × {config['tests_per_seed']} tests; {config['draws']:,} sequences per scenario "
             f"and seed; scenarios {', '.join(config['scenarios'])}; {config['wall_s']:.0f} s. commit "
             f"`{(meta.get('commit') or 'unknown')[:12]}`, {meta['machine'].get('cpu')}, load "
             f"{meta['machine'].get('loadavg_1_5_15')}.")
    L += [f"**Resumed:** {line}." for line in resume_lines(meta["resume"])] if meta.get("resume") else []
    L.append("")
    L.append("## Family-wise false alarms (Holm over all tests of one seed)")
    L.append("")
    L.append("| family level | seeds | alarms | rate | 95 % CI (Clopper–Pearson) | consistent (CI low ≤ level) |")
    L.append("|---|---|---|---|---|---|")
    for _, r in family.iterrows():
        L.append(f"| {r.family_level:g} | {int(r.seeds)} | {int(r.alarms)} | {r.rate:.3g} | "
                 f"[{r.ci_low:.3g}, {r.ci_high:.3g}] | {'yes' if r.consistent else 'NO'} |")
    L.append("")
    L.append("## Per kind of test (raw p-values pooled over scenarios, positions and seeds)")
    L.append("")
    head = " | ".join(f"rate ≤ {a:g} [95 % CI]" for a in LEVELS)
    L.append(f"| test | p-values | {head} | share of p = 1 |")
    L.append("|---|---|" + "---|" * len(LEVELS) + "---|")
    for _, r in per_test.iterrows():
        cells = " | ".join(f"{r[f'rate@{a:g}']:.4f} [{r[f'ci_low@{a:g}']:.4f}, {r[f'ci_high@{a:g}']:.4f}]"
                           for a in LEVELS)
        L.append(f"| {r.kind} | {int(r.n_pvalues)} | {cells} | {r.share_p_equal_1:.3f} |")
    L.append("")
    L.append("## KS of the raw p-values against U(0, 1), per kind of test")
    L.append("")
    L.append("| test | p-values | KS D | p | D⁺ (too many small p) | p |")
    L.append("|---|---|---|---|---|---|")
    for _, r in ks.iterrows():
        L.append(f"| {r.kind} | {int(r.n_pvalues)} | {r.ks:.4f} | {r.ks_pvalue:.3g} | {r.ks_greater:.4f} | "
                 f"{r.ks_greater_pvalue:.3g} |")
    L.append("")
    L.append("p-values of one seed are dependent, so the KS p-values are indicative. Figure: calibrate_qq.png.")
    L.append("")
    L.append("Discrete statistics (χ² on counts, binned KS, KS/AD on log-probabilities with ties) give "
             "conservative p-values, and exact checks (greedy scenario, α = 0 or 1, single-cell positions) give "
             "p = 1: rates below nominal are expected there; a rate whose CI lies above the nominal level would "
             "be a defect.")
    return "\n".join(L) + "\n"
