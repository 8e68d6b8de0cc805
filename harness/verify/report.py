"""The report of a verification: tables, markdown summary and figures (drawn from the tables).

Files written to the report folder (all carrying the run's provenance; staged beside the folder and moved
in together by :func:`harness.core.atomic.staged_report`, which also removes files of an earlier report there
that this one did not write, e.g. ``figures/`` after a ``--no-figures`` rerun):

    tests.parquet, tests.csv        one row per test (:class:`harness.verify.battery.TestRow`): scenario, run, test,
                                    statistic, p-value, Holm-adjusted p-value, minimum detectable effect (and
                                    its unit), TV estimate and bounds, verdict
    runs.csv                        one row per (sampler, scenario) (:class:`harness.verify.verdicts.RunVerdict`):
                                    verdict, tests that caught it, TV
    distributions.parquet           observed and expected counts per position and symbol, every run
    pit_hist.parquet                PIT histograms (64 cells) per position, every run (real-model runs too)
    summary.md                      the short human summary (budget, power, TV bounds, what the certificates
                                    cost, detection table, the real-model scenario)
    meta.json                       provenance (config, seed, commit, versions, machine) and timing
    figures/*.png                   drawn by :func:`draw_figures` from the parquet files alone
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd

from harness.core.atomic import staged_report
from harness.core.jsonfile import read_json
from harness.core.backends import default_workers
from harness.core.forkmap import fork_map
from harness.core.provenance import (atomic_savefig, atomic_write_csv, atomic_write_json, atomic_write_parquet,
                                atomic_write_text, metadata)
from harness.verify.realmodel import REAL_MODEL_SCENARIO as REAL_MODEL
from harness.verify.cost import console_cost, cost_section
from harness.verify.family import run_acceptance
from harness.verify.stopping import CAP_FACTOR
from harness.verify.measured import measured_line, stop_measured_line
from harness.verify.outcome import Outcome, loss_estimate
from harness.core.verdict import headline
from harness.verify.runs import MUST_BE_CAUGHT, UNDER_TEST
from harness.controls.chain import CATALOGUE

__all__ = ["build", "draw_figures", "REPORT_FILES"]

# The files a report writes (a folder's earlier report without a manifest is cleaned of these only).
REPORT_FILES = ("tests.parquet", "tests.csv", "runs.csv", "tests.csv.meta.json", "runs.csv.meta.json",
                "distributions.parquet", "pit_hist.parquet", "meta.json",
                "summary.md", "figures/*.png")

PIT_COARSE = 64


def _fmt(x, digits=3):
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    if isinstance(x, (int, np.integer)):
        return f"{x:,}"
    if x == 0:
        return "0"
    if abs(x) < 1e-3 or abs(x) >= 1e5:
        return f"{x:.{digits - 1}e}"
    return f"{x:.{digits}g}"


def _distributions(runs, baselines, laws, real_runs=()) -> tuple[pd.DataFrame, pd.DataFrame]:
    dist, pit = [], []
    for rr in real_runs:
        if rr.error is not None:
            continue
        u = rr.draw.u  # (N, T)
        T = u.shape[1]
        b = np.minimum((u * PIT_COARSE).astype(np.int64), PIT_COARSE - 1)
        h = np.stack([np.bincount(b[:, t], minlength=PIT_COARSE) for t in range(T)])  # (T, 64)
        p2, b2 = np.meshgrid(np.arange(T), np.arange(PIT_COARSE), indexing="ij")
        pit.append(pd.DataFrame({"run": rr.label, "role": rr.role, "scenario": REAL_MODEL,
                                 "position": p2.ravel(), "bin": b2.ravel(), "count": h.ravel()}))
    for r in list(runs) + list(baselines.values()):
        if r.acc is None or r.acc.n == 0:
            continue
        law = laws[r.scenario.name]
        marg = law.marginals()
        N, W = marg.shape
        n = r.acc.n
        pos, sym = np.meshgrid(np.arange(N), np.arange(W), indexing="ij")
        dist.append(pd.DataFrame({"run": r.label, "role": r.role, "scenario": r.scenario.name,
                                  "position": pos.ravel(), "symbol": sym.ravel(),
                                  "observed": r.acc.counts.ravel(), "expected": (n * marg).ravel(), "n": n}))
        if r.acc.with_pit:
            h = r.acc.pit_hist.reshape(N, PIT_COARSE, -1).sum(-1)  # (N, 64)
            p2, b2 = np.meshgrid(np.arange(N), np.arange(PIT_COARSE), indexing="ij")
            pit.append(pd.DataFrame({"run": r.label, "role": r.role, "scenario": r.scenario.name,
                                     "position": p2.ravel(), "bin": b2.ravel(), "count": h.ravel()}))
    return (pd.concat(dist, ignore_index=True) if dist else pd.DataFrame(),
            pd.concat(pit, ignore_index=True) if pit else pd.DataFrame())


def build(*, table, verdicts, runs, baselines, laws, config, seed, timing, outcome: Outcome, out: Optional[Path],
          figures: bool, real_runs=(), resume: Optional[dict] = None, resume_lines=(), workers: int = 1) -> dict:
    """The summary, console lines and provenance of a verification, and its report folder ``out`` (None: no
    files); ``outcome``: the command's verdict (:func:`harness.verify.outcome.judge`); ``workers``: processes
    drawing the figures."""
    meta = metadata(config, seed)
    meta["timing"] = timing
    meta["passed"] = outcome.verdict == "certified"
    meta["verdict"] = outcome.verdict
    if outcome.command:
        meta["to_certify"] = outcome.command
    meta["resume"] = resume or {"reused_shards": 0, "stale_shards_redrawn": 0, "fingerprint": None}
    summary = _summary(table, verdicts, runs, laws, config, meta, timing, outcome, resume_lines)
    console = _console(verdicts, config, timing, outcome, out)
    if out is not None:
        with staged_report(out, "verify", REPORT_FILES) as staged:  # every file moves into out together
            _write(staged.dir, table, verdicts, _distributions(runs, baselines, laws, real_runs), meta, summary,
                   figures, workers)
    return {"summary": summary, "console": console, "meta": meta}


def _write(d: Path, table, verdicts, dist_pit, meta, summary, figures: bool, workers: int = 1) -> None:
    """The report's files, into folder ``d`` (the table's columns are harness.verify.battery.TEST_COLUMNS, in order)."""
    dist, pit = dist_pit
    atomic_write_parquet(d / "tests.parquet", table, meta)
    atomic_write_csv(d / "tests.csv", table, meta)
    atomic_write_csv(d / "runs.csv", verdicts, meta)
    atomic_write_parquet(d / "distributions.parquet", dist, meta)
    atomic_write_parquet(d / "pit_hist.parquet", pit, meta)
    atomic_write_json(d / "meta.json", meta)
    atomic_write_text(d / "summary.md", summary)
    if figures:
        draw_figures(d, workers)


# ------------------------------------------------------------------------------------ summary
def _summary(table, verdicts, runs, laws, config, meta, timing, outcome: Outcome, resume_lines=()) -> str:
    is_vn = verdicts.scenario.str.startswith("von_neumann")
    is_rm = verdicts.scenario == REAL_MODEL
    must = verdicts[(verdicts.certificate.fillna("") != "") & ~verdicts.role.isin(MUST_BE_CAUGHT)]
    L = _header(config, meta, outcome, verdicts) + _next_steps(outcome) + (_strongest(must, config) if len(must) else []) + _certificates(verdicts, config) + \
        cost_section(verdicts, timing) + \
        [f"**Resumed:** {line}." for line in resume_lines] + ([""] if resume_lines else []) + _budget(config, timing)
    L += _scenarios(verdicts[verdicts.role.isin(UNDER_TEST) & ~is_vn & ~is_rm], table, runs, laws)
    L += _real_model_section(verdicts[is_rm], config)
    L += _controls(verdicts[~verdicts.role.isin(UNDER_TEST) & ~is_vn])
    L += _von_neumann(verdicts[is_vn])
    L += _failures(verdicts[~verdicts.passed])
    L += _method(bool(is_rm.any()))
    return "\n".join(L) + "\n"


def _outcome(v) -> str:
    """A run's outcome against its role: caught / MISSED (must be caught), passed / FALSE ALARM / NOT
    CERTIFIED (must pass: certified where it has a certificate), or not judged (a peer)."""
    if v.role == "peer":
        return "not judged"
    if v.role in MUST_BE_CAUGHT:
        return "caught" if v.passed else "**MISSED**"
    if not v.passed and getattr(v, "certificate", "") == "inconclusive":
        return "**NOT CERTIFIED** (inconclusive)"
    return "passed" if v.passed else "**FALSE ALARM**"


_RESULT_WORDS = {
    "certified": "every run certified, every buggy control caught, every lossless control certified",
    "lossy": "a loss was found (or a control did not behave as its role requires); where it is: below",
    "inconclusive": "nothing was found lossy, but not every run was certified: the draws that would are below",
}


def _failed(verdicts) -> bool:
    """Whether a sampler under test failed (raised, returned malformed output, ended or hung its worker): the
    command then ends in exit 3, not with a verdict (:func:`harness.verify.sampler.sampler_failure`)."""
    err = verdicts.error.fillna("").astype(str) if "error" in verdicts else pd.Series([], dtype=str)
    return bool(len(verdicts) and (verdicts.role.isin(UNDER_TEST) & (err != "")).any())


def _headline(verdicts, outcome: Outcome) -> str:
    """PASS / LOSSY / INCONCLUSIVE, or FAILED when the sampler under test failed (exit 3)."""
    return "FAILED" if _failed(verdicts) else headline(outcome.verdict)


def _header(config, meta, outcome: Outcome, verdicts) -> list[str]:
    mach = meta["machine"]
    why = _RESULT_WORDS[outcome.verdict] if config["sampler"] == "reference" or outcome.verdict != "certified" \
        else "certified on every scenario"
    if _failed(verdicts):
        why = "the sampler under test failed (error.log says how): no verdict; exit 3"
    return [f"# Verification report: {config['sampler']}", "",
            f"**Result: {_headline(verdicts, outcome)}** — {why}", "",
            f"commit `{(meta.get('commit') or 'unknown')[:12]}`{' (dirty tree)' if meta.get('dirty') else ''}, "
            f"seed {meta['seed']}, torch {meta['versions'].get('torch')}, numpy {meta['versions'].get('numpy')}, "
            f"scipy {meta['versions'].get('scipy')}; {mach.get('cpu')}, {mach.get('cpus_available')} cores, "
            f"load average at start {mach.get('loadavg_1_5_15')}; {meta['created_utc']}; "
            f"`{meta.get('command')}`", ""]


def _next_steps(outcome: Outcome) -> list[str]:
    """What the verdict means for the user: where the loss is (lossy), the draws and command that would
    certify (inconclusive); nothing when certified."""
    if outcome.verdict == "certified":
        return []
    L = ["## Why not PASS", *(f"- {r}" for r in outcome.reasons), ""]
    if outcome.losses:
        L += ["## Where the loss is",
              "Estimated loss: the plug-in TV of the law (position, consecutive pair or J-window) whose confidence "
              "interval lies highest, with that interval (simultaneous with every bound of the command); the tokens: "
              "the cells of that law whose observed share departs most from the exact one ('end': after EOS).", "",
              *(f"- {x}" for x in outcome.losses), ""]
    if outcome.advice:
        L += ["## To certify", *(f"- {x}" for x in outcome.advice), ""]
        if outcome.command:
            L += ["```sh", outcome.command, "```",
                  "Each run's certificate holds at its own confidence; across this run and a rerun, the chance that "
                  "either certifies a lossy sampler is at most the sum (`--until-certified` keeps one budget).", ""]
    return L


def cert_statement(v) -> str:
    """The certificate of one run in words, by the law each bound covers: 'certified (confidence 1 − δ): TV ≤ ε
    for the marginal at each position, ..., for every window of J tokens' (or 'the whole output law'),
    'inconclusive: ...' or 'lossy'."""
    conf = f"confidence {_fmt(v.cert_confidence, 4)}"
    scope = getattr(v, "cert_scope", "")
    if isinstance(scope, str) and scope:
        what = scope
    elif v.scenario == REAL_MODEL:
        if v.certificate == "lossy":
            return "lossy: a loss test rejects"
        return "inconclusive: no certificate (no draw on the exact pair; the tiny pair's PIT tests certify nothing)"
    else:
        what = (f"TV ≤ {_fmt(v.epsilon_position)} per position, ≤ {_fmt(v.epsilon_pair)} per pair, "
                f"≤ {_fmt(v.epsilon_joint)} on the joint")
    if v.certificate == "certified":
        return f"certified ({conf}): {what}"
    if v.certificate == "lossy":
        return "lossy: a loss test rejects"
    return f"inconclusive ({conf}): not all of {what}"


def _rate(x) -> str:
    return f"{x:.2g}" if isinstance(x, float) and math.isfinite(x) else "—"


def _inconclusive_words(r, form: str) -> str:
    """``form`` filled with the run's P(inconclusive | lossless), normal approximation and bound; '' where the run
    has none (a lossy run: no planning figures)."""
    normal, bound = r.get("cert_inconclusive_normal"), r.get("cert_inconclusive_rate")
    if not any(isinstance(x, float) and math.isfinite(x) for x in (normal, bound)):
        return ""
    return form.format(_rate(normal), _rate(bound))


def _strongest(v, config) -> list[str]:
    """The lead: for each run that must be certified, the broadest law it was certified on."""
    L = ["## What this run certified",
         "The broadest statement each run earned (whole output law > every window of J tokens > each consecutive "
         "pair > the marginal at each position), every one at the command's simultaneous confidence. P(inconclusive): "
         "the probability that a lossless sampler of this size ends inconclusive (some bound ≥ its ε), summed over the "
         "run's bounds: ≈ the normal approximation (mean and sd of each bound over 200 simulated lossless count vectors; "
         "the planning figure the sizes are chosen by) and ≤ a rigorous bound (for the worst-event bound the smaller of "
         "McDiarmid and, on ≤ 16 cells, the union over events of exact binomial tails; that union for the events bound; "
         "Bernstein for the cross U-statistic; 10-100x conservative where measured).", ""]
    for _, r in v.iterrows():
        s = r.get("cert_strongest", "")
        s = s if isinstance(s, str) and s else "none"
        L.append(f"- **{r.run}** on {r.scenario}: {s}" + _inconclusive_words(r, " (P(inconclusive | lossless) ≈ {}, ≤ {})"))
    ok = np.isfinite(v.cert_inconclusive_rate.to_numpy(np.float64)) if "cert_inconclusive_rate" in v else []
    if np.any(ok):
        both = [min(1.0, float(v[c].to_numpy(np.float64)[ok].sum())) for c in ("cert_inconclusive_normal", "cert_inconclusive_rate")]
        main_runs = ok & (v.run == config.get("sampler")).to_numpy()
        nine = [min(1.0, float(v[c].to_numpy(np.float64)[main_runs].sum())) for c in ("cert_inconclusive_normal", "cert_inconclusive_rate")]
        L += ["", f"P(some run of this command ends inconclusive | every sampler lossless) ≈ **{both[0]:.2g}** "
                  f"(≤ {both[1]:.2g}) over the {int(ok.sum())} runs with a certificate (the real-model ones on the "
                  f"exact pair included); over the {int(main_runs.sum())} scenarios of the sampler under test ≈ "
                  f"{nine[0]:.2g} (≤ {nine[1]:.2g})"]
    st = config.get("settings") or {}
    line = stop_measured_line if config.get("stop_at_need") else measured_line  # the procedure this run used
    measured = line() if np.any(ok) else None  # a lossy run: no planning figures, measured ones neither
    if measured:
        default = not config.get("full") and config.get("draws") == st.get("draws")
        L += ["", f"The false-inconclusive rate {measured}" + ("." if default else " (this run's sizes are not the "
                                                                                   "default's).")]
    return L + [""]


def _needed(v) -> str:
    return f"{int(v.certify_draws):,}" if isinstance(v.certify_draws, float) and math.isfinite(v.certify_draws) else "—"


def _certificates(verdicts, config) -> list[str]:
    """The summary's lead: the certificate of every run that must be certified."""
    v = verdicts[(verdicts.certificate.fillna("") != "") & ~verdicts.role.isin(MUST_BE_CAUGHT)]
    if not len(v):
        return []
    L = ["## Certificates",
         "A run is certified when no loss test rejects and every upper confidence bound of it lies below its "
         f"tolerance ε; all bounds of this command hold simultaneously with confidence {config['tv_confidence']:g} "
         f"(Bonferroni: δ = {config['tv_delta_each']:.2g} per bound), so each certificate is an interval-inclusion "
         "equivalence test at that confidence. TV bounds are finite-sample, on the cells the target gives mass with the "
         "others lumped into one (they cover the whole law of what they bound): the worst-event bound (the plug-in TV plus "
         "one event's exact Clopper–Pearson deviation, no union over events; `harness.stats.worstevent`), on ≤ 10 cells "
         "the union over events of exact binomial bounds (`harness.stats.events`), or the χ²-type cross U-statistic bound "
         "(two random halves of the draws, Bernstein's inequality; width ~k^(1/4)/√n; `harness.stats.crossu`), whichever "
         "has the smallest planning figure at that law and size (chosen before the counts are seen); Clopper–Pearson for "
         "a one-hot target. The asymptotic "
         "noncentral-χ² inversion is reported in tests.csv (`tv_upper_asymptotic`) but certifies nothing. Largest bound / ε: "
         "the bound closest to its tolerance. Draws to certify: sequences at which a lossless sampler's expected "
         "bounds all fall below ε (each bound's mean, not their largest: fewer than half of lossless runs of that size "
         "certify; results/calibrate/reach measures 2-9 % at half the default draws). P(inconclusive): the bound on "
         "the rate at which a lossless sampler of the size drawn ends inconclusive.", "",
         "| run | scenario | certificate | largest bound / ε | max bound: position, pair, J-window | "
         "sequences drawn | draws to certify | P(inconclusive) | method |",
         "|---|---|---|---|---|---|---|---|---|"]
    for _, r in v.iterrows():
        bounds = f"{_fmt(r.tv_position_upper_max)}, {_fmt(r.tv_pair_upper_max)}, {_fmt(r.tv_joint_upper)}"
        L.append(f"| {r.run} ({r.role}) | {r.scenario} | **{cert_statement(r)}** | {r.cert_worst} "
                 f"({_fmt(r.cert_worst_ratio)}) | {bounds} | {int(r.sequences):,} | {_needed(r)} | "
                 f"{_inconclusive_words(r, '≈ {} (≤ {})') or '—'} | {r.cert_method} |")
    return L + [""]


