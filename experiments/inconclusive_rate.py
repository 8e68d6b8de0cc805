"""How often does a lossless sampler end *inconclusive*?  The certificate planner's rate, measured (issue 24, item 5).

    python experiments/inconclusive_rate.py [--reps 150] [--jobs 2] [--out results/calibrate/inconclusive]

`make verify` states, per run, P(inconclusive | lossless sampler) at the run's size: ``cert_inconclusive_normal``
(the planning figure: the normal approximation of each TV bound's upper end over simulated lossless count vectors,
summed over the run's bounds; :func:`harness.verify.battery.tv_interval_inconclusive_normal`) and
``cert_inconclusive_rate`` (a rigorous upper bound: McDiarmid / Bernstein tails, summed).  The default run's rate
(~1e-4 per command) is far too small to measure, so the planner is checked where its figure is large: each cell
below draws a lossless sampler at a size near the one its certificate plans for (``scale`` x the planned
``certify_draws``), over ``--reps`` independent seeds, through the whole pipeline of `make verify` (the sampler's
draws, every loss test, every finite-sample TV bound of the certificate), and counts the seeds that end
inconclusive; Clopper-Pearson 95 % interval on that share, beside the planner's two figures at that size.

Why a lossless sampler's rate depends on its output law only: the certificate's bounds are functions of the counts
of whole output sequences, which for any lossless sampler are multinomial(n, P) -- how it got there (acceptance,
bonus tokens) does not enter.  The second sampler of each scenario (``no_bonus_token``: lossless, other acceptance
behaviour) checks that; its share must agree with the reference's.

The tolerances ε are the scenario's times ``eps_scale`` (so that a cell's size, and its time, stays small: the
bounds' shape in n and ε is the same); each row says which.  A row agrees with the planner when the normal figure
is not below the measured share's 95 % interval (inside it, or above it: conservative) and neither is the rigorous
bound.

Default cells (scenario, ε scale, sizes as multiples of the planned draws):
    base  x2 (ε 0.01 per position): 1.0 and 1.15 x planned
    top_p x2: the same (top_p ended inconclusive for a held-out lossless sampler at the default size)
    power x8 (ε 0.004 per position, 0.016 whole law): the same
About 25 minutes on 2 cores at --reps 150 (every rep draws the sampler and the target-only baseline).
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from harness.controls.chain import CATALOGUE  # noqa: E402
from harness.core.figures import md_table  # noqa: E402
from harness.core.provenance import atomic_write_csv, atomic_write_text, metadata  # noqa: E402
from harness.laws.scenarios import load_scenario, load_settings  # noqa: E402
from harness.stats import clopper_pearson  # noqa: E402
from harness.verify.epsilon import epsilons_for  # noqa: E402
from harness.verify.pipeline import verify  # noqa: E402
from specimpl.speculative import speculative_generate  # noqa: E402

SEED = 20261203
CELLS = (("base", 2.0), ("top_p", 2.0), ("power", 8.0))  # (scenario, ε scale)
SCALES = (1.0, 1.15)  # sizes, as multiples of the planned certify_draws
SAMPLERS = ("reference", "no_bonus_token")
PILOT_DRAWS = 20_000
CONFIDENCE = 0.95


def sampler_fn(name: str):
    if name == "reference":
        return speculative_generate
    return next(c for c in CATALOGUE if c.name == name and c.kind == "lossless").sampler


def cell_settings(scenario: str, eps_scale: float):
    """(settings with the scenario's ε x ``eps_scale`` laid over the command line's, the scenario at weight 1)."""
    settings = load_settings()
    sc = load_scenario(scenario)
    eps = epsilons_for(settings, sc)
    over = {k: min(1.0, getattr(eps, k) * eps_scale) for k in ("position", "pair", "joint")}
    return dataclasses.replace(settings, epsilon_override=over), dataclasses.replace(sc, weight=1.0, full_weight=1.0)


def one_run(job: tuple) -> dict:
    """One seed of one cell through verify(): the sampler's certificate row."""
    scenario, eps_scale, sampler, draws, seed = job
    import torch
    torch.set_num_threads(1)
    settings, sc = cell_settings(scenario, eps_scale)
    r = verify(sampler=sampler_fn(sampler), sampler_label=sampler, scenarios=[sc], settings=settings, draws=draws,
               seed=seed, controls=False, out=None, figures=False, progress=False, von_neumann=False, real_model=None)
    v = r.verdicts.set_index("run").loc[sampler]
    return dict(scenario=scenario, eps_scale=eps_scale, sampler=sampler, draws=draws, seed=seed,
                sequences=int(v.sequences), certificate=str(v.certificate), cert_worst=str(v.cert_worst),
                cert_worst_ratio=float(v.cert_worst_ratio), certify_draws=float(v.certify_draws),
                normal=float(v.cert_inconclusive_normal), rigorous=float(v.cert_inconclusive_rate),
                epsilon_position=float(v.epsilon_position), epsilon_joint=float(v.epsilon_joint))


def planned_draws(scenario: str, eps_scale: float) -> int:
    """The certificate's planned size for a lossless sampler (certify_draws of a small pilot run)."""
    return int(one_run((scenario, eps_scale, "reference", PILOT_DRAWS, SEED))["certify_draws"])


