"""`verify --stop-at-need` measured on simulated lossless commands (issue 42, item 1).

    python experiments/stop_at_need.py [--commands 200] [--cap-commands 3700] [--real-commands 0] [--jobs 2]
                                       [--out results/calibrate/stop_at_need]

Each simulated command holds the reference run of every default scenario (harness.verify.simcommand.default_command:
the command's δ per bound over its 1,204 bounds); a lossless run's counts are drawn from the scenario's exact law
with their exact joint law (simcommand.window_counts: the same statistic as real runs, results/calibrate/
inconclusive_default/check.csv), in increments between the looks of harness.verify.stopping.run_looks, and the run
stops at the first look where harness.verify.stopping.certified_at holds (every TV bound at the look's δ below its ε).

1. ``--commands``: the stopping size of every run (draws.csv: per scenario the fixed-n need, the looks, the mean
   stopping size over the need and over the fixed-n default, quantiles, inconclusive count);
2. ``--cap-commands``: the false-inconclusive rate at the cap.  A run is inconclusive under --stop-at-need only if
   it is not certified at its last look (the cap, at δ · CAP_SHARE), so P(inconclusive) ≤ P(not certified at the
   cap): each command is drawn at the caps alone (cap.csv: per scenario and per command, with the exact
   Clopper–Pearson 95 % interval).
3. ``--real-commands``: the real-model run of each command on the exact transformer pair, which stops at the need
   too (harness.verify.stopping.PairStopRule: looks at shard boundaries, in sequences per prompt), drawn at its cap
   from its enumerated float64 law and judged by the verdict's own specs at the cap's share of δ; paired with
   cap.csv's command i (the one written by this call, or an earlier call's with ``--cap-commands 0``) for the
   per-command rate of the default (real.csv, real.md);
4. ``--real-stop-commands``: the real-model run's stopping size, its counts drawn in increments between its looks
   (real_draws.csv, real.md).
Writes draws.csv, cap.csv, real.csv, real_draws.csv (with provenance sidecars), summary.md and real.md.
"""
from __future__ import annotations

import argparse
import sys
import time
from multiprocessing import Pool
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's harness

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from scipy import stats as sps  # noqa: E402

from harness.core.figures import md_table  # noqa: E402
from harness.core.provenance import atomic_write_csv, atomic_write_text, metadata  # noqa: E402
from harness.laws.scenarios import SCENARIO_DIR, load_settings  # noqa: E402
from harness.verify.calibrate_inconclusive import holm_tests  # noqa: E402
from harness.verify.cli import real_model_spec  # noqa: E402
from harness.verify.exactmodel import (ExactModelDraw, exact_model_law, plan_exact_model_tests,  # noqa: E402
                                       sequences_per_shard)
from harness.verify.realmodel import REAL_MODEL_SCENARIO  # noqa: E402
from harness.verify.simcommand import _empty_acc, default_command, fill_accumulator, memo_upper_choice, window_counts  # noqa: E402
from harness.verify.stopping import (CAP_FACTOR, CAP_SHARE, RATIO, certified_at, largest_ratio, need,  # noqa: E402
                                     pair_cap, pair_stop_rule, run_looks)

SEED = 20261206
_STATE: dict = {}


def _setup():
    if not _STATE:
        s = load_settings(SCENARIO_DIR)
        plan = default_command(s, SCENARIO_DIR, holm_tests()[0], with_controls=False)
        d = plan.levels.delta_each
        runs = []
        for r in plan.runs:
            sc, eps = r.spec.scenario, plan.certifier.of(r.spec.scenario.name)
            runs.append((sc, r.law, eps, run_looks(r.law, sc.joint_tokens, eps, d, r.spec.draws),
                         need(r.law, sc.joint_tokens, eps, d), r.spec.draws))
        _STATE.update(plan=plan, runs=runs, delta=d, real=_real_setup(plan, d))
    return _STATE