def _budget(config, timing) -> list[str]:
    m = config["n_tests"]
    tot = timing["tokens_total"]
    return ["## Error budget and effort",
            f"- One family: **{m} tests** (every scenario, control and the von Neumann sampler). Family-wise "
            f"false-alarm budget **{config['family_alpha']:g}**, split by Holm; the planners use the Bonferroni "
            f"level {config['alpha_bonferroni'] * m:.3g}/{m} = **{config['alpha_bonferroni']:.3g}** per test and power "
            f"**{config['power']:g}**.",
            *_sequential_line(config, timing), *_stop_line(timing),
            f"- TV upper bounds hold simultaneously with confidence {config['tv_confidence']:g} "
            f"(δ = {config['tv_delta_each']:.2g} per bound).",
            f"- Drew **{tot:,} tokens** ({timing['tokens_sampler']:,} from the sampler under test, "
            f"{timing['tokens_target_only']:,} target-only, {timing['tokens_controls']:,} from controls) "
            + (f"+ {timing['tokens_real_model']:,} tokens on the tiny pair and {timing.get('tokens_exact_pair', 0):,} on "
               f"the exact pair ({timing['wall_real_model_s']:.0f} s of sampler time incl. target scoring{_flop_words(timing)}) "
               if timing.get("tokens_real_model") else "")
            + f"+ {timing['von_neumann_proposals']:,} von Neumann proposals, in **{timing['wall_total_s']:.0f} s** "
            f"(drawing {timing['wall_draw_s']:.0f} s = {tot / max(timing['wall_draw_s'], 1e-9) / 1e6:.2f} M "
            f"tokens/s incl. statistics; tests {timing['wall_tests_s']:.0f} s).",
            *(f"- Plan: {n}" for n in config.get("plan_notes", ())), ""]


