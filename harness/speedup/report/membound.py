"""Figure and table of the sweep's ``membound`` suite (the widened, memory-bound target; issue 14).

    membound_speedup   speedup over target-only against k, one panel per batch size: measured (wall clock
                       and process CPU time, points) and the measured cost model's prediction (lines, the
                       same two bases)
    membound.md        every cell: k, B, alpha_hat, measured and predicted speedup on both bases, the
                       model's error, and the share of a round spent outside the two models' forwards

Drawn from the stored ``measured.csv`` alone, via the registries of :mod:`harness.speedup.report.cli`.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd
from harness.core.figures import save_figure as _save
from harness.core.figures import results_line

__all__ = ["FIGURES", "TABLES", "rows_of", "membound_md"]


def rows_of(res) -> pd.DataFrame:
    """The suite's rows of measured.csv (an empty frame when there are none)."""
    m = res.measured
    if m is None or "suite" not in m:
        return pd.DataFrame()
    return m[m.suite == "membound"].sort_values(["batch", "draft", "k"])


def _has(res) -> bool:
    return len(rows_of(res)) > 0


def fig_speedup(plt, res, out, formats):
    m = rows_of(res)
    bs = sorted(m.batch.unique())
    fig, axes = plt.subplots(1, len(bs), figsize=(max(3.0 * len(bs), 4.6), 3.2), squeeze=False, sharey=True)
    for ax, B in zip(axes[0], bs):
        for draft, g in m[m.batch == B].groupby("draft", sort=False):
            ax.plot(g.k, g.speedup_measured_model, "-", color="C0", lw=1, label=f"model, wall ({draft})")
            ax.plot(g.k, g.speedup_measured, "o", color="C0", ms=4, label=f"measured, wall ({draft})")
            if g.cpu_speedup_measured.notna().any():
                ax.plot(g.k, g.cpu_speedup_measured_model, "--", color="C1", lw=1, label="model, CPU time")
                ax.plot(g.k, g.cpu_speedup_measured, "s", color="C1", ms=3, mfc="none", label="measured, CPU time")
        ax.axhline(1.0, color="0.3", ls=":", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(m.k.unique()), [str(k) for k in sorted(m.k.unique())])
        ax.set_xlabel("draft length k")
        ax.set_title(f"batch {B}")
    axes[0][0].set_ylabel("speedup over target-only")
    axes[0][0].legend(loc="best")
    fig.suptitle("memory-bound pair: measured vs cost model", fontsize=9)
    return _save(fig, Path(out), "membound_speedup", res.meta_of("measured.csv"), formats)


def membound_md(res) -> str:
    m = rows_of(res)
    out = [f"Memory-bound pair, {results_line(res.meta_of('measured.csv'))}.", "",
           "| draft | k | B | alpha_hat | S measured (wall) | S model (wall) | error | S measured (CPU) | "
           "S model (CPU) | error (CPU) | outside forwards (share of a round) |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in m.itertuples():
        out.append(f"| {r.draft} | {r.k} | {r.batch} | {r.alpha_hat:.3f} | {r.speedup_measured:.3f} | "
                   f"{r.speedup_measured_model:.3f} | {r.err_measured_model:.1%} | {r.cpu_speedup_measured:.3f} | "
                   f"{r.cpu_speedup_measured_model:.3f} | {r.cpu_err_measured_model:.1%} | "
                   f"{getattr(r, 'overhead_share_round', float('nan')):.1%} |")
    e, c = m.err_measured_model, m.cpu_err_measured_model
    out += ["", f"Model error over {len(m)} cells: wall median {e.median():.1%}, worst {e.max():.1%}; "
            f"CPU time median {c.median():.1%}, worst {c.max():.1%}.  Best measured speedup: wall "
            f"{m.speedup_measured.max():.3f}, CPU time {m.cpu_speedup_measured.max():.3f}.", ""]
    return "\n".join(out)


FIGURES = (("membound_speedup", _has, fig_speedup),)
TABLES = (("membound", _has, membound_md, "membound.md"),)
