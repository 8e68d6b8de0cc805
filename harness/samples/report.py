"""The report of ``verify-samples``: tests.csv, summary.md (the certificate first), meta.json.

Files are staged and moved into ``--out`` together (:func:`harness.core.atomic.staged_report`), each written
atomically with the run's provenance (:func:`harness.core.provenance.metadata`: config, seed, commit,
versions, machine, command).
"""
from __future__ import annotations


from pathlib import Path

from harness.core.atomic import staged_report
from harness.core.jsonfile import read_json
from harness.core.verdict import headline
from harness.core.provenance import (atomic_write_csv, atomic_write_json, atomic_write_text, metadata, portable,
                                     read_table_csv)

__all__ = ["report_row", "write_report", "summary_text"]

FILES = ("tests.csv", "summary.md", "meta.json")


def _config(res, args) -> dict:
    return {"command": "verify-samples", "mode": res.mode, "samples": str(args.samples),
            "target": args.target, "baseline": None if args.baseline is None else str(args.baseline),
            "epsilon": args.epsilon, "alpha": args.alpha, "dtype": args.dtype, "logprob_tol": args.logprob_tol}


def _bounds_dict(b) -> dict:
    if b is None:
        return {}
    return {"what": b.what, "delta_each": b.delta_each, "completions_needed": b.needed, "max_upper": b.max_upper,
            "completions_needed_at": dict(b.needed_at),
            "n": list(b.n), "hat": list(b.hat), "upper": list(b.upper)}


def summary_text(res, args, advice=()) -> str:
    """summary.md: the headline word and the certificate first, then (inconclusive) ``advice``, the rejections and
    the tests by family."""
    c, t = res.certificate, res.table
    lv = res.info.get("levels", {})
    lines = [f"# verify-samples: {c.verdict}", "", f"**Result: {headline(c.verdict)}**", "", c.headline(), "",
             f"- mode: {res.mode}; samples: `{portable(str(args.samples))}`" +
             (f"; target: `{portable(str(args.target))}` ({'float64 exact law' if res.mode == 'exact' else args.dtype})" if args.target else
              f"; baseline: `{portable(str(args.baseline))}`"),
             (f"- completions: {res.info['sample_completions']} in the samples, {res.info['baseline_completions']} in the "
              f"baseline (the certificate counts the smaller, {c.completions}); " if "sample_completions" in res.info else
              f"- completions: {c.completions}; ") + ", ".join(f"{k}: {v}" for k, v in res.info.items()
                                                           if k in ("tokens_scored", "tokens_compared")),
             f"- family: {lv.get('n_tests')} tests, Holm at alpha = {res.info.get('family_alpha'):g}, power "
             f"{res.info.get('power'):g}"
             f" (each planned at {lv.get('alpha_each', float('nan')):.3g}); min detectable deviation per row in "
             "tests.csv (`min_detectable`, at the run's power)",
             f"- certificate: epsilon = {c.epsilon:g}, confidence {c.confidence:g}; "
             + (f"bounded: {c.bounds.what}; largest bound {c.bounds.max_upper:.3g}" if c.bounds else "no bounds")
             + (f"; completions needed to certify epsilon (planner, under H0): {c.bounds.needed}"
                if c.bounds and c.verdict != "lossy" else "")]
    if res.info.get("pit_kolmogorov"):
        k = res.info["pit_kolmogorov"]
        lines.append(f"- also bounded (a test, not the certificate): {k['what']}; largest bound {k['max_upper']:.3g} "
                     f"(each at miss probability {k['delta_each']:.2g})" + ("" if c.verdict == "lossy" else
                     f"; completions that bring it under epsilon (planner, under H0): {k['completions_needed']}"))
    if res.info.get("engine_logprobs"):
        a = res.info["engine_logprobs"]
        lines.append(f"- engine logprobs vs scorer: max |diff| {a['max_abs_diff']:.3g}, mean {a['mean_abs_diff']:.3g} "
                     f"over {a['tokens']} tokens (tolerance {a['tolerance']:g})")
    if res.mode == "exact":
        i = res.info
        lines.append(f"- exact law: {i['exact_law']}, {i['prompts']} prompt(s), completions per prompt "
                     f"{i['completions_per_prompt']}; float32 numerics floor {i['numerics_floor']:.2g}; largest pair "
                     f"bound {i['max_pair_bound']:.3g}, largest {i['window']}-window bound {i['max_window_bound']:.3g}")
    if "dependence" in res.info:
        d = res.info["dependence"]
        lines.append(f"- dependence between completions (a separate stage at false-alarm rate {d['level']:g}, on top of "
                     f"the family's alpha: a lossy verdict is false with probability <= alpha + {d['level']:g}): "
                     f"{d['line']}" + (f" ({res.info['wall_dependence_s']:.1f} s)" if "wall_dependence_s" in res.info else ""))
    if "wall_score_s" in res.info:
        lines.append(f"- scoring wall time: {res.info['wall_score_s']:.1f} s")
    if advice:
        lines += ["", "## To certify", "", advice[0], "", "```sh", *(a.strip() for a in advice[1:]), "```"]
    rej = t[t["reject"]]
    lines += ["", f"## Rejections ({len(rej)})", ""]
    lines += [f"- {r.family}/{r.test}" + (f" @ position {int(r.position)}" if r.position >= 0 else "") +
              f": p = {r.pvalue:.3g}, p_adj = {r.p_adjusted:.3g}; {r.method}" for r in rej.itertuples()] or ["none"]
    fams = t.groupby("family").agg(tests=("test", "size"), rejected=("reject", "sum"), min_p=("pvalue", "min"))
    lines += ["", "## Tests by family", "", "| family | tests | rejected | smallest p |", "|---|---|---|---|"]
    lines += [f"| {f} | {int(r.tests)} | {int(r.rejected)} | {r.min_p:.3g} |" for f, r in fams.iterrows()]
    if res.notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in res.notes]
    return "\n".join(lines) + "\n"