def _sequential_line(config, timing) -> list[str]:
    """The budget line of sequential stopping (none when it was off)."""
    sq = timing.get("sequential") or {}
    if not sq.get("runs"):
        return []
    share = (f"{sq['stopped_sequences']:,} of their {sq['stopped_planned']:,} planned sequences "
             f"({sq['stopped_tokens']:,} tokens)" if sq["stopped"] else "none")
    return [f"- Sequential stopping (anytime-valid e-process, `harness.verify.sequential`): **{sq['runs']} runs** "
            f"looked at after every shard, each stopping lossy once E ≥ 1/{sq['level']:.3g} (budget "
            f"{config.get('sequential_alpha', 0):g}, Bonferroni over the runs; Holm gets the rest). "
            f"**{sq['stopped']} stopped early**, drawing {share}; a stopped run's fixed-n rows are shown, not judged."]


def _stop_line(timing) -> list[str]:
    """What stopping at the need did (none under --fixed-n)."""
    st = timing.get("stop_at_need") or {}
    if not st.get("runs"):
        return []
    each = "; ".join(f"{x['scenario']} {x['sequences']:,} of {x['fixed_n']:,}" + (
        f" (lossy beyond doubt at look {x['look']} of {x['looks']})" if x.get("lossy") else
        f" (look {x['look']} of {x['looks']})" if x["look"] else " (no look certified it)") for x in st["runs"])
    return [f"- Stop at the need (`harness.verify.stopping`; `--fixed-n` draws the fixed sizes): "
            f"**{len(st['runs'])} run{'s' if len(st['runs']) != 1 else ''} under test** drew {st['sequences']:,} "
            f"sequences against their fixed sizes' "
            f"{st['fixed_n']:,} ({st['sequences'] / max(st['fixed_n'], 1):.2f} ×; the cap is "
            f"{CAP_FACTOR:g} × the fixed size), each stopping at the first look where every bound, at that look's δ, "
            f"lay below its ε: {each}."]


