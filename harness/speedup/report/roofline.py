"""Figures of the roofline speedup model, drawn from a results folder's ``roofline.csv`` alone.

    roofline_speedup_vs_batch   S against batch (log), one panel per (scenario, context), one line per
                                algorithm at its best k for each batch; S = 1 dashed, the crossover
                                batch marked (|) and labelled
    roofline_optimal_k          the best k against batch, per scenario, one line per (algorithm, context);
                                k = 0 drawn where no k gains (speculation off)
    roofline_goodput            goodput (emitted tokens per second, all sequences) against batch at the best
                                k, per (scenario, context), with target-only decoding
    roofline_fidelity           predicted against published speculative speedups (log axes, one colour per
                                source, y = x and +-20 % dashed, S = 1 lines; a row whose sign of S - 1 the
                                model gets wrong is drawn as an x), from ``fidelity_published.csv``

``roofline.csv`` is written by ``python -m harness.speedup.roofline.fidelity`` (published scenarios),
``python -m harness tune`` (a pair on a machine) and ``experiments/gpu_sweep.sh`` (costs measured with
CUDA events: rows with ``source`` = 'measured-gpu' get "measured on GPU" in every title).  Registered in
:mod:`harness.speedup.report.cli`'s FIGURES; drawn with its ``_save`` (provenance of the stored results only).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from harness.speedup.roofline.speedup import crossover_batch
from harness.core.figures import save_figure as _save
from harness.core.provenance import checked_provenance, read_table_csv

__all__ = ["FIGURES", "load_grid", "load_fidelity", "best_by_batch", "marker"]


def _stored(res, name: str) -> pd.DataFrame:
    """A stored table of the results folder (its provenance checked), or an empty frame when it is not there."""
    p = Path(res.path) / name
    if not p.exists():
        return pd.DataFrame()
    checked_provenance(p)
    return read_table_csv(p)


def load_grid(res) -> pd.DataFrame:
    """The stored grid, rows that do not fit in the machine's memory left out."""
    g = _stored(res, "roofline.csv")
    return g[g.fits.astype(bool)] if "fits" in g else g


def _applies(res) -> bool:
    return len(load_grid(res)) > 0


def marker(grid: pd.DataFrame) -> str:
    """' (measured on GPU)' when the costs behind the grid were measured on a GPU, else ' (roofline)'."""
    src = set(grid.get("source", pd.Series(["roofline"])).astype(str))
    return " — measured on GPU" if "measured-gpu" in src else (" — measured here" if "measured" in src else " — roofline")


def best_by_batch(g: pd.DataFrame) -> pd.DataFrame:
    """Per batch, the row of the k with the largest S (ties: smallest k)."""
    g = g.sort_values(["batch", "speedup", "k"], ascending=[True, False, True])
    return g.groupby("batch", as_index=False).first()


_STYLE = {"block": "--"}  # block's E is the chain's (a lower bound): its line lies on the chain's


def _panels(grid):
    return [(sc, L, g) for (sc, L), g in grid.groupby(["scenario", "context"], sort=True)]


def _colors(plt, names):
    cmap = plt.get_cmap("tab10")
    return {a: cmap(i % 10) for i, a in enumerate(names)}


