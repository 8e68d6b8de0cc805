"""Figures and table of the sweep's ``algorithms`` suite (chain, block and tree verification).

    algorithms_tokens_per_call   tokens per target call against alpha, one line per algorithm, one panel
                                 per k (synthetic cells: exact lines, measured points: timed runs hollow,
                                 the large untimed run filled)
    algorithms_speedup           wall-clock speedup over target-only against alpha, one line per algorithm,
                                 rows c (fixed), columns k; measured points and the cost model of
                                 :mod:`harness.speedup.costmodel_tree` (dashed)
    algorithms_tiny_pair         the tiny HF pair: tokens per target call and speedup against k
    algorithms.md                every row: n-gram scenarios (block vs token-level, measured vs exact,
                                 relative gain), synthetic and tiny-pair cells

Drawn from the suite's stored cells alone (:func:`harness.speedup.sweep.algorithms.algorithms_table`), via the
registries of :mod:`harness.speedup.report.cli`, which lists :data:`FIGURES` and :data:`TABLES` of this module.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from harness.speedup.sweep.algorithms import algorithms_table
from harness.core.figures import save_figure as save
from harness.core.figures import results_line

__all__ = ["FIGURES", "TABLES", "table_of", "algorithms_md"]


def table_of(res) -> pd.DataFrame:
    """The suite's rows for a :class:`harness.speedup.report.cli.SweepResults` (an empty frame when there are none)."""
    t = algorithms_table(Path(res.path), res.meta)
    return pd.DataFrame() if t is None else t


def _has(kind: str):
    def applies(res) -> bool:
        t = table_of(res)
        return len(t) > 0 and bool((t.kind == kind).any())
    return applies


def _colors(plt, names):
    cmap = plt.get_cmap("tab10")
    return {a: cmap(i % 10) for i, a in enumerate(names)}


def _save(fig, res, out, name, formats):
    return save(fig, Path(out), name, res.meta_for_suite("algorithms"), formats)


def fig_tokens_per_call(plt, res, out, formats):
    t = table_of(res)
    s = t[t.kind == "synthetic"]
    ks = sorted(s.k.unique())
    cols = _colors(plt, list(dict.fromkeys(s.algorithm)))
    fig, axes = plt.subplots(1, len(ks), figsize=(3.0 * len(ks), 3.0), squeeze=False, sharey=True)
    for ax, k in zip(axes[0], ks):
        for algo, g in s[s.k == k].groupby("algorithm", sort=False):
            g = g.groupby("alpha", as_index=False)[["exact_tokens_per_call", "tokens_per_call",
                                                      "count_tokens_per_call"]].mean()
            ax.plot(g.alpha, g.exact_tokens_per_call, color=cols[algo], lw=1, label=f"{algo} (exact)")
            ax.scatter(g.alpha, g.count_tokens_per_call, color=cols[algo], s=14, zorder=3)
            ax.scatter(g.alpha, g.tokens_per_call, facecolors="none", edgecolors=cols[algo], s=22, zorder=3)
        ax.set_title(f"k = {k}")
        ax.set_xlabel(r"$\alpha$ (token-level acceptance)")
    axes[0][0].set_ylabel("tokens per target call")
    axes[0][-1].legend(fontsize=6)
    fig.suptitle("Synthetic pairs: lines exact, filled points measured (untimed large run), hollow: timed runs")
    return _save(fig, res, out, "algorithms_tokens_per_call", formats)


def fig_speedup(plt, res, out, formats):
    t = table_of(res)
    s = t[t.kind == "synthetic"]
    cs, ks = sorted(s.c.unique()), sorted(s.k.unique())
    cols = _colors(plt, list(dict.fromkeys(s.algorithm)))
    fig, axes = plt.subplots(len(cs), len(ks), figsize=(3.0 * len(ks), 2.6 * len(cs)), squeeze=False, sharey=True)
    for i, c in enumerate(cs):
        for j, k in enumerate(ks):
            ax = axes[i][j]
            for algo, g in s[(s.c == c) & (s.k == k)].groupby("algorithm", sort=False):
                g = g.sort_values("alpha")
                ax.plot(g.alpha, g.speedup, "o-", color=cols[algo], ms=3, lw=1, label=f"{algo} measured")
                ax.plot(g.alpha, g.speedup_predicted_rescored, "--", color=cols[algo], lw=0.8)
            ax.axhline(1.0, color="grey", lw=0.6)
            ax.set_title(f"c = {c:g}, k = {k}")
            if i == len(cs) - 1:
                ax.set_xlabel(r"$\alpha$")
        axes[i][0].set_ylabel("speedup over target-only")
    axes[0][-1].legend(fontsize=6)
    fig.suptitle("Synthetic pairs: wall-clock speedup (medians, side by side); dashed: cost model")
    return _save(fig, res, out, "algorithms_speedup", formats)