def _scenarios(main, table, runs, laws) -> list[str]:
    if not len(main):
        return []
    L = ["## Scenarios",
         "Detectable TV: the smallest TV(sampler, target) at one position that the per-position χ² "
         "detects with the stated power at its level (noncentral χ², ½√(λ*/n)). TV bound: upper "
         "confidence bound on TV(sampler, target) per position (max over positions) and on the J-windows "
         "(max over every window of J tokens; J = N: the whole output law), method named in tests.csv (`tv_method`).", "",
         "| scenario | controls | exact α per draft position | sequences | verdict | min adj. p | "
         "detectable TV / position | TV bound / position (max) | TV bound, J-windows (max) | PIT: detectable KS "
         "(pooled / position) |",
         "|---|---|---|---|---|---|---|---|---|---|"]
    for _, v in main.iterrows():
        r = next(r for r in runs if r.label == v.run and r.scenario.name == v.scenario)
        sc = r.scenario
        exact = run_acceptance(r, laws[v.scenario])  # the run's algorithm's law (None: the chain rule's)
        alpha = laws[v.scenario].acceptance_law(sc.k).alpha if exact is None else (exact.alpha if exact else [])
        sub = table[(table.run == v.run) & (table.scenario == v.scenario)]
        pit_pool = sub[(sub.family == "pit") & (sub.test == "pooled")]
        pit_pos = sub[(sub.family == "pit") & (sub.test == "position")]
        where = v.scenario if r.algorithm == "chain" else f"{v.scenario} ({r.algorithm})"
        L.append(f"| {where} | {sc.describe()} | {', '.join(f'{a:.3f}' for a in alpha)} | "
                 f"{int(v.sequences):,} | {v.verdict} | {_fmt(v.min_p_adjusted)} | {_fmt(v.mde_position_tv)} | "
                 f"{_fmt(v.tv_position_upper_max)} | {_fmt(v.tv_joint_upper)} (J={sc.joint_tokens}) | "
                 f"{_fmt(float(pit_pool.min_detectable.iloc[0]) if len(pit_pool) else float('nan'))} / "
                 f"{_fmt(float(pit_pos.min_detectable.max()) if len(pit_pos) else float('nan'))} |")
    return L + [""]


