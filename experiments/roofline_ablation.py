"""What each term added for the published points buys: the fidelity table with one term switched off.

    PYTHONPATH=. python experiments/roofline_ablation.py [--out results/roofline/ablation.md]

Every variant is calibrated exactly as the full model (target-only figures only; no speculative number is
fitted); only the term changes:

    full model              harness/configs/fidelity/published.toml as it is
    no MoE expert reads     a mixture's forward reads the experts of one token whatever B n is
    no bounded draft cache  the draft reads the target's full context (MagicDec's StreamingLLM budget ignored)
    tree drafts of 1 token  SGLang's tree draft steps score 1 token per sequence instead of topk
    no prefill              whole-run rows (prompt_tokens, output_tokens) priced as steady decoding: no prefill
                            in the speedup or in the calibration points (the A40 sweep)
    no engine tax           the speculative engine's per-step cost measured off (spec_off_rates) not charged
    one model's runs        each A40 target's machine fitted to its own target-only runs, not the pool of all
                            four targets' (calibrate_pool); the calibration rule (harness.speedup.roofline.identify)
                            refuses this fit (one model's runs do not separate eff_bandwidth from overhead_s), so
                            the variant is fitted with that check switched off
    per-layer fixed cost    the A40 pool fits overhead_per_layer_s (a fixed cost per decoder layer) in place of
                            overhead_s (per call): the four targets' layer counts (28-48) and sizes separate them
    per-request step cost   the A40 pool fits step_per_request_s (the engine's cost per running request and step,
                            charged once a speculative round) beside its three fields

Writes a Markdown table (speculative speedups: n, |error| median and worst, signs right; and over the rows
the term concerns) with the provenance of this run.  Only calibration rows are counted: the ablation is the
evidence by which terms were kept or dropped, so it never looks at evaluation rows.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from unittest import mock

from harness.core.provenance import atomic_write_text, metadata
from harness.core.figures import results_line
from harness.speedup.roofline import model as rm
from harness.speedup.roofline import rounds as rr
from harness.speedup.roofline.fidelity import fidelity_table, load_published, summary


def _line(name: str, t, concern) -> str:
    t = t[t.split == "calibration"]  # the rows that chose the terms (docs/roofline.md, "The declared split")
    m = summary(t, "calibration")
    sub = t[concern(t) & (t.quantity == "speedup") & t.rel_err.notna()]
    return (f"| {name} | {m['speedups']} | {100 * m['speedup_median']:.1f} % | {100 * m['speedup_worst']:.0f} % | "
            f"{m['sign_right']} of {m['speedups']} | {len(sub)} | {100 * sub.rel_err.abs().median():.1f} % | "
            f"{int(sub.sign_ok.astype(bool).sum())} of {len(sub)} |")


def drop_fields(pub: dict, *keys: str) -> dict:
    """The file with ``keys`` removed from every row (a term switched off)."""
    return {**pub, "row": [{k: v for k, v in r.items() if k not in keys} for r in pub["row"]]}


def own_runs_only(pub: dict) -> dict:
    """The file with each pooled row's machine fitted to its own target's points of the pool only."""
    def own(r):
        if not r.get("_pool"):
            return r
        pts, fit = r["_pool"]
        return {**r, "_pool": (tuple(p for p in pts if p[0] == r["target"]), fit)}
    return {**pub, "row": [own(r) for r in pub["row"]]}


def own_runs_table(pub: dict):
    """The fidelity table of :func:`own_runs_only`, fitted although the calibration rule refuses it."""
    from harness.speedup.roofline import fidelity
    with mock.patch.object(fidelity, "check_separated", lambda *a: 1.0):
        return fidelity_table(own_runs_only(pub))


def pool_fit(pub: dict, fit: tuple) -> dict:
    """The file with every pooled row's machine fitted to the pool's points with ``fit`` instead of the pool's own."""
    return {**pub, "row": [{**r, "_pool": (r["_pool"][0], tuple(fit))} if r.get("_pool") else r for r in pub["row"]]}


def rows() -> list[str]:
    pub = load_published()
    moe = (lambda t: t.id.str.startswith(("specforge", "angelslim")))
    longctx = (lambda t: t.id.str.startswith("magicdec"))
    tree = (lambda t: t.method == "eagle-tree")
    out = [_line("full model (MoE rows)", fidelity_table(pub), moe),
           _line("full model (MagicDec rows)", fidelity_table(pub), longctx),
           _line("full model (SGLang tree rows)", fidelity_table(pub), tree)]
    one = rm.ModelShape.weight_bytes_for
    with mock.patch.object(rm.ModelShape, "weight_bytes_for", lambda self, tokens: one(self, 1)):
        out.append(_line("no MoE expert reads", fidelity_table(pub), moe))
    out.append(_line("no bounded draft cache", fidelity_table(drop_fields(pub, "draft_context")), longctx))
    calls = rr.round_calls
    with mock.patch.object(rr, "round_calls", lambda row, e: ([1] * len(calls(row, e)[0]), calls(row, e)[1])):
        out.append(_line("tree drafts of 1 token", fidelity_table(pub), tree))
    a40 = (lambda t: t.group == "a40-goodput")
    out.append(_line("full model (A40 sweep rows)", fidelity_table(pub), a40))
    for name, keys in (("no prefill (steady state)", ("prompt_tokens", "output_tokens")),
                       ("no engine tax", ("spec_off_rates",)),
                       ("neither", ("prompt_tokens", "output_tokens", "spec_off_rates"))):
        out.append(_line(name, fidelity_table(drop_fields(pub, *keys)), a40))
    out.append(_line("one model's runs (no pool; refused by the rule)", own_runs_table(pub), a40))
    out.append(_line("per-layer fixed cost in place of per-call",
                     fidelity_table(pool_fit(pub, ("eff_bandwidth", "eff_compute", "overhead_per_layer_s"))), a40))
    out.append(_line("+ per-request step cost",
                     fidelity_table(pool_fit(pub, ("eff_bandwidth", "eff_compute", "overhead_s", "step_per_request_s"))),
                     a40))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("results/roofline/ablation.md"))
    args = ap.parse_args(argv)
    meta = metadata({"name": "roofline-ablation", "file": "harness/configs/fidelity/published.toml"}, None)
    head = ["| variant | speedups | median abs error | worst | sign right | rows concerned | their median | their signs right |",
            "|---|---|---|---|---|---|---|---|"]
    text = (f"Roofline ablation over the calibration rows of the published points (the evidence that chose the terms; evaluation rows are never used here); {results_line(meta)}.\n\n" + "\n".join(head + rows()) + "\n")
    atomic_write_text(args.out, text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