def _real_setup(plan, delta: float):
    """The default command's real-model certificate on the exact pair: the enumerated float64 law of the first J
    tokens per prompt, sequences per prompt, its tolerances, its stop rule (looks at shard boundaries, decided at the
    command's δ per bound ``delta``)."""
    spec = real_model_spec(SCENARIO_DIR / "default.toml")
    if not spec.enabled or spec.exact is None:
        return None
    law = exact_model_law(spec.exact, spec.config)
    P, n = len(spec.exact.prompts), int(spec.exact.n_sequences)
    joints = [np.asarray(law.law.joint[i], np.float64).ravel() for i in range(P)]
    eps = plan.certifier.of(REAL_MODEL_SCENARIO)
    ends = np.cumsum(sequences_per_shard(spec.exact, pair_cap(n))) // P
    return dict(law=law, joints=[j / j.sum() for j in joints], n=n, eps=eps,
                rule=pair_stop_rule(law, P, ends, eps, delta, n))


def _stop(sc, law, eps, looks, rng) -> float:
    """The stopping size of one lossless run (NaN: not certified at the cap: inconclusive)."""
    cum, prev = None, 0
    for n in looks.sizes:
        w = window_counts(law, sc.joint_tokens, n - prev, rng)
        cum, prev = (w if cum is None else cum + w), n
        if certified_at(fill_accumulator(_empty_acc(law, sc), cum), eps, looks):
            return float(n)
    return float("nan")


def _draws_job(i: int) -> list:
    st = _setup()
    rng = np.random.default_rng([SEED, 1, i])
    with memo_upper_choice():
        return [(i, sc.name, _stop(sc, law, eps, looks, rng)) for sc, law, eps, looks, _, _ in st["runs"]]


def _cap_job(i: int) -> list:
    st = _setup()
    rng = np.random.default_rng([SEED, 2, i])
    out = []
    with memo_upper_choice():
        for sc, law, eps, looks, _, _ in st["runs"]:
            acc = fill_accumulator(_empty_acc(law, sc), window_counts(law, sc.joint_tokens, looks.cap, rng))
            out.append((i, sc.name, largest_ratio(acc, eps, looks.deltas[-1])))
    return out