def _controls(ctrl) -> list[str]:
    if not len(ctrl):
        return []
    cat = {c.name: c for c in CATALOGUE}
    L = ["## Controls (detection table)",
         "Buggy samplers must be caught (a loss test rejects after Holm); lossless ones must pass. "
         "Measured TV: plug-in TV(empirical law, exact target law) on the position, consecutive pair or "
         "first-J joint whose confidence interval lies highest, and on the first-J joint, with simultaneous "
         "confidence intervals (finite-sample bounds). Lossless controls: upper bounds.", "",
         "| control | kind | scenario (why) | outcome | tests that caught it | min adj. p (loss tests) | "
         "measured TV (most certain of positions, pairs, joint) [CI] | measured TV, joint of first J [CI] | "
         "acceptance |",
         "|---|---|---|---|---|---|---|---|---|"]
    for _, v in ctrl.iterrows():
        if v.scenario == REAL_MODEL:
            L.append(_real_detection_row(v))
            continue
        c = cat.get(v.run)
        must = v.role in MUST_BE_CAUGHT
        why = f"{v.scenario} ({c.shows_when})" if c and must else v.scenario
        tvp = (f"{_fmt(v.tv_best)} on {v.tv_best_test} [{_fmt(v.tv_best_lower)}, {_fmt(v.tv_best_upper)}]"
               if must else f"≤ {_fmt(v.tv_position_upper_max)} (bound, worst position)")
        tvj = (f"{_fmt(v.tv_joint)} [{_fmt(v.tv_joint_lower)}, {_fmt(v.tv_joint_upper)}]" if must
               else f"≤ {_fmt(v.tv_joint_upper)} (bound)")
        L.append(f"| {v.run} | {v.role} | {why} | {_outcome(v)} | {v.caught_by or '—'} | "
                 f"{_fmt(v.min_p_adjusted_loss)} | {tvp} | {tvj} | {v.efficiency} |")
    return L + [""]


def _von_neumann(vn) -> list[str]:
    if not len(vn):
        return []
    L = ["## von Neumann sampler (KS, AD against the target CDF; exact binomial acceptance against 1/M)", "",
         "| sampler | envelope | proposals | accepted | acceptance (1/M) | verdict | outcome | min adj. p |",
         "|---|---|---|---|---|---|---|---|"]
    for _, v in vn.iterrows():
        L.append(f"| {v.run} | {v.scenario.replace('von_neumann_', '')} | {int(v.sequences):,} | {int(v.tokens):,} | "
                 f"{v.acceptance:.4f} ({v.expected_acceptance:.4f}) | {v.verdict} | {_outcome(v)} | "
                 f"{_fmt(v.min_p_adjusted)} |")
    return L + [""]