def fig_tiny_pair(plt, res, out, formats):
    t = table_of(res)
    s = t[t.kind == "tiny"]
    cols = _colors(plt, list(dict.fromkeys(s.algorithm)))
    fig, axes = plt.subplots(1, 2, figsize=(7.0, 3.0), squeeze=False)
    for (src, algo), g in s.groupby(["source", "algorithm"], sort=False):
        g = g.sort_values("k")
        label = f"{algo} ({src})" if s.source.nunique() > 1 else algo
        axes[0][0].plot(g.k, g.tokens_per_call, "o-", color=cols[algo], ms=3, lw=1, label=label)
        axes[0][1].plot(g.k, g.speedup, "o-", color=cols[algo], ms=3, lw=1, label=label)
    for ax, ylab in zip(axes[0], ("tokens per target call", "speedup over target-only")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(s.k.unique()))
        ax.set_xticklabels([str(k) for k in sorted(s.k.unique())])
        ax.set_xlabel("draft length k (tree depth)")
        ax.set_ylabel(ylab)
    axes[0][1].axhline(1.0, color="grey", lw=0.6)
    axes[0][1].legend(fontsize=6)
    fig.suptitle("Tiny HF pair (tree attention: one target forward per round), measured")
    return _save(fig, res, out, "algorithms_tiny_pair", formats)


def _fmt(x, nd=3) -> str:
    return "–" if x is None or (isinstance(x, float) and not np.isfinite(x)) else f"{x:.{nd}f}"


def _scenario_md(s: pd.DataFrame) -> list[str]:
    lines = ["## n-gram scenarios: mean accepted drafts per round, measured (± chunk s.e.) vs exact", "",
             "| scenario | k | algorithm | measured | exact | z | gain over chain (measured / exact) | exact by |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for src, g in s.groupby("source", sort=False):
        chain = g[g.algorithm == "chain"].iloc[0] if (g.algorithm == "chain").any() else None
        for r in g.itertuples():
            z = (r.mean_accepted - r.exact_mean_accepted) / r.se_mean_accepted if r.se_mean_accepted > 0 else np.nan
            gain = "–"
            if chain is not None and r.algorithm != "chain" and chain.mean_accepted > 0:
                ge = r.exact_mean_accepted / chain.exact_mean_accepted - 1 if chain.exact_mean_accepted > 0 else np.nan
                gain = f"{r.mean_accepted / chain.mean_accepted - 1:+.1%} / " + ("–" if not np.isfinite(ge) else f"{ge:+.1%}")
            lines.append(f"| {src} | {r.k} | {r.algorithm} | {_fmt(r.mean_accepted)} ± {_fmt(r.se_mean_accepted)} | "
                         f"{_fmt(r.exact_mean_accepted)} | {_fmt(z, 1)} | {gain} | {r.exact_method} |")
    return lines + [""]


def _timed_md(s: pd.DataFrame, title: str) -> list[str]:
    lines = [title, "", "| cell | algorithm | k | tokens/call measured (timed; large run) | exact | speedup (median) "
             "| predicted (rescored; cached) |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in s.itertuples():
        cell = r.source if r.kind == "tiny" else f"alpha={r.alpha:g}, c={r.c:g}"
        count = getattr(r, "count_tokens_per_call", np.nan)
        pr, pc = getattr(r, "speedup_predicted_rescored", np.nan), getattr(r, "speedup_predicted_cached", np.nan)
        lines.append(f"| {cell} | {r.algorithm} | {r.k} | {_fmt(r.tokens_per_call, 2)}; {_fmt(count, 2)} | "
                     f"{_fmt(r.exact_tokens_per_call, 2)} | {_fmt(r.speedup, 2)} | {_fmt(pr, 2)}; {_fmt(pc, 2)} |")
    return lines + [""]


def algorithms_md(res) -> str:
    t = table_of(res)
    out = [f"# Chain, block and tree verification — {results_line(res.meta_for_suite('algorithms'))}", ""]
    if (t.kind == "scenario").any():
        out += _scenario_md(t[t.kind == "scenario"])
    if (t.kind == "synthetic").any():
        out += _timed_md(t[t.kind == "synthetic"], "## Synthetic-cost pairs (set call costs, exact alpha)")
    if (t.kind == "tiny").any():
        out += _timed_md(t[t.kind == "tiny"], "## Tiny HF pair")
    return "\n".join(out)


def _any(res) -> bool:
    return len(table_of(res)) > 0


# (name, applies, make) — wrapped into harness.speedup.report.cli.Output by harness.speedup.report.cli
FIGURES = (
    ("algorithms_tokens_per_call", _has("synthetic"), fig_tokens_per_call),
    ("algorithms_speedup", _has("synthetic"), fig_speedup),
    ("algorithms_tiny_pair", _has("tiny"), fig_tiny_pair),
)
TABLES = (("algorithms", _any, algorithms_md, "algorithms.md"),)