def summarise(runs: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for key, g in runs.groupby(["scenario", "eps_scale", "sampler", "draws"], sort=False):
        k, n = int((g.certificate == "inconclusive").sum()), len(g)
        lo, hi = clopper_pearson(k, n, 1 - CONFIDENCE)
        normal, rigorous = float(g.normal.iloc[0]), float(g.rigorous.iloc[0])
        rows.append(dict(zip(["scenario", "eps_scale", "sampler", "draws"], key), epsilon_position=g.epsilon_position.iloc[0],
                         epsilon_joint=g.epsilon_joint.iloc[0], size_over_planned=float(key[3] / g.certify_draws.iloc[0]),
                         reps=n, inconclusive=k, lossy=int((g.certificate == "lossy").sum()), share=k / n, cp_lo=lo,
                         cp_hi=hi, planner_normal=normal, planner_rigorous=rigorous,
                         normal_ok=bool(normal >= lo), rigorous_ok=bool(rigorous >= lo)))
    return pd.DataFrame(rows)


def markdown(table: pd.DataFrame, meta: dict, args, wall: float) -> str:
    cols = ["scenario", "sampler", "epsilon_position", "epsilon_joint", "draws", "size_over_planned", "reps",
            "inconclusive", "lossy", "share", "cp_lo", "cp_hi", "planner_normal", "planner_rigorous", "normal_ok",
            "rigorous_ok"]
    ok = bool(table.normal_ok.all() and table.rigorous_ok.all() and (table.lossy == 0).all())
    return "\n".join([
        "# How often a lossless sampler ends inconclusive: measured vs the certificate's planner", "",
        f"Command: `python experiments/inconclusive_rate.py --reps {args.reps} --jobs {args.jobs}`; commit "
        f"{meta['commit']}; {wall:.0f} s.", "",
        "Each row: a lossless sampler drawn `reps` times (independent seeds) through `make verify`'s pipeline at "
        "`draws` sequences (its target-only baseline as many), ε = the scenario's x `eps_scale`; *share* the seeds "
        "that ended inconclusive, [cp_lo, cp_hi] its Clopper-Pearson 95 % interval; *planner_normal* / "
        "*planner_rigorous* the run's own stated P(inconclusive | lossless) (runs.csv's cert_inconclusive_normal / "
        "cert_inconclusive_rate) at that size.  normal_ok: the planning figure is not below the interval "
        "(it may be conservative); rigorous_ok: the rigorous bound is not below it.", "",
        md_table(table[cols].to_dict("records"), cols), "",
        f"**Planner {'consistent' if ok else 'INCONSISTENT'} with the measured rates** "
        f"({int(table.normal_ok.sum())} of {len(table)} rows normal_ok, {int(table.rigorous_ok.sum())} rigorous_ok, "
        f"{int(table.lossy.sum())} lossy verdicts of a lossless sampler).", ""])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=150, help="seeds per cell and sampler (default 150)")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--out", type=Path, default=Path("results/calibrate/inconclusive"))
    ap.add_argument("--cells", nargs="*", default=None, metavar="SCENARIO:SCALE",
                    help="cells (default base:2 top_p:2 power:8)")
    args = ap.parse_args(argv)
    if args.reps < 1 or args.jobs < 1:
        print(f"inconclusive_rate: `--reps` and `--jobs` must be integers >= 1; got {args.reps}, {args.jobs}",
              file=sys.stderr)
        return 2
    cells = CELLS if args.cells is None else [(c.split(":")[0], float(c.split(":")[1])) for c in args.cells]
    t0 = time.perf_counter()
    jobs = []
    for scenario, eps_scale in cells:
        planned = planned_draws(scenario, eps_scale)
        print(f"inconclusive_rate: {scenario} at ε x {eps_scale:g}: planned {planned:,} sequences", file=sys.stderr)
        for i, scale in enumerate(SCALES):
            for j, sampler in enumerate(SAMPLERS):
                jobs += [(scenario, eps_scale, sampler, int(round(scale * planned)), SEED + 100_000 * (i + 1) +
                          10_000 * j + rep) for rep in range(args.reps)]
    rows = run_all(jobs, args.jobs)
    runs = pd.DataFrame(rows)
    table = summarise(runs)
    wall = time.perf_counter() - t0
    meta = metadata({k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}, SEED)
    atomic_write_csv(args.out / "runs.csv", runs, meta)
    atomic_write_csv(args.out / "inconclusive.csv", table, meta)
    atomic_write_text(args.out / "summary.md", markdown(table, meta, args, wall))
    print(markdown(table, meta, args, wall), file=sys.stderr)
    return 0


def run_all(jobs: list, workers: int) -> list:
    from tqdm import tqdm
    if workers == 1:
        return [one_run(j) for j in tqdm(jobs, desc="inconclusive_rate", file=sys.stderr)]
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor
    with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as pool:
        return list(tqdm(pool.map(one_run, jobs, chunksize=4), total=len(jobs), desc="inconclusive_rate",
                         file=sys.stderr))


if __name__ == "__main__":
    sys.exit(main())