def _failures(bad) -> list[str]:
    if not len(bad):
        return []
    L = ["## Failures"]
    for _, v in bad.iterrows():
        L.append(f"- **{v.run}** on `{v.scenario}`: {v.verdict}" + (f"; rejected by {v.caught_by}"
                                                                      if v.caught_by else ""))
    return L + [""]


def _method(with_real_model: bool) -> list[str]:
    L = ["## Method",
         "- `gof`: Pearson χ² against the exact target law — each position (bonus positions included), each "
         "consecutive pair, the joint of the first J tokens — cells pooled from the target alone to expected "
         "counts ≥ 100; a draw the target gives probability 0 rejects outright.",
         "- `two_sample`: χ² homogeneity against target-only sampling at the same budget (positions, joint); "
         "KS and Anderson–Darling on each sequence's target log-probability.",
         "- `pit`: randomized PIT under the target's conditional given the emitted prefix (PAD absorbing after "
         "EOS): iid U(0,1) under H0; KS pooled and per position on a 65,536-cell grid (conservative), χ² of "
         "non-overlapping consecutive pairs on an m×m grid.",
         "- `acceptance`: per draft position, accepted − α_i·judged against the exact α_i of the reference "
         "process (propagated exactly; α_i is not iid across positions), and the accepted-length histogram; "
         "variance from the spread between sampler calls (t, Hotelling T²). A rejection here alone means "
         "*inefficient* (or over-accepting), not lossy."]
    if with_real_model:
        L.append("- `exact_pair` on `real_model` (the certificate): the same sampler runs on the exact transformer "
                 "pair (`specimpl/assets/exact_pair`: a 2-layer Llama with attention, V = 16) through its real torch "
                 "forwards (KV caches, batches alternating two ragged prompts, EOS off); the law of its first J "
                 "tokens after each prompt is enumerated in float64 (`harness.laws.transformer`). Per prompt: χ² and "
                 "a finite-sample token-TV bound for the marginal at each position, each consecutive pair and every "
                 "window of W tokens. The sequence is the unit: the counts are exactly multinomial whatever the "
                 "dependence between the tokens of one sequence, so the bounds hold as stated (assumed: the rows "
                 "of a batch are independent of each other).")
        L.append("- `pit` on `real_model` (tests, no certificate): the sampler runs on the shipped tiny "
                 "transformers pair (`specimpl/assets/tiny_pair`, held-out stdlib prompts of ragged lengths, EOS "
                 "off); each emitted token's randomized PIT under the target's warped conditional, the target "
                 "scoring each whole sequence in one forward (independent of the sampler's KV-cached calls). KS "
                 "pooled (exact null), KS per position, χ² of non-overlapping consecutive pairs on an m×m grid. "
                 "These reject; they certify nothing: the pooled N·T PIT values are independent only under H0 (a "
                 "per-sequence bug makes one sequence's values dependent), so the pooled DKW figure reported is "
                 "not a confidence bound for a lossy sampler (results/calibrate/realmodel_dependence.md).")
    L.append("- `von_neumann`: KS and AD of accepted points against the exact CDF; exact binomial test of the "
             "accepted count against 1/M. No bound: its verdict stays two-valued (lossy / lossless), no certificate.")
    L.append("- Certificate: see *Certificates*. The χ² tests pool rare cells (tests.csv `chi2_pooled_mass`: the "
             "target mass inside merged cells, where a deviation that keeps the merged total is invisible to "
             "that test); the TV bounds do not pool: they bound TV over every cell of positive mass (plus the "
             "lumped zero-mass cell, `tv_cells`).")
    return L


def _real_model_section(rm: pd.DataFrame, config) -> list[str]:
    if not len(rm):
        return []
    c = config.get("real_model") or {}
    L = ["## Real model, tests (shipped tiny transformers pair): sequential randomized PIT, no certificate",
         f"Sampling {c.get('config', '?')}, k = {c.get('k', '?')}, {c.get('max_new_tokens', '?')} tokens per sequence "
         "(EOS off). Tests in the run's family (Holm); detectable: the smallest Kolmogorov distance of the PIT law "
         "from U(0,1) (KS, DKW) or TV on the PIT pair grid (χ², noncentral) that the test detects with power "
         f"{config['power']:g} at the Bonferroni level. Pooled DKW: the DKW figure on the pooled PIT law's Kolmogorov "
         "distance from U(0,1), valid only for independent PIT values (true under H0, not for a sampler with a "
         "per-sequence bug): reported, not a certificate. The real-model certificate is on the exact transformer "
         "pair (*Certificates*).", "",
         "| sampler | role | sequences × T = tokens | outcome | tests that caught it | pooled KS: D, p, adj. p, "
         "detectable | per position: worst p (position), min adj. p, detectable | pairs: TV on grid, min p, "
         "min adj. p, detectable | pooled DKW (not a bound) | acceptance |",
         "|---|---|---|---|---|---|---|---|---|---|"]
    for _, v in rm.iterrows():
        outcome = _outcome(v)
        if isinstance(v.error, str) and v.error:
            L.append(f"| {v.run} | {v.role} | {int(v.sequences):,} | **{v.verdict}** | — | — | — | — | — | — |")
            continue
        T = int(v.tokens) // max(int(v.sequences), 1)
        L.append(f"| {v.run} | {v.role} | {int(v.sequences):,} × {T} = {int(v.tokens):,} | {v.verdict} ({outcome}) | "
                 f"{v.caught_by or '—'} | {_fmt(v.pit_ks)}, {_fmt(v.pit_ks_p)}, {_fmt(v.pit_ks_p_adjusted)}, "
                 f"{_fmt(v.pit_ks_detectable)} | {_fmt(v.pit_position_min_p)} ({int(v.pit_position_worst)}), "
                 f"{_fmt(v.pit_position_min_p_adjusted)}, {_fmt(v.pit_position_detectable)} | "
                 f"{_fmt(v.pit_pairs_tv_hat)}, {_fmt(v.pit_pairs_min_p)}, {_fmt(v.pit_pairs_min_p_adjusted)}, "
                 f"{_fmt(v.pit_pairs_detectable)} ({int(v.pit_pairs_cells)} cells) | {_fmt(v.pit_kolmogorov_upper)} | "
                 f"{_fmt(v.acceptance)} |")
    L.append("")
    return L


