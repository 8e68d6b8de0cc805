"""`python -m harness calibrate --inconclusive`: the false-inconclusive rate of `make verify` at its default, measured.

``--commands`` whole default `verify` commands of a lossless sampler are simulated from the exact laws
(:mod:`harness.verify.simcommand`: each run's counts drawn with their exact joint law, judged by the command's own
test specs, levels, Holm and :func:`harness.verify.verdicts.exact_verdict`), and each run's certificate and the
command's verdict are counted: per scenario and per command, the rate of *inconclusive* (a lossless sampler not
certified) and of *lossy* (a false alarm of the count tests), each with its exact Clopper–Pearson 95 % interval
(``scipy.stats.binomtest(k, n).proportion_ci(method="exact")``).  Each simulated command holds the reference run of
every default scenario at its default size (the real-model scenario has no enumerable law: left out); the first
``--control-commands`` also hold the command's control-sized certified runs (lossless controls, block / tree
references, certified at ``control_epsilon_scale`` x ε).

Before the rates, the check that a simulated run is the real one in law (``--check-runs`` runs of each): the
reference sampler drawn through the command's shard function (:func:`harness.verify.shards.draw_shard`) on
``--check-scenario`` at ``--check-draws`` sequences, against as many multinomial runs of the same size, both judged
by the same code; two-sample Kolmogorov–Smirnov on the certificate statistic (largest bound / ε) and on the largest
position and window bounds.

Resumable: commands are drawn in batches of :data:`BATCH`, each stored under ``<out>/_tmp_batches`` with the
fingerprint of the code and settings that drew it (a stale one is redrawn).  Writes ``runs.csv`` (one row per
simulated run), ``commands.csv`` (one row per command), ``rates.csv``, ``check.csv``, ``summary.md`` and
``README.md`` to ``<out>`` (``--out results/calibrate`` -> results/calibrate/inconclusive_default).
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd
from scipy import stats as sps

from harness.core.atomic import staged_report
from harness.core.config import derive_seed
from harness.core.fingerprint import code_fingerprint, fingerprint
from harness.core.forkmap import run_jobs
from harness.core.options import check_option
from harness.core.outdir import own_subfolder
from harness.core.provenance import atomic_write_csv, atomic_write_parquet, atomic_write_text, metadata
from harness.verify.battery import Accumulator
from harness.verify.shards import ShardTask, draw_shard, sampler_recipe
from harness.verify.measured import MEASURED, NAME, measured_line
from harness.verify.simcommand import (CommandPlan, SimRun, default_command, judge_command, memo_upper_choice,
                                       simulate_command)
from specimpl.speculative import speculative_generate

__all__ = ["run", "check_args", "calibrate_inconclusive", "measured_line", "MEASURED", "NAME"]

BATCH = 25  # commands per stored batch
CONFIDENCE = 0.95
REPO = Path(__file__).resolve().parents[2]
REFERENCE_META = REPO / "results" / "verify" / "meta.json"  # the committed default command: its Holm m
REPORT_FILES = ("runs.csv", "commands.csv", "rates.csv", "check.csv", "summary.md", "README.md")
RUN_FIELDS = ("run", "role", "scenario", "sequences", "certificate", "cert_worst", "cert_worst_ratio",
              "tv_position_upper_max", "tv_joint_upper", "min_p_adjusted", "cert_inconclusive_normal",
              "cert_inconclusive_rate")


def holm_tests(path: Path = REFERENCE_META) -> tuple[Optional[int], str]:
    """(Holm's m of the committed default command, where it was read); (None, why) without one."""
    try:
        m = int(json.loads(Path(path).read_text())["config"]["n_tests"])
    except (OSError, KeyError, ValueError, TypeError) as e:
        return None, f"not read ({type(e).__name__}): m = the number of TV bounds"
    return m, "results/verify/meta.json (config.n_tests of the committed default command)"


# ---------------------------------------------------------------------------------------- the batches
_PLANS: dict = {}


def _plan(settings, scenario_dir: str, m: Optional[int], with_controls: bool) -> CommandPlan:
    key = (scenario_dir, m, with_controls)
    if key not in _PLANS:
        _PLANS[key] = default_command(settings, Path(scenario_dir), m, with_controls)
    return _PLANS[key]


def _draw_batch(job: tuple) -> str:
    """Simulate one batch of commands and store its rows (a worker; the rows depend on the batch seed alone)."""
    settings, scenario_dir, m, b, n_commands, with_controls, seed, path, fp = job
    plan = _plan(settings, scenario_dir, m, with_controls)
    rng = np.random.default_rng(seed)
    rows = []
    with memo_upper_choice():
        for i in range(n_commands):
            v, verdict = simulate_command(plan, rng)
            v = v[list(RUN_FIELDS)].copy()
            v.insert(0, "command", b * BATCH + i)
            v["command_verdict"] = verdict
            rows.append(v)
    table = pd.concat(rows, ignore_index=True)
    table["with_controls"] = with_controls
    atomic_write_parquet(Path(path), table, {"fingerprint": fp})
    return str(path)


def _stored(path: Path, fp: str) -> Optional[pd.DataFrame]:
    import pyarrow.parquet as pq
    try:
        prov = json.loads((pq.read_schema(path).metadata or {}).get(b"provenance", b"{}"))
    except Exception:  # noqa: BLE001 - an unreadable stored batch is stale, never trusted
        return None
    return pd.read_parquet(path) if isinstance(prov, dict) and prov.get("fingerprint") == fp else None


def _jobs(settings, scenario_dir, *, commands: int, control_commands: int, m: Optional[int], check: tuple,
          store: Path) -> tuple[list, list, list, dict]:
    """(the jobs to run, the batch files, the check files, what was resumed): every job's file in ``store`` is
    reused when its fingerprint (code, settings, job) matches, else (re)drawn."""
    code = code_fingerprint()
    todo, batches, checks, resume = [], [], [], {"reused_jobs": 0, "stale_jobs_redrawn": 0}

    def want(fn, path: Path, fp: str, job: tuple) -> None:
        if path.is_file():
            if _stored(path, fp) is not None:
                resume["reused_jobs"] += 1
                return
            resume["stale_jobs_redrawn"] += 1
        todo.append((fn, job + (str(path), fp)))

    runs, scenario, draws = check
    for first in range(0, runs, CHECK_CHUNK):
        count = min(CHECK_CHUNK, runs - first)
        job = (settings, str(scenario_dir), m, scenario, draws, first, count, settings.seed)
        path = store / f"check{first:05d}.parquet"
        checks.append(path)
        want("check", path, fingerprint(code, "check", *job), job)
    for b in range((commands + BATCH - 1) // BATCH):
        n = min(BATCH, commands - b * BATCH)
        job = (settings, str(scenario_dir), m, b, n, b * BATCH < control_commands, derive_seed(settings.seed, NAME, b))
        path = store / f"batch{b:05d}.parquet"
        batches.append(path)
        want("batch", path, fingerprint(code, "batch", *job), job)
    return todo, batches, checks, resume


def simulate_commands(settings, scenario_dir, *, commands: int, control_commands: int, m: Optional[int],
                      check: tuple, store: Path, jobs: int, progress: bool) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """(every simulated command's runs, every run of the check, what was resumed): the check's jobs first, then the
    batches of commands, on ``jobs`` worker processes."""
    from tqdm import tqdm
    todo, batches, checks, resume = _jobs(settings, scenario_dir, commands=commands, control_commands=control_commands,
                                          m=m, check=check, store=store)
    total = len(batches) + len(checks)
    bar = tqdm(total=total, initial=total - len(todo), desc="calibrate --inconclusive: jobs", disable=not progress,
               file=sys.stderr)
    run_jobs(_dispatch, todo, jobs, bar)
    bar.close()
    allruns = pd.concat([pd.read_parquet(p) for p in batches], ignore_index=True)
    checked = pd.concat([pd.read_parquet(p) for p in checks], ignore_index=True) if checks else pd.DataFrame()
    return allruns, checked, resume


def _dispatch(item: tuple) -> str:
    fn, job = item
    return (_check_job if fn == "check" else _draw_batch)(job)


# ------------------------------------------------------------------------------ the check: same law
CHECK_FIELDS = ("cert_worst_ratio", "tv_position_upper_max", "tv_joint_upper")


def _check_plan(plan: CommandPlan, scenario: str, draws: int) -> CommandPlan:
    """``plan`` (the default command's levels) with one run: the reference on ``scenario`` at ``draws``."""
    run = next(r for r in plan.runs if r.spec.scenario.name == scenario and r.spec.label == "reference")
    spec = type(run.spec)(run.spec.label, run.spec.role, run.spec.sampler, run.spec.scenario, int(draws))
    return CommandPlan([SimRun(spec, run.law)], plan.levels, plan.holm_alpha, plan.certifier, plan.power,
                       plan.n_bounds_exact, plan.n_bounds_real, plan.left_out)


def real_run(plan: CommandPlan, seed: int):
    """One real run of ``plan``'s single run: the reference sampler through the command's shard function
    (:func:`harness.verify.shards.draw_shard`, one shard), its accumulator judged as a simulated one is."""
    run = plan.runs[0]
    sc = run.spec.scenario
    task = ShardTask(0, 0, run.spec.draws, run.spec.label, sc, sampler_recipe(speculative_generate, "reference"),
                     seed, False, 16, 4, 0)
    res = draw_shard(task)
    if res.error is not None:
        raise RuntimeError(f"the reference sampler failed on {sc.name}: {res.error}")
    acc = Accumulator(run.law, sc.joint_tokens, 16, 4, 0, None, with_pit=True, pit_max_lag=sc.k + 1).merge(res.statistics)
    return judge_command(plan, [acc])[0].iloc[0]


CHECK_CHUNK = 25  # real and multinomial runs of the check per stored job


def _check_job(job: tuple) -> str:
    """Runs ``first``..``first + count - 1`` of the check, real and multinomial, stored (a worker)."""
    settings, scenario_dir, m, scenario, draws, first, count, seed, path, fp = job
    import torch
    torch.set_num_threads(1)
    cp = _check_plan(_plan(settings, scenario_dir, m, False), scenario, draws)
    rng = np.random.default_rng(derive_seed(seed, NAME, "check", first))
    rows = []
    with memo_upper_choice():
        for i in range(first, first + count):
            rows.append(dict(simulate_command(cp, rng)[0].iloc[0][list(CHECK_ROW)], kind="multinomial", index=i))
            rows.append(dict(real_run(cp, derive_seed(seed, NAME, "real", i))[list(CHECK_ROW)], kind="real", index=i))
    atomic_write_parquet(Path(path), pd.DataFrame(rows), {"fingerprint": fp})
    return str(path)


CHECK_ROW = ("certificate",) + CHECK_FIELDS


def check_table(runs: pd.DataFrame, scenario: str, draws: int) -> pd.DataFrame:
    """Per statistic (:data:`CHECK_FIELDS`): the real and the multinomial runs' quantiles, the two-sample KS
    statistic and p-value, and how many of each ended inconclusive."""
    real, sim = runs[runs.kind == "real"], runs[runs.kind == "multinomial"]
    rows = []
    for f in CHECK_FIELDS:
        a, b = real[f].to_numpy(np.float64), sim[f].to_numpy(np.float64)
        ks = sps.ks_2samp(a, b)
        row = {"scenario": scenario, "sequences": int(draws), "statistic": f, "runs_real": len(a),
               "runs_multinomial": len(b), "ks_statistic": float(ks.statistic), "ks_pvalue": float(ks.pvalue)}
        for q in (0.05, 0.25, 0.5, 0.75, 0.95):
            row[f"real_q{int(q * 100):02d}"], row[f"multinomial_q{int(q * 100):02d}"] = np.quantile(a, q), np.quantile(b, q)
        row["real_inconclusive"] = int((real.certificate == "inconclusive").sum())
        row["multinomial_inconclusive"] = int((sim.certificate == "inconclusive").sum())
        rows.append(row)
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------------------- the rates
def _cp(k: int, n: int) -> tuple[float, float]:
    ci = sps.binomtest(int(k), int(n)).proportion_ci(confidence_level=CONFIDENCE, method="exact")
    return float(ci.low), float(ci.high)


def _rate_row(what: str, scenario: str, runs: str, n: int, k_inc: int, k_lossy: int, normal=np.nan,
              rigorous=np.nan) -> dict:
    (il, ih), (ll, lh) = _cp(k_inc, n), _cp(k_lossy, n)
    return {"level": what, "scenario": scenario, "runs": runs, "commands": n, "inconclusive": k_inc,
            "inconclusive_rate": k_inc / n, "inconclusive_cp_low": il, "inconclusive_cp_high": ih,
            "lossy": k_lossy, "lossy_rate": k_lossy / n, "lossy_cp_low": ll, "lossy_cp_high": lh,
            "planner_normal": normal, "planner_rigorous": rigorous}


def rates(allruns: pd.DataFrame) -> pd.DataFrame:
    """Per run of the command (scenario, run label) and per command: inconclusive and lossy counts and rates with
    their Clopper–Pearson intervals, beside the planner's figures (the runs' own cert_inconclusive_*)."""
    rows = []
    for (scenario, label), g in allruns.groupby(["scenario", "run"], sort=False):
        rows.append(_rate_row("run", scenario, label, len(g), int((g.certificate == "inconclusive").sum()),
                              int((g.certificate == "lossy").sum()), float(g.cert_inconclusive_normal.median()),
                              float(g.cert_inconclusive_rate.median())))
    ref = allruns[allruns.run == "reference"]
    for label, sub in (("reference runs of every default scenario", ref), ("every simulated run", allruns)):
        if label.startswith("every simulated") and not bool(allruns.with_controls.any()):
            continue
        cmds = sub[sub.command.isin(sub.command[sub.with_controls].unique())] if label.startswith("every simulated") \
            else sub
        per = cmds.groupby("command").certificate.agg(lambda c: ("lossy" if (c == "lossy").any() else
                                                                 "inconclusive" if (c == "inconclusive").any()
                                                                 else "certified"))
        normal = cmds.groupby("command").cert_inconclusive_normal.sum().median()
        rigorous = cmds.groupby("command").cert_inconclusive_rate.sum().median()
        rows.append(_rate_row("command", "(all)", label, len(per), int((per == "inconclusive").sum()),
                              int((per == "lossy").sum()), float(normal), float(min(1.0, rigorous))))
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------- the report
def _fmt(x: float) -> str:
    return f"{x:.3g}" if np.isfinite(x) else "—"


def _rate_lines(table: pd.DataFrame) -> list[str]:
    L = ["| level | scenario | runs | commands | inconclusive | rate | CP 95 % | lossy | rate | CP 95 % | "
         "planner ≈ (normal) | planner ≤ (rigorous) |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in table.itertuples():
        L.append(f"| {r.level} | {r.scenario} | {r.runs} | {r.commands:,} | {r.inconclusive} | {_fmt(r.inconclusive_rate)} "
                 f"| [{_fmt(r.inconclusive_cp_low)}, {_fmt(r.inconclusive_cp_high)}] | {r.lossy} | {_fmt(r.lossy_rate)} | "
                 f"[{_fmt(r.lossy_cp_low)}, {_fmt(r.lossy_cp_high)}] | {_fmt(r.planner_normal)} | "
                 f"{_fmt(r.planner_rigorous)} |")
    return L


def _check_lines(check: pd.DataFrame) -> list[str]:
    L = ["| scenario | sequences | statistic | runs (real / multinomial) | median real / multinomial | "
         "5-95 % real | 5-95 % multinomial | KS D | KS p |", "|---|---|---|---|---|---|---|---|---|"]
    for r in check.itertuples():
        L.append(f"| {r.scenario} | {r.sequences:,} | {r.statistic} | {r.runs_real} / {r.runs_multinomial} | "
                 f"{r.real_q50:.4g} / {r.multinomial_q50:.4g} | {r.real_q05:.4g}-{r.real_q95:.4g} | "
                 f"{r.multinomial_q05:.4g}-{r.multinomial_q95:.4g} | {r.ks_statistic:.3f} | {r.ks_pvalue:.3g} |")
    return L


def summary_md(table: pd.DataFrame, check: pd.DataFrame, config: dict, meta: dict) -> str:
    cmd = table[(table.level == "command")].iloc[0]
    L = ["# False-inconclusive rate of `make verify` at its default, measured (simulated commands)", "",
         f"Command: `{config['command']}`; commit `{(meta.get('commit') or 'unknown')[:12]}`; "
         f"{config['wall_s']:.0f} s.", "",
         f"**{int(cmd.inconclusive)} of {int(cmd.commands):,} simulated default commands ended inconclusive: "
         f"P(inconclusive | lossless sampler) per command ≤ {cmd.inconclusive_cp_high:.2g}** (exact Clopper–Pearson "
         f"95 %, two-sided, `scipy.stats.binomtest(k, n).proportion_ci(method='exact')`); false alarms of the count "
         f"tests: {int(cmd.lossy)} (≤ {cmd.lossy_cp_high:.2g}).", "",
         "Each command: the reference run of every default scenario at its default size "
         f"({', '.join(config['scenarios'])}), its counts drawn from the scenario's exact law with their exact joint "
         "law, judged by the command's own gof test specs, its levels (δ = "
         f"{config['tv_delta_each']:.3g} per bound over the command's {config['n_bounds']:,} bounds, Holm over "
         f"m = {config['n_tests']:,} tests, {config['n_tests_source']}), `exact_verdict` and `command_verdict` "
         "(harness.verify.simcommand).  Left out: " + "; ".join(config["left_out"]) + ".", "",
         f"The first {config['control_commands']:,} commands also hold the command's control-sized certified runs "
         "(lossless controls, block / tree references at control_epsilon_scale x ε).", "",
         "## Rates", "", *_rate_lines(table), "",
         "planner ≈ / ≤: the figures `make verify` states (runs.csv's cert_inconclusive_normal / cert_inconclusive_rate; "
         "per command their sum), for comparison.", "",
         "## The simulated run is the real one in law", "",
         f"{config['check_runs']} runs of the reference sampler through the command's shard function "
         "(`harness.verify.shards.draw_shard`) and as many multinomial runs, both judged by the same code at the "
         "default command's levels; two-sample Kolmogorov–Smirnov:", "", *_check_lines(check), ""]
    return "\n".join(L)


README = """# results/calibrate/inconclusive_default

How often `make verify`'s default command ends *inconclusive* (exit 4) for a lossless sampler, measured by simulating
whole default commands from the exact laws (issue 42, item 2).  Made by

```sh
{command}
```

(`harness.verify.calibrate_inconclusive`, the simulation in `harness.verify.simcommand`; resumable).

- `rates.csv`: per run of the command and per command, inconclusive and lossy counts, rates and exact Clopper–Pearson
  95 % intervals (`inconclusive_cp_high`: the upper bound), beside the planner's figures.  `verify`'s summary.md
  quotes the per-command row (`harness.verify.measured.measured_line`).
- `runs.csv`: one row per simulated run (command, run, scenario, certificate, the certificate statistic
  `cert_worst_ratio` = largest bound / ε, ...); `commands.csv`: one row per command with its verdict
  (`harness.verify.outcome.command_verdict`).
- `check.csv`: real runs of the reference sampler against multinomial runs of the same size, the certificate
  statistic's quantiles and a two-sample KS test: the simulation is the real statistic in law.
- `summary.md`: the figures in words.  Every CSV has its provenance in `<name>.csv.meta.json`.
"""


# ------------------------------------------------------------------------------------------- the run
def calibrate_inconclusive(settings, scenario_dir, *, commands: int, control_commands: int, check_runs: int,
                           check_scenario: str, check_draws: int, out: Path, jobs: int = 1, fresh: bool = False,
                           progress: bool = True, command_line: str = "") -> dict:
    """Simulate ``commands`` default commands and check the simulation against ``check_runs`` real runs; write
    the report (module docstring) to ``out``; returns its tables, summary and console line."""
    out = Path(out)
    store = own_subfolder(out / "_tmp_batches")
    if fresh:
        for p in store.glob("*.parquet"):
            p.unlink()
    tic = time.perf_counter()
    m, m_source = holm_tests()
    plan = _plan(settings, str(scenario_dir), m, False)
    allruns, checked, resume = simulate_commands(settings, scenario_dir, commands=commands,
                                                 control_commands=control_commands, m=m,
                                                 check=(check_runs, check_scenario, check_draws), store=store,
                                                 jobs=jobs, progress=progress)
    check = check_table(checked, check_scenario, check_draws) if check_runs else pd.DataFrame()
    table = rates(allruns)
    per_command = allruns.groupby("command").agg(verdict=("command_verdict", "first"),
                                                 with_controls=("with_controls", "first"),
                                                 runs=("run", "size"), worst_ratio=("cert_worst_ratio", "max"))
    config = {"mode": "inconclusive", "commands": commands, "control_commands": int(per_command.with_controls.sum()),
              "scenarios": [r.spec.scenario.name for r in plan.runs], "n_bounds": plan.levels.n_bounds,
              "n_bounds_exact": plan.n_bounds_exact, "n_bounds_real": plan.n_bounds_real,
              "tv_delta_each": plan.levels.delta_each, "n_tests": plan.levels.n_tests, "n_tests_source": m_source,
              "holm_alpha": plan.holm_alpha, "alpha_bonferroni": plan.levels.alpha_each, "check_runs": check_runs,
              "check_scenario": check_scenario, "check_draws": check_draws, "jobs": jobs,
              "left_out": list(plan.left_out), "command": command_line, "wall_s": time.perf_counter() - tic}
    meta = metadata(config, settings.seed)
    meta["resume"] = resume
    summary = summary_md(table, check, config, meta)
    with staged_report(out, "calibrate-inconclusive", REPORT_FILES) as staged:
        atomic_write_csv(staged.dir / "runs.csv", allruns, meta)
        atomic_write_csv(staged.dir / "commands.csv", per_command.reset_index(), meta)
        atomic_write_csv(staged.dir / "rates.csv", table, meta)
        atomic_write_csv(staged.dir / "check.csv", check, meta)
        atomic_write_text(staged.dir / "summary.md", summary)
        atomic_write_text(staged.dir / "README.md", README.format(command=command_line))
    for p in store.glob("*.parquet"):
        p.unlink()
    try:
        store.rmdir()
    except OSError:
        pass
    cmd = table[table.level == "command"].iloc[0]
    console = (f"calibrate --inconclusive: {int(cmd.inconclusive)} of {int(cmd.commands):,} simulated default commands "
               f"inconclusive (≤ {cmd.inconclusive_cp_high:.2g}, Clopper–Pearson 95 %), {int(cmd.lossy)} lossy; "
               f"report {out}/summary.md")
    return {"rates": table, "runs": allruns, "check": check, "summary": summary, "console": console, "meta": meta}


def check_args(args, settings) -> None:
    """The options of ``--inconclusive``, checked before any work (UsageError, exit 2, naming the option)."""
    check_option(1 <= args.commands <= 100_000, "--commands", args.commands, "an integer in [1, 100,000]")
    check_option(0 <= args.control_commands <= 100_000, "--control-commands", args.control_commands,
                 "an integer in [0, 100,000]")
    check_option(0 <= args.check_runs <= 10_000, "--check-runs", args.check_runs, "an integer in [0, 10,000]")
    check_option(500 <= args.check_draws <= 10_000_000, "--check-draws", args.check_draws,
                 "an integer in [500, 10,000,000]")
    check_option(args.check_scenario in settings.scenarios, "--check-scenario", args.check_scenario,
                 f"one of the default scenarios ({', '.join(settings.scenarios)})")


def run(args, settings) -> int:
    """`calibrate --inconclusive`: exit 0 when the count tests' false-alarm rate is consistent with the family's budget
    (its interval's lower end <= family_alpha) and the check does not reject equality in law at 1e-3, 1 otherwise
    (the inconclusive rate itself is reported, not judged)."""
    line = (f"python -m harness calibrate --inconclusive --commands {args.commands} --control-commands "
            f"{args.control_commands} --check-runs {args.check_runs} --check-scenario {args.check_scenario} "
            f"--check-draws {args.check_draws} --jobs {args.jobs}")
    res = calibrate_inconclusive(settings, args.scenario_dir, commands=args.commands,
                                 control_commands=args.control_commands, check_runs=args.check_runs,
                                 check_scenario=args.check_scenario, check_draws=args.check_draws, out=args.out,
                                 jobs=args.jobs, fresh=args.fresh, progress=not args.no_progress, command_line=line)
    print(res["console"], file=sys.stderr)
    cmd = res["rates"][res["rates"].level == "command"].iloc[0]
    bad_check = bool(len(res["check"]) and (res["check"].ks_pvalue < 1e-3).any())
    if cmd.lossy_cp_low > settings.family_alpha or bad_check:
        print("python -m harness calibrate --inconclusive: " + ("the simulated runs differ in law from the real ones "
              "(check.csv: KS p < 1e-3)" if bad_check else f"false alarms of lossless runs above family_alpha "
              f"{settings.family_alpha:g}") + "; exit 1", file=sys.stderr)
        return 1
    return 0