def write_report(out, res, args, advice=()) -> list[str]:
    """tests.csv, summary.md and meta.json into ``out`` (``advice``: the lines of an inconclusive verdict's next step)."""
    meta = metadata(_config(res, args), args.seed)
    meta.update({"verdict": res.certificate.verdict, "completions": res.certificate.completions, "headline": res.certificate.headline(),
                 "reasons": list(res.certificate.reasons), "bounds": _bounds_dict(res.certificate.bounds),
                 "notes": list(res.notes), "info": res.info})
    with staged_report(Path(out), "verify-samples", FILES) as st:
        atomic_write_csv(st.dir / "tests.csv", res.table, meta)
        atomic_write_text(st.dir / "summary.md", summary_text(res, args, advice))
        atomic_write_json(st.dir / "meta.json", meta)
    return list(FILES)


def report_row(out) -> dict:
    """One table row from a ``verify-samples`` report folder: the verdict and headline (meta.json), the largest
    per-position bound and estimate, the rejecting tests in order of their adjusted p-value (tests.csv), and the
    dependence stage's line (:mod:`harness.samples.dependence`: its finding, or what it would detect at this size)."""
    out = Path(out)
    meta = read_json(out / "meta.json", "report")
    t = read_table_csv(out / "tests.csv")
    rej = t[t["reject"]].sort_values("p_adjusted", kind="stable")
    b = meta.get("bounds") or {}
    return {"verdict": meta["verdict"], "detail": meta["headline"][:240],
            "max_position_tv_upper": b.get("max_upper", float("nan")),
            "max_position_tv_hat": max(b.get("hat") or [float("nan")]), "rejecting_tests": int(len(rej)),
            "first_rejecting": ", ".join(f"{r.test}@{int(r.position)}" for r in rej.head(3).itertuples()),
            "dependence": (meta.get("info") or {}).get("dependence", {}).get(
                "line", "not run (the report predates the dependence stage)")}