def _real_detection_row(v) -> str:
    """A real-model control in the detection table (measured: PIT distances, not TV to an exact law)."""
    outcome = _outcome(v)
    if isinstance(v.error, str) and v.error:
        return f"| {v.run} | {v.role} | {REAL_MODEL} | **{v.verdict}** | — | — | — | — | — |"
    why = "real_model (exact pair and tiny HF pair, KV-cached ragged batches)"
    exact = (f"exact pair: {_fmt(v.tv_best)} on {v.tv_best_test} [{_fmt(v.tv_best_lower)}, {_fmt(v.tv_best_upper)}]"
             if v.role in MUST_BE_CAUGHT else f"exact pair: ≤ {_fmt(v.tv_position_upper_max)} (bound, worst position)")
    joint = (f"{_fmt(v.tv_joint)} [{_fmt(v.tv_joint_lower)}, {_fmt(v.tv_joint_upper)}] (exact pair, W-window)"
             if v.role in MUST_BE_CAUGHT else f"≤ {_fmt(v.tv_joint_upper)} (bound, exact pair, W-window)")
    return (f"| {v.run} | {v.role} | {why} | {outcome} | {v.caught_by or '—'} | {_fmt(v.min_p_adjusted_loss)} | "
            f"{exact}; tiny pair: PIT pair grid TV {_fmt(v.pit_pairs_tv_hat)} (detectable "
            f"{_fmt(v.pit_pairs_detectable)}), pooled PIT KS {_fmt(v.pit_ks)} | {joint} | {_fmt(v.acceptance)} |")


def _console(verdicts, config, timing, outcome: Outcome, out) -> str:
    """The console: one line per run, the report's path, then what the verdict asks of the user (where the loss
    is, or the draws and the command that would certify) and, last, the headline word."""
    who = f"{config.get('command', 'verify')} {config['sampler']}"
    lines = [f"{who}: {config['n_tests']} tests, family-wise alpha {config['family_alpha']:g}; "
             f"{timing['tokens_total']:,} tokens in {timing['wall_total_s']:.0f} s"]
    lines += [_console_run(v) for _, v in verdicts.iterrows()]
    lines.append(console_cost(verdicts, timing, config["sampler"]))
    if out is not None:
        lines.append(f"report: {out}/summary.md")
    lines += [f"why: {r}" for r in outcome.reasons]
    lines += [f"  loss: {x}" for x in outcome.losses] + [f"  to certify: {x}" for x in outcome.advice]
    if outcome.command:
        lines += ["to certify, run:", f"  {outcome.command}"]
    tail = {"certified": "every run as its role requires", "lossy": f"{outcome.tally}; exit 1",
            "inconclusive": f"nothing lossy; {outcome.tally}; exit 4"}[outcome.verdict]
    if _failed(verdicts):
        tail = f"{outcome.tally}; exit 3"
    lines.append(f"{who}: {_headline(verdicts, outcome)} ({tail})")
    return "\n".join(lines)


def _console_run(v) -> str:
    """One run's console line: its outcome against its role, its verdict, the tests that caught it, its
    certificate with its largest bound / ε, or its loss where it is lossy (the draws that would certify an
    inconclusive run: the advice lines of :func:`_console`)."""
    mark = "ok  " if v.passed else "FAIL"
    extra = f" <- {v.caught_by}" if isinstance(v.caught_by, str) and v.caught_by else ""
    cert = ""
    if isinstance(v.certificate, str) and v.certificate and v.role not in MUST_BE_CAUGHT:
        cert = f" | {cert_statement(v)}"
        cert += f"; loss {loss_estimate(v)}" if v.certificate == "lossy" else f"; worst {v.cert_worst}"
    return f"  {mark} {v.role:15s} {v.run:32s} {v.scenario:20s} {v.verdict}{extra}{cert}"


# ------------------------------------------------------------------------------------ figures
_Z = 4.0  # reference band of the figures: ±4 standard deviations under H0
_CONTROL_ROLES = ["lossy", "lossy-by-design", "lossless"]