def _grid_fig(plt, n, ncols=4):
    rows = (n + ncols - 1) // ncols
    fig, axes = plt.subplots(rows, min(n, ncols), figsize=(3.0 * min(n, ncols), 2.7 * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, axes.flat


def fig_speedup_vs_batch(plt, res, out, formats):
    grid = load_grid(res)
    cols = _colors(plt, list(dict.fromkeys(grid.algorithm)))
    panels = _panels(grid)
    fig, axes = _grid_fig(plt, len(panels))
    for ax, (sc, L, g) in zip(axes, panels):
        for algo, ga in g.groupby("algorithm", sort=False):
            b = best_by_batch(ga)
            ax.plot(b.batch, b.speedup, "o" + _STYLE.get(algo, "-"), ms=2.5, lw=1, color=cols[algo],
                    label=f"{algo} (best k)")
            x = crossover_batch(b.batch, b.speedup)
            if np.isfinite(x):
                ax.axvline(x, color=cols[algo], ls=":", lw=0.8)
                ax.annotate(f"{x:.0f}", (x, 1.0), textcoords="offset points", xytext=(2, 4), fontsize=6,
                            color=cols[algo])
        ax.axhline(1.0, color="k", ls="--", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set(title=f"{sc}, context {L}", xlabel="batch B", ylabel="speedup S")
        ax.legend(loc="best")
    fig.suptitle("Speedup vs batch (S = 1 crossover marked)" + marker(grid), fontsize=9)
    return _save(fig, Path(out), "roofline_speedup_vs_batch", res.meta, formats)


def fig_optimal_k(plt, res, out, formats):
    grid = load_grid(res)
    scen = sorted(grid.scenario.unique())
    fig, axes = _grid_fig(plt, len(scen), ncols=3)
    for ax, sc in zip(axes, scen):
        g = grid[grid.scenario == sc]
        for (algo, L), ga in g.groupby(["algorithm", "context"], sort=False):
            b = best_by_batch(ga)
            k = np.where(b.speedup > 1.0, b.k, 0)
            ax.step(b.batch, k, where="mid", lw=1, label=f"{algo}, L={L}")
        ax.set_xscale("log", base=2)
        ax.set(title=sc, xlabel="batch B", ylabel="best k (0: speculation off)")
        ax.legend(loc="best", fontsize=5)
    fig.suptitle("Optimal k vs batch" + marker(grid), fontsize=9)
    return _save(fig, Path(out), "roofline_optimal_k", res.meta, formats)


def fig_goodput(plt, res, out, formats):
    grid = load_grid(res)
    cols = _colors(plt, list(dict.fromkeys(grid.algorithm)))
    panels = _panels(grid)
    fig, axes = _grid_fig(plt, len(panels))
    for ax, (sc, L, g) in zip(axes, panels):
        ar = g.groupby("batch", as_index=False).goodput_ar.first()
        ax.plot(ar.batch, ar.goodput_ar, "k-", lw=1.2, label="target-only")
        for algo, ga in g.groupby("algorithm", sort=False):
            b = best_by_batch(ga)
            ax.plot(b.batch, b.goodput_spec, "o" + _STYLE.get(algo, "-"), ms=2.5, lw=1, color=cols[algo], label=f"{algo} (best k)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set(title=f"{sc}, context {L}", xlabel="batch B", ylabel="goodput (tokens/s)")
        ax.legend(loc="best")
    fig.suptitle("Goodput: emitted tokens per second, all sequences" + marker(grid), fontsize=9)
    return _save(fig, Path(out), "roofline_goodput", res.meta, formats)


def load_fidelity(res) -> pd.DataFrame:
    """The published speculative speedups of the evaluation rows with a prediction (fidelity_published.csv; a
    table without a split column counts whole), or an empty frame."""
    t = _stored(res, "fidelity_published.csv")
    t = t[(t.quantity == "speedup") & t.predicted.notna()] if "quantity" in t else t.iloc[:0]
    t = t[t.split == "evaluation"] if "split" in t else t
    return t.assign(sign_ok=t.sign_ok.astype(str).str.lower() == "true") if len(t) else t


def fig_fidelity(plt, res, out, formats):
    t = load_fidelity(res)
    groups = list(dict.fromkeys(t.group))
    cols = _colors(plt, groups)
    fig, ax = plt.subplots(figsize=(5.2, 4.6))
    lo, hi = 0.8 * min(t.measured.min(), t.predicted.min()), 1.25 * max(t.measured.max(), t.predicted.max())
    x = np.geomspace(lo, hi, 50)
    ax.plot(x, x, "k-", lw=0.8)
    for f in (0.8, 1.2):
        ax.plot(x, f * x, "k--", lw=0.5)
    ax.axhline(1.0, color="grey", lw=0.6, ls=":")
    ax.axvline(1.0, color="grey", lw=0.6, ls=":")
    for gname in groups:
        g = t[t.group == gname]
        ok, bad = g[g.sign_ok], g[~g.sign_ok]
        ax.plot(ok.measured, ok.predicted, "o", ms=4, color=cols[gname], alpha=0.8, label=f"{gname} ({len(g)})")
        if len(bad):
            ax.plot(bad.measured, bad.predicted, "x", ms=7, mew=1.5, color=cols[gname])
    err = (t.predicted / t.measured - 1).abs()
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set(xlim=(lo, hi), ylim=(lo, hi), xlabel="measured speedup (published)", ylabel="predicted speedup (roofline)",
           title=f"{len(t)} published speedups (evaluation rows) from {t.group.nunique()} sources: |error| median {100 * err.median():.1f} %, "
                 f"worst {100 * err.max():.0f} %;\nsign of S-1 wrong at {int((~t.sign_ok).sum())} (x)")
    ax.title.set_fontsize(7)
    ax.legend(loc="upper left", fontsize=6)
    return _save(fig, Path(out), "roofline_fidelity", res.meta, formats)


FIGURES = (
    ("roofline_fidelity", lambda res: len(load_fidelity(res)) > 0, fig_fidelity),
    ("roofline_speedup_vs_batch", _applies, fig_speedup_vs_batch),
    ("roofline_optimal_k", _applies, fig_optimal_k),
    ("roofline_goodput", _applies, fig_goodput),
)