def real_draw(law, joints: list, n: int, rng, counts: list = None) -> ExactModelDraw:
    """A lossless sampler's draw on the exact pair: ``n`` iid sequences per prompt of the enumerated law of the first
    J tokens (multinomial counts of the V**J sequences, laid out as token rows: the statistic of a real run is a
    function of these counts alone); ``counts`` (one (V**J,) array per prompt): added to in place, and the draw is
    of their totals (the increments of a run looked at as it grows)."""
    V, J = law.law.vocab_size, law.law.n_tokens
    rows, prompt = [], []
    for i, pj in enumerate(joints):
        c = rng.multinomial(n, pj)
        if counts is not None:
            counts[i] += c
            c = counts[i]
        code = np.repeat(np.arange(pj.size, dtype=np.int64), c)  # (n_i,) sequence codes
        rows.append(np.stack([code // V ** (J - 1 - t) % V for t in range(J)], axis=1))  # (n_i, J)
        prompt.append(np.full(code.size, i, np.int64))
    return ExactModelDraw("reference", np.concatenate(rows), np.concatenate(prompt), len(joints))


def real_ratio(real: dict, draw: ExactModelDraw, levels, power: float, share: float = 1.0) -> float:
    """Largest token-TV bound / ε of the real-model certificate on ``draw``: the verdict's own test specs
    (:func:`plan_exact_model_tests`), every bound at the command's δ per bound x ``share``."""
    out = 0.0
    for sp in plan_exact_model_tests(draw, real["law"]):
        row = sp.evaluate(levels.alpha_each, power, levels.delta_each * share)
        out = max(out, float(row.tv_upper) / real["eps"].for_real_test(sp.test))
    return out


def _real_job(i: int) -> list:
    """The real-model run at its cap, its bounds at the cap's share of δ (not certified there: inconclusive)."""
    st = _setup()
    real, plan = st["real"], st["plan"]
    looks = real["rule"].looks
    rng = np.random.default_rng([SEED, 3, i])
    with memo_upper_choice():
        return [(i, REAL_MODEL_SCENARIO, real_ratio(real, real_draw(real["law"], real["joints"], looks.cap, rng),
                                                    plan.levels, plan.power, looks.deltas[-1]))]


def _real_stop_job(i: int) -> list:
    """The real-model run's stopping size (sequences per prompt; NaN: not certified at its cap)."""
    real = _setup()["real"]
    rule, law = real["rule"], real["law"]
    rng = np.random.default_rng([SEED, 4, i])
    counts = [np.zeros(j.size, np.int64) for j in real["joints"]]
    prev = 0
    with memo_upper_choice():
        for n in rule.looks.sizes:
            draw = real_draw(law, real["joints"], n - prev, rng, counts)
            prev = n
            if rule.certified_draw(draw, law):
                return [(i, REAL_MODEL_SCENARIO, float(n))]
    return [(i, REAL_MODEL_SCENARIO, float("nan"))]


def _cp(k: int, n: int) -> tuple:
    ci = sps.binomtest(int(k), int(n)).proportion_ci(confidence_level=0.95, method="exact")
    return float(ci.low), float(ci.high)


def draws_table(rows: list) -> pd.DataFrame:
    st = _setup()
    df = pd.DataFrame(rows, columns=["command", "scenario", "stop"])
    out = []
    for sc, law, eps, looks, nd, fixed in st["runs"]:
        s = df[df.scenario == sc.name].stop.to_numpy()
        ok = s[~np.isnan(s)]
        q = np.quantile(ok, [0.5, 0.9, 0.99]) if ok.size else [np.nan] * 3
        out.append({"scenario": sc.name, "commands": s.size, "need": nd, "fixed_n_default": fixed, "cap": looks.cap,
                    "looks": len(looks.sizes), "mean_stop": ok.mean() if ok.size else np.nan,
                    "mean_over_need": ok.mean() / nd if ok.size else np.nan,
                    "mean_over_default": ok.mean() / fixed if ok.size else np.nan,
                    "median_stop": q[0], "p90_stop": q[1], "p99_stop": q[2],
                    "inconclusive": int(np.isnan(s).sum()), "mean_draws_with_cap": np.where(np.isnan(s), looks.cap, s).mean()})
    return pd.DataFrame(out)


def cap_table(rows: list) -> pd.DataFrame:
    st = _setup()
    df = pd.DataFrame(rows, columns=["command", "scenario", "ratio"])
    out = []
    for sc, law, eps, looks, _, _ in st["runs"]:
        r = df[df.scenario == sc.name].ratio.to_numpy()
        k = int((r >= 1).sum())
        lo, hi = _cp(k, r.size)
        out.append({"level": "run", "scenario": sc.name, "cap": looks.cap, "delta_cap": looks.deltas[-1],
                    "commands": r.size, "not_certified": k, "rate": k / r.size, "cp_low": lo, "cp_high": hi,
                    "largest_ratio_max": float(r.max()), "largest_ratio_p99": float(np.quantile(r, 0.99))})
    per_cmd = df.groupby("command").ratio.max().to_numpy()
    k = int((per_cmd >= 1).sum())
    lo, hi = _cp(k, per_cmd.size)
    out.append({"level": "command", "scenario": "(all)", "cap": np.nan, "delta_cap": np.nan, "commands": per_cmd.size,
                "not_certified": k, "rate": k / per_cmd.size, "cp_low": lo, "cp_high": hi,
                "largest_ratio_max": float(per_cmd.max()), "largest_ratio_p99": float(np.quantile(per_cmd, 0.99))})
    return pd.DataFrame(out)


def real_table(rows: list, cap: pd.DataFrame) -> pd.DataFrame:
    """The real-model certificate's rate of not certifying at its cap (the only way it ends inconclusive), and
    the whole command's: the exact-law runs at their caps (``cap``, this script's cap.csv) and the real-model run
    paired by command index (independent draws, as in a real command).  Only the counts of the exact-law part are
    stored, so the pairing is exact only when it had no failure (then a command fails iff its real-model run does);
    otherwise the union's count is bounded by the sum, and the row says so."""
    r = pd.DataFrame(rows, columns=["command", "scenario", "ratio"]).ratio.to_numpy()
    k = int((r >= 1).sum())
    lo, hi = _cp(k, r.size)
    real = _setup()["real"]
    looks = real["rule"].looks
    out = [{"level": "run", "scenario": REAL_MODEL_SCENARIO, "sequences_per_prompt": looks.cap,
            "delta_cap": st_delta() * looks.deltas[-1],
            "commands": r.size, "not_certified": k, "rate": k / r.size, "cp_low": lo, "cp_high": hi,
            "largest_ratio_max": float(r.max()), "largest_ratio_p99": float(np.quantile(r, 0.99)), "pairing": ""}]
    c = cap[cap.level == "command"].iloc[0]
    n = int(min(c.commands, r.size))
    k_cmd = int((r[:n] >= 1).sum()) + int(c.not_certified)
    lo, hi = _cp(min(k_cmd, n), n)
    out.append({"level": "command", "scenario": "(all, with real_model)", "sequences_per_prompt": looks.cap,
                "delta_cap": np.nan,
                "commands": n, "not_certified": k_cmd, "rate": k_cmd / n, "cp_low": lo, "cp_high": hi,
                "largest_ratio_max": np.nan, "largest_ratio_p99": np.nan,
                "pairing": "exact" if int(c.not_certified) == 0 else "union bound (sum of the parts)"})
    return pd.DataFrame(out)


def st_delta() -> float:
    return float(_setup()["delta"])


def real_draws_table(rows: list) -> pd.DataFrame:
    """The real-model run's stopping size (sequences per prompt) over lossless commands."""
    real = _setup()["real"]
    rule = real["rule"]
    s = pd.DataFrame(rows, columns=["command", "scenario", "stop"]).stop.to_numpy()
    ok = s[~np.isnan(s)]
    q = np.quantile(ok, [0.5, 0.9, 0.99]) if ok.size else [np.nan] * 3
    need = rule.looks.sizes[0]
    counts = {int(n): int((ok == n).sum()) for n in rule.looks.sizes}
    return pd.DataFrame([{"scenario": REAL_MODEL_SCENARIO, "commands": s.size, "first_look": need,
                          "fixed_n_default": real["n"], "cap": rule.looks.cap, "looks": len(rule.looks.sizes),
                          "mean_stop": ok.mean() if ok.size else np.nan,
                          "mean_over_first_look": ok.mean() / need if ok.size else np.nan,
                          "mean_over_default": ok.mean() / real["n"] if ok.size else np.nan,
                          "median_stop": q[0], "p90_stop": q[1], "p99_stop": q[2],
                          "inconclusive": int(np.isnan(s).sum()),
                          "mean_draws_with_cap": np.where(np.isnan(s), rule.looks.cap, s).mean(),
                          "stops_per_look": " ".join(f"{n}:{c}" for n, c in counts.items())}])


def _map(fn, n: int, jobs: int) -> list:
    if jobs <= 1:
        return [row for i in range(n) for row in fn(i)]
    with Pool(jobs) as pool:
        return [row for part in pool.imap_unordered(fn, range(n), chunksize=4) for row in part]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commands", type=int, default=200)
    ap.add_argument("--cap-commands", type=int, default=3700)
    ap.add_argument("--real-commands", type=int, default=0,
                    help="the real-model certificate (exact pair) at its cap in that many commands, paired with "
                         "cap.csv's")
    ap.add_argument("--real-stop-commands", type=int, default=0,
                    help="the real-model certificate's stopping size (exact pair) in that many commands")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path("results/calibrate/stop_at_need"))
    a = ap.parse_args(argv)
    t0 = time.time()
    st = _setup()
    draws = draws_table(_map(_draws_job, a.commands, a.jobs)) if a.commands else None
    t1 = time.time()
    cap = cap_table(_map(_cap_job, a.cap_commands, a.jobs)) if a.cap_commands else None
    t2 = time.time()
    cap_here = cap is not None
    if a.real_commands and cap is None:
        cap = pd.read_csv(a.out / "cap.csv")  # the exact-law runs' caps of an earlier call (the real part pairs with it)
    real = real_table(_map(_real_job, a.real_commands, a.jobs), cap) if a.real_commands else None
    t3 = time.time()
    real_stop = real_draws_table(_map(_real_stop_job, a.real_stop_commands, a.jobs)) if a.real_stop_commands else None
    t4 = time.time()
    cfg = {"commands": a.commands, "cap_commands": a.cap_commands, "ratio": RATIO, "cap_share": CAP_SHARE,
           "cap_factor": CAP_FACTOR, "delta_each": st["delta"], "wall_draws_s": t1 - t0, "wall_cap_s": t2 - t1, "real_commands": a.real_commands, "wall_real_s": t3 - t2,
           "real_stop_commands": a.real_stop_commands, "wall_real_stop_s": t4 - t3}
    meta = metadata(cfg, SEED)
    a.out.mkdir(parents=True, exist_ok=True)
    lines = [f"# `verify --stop-at-need` on simulated lossless commands\n",
             f"Command: `python experiments/stop_at_need.py --commands {a.commands} --cap-commands {a.cap_commands} "
             f"--jobs {a.jobs}`; looks x{RATIO} from the fixed-n need to the cap ({CAP_FACTOR} x the default size), "
             f"δ per bound {st['delta']:.3g} spent: the cap {CAP_SHARE:g}, the earlier looks the rest evenly; "
             f"{t1 - t0:.0f} s + {t2 - t1:.0f} s.\n"]
    if draws is not None:
        atomic_write_csv(a.out / "draws.csv", draws, meta)
        lines += ["## Stopping size of a lossless run\n", md_table(draws.to_dict("records"), list(draws.columns)), ""]
    if cap_here:
        atomic_write_csv(a.out / "cap.csv", cap, meta)
        lines += ["## Not certified at the cap (the only way a run ends inconclusive)\n", md_table(cap.to_dict("records"), list(cap.columns)), ""]
    if draws is not None or cap_here:
        atomic_write_text(a.out / "summary.md", "\n".join(lines) + "\n")
        print("\n".join(lines))
    if real is not None:
        atomic_write_csv(a.out / "real.csv", real, meta)
    if real_stop is not None:
        atomic_write_csv(a.out / "real_draws.csv", real_stop, meta)
    if real is not None or real_stop is not None:
        text = "\n".join(_real_lines(a, pd.read_csv(a.out / "real.csv"), pd.read_csv(a.out / "real_draws.csv"),
                                     t3 - t2, t4 - t3)) + "\n"
        atomic_write_text(a.out / "real.md", text)
        print(text)
    return 0


def _real_lines(a, real: pd.DataFrame, stop: pd.DataFrame, wall: float, wall_stop: float) -> list:
    cmd = real[real.level == "command"].iloc[0]
    run = real[real.level == "run"].iloc[0]
    st = stop.iloc[0]
    return ["# The real-model certificate in simulated lossless default commands, and the whole command's rate\n",
            f"Commands: `python experiments/stop_at_need.py --commands 0 --cap-commands 0 --real-commands "
            f"{a.real_commands} --real-stop-commands {a.real_stop_commands} --jobs {a.jobs}` ({wall:.0f} s + "
            f"{wall_stop:.0f} s; a call with 0 keeps the other's committed table), after the call that wrote cap.csv.  "
            "Each command's real-model run on the exact transformer pair is drawn from the enumerated float64 law of "
            "its first J tokens per prompt (multinomial counts of whole sequences: the run's statistic is a function "
            "of them) and judged by the verdict's own test specs (harness.verify.exactmodel.plan_exact_model_tests).  "
            "It stops at the need (harness.verify.stopping.PairStopRule: looks at shard boundaries from the planner's "
            f"need, x{RATIO}, to the cap {CAP_FACTOR} x the default size, the cap at δ x {CAP_SHARE:g}), so it ends "
            "inconclusive only if it is not certified at its cap: drawn there, that is the rate below.  Command i's "
            "real-model run is paired with cap.csv's command i (the exact-law runs at their caps; independent draws, "
            "as in a real command).\n",
            "## Not certified at the cap\n",
            md_table(real.to_dict("records"), list(real.columns)), "",
            f"**P(inconclusive | lossless) per default command ≤ {cmd.cp_high:.2g}** (exact Clopper–Pearson 95 %; "
            f"{int(cmd.not_certified)} of {int(cmd.commands):,} commands; pairing: {cmd.pairing}); the real-model "
            f"run alone ≤ {run.cp_high:.2g} ({int(run.not_certified)} of {int(run.commands):,}).\n",
            "## Stopping size (sequences per prompt), its counts drawn in increments between the looks\n",
            md_table(stop.to_dict("records"), list(stop.columns)), "",
            f"A lossless run draws {st.mean_over_default:.2f} x the default size on average ({st.mean_stop:,.0f} of "
            f"{int(st.fixed_n_default):,} sequences per prompt; {st.mean_over_first_look:.2f} x its first look, the "
            f"planner's need at a shard boundary)."]


if __name__ == "__main__":
    sys.exit(main())