def draw_figures(out: Path, workers: Optional[int] = None) -> list[Path]:
    """Figures from the stored tables of a report folder (``distributions.parquet``, ``pit_hist.parquet``),
    drawn side by side on ``workers`` processes (None: every core; :func:`harness.core.forkmap.fork_map`)."""
    import matplotlib
    matplotlib.use("Agg")

    out = Path(out)
    meta = read_json(out / "meta.json", "report")
    dist = pd.read_parquet(out / "distributions.parquet")
    pit = pd.read_parquet(out / "pit_hist.parquet")
    figdir = out / "figures"
    jobs = []  # (table, panel, row height, title, path) per figure
    # 1. observed vs expected per position: the sampler under test, then the controls
    for roles, name, title in ((list(UNDER_TEST), "positions.png", "observed vs exact expected count per position "
                                "and symbol (standardized)"),
                               (_CONTROL_ROLES, "positions_controls.png",
                                "controls: observed vs exact expected per position and symbol")):
        d = dist[dist.role.isin(roles)] if len(dist) else dist
        if not d.empty:
            jobs.append((d, _residual_panel, 2.4, title + f"; dashed: ±{_Z:g}", figdir / name))
    # 2. PIT histograms (pooled over positions), with a ±4 sd band for the bin counts under H0
    for roles, name in ((list(UNDER_TEST), "pit.png"), (_CONTROL_ROLES, "pit_controls.png")):
        d = pit[pit.role.isin(roles)] if len(pit) else pit
        if not d.empty:
            jobs.append((d, _pit_panel, 2.2, "randomized PIT density (64 cells, pooled over positions); "
                         f"grey: ±{_Z:g} sd under H0", figdir / name))
    workers = default_workers() if workers is None else workers
    return fork_map(lambda i: _grid_figure(*jobs[i], meta), len(jobs), workers, chunksize=1)


def _grid_figure(d: pd.DataFrame, panel, row_height: float, title: str, path: Path, meta) -> Path:
    """One panel per (run, scenario) of ``d``, four to a row."""
    import matplotlib.pyplot as plt
    groups = list(d.groupby(["run", "scenario"], sort=False))
    cols = 4
    rows = math.ceil(len(groups) / cols)
    width, height = 3.2 * cols, row_height * rows + 0.4
    fig, axes = plt.subplots(rows, cols, figsize=(width, height), squeeze=False)
    # fixed margins in inches (tight_layout measured every tick label of every panel: ~1/3 of the figure's time)
    fig.subplots_adjust(left=0.75 / width, right=1 - 0.1 / width, bottom=0.55 / height, top=1 - 0.55 / height,
                        wspace=0.38, hspace=0.5 * 2.3 / row_height)
    for ax, ((run, scen), g) in zip(axes.ravel(), groups):
        panel(ax, g, f"{run} / {scen}" if run != "reference" else scen)
    for ax in axes.ravel()[len(groups):]:
        ax.axis("off")
    if panel is _residual_panel:
        _symbol_legend(fig, d, height)
    fig.suptitle(title, fontsize=9, y=1 - 0.07 / height)
    written = atomic_savefig(fig, path, meta, dpi=110)
    plt.close(fig)
    return written


def _symbol_legend(fig, d: pd.DataFrame, height: float) -> None:
    """The legend of :func:`_residual_panel`'s colours: one entry per symbol (token id) drawn, under the title."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    cmap = plt.get_cmap("tab10")
    symbols = sorted(int(s) for s in d.symbol.unique())
    handles = [Line2D([], [], ls="", marker="o", ms=3, color=cmap(min(s, 9) / 9)) for s in symbols]
    fig.legend(handles, [f"symbol {s}" for s in symbols], loc="upper center", ncol=min(len(symbols), 12),
               fontsize=6, frameon=False, bbox_to_anchor=(0.5, 1 - 0.2 / height), handletextpad=0.1,
               columnspacing=0.8)


def _residual_panel(ax, d, title):
    d = d[d.expected > 0]
    zs = (d.observed - d.expected) / np.sqrt(d.expected)
    x = d.position + (d.symbol / (d.symbol.max() + 1)) * 0.8
    ax.scatter(x, zs, s=6, c=d.symbol, cmap="tab10", vmin=0, vmax=9)
    ax.axhline(_Z, color="0.6", lw=0.6, ls="--")
    ax.axhline(-_Z, color="0.6", lw=0.6, ls="--")
    ax.axhline(0, color="0.3", lw=0.6)
    ax.set_title(title, fontsize=8)
    ax.set_xlabel("position (symbols within)", fontsize=7)
    ax.set_ylabel("(obs − exp)/√exp", fontsize=7)
    ax.tick_params(labelsize=6)


def _pit_panel(ax, g, title):
    h = g.groupby("bin")["count"].sum().sort_index().to_numpy()
    n = h.sum()
    dens = h / n * len(h)
    sd = math.sqrt((1 / len(h)) * (1 - 1 / len(h)) / n) * len(h)
    ax.stairs(dens, np.arange(len(h) + 1) / len(h), fill=True, color="C0")  # one artist, not a bar per cell
    ax.axhspan(1 - _Z * sd, 1 + _Z * sd, color="0.85", zorder=0)
    ax.axhline(1, color="k", lw=0.6)
    ax.set_ylim(min(0.9, dens.min() * 0.98), max(1.1, dens.max() * 1.02))
    ax.set_title(title, fontsize=8)
    ax.tick_params(labelsize=6)


def _flop_words(timing: dict) -> str:
    """', at least F flops = S of this machine's one-thread matmul rate R' for the real-model part, if measured."""
    if "real_model_flop_share" not in timing:
        return ""
    return (f"; at least {timing['real_model_flops_min']:.3g} flops of model arithmetic = "
            f"{timing['real_model_flop_share']:.2g} of this machine's one-thread float32 matmul rate, "
            f"{timing['matmul_gflops_1thread']:.0f} GFLOP/s"
            + (": the part is bound by per-call overhead, not arithmetic" if timing["real_model_flop_share"] < 0.05 else ""))
