"""`python -m harness report`: figures and tables of a sweep, drawn from its stored results only.

Reads ``results/sweep/<name>/{grid.parquet, measured.csv, profiles.csv, meta.json}`` (written by
``python -m harness sweep``) and writes, under ``<results>/figures/`` (PNG and PDF, provenance in
the footer and in the PNG's metadata):

    speedup_vs_alpha   analytic S(alpha) for several k at fixed c, measured points overlaid
    speedup_heatmap    S over (alpha, c) at the best k and at a fixed k, S = 1 contour marked,
                       measured cells overlaid (filled: measured S > 1, crosses: S < 1)
    optimal_k          the best k over (alpha, c); grey where no k gains
    pred_vs_meas       predicted against measured speedup, analytic and measured models, y = x
    tokens_per_call    tokens per target call against k, measured and E(alpha, k)
    cost_curves        per-call forward time against tokens scored and batch size (profile suite)

and the tables ``measured_table.tex`` (real-model runs, booktabs), ``synthetic_table.tex``,
``fidelity.md`` (median and worst |predicted - measured| / measured) and ``summary.md`` (the
negative-speedup cells, machine load).  Curves of the analytic model are evaluated from
:mod:`harness.speedup.costmodel` at stored values (alpha_hat, c); nothing is run or timed here.

Reproducible: what is written depends on the stored results alone.  The provenance figures and tables
carry (footer, PNG metadata, a first line in each table) is that of the results they were drawn from,
and no date or machine detail of the report run is written, so the report of one set of results is the
same bytes wherever and whenever it is made.

The results are read into one :class:`SweepResults`.  :data:`FIGURES` and :data:`TABLES` are the
registries of what is drawn (each with the condition under which it applies), and :data:`SUITE_STYLES`
says how each measured suite is shown (markers, grouping, its LaTeX table), so no drawing code branches
on a suite's name.
"""
from __future__ import annotations

from harness.core.jsonfile import read_json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import pandas as pd

from harness.speedup import costmodel as cm
from harness.core.config import RESULTS
from harness.core.atomic import staged_report
from harness.core.figures import pyplot as _plt, results_line, save_figure as _save
from harness.core.provenance import atomic_savefig, atomic_write_text, check_schema, checked_provenance, read_table_csv
from harness.speedup.sweep.tables import PREDICTIONS, fidelity
from harness.core.errors import UsageError
from harness.core.options import check_option, check_out
from harness.core.outdir import claim_out

__all__ = ["add_arguments", "run", "make_report", "draw_report", "SweepResults", "FIGURES", "TABLES", "SUITE_STYLES"]

K_SHOWN = (1, 2, 4, 8)
CLOCK_MARKERS = {"wall": "o", "hybrid": "D", "spin": "v", "virtual": "x"}
COST_CURVE_SUITE = "profile"  # the suite whose profiles are cost curves (the others' are in-cell profiles)


@dataclass(frozen=True)
class SweepResults:
    """A sweep's stored results: ``meta.json`` and the tables (None where the sweep wrote none)."""

    path: Path
    meta: dict
    grid: Optional[pd.DataFrame]
    measured: Optional[pd.DataFrame]
    profiles: Optional[pd.DataFrame]
    table_meta: dict = field(default_factory=dict)  # table file -> the provenance it carries

    def meta_of(self, *tables: str) -> dict:
        """The provenance of the first of ``tables`` that carries one (a table kept by a partial rerun keeps
        the run that made it), else meta.json's: what an output drawn from those tables is stamped with."""
        run = (self.meta.get("commit"), self.meta.get("created_utc"))
        for name in tables:
            t = self.table_meta.get(name)
            if t:  # made by the run meta.json describes: meta.json's (it holds the whole sweep's summary)
                return self.meta if (t.get("commit"), t.get("created_utc")) == run else t
        return self.meta

    def meta_for_suite(self, suite: str) -> dict:
        """The provenance of the run that stored ``suite``'s cells: meta.json's when that run ran the suite, else
        (a partial ``--suites`` run skipped it) the earlier run meta.json records as ``previous_run``."""
        meta = self.meta
        while suite not in meta.get("config", {}).get("suites", []) and isinstance(meta.get("previous_run"), dict):
            meta = meta["previous_run"]
        return meta

    @classmethod
    def load(cls, path) -> "SweepResults":
        path = Path(path)
        if not (path / "meta.json").exists():
            raise FileNotFoundError(f"`--results` {str(path)!r} holds no sweep results (no meta.json); "
                                    "run `python -m harness sweep` first")
        meta = read_json(path / "meta.json", "`--results`")
        check_schema(meta, path / "meta.json")
        tables = {name: _read_table(path / name) for name in ("grid.parquet", "measured.csv", "profiles.csv")}
        return cls(path, meta, *(tables[n][0] for n in ("grid.parquet", "measured.csv", "profiles.csv")),
                   {name: t[1] for name, t in tables.items() if t[1]})

    @property
    def has_measured(self) -> bool:
        return self.measured is not None and len(self.measured) > 0

    def suite(self, name: str) -> pd.DataFrame:
        """The measured rows of suite ``name`` (an empty frame when there are none)."""
        if self.measured is None:
            return pd.DataFrame()
        return self.measured[self.measured.suite == name]


@dataclass(frozen=True)
class Panel:
    """One panel of the speedup-vs-alpha figure: measured ``points`` at cost ratio ``c``."""

    c: float
    points: pd.DataFrame
    title: str  # formatted with the panel's c
    markers: dict  # clock -> marker


@dataclass(frozen=True)
class SuiteStyle:
    """How a measured suite is shown.

    panels        measured rows -> panels of the speedup-vs-alpha figure
    marker        heatmap marker of a cell with measured S >= 1; ``below`` of one with S < 1
    by            the column whose groups are the lines of the tokens-per-call figure
    alpha_is_set  True: the group's value is the set alpha (the line is drawn at it), else alpha_hat
    table         (key, file, caption, label) of its LaTeX table
    """

    panels: Callable[[pd.DataFrame], list]
    marker: str
    below: str
    by: str
    alpha_is_set: bool
    table: tuple




def _read_table(path: Path) -> tuple:
    """A stored CSV or parquet table and the provenance it carries ((None, None) when absent); refused when its
    provenance names an unknown schema_version."""
    if not path.exists():
        return None, None
    meta = checked_provenance(path)
    return (pd.read_parquet(path) if path.suffix == ".parquet" else read_table_csv(path)), meta


def _k_colors(plt):
    cmap = plt.get_cmap("viridis")
    return {k: cmap(i / max(len(K_SHOWN) - 1, 1) * 0.9) for i, k in enumerate(K_SHOWN)}


# -- figures --------------------------------------------------------------------------------------
def _synthetic_panels(m: pd.DataFrame) -> list[Panel]:
    cs = sorted(m["c_set"].unique()) if len(m) else [0.1]  # no synthetic runs: the analytic curves at c = 0.1
    return [Panel(c, m[np.isclose(m.c_set, c)] if len(m) else m, "synthetic: c = {:.3g}", CLOCK_MARKERS)
            for c in cs]


def _real_panels(m: pd.DataFrame) -> list[Panel]:
    if len(m):  # the 1-layer draft and its noise mixtures share one network, so one c
        m = m[m.draft.str.startswith("draft") | (m.draft == "uniform")]
    if not len(m):
        return []
    return [Panel(float(m["c_profiled"].median()), m, "tiny HF pair (1-layer draft, noised): c ≈ {:.2g}",
                  {clock: "s" for clock in CLOCK_MARKERS})]


def _speedup_panel(ax, panel: Panel, grid, col) -> None:
    title_c = panel.c
    if grid is not None:  # the stored grid at the c nearest to this panel's
        cg = grid["c"].unique()
        c_near = float(cg[np.argmin(np.abs(np.log(cg) - np.log(panel.c)))])
        for k in K_SHOWN:
            g = grid[(grid.c == c_near) & (grid.k == k)].sort_values("alpha")
            ax.plot(g.alpha, g.speedup, color=col[k], lw=1.2, label=f"analytic k={k}")
        title_c = c_near
    pts = panel.points
    for k in K_SHOWN if len(pts) else ():
        for clock, mk in panel.markers.items():
            m = pts[(pts.k == k) & (pts.clock == clock)]
            if len(m):
                ax.scatter(m.alpha_hat, m.speedup_measured, color=col[k], s=18 if mk != "D" else 12,
                           edgecolor=None if mk == "x" else "k", lw=0.4, zorder=3, marker=mk,
                           label=f"measured k={k}" + ("" if clock == "wall" else f" ({clock})"))
                _spread_bars(ax, m, col[k])
    ax.axhline(1.0, color="0.3", ls="--", lw=0.8, label="S = 1 (target-only)")
    ax.axvline(title_c, color="0.6", ls=":", lw=0.8, label=r"$\alpha$ = c (k = 1 breaks even)")
    ax.set_xlabel(r"acceptance $\alpha$ (measured $\hat\alpha$ for points)")
    ax.set_ylabel("speedup S over target-only")
    ax.set_title(panel.title.format(title_c))
    ax.set_xlim(0, 1)


def _spread_bars(ax, m: pd.DataFrame, color) -> None:
    """Error bars of measured points: the spread of S over the cell's timed passes (measured.csv's
    ``speedup_spread``, max − min of the per-pass S over ``repeats``), drawn as a bar of that length centred on
    the point; none where the column is absent (results stored before it)."""
    if "speedup_spread" not in m or not m.speedup_spread.notna().any():
        return
    ax.errorbar(m.alpha_hat, m.speedup_measured, yerr=m.speedup_spread.fillna(0) / 2, fmt="none", ecolor=color,
                elinewidth=0.7, capsize=1.5, zorder=2, label="bar: spread of S over repeats (max − min)")


def fig_speedup_vs_alpha(plt, res: SweepResults, out, formats):
    panels = [p for name, style in SUITE_STYLES.items() for p in style.panels(res.suite(name))]
    ncols = 2 if len(panels) > 1 else 1
    nrows = -(-len(panels) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.6 * ncols, 2.9 * nrows + 0.6), squeeze=False)
    for ax in axes.ravel()[len(panels):]:
        ax.set_visible(False)
    col = _k_colors(plt)
    for ax, panel in zip(axes.ravel(), panels):
        _speedup_panel(ax, panel, res.grid, col)
    handles = {}
    for ax in axes.ravel():
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    order = sorted(handles, key=lambda lab: (not lab.startswith("analytic"), not lab.startswith("measured"), lab))
    nleg = -(-len(order) // 4)
    fig.legend([handles[lab] for lab in order], order, loc="lower center", ncol=4, fontsize=6, frameon=False,
               bbox_to_anchor=(0.5, 0.018))
    fig.tight_layout(rect=(0, 0.02 + 0.028 * nleg * 2 / nrows, 1, 1))
    return [str(atomic_savefig(fig, out / f"speedup_vs_alpha.{fmt}", res.meta_of("grid.parquet", "measured.csv"))) for fmt in formats]


def _grid_matrix(grid, k=None):
    g = grid if k is None else grid[grid.k == k]
    if k is None:
        g = g.loc[g.groupby(["alpha", "c"])["speedup"].idxmax()]
    piv_s = g.pivot(index="c", columns="alpha", values="speedup")
    piv_k = g.pivot(index="c", columns="alpha", values="k")
    return piv_s.columns.values, piv_s.index.values, piv_s.values, piv_k.values


def _measured_on_heatmap(ax, res: SweepResults, k: int) -> None:
    """Measured cells at draft length ``k`` over a heatmap: open markers S >= 1, crosses S < 1."""
    for suite, style in SUITE_STYLES.items():
        mm = res.suite(suite)
        mm = mm[mm.k == k] if len(mm) else mm
        if not len(mm):
            continue
        cx = mm.c_set.where(mm.c_set.notna(), mm.c_profiled)
        up = mm.speedup_measured >= 1
        ax.scatter(mm.alpha_hat[up], cx[up], marker=style.marker, facecolor="w", edgecolor="k", s=16, lw=0.6,
                   label=f"{suite}: measured S ≥ 1")
        ax.scatter(mm.alpha_hat[~up], cx[~up], marker=style.below, color="k", s=16, lw=0.8,
                   label=f"{suite}: measured S < 1")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="lower right", fontsize=6)


def fig_heatmap(plt, res: SweepResults, out, formats, k_fixed=4):
    from matplotlib.colors import TwoSlopeNorm
    grid = res.grid
    fig, axes = plt.subplots(1, 2, figsize=(7.6, 3.2))
    for ax, k in zip(axes, (None, k_fixed)):
        a, c, S, _ = _grid_matrix(grid, k)
        norm = TwoSlopeNorm(vmin=float(S.min()), vcenter=1.0, vmax=max(float(S.max()), 1.01))
        im = ax.pcolormesh(a, c, S, cmap="RdBu", norm=norm, shading="auto")
        cs = ax.contour(a, c, S, levels=[1.0], colors="k", linewidths=1.2)
        ax.clabel(cs, fmt={1.0: "S = 1"}, fontsize=7)
        ax.contour(a, c, S, levels=[1.5, 2, 3, 5], colors="0.3", linewidths=0.5, linestyles=":")
        ax.set_yscale("log")
        ax.set_xlabel(r"acceptance $\alpha$")
        ax.set_ylabel(r"cost ratio $c = T_{draft}/T_{target}$")
        ax.set_title("S at the best k (1..%d)" % int(grid.k.max()) if k is None else f"S at k = {k}")
        fig.colorbar(im, ax=ax, label="speedup S")
        if res.measured is not None and k is not None:
            _measured_on_heatmap(ax, res, k)
    return _save(fig, out, "speedup_heatmap", res.meta_of("grid.parquet"), formats)


def fig_optimal_k(plt, res: SweepResults, out, formats):
    from matplotlib.colors import BoundaryNorm
    grid = res.grid
    a, c, S, K = _grid_matrix(grid)
    kmax = int(grid.k.max())
    Km = np.ma.masked_where(S < 1.0, K)
    fig, ax = plt.subplots(figsize=(4.4, 3.3))
    ax.pcolormesh(a, c, np.where(S < 1.0, 1.0, np.nan), cmap="Greys", vmin=0, vmax=4, shading="auto")
    bounds = np.arange(0.5, kmax + 1.5)
    im = ax.pcolormesh(a, c, Km, cmap="viridis", norm=BoundaryNorm(bounds, 256), shading="auto")
    ax.contour(a, c, S, levels=[1.0], colors="k", linewidths=1.0)
    ax.plot([0, 1], [0.01, 1], alpha=0)  # keep limits
    ax.set_yscale("log")
    ax.set_xlabel(r"acceptance $\alpha$")
    ax.set_ylabel(r"cost ratio $c$")
    ax.set_title("best k (grey: no k gains, S < 1)")
    fig.colorbar(im, ax=ax, label="optimal k", ticks=[1, 2, 4, 8, 12, 16][: 6 if kmax >= 16 else 4])
    return _save(fig, out, "optimal_k", res.meta_of("grid.parquet"), formats)


def fig_pred_vs_meas(plt, res: SweepResults, out, formats):
    measured = res.measured
    fig, ax = plt.subplots(figsize=(4.2, 4.0))
    lo = float(min(measured.speedup_measured.min(), measured.speedup_analytic.min(),
                   measured.speedup_measured_model.min())) * 0.9
    hi = float(max(measured.speedup_measured.max(), measured.speedup_analytic.max(),
                   measured.speedup_measured_model.max())) * 1.1
    ax.plot([lo, hi], [lo, hi], color="k", lw=0.8, label="y = x")
    ax.axhline(1, color="0.6", ls=":", lw=0.7)
    ax.axvline(1, color="0.6", ls=":", lw=0.7)
    colors = plt.get_cmap("tab10")
    for i, (group, m) in enumerate(measured.groupby("group")):
        color = colors(i)
        ax.scatter(m.speedup_measured, m.speedup_analytic, marker="^", facecolor="none", edgecolor=color, s=18,
                   lw=0.7, label=f"{group}: analytic (median err {m.err_analytic.median():.1%})")
        ax.scatter(m.speedup_measured, m.speedup_measured_model, marker="o", color=color, s=12,
                   label=f"{group}: measured model (median err {m.err_measured_model.median():.1%})")
    from matplotlib.ticker import FixedLocator, NullFormatter, ScalarFormatter
    ticks = [t for t in (0.1, 0.2, 0.3, 0.5, 0.7, 1, 1.5, 2, 3, 5, 7, 10) if lo <= t <= hi]
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(FixedLocator(ticks))
        axis.set_major_formatter(ScalarFormatter())
        axis.set_minor_formatter(NullFormatter())
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured speedup (tokens/s ratio)")
    ax.set_ylabel("predicted speedup")
    ax.set_title("predicted vs measured")
    ax.legend(loc="lower right", fontsize=5.5)
    return _save(fig, out, "pred_vs_meas", res.meta_of("measured.csv"), formats)


def fig_tokens_per_call(plt, res: SweepResults, out, formats):
    suites = [s for s in SUITE_STYLES if len(res.suite(s))]
    fig, axes = plt.subplots(1, len(suites), figsize=(3.8 * len(suites), 3.0), squeeze=False)
    for ax, suite in zip(axes[0], suites):
        m, style = res.suite(suite), SUITE_STYLES[suite]
        groups = list(m.groupby(style.by))
        cmap = plt.get_cmap("plasma")
        for i, (name, g) in enumerate(groups):
            col = cmap(i / max(len(groups), 1) * 0.9)
            g = g.groupby("k", as_index=False).agg(tpc=("tokens_per_target_call", "mean"),
                                                   alpha=("alpha_hat", "mean"))
            ax.scatter(g.k, g.tpc, color=col, s=16, zorder=3)
            ks = np.arange(1, int(g.k.max()) + 1)
            a = float(name) if style.alpha_is_set else float(g.alpha.mean())
            ax.plot(ks, cm.expected_tokens(min(a, 1.0), ks), color=col, lw=1,
                    label=(rf"$\alpha$={a:g}" if style.alpha_is_set else f"{name} ($\\hat\\alpha$={a:.2f})"))
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(m.k.unique()))
        ax.set_xticklabels([str(k) for k in sorted(m.k.unique())])
        ax.set_xlabel("draft length k")
        ax.set_ylabel("tokens per target call")
        ax.set_title(f"{suite}: points measured, lines E(alpha, k)")
        ax.legend(fontsize=6)
    return _save(fig, out, "tokens_per_call", res.meta_of("measured.csv"), formats)


def fig_cost_curves(plt, res: SweepResults, out, formats):
    profiles = res.profiles
    f = profiles[(profiles.suite == COST_CURVE_SUITE) & (profiles.op.str.endswith(".forward"))]
    if not len(f):
        return []
    models = list(f.model.unique())
    fig, axes = plt.subplots(1, 2, figsize=(7.6, 3.0))
    cmap = plt.get_cmap("tab10")
    for i, mname in enumerate(models):
        g = f[f.model == mname]
        for B, gb in g.groupby("batch"):
            gb = gb.sort_values("n")
            axes[0].plot(gb.n, gb.median_s * 1e3, color=cmap(i), lw=0.8, alpha=0.3 + 0.7 * (B == g.batch.min()),
                         marker=".", label=f"{mname}, B={B}" if B in (g.batch.min(), g.batch.max()) else None)
        g1 = g[g.n == g.n.min()].sort_values("batch")
        axes[1].errorbar(g1.batch, g1.median_s * 1e3, yerr=[(g1.median_s - g1.q25_s) * 1e3, (g1.q75_s - g1.median_s) * 1e3],
                         color=cmap(i), marker="o", ms=3, lw=1, label=f"{mname} (n={int(g.n.min())})")
    axes[0].set_xlabel("tokens scored per call n")
    axes[0].set_ylabel("forward time [ms] (median)")
    axes[0].set_title("T(n, B): tokens scored")
    axes[0].legend(fontsize=6)
    axes[1].set_xscale("log", base=2)
    axes[1].set_xlabel("batch size B")
    axes[1].set_ylabel("forward time [ms] (median, IQR)")
    dev = ", ".join(sorted(f.device.unique()))
    axes[1].set_title(f"T(1, B): batch size ({dev})")
    axes[1].legend(fontsize=6)
    return _save(fig, out, "cost_curves", res.meta_of("profiles.csv"), formats)


# -- tables ---------------------------------------------------------------------------------------
def _tex_escape(s) -> str:
    return str(s).replace("_", r"\_").replace("%", r"\%").replace("+", "+")


def _speedup_cell(bold_below_one: bool) -> Callable:
    return lambda v: (r"\textbf{%.2f}" if (bold_below_one and v < 1) else "%.2f") % v


# (column of measured.csv, header, format) of the LaTeX tables
TEX_COLUMNS = (
    ("draft", "draft", _tex_escape), ("k", "$k$", lambda v: str(int(v))),
    ("alpha_hat", r"$\hat\alpha$", "{:.2f}".format), ("acceptance_rate", "acc./drafted", "{:.2f}".format),
    ("mean_acceptance_length", "mean acc. len.", "{:.2f}".format), ("c_profiled", "$c$", "{:.3f}".format),
    ("tokens_per_s_ar", "tok/s target", "{:.0f}".format), ("tokens_per_s_spec", "tok/s spec.", "{:.0f}".format),
    ("speedup_measured", "$S$ meas.", _speedup_cell(True)), ("speedup_analytic", "$S$ analytic", _speedup_cell(False)),
    ("speedup_measured_model", "$S$ model", _speedup_cell(False)),
)




def latex_table(m: pd.DataFrame, caption: str, label: str, meta: Optional[dict] = None) -> str:
    """A booktabs table of measured rows (one per draft and k); ``meta`` (the results' provenance) goes into
    a leading comment line.  Bold: a measured speedup below 1."""
    lines = [f"% {results_line(meta)}"] if meta is not None else []
    lines += [r"\begin{table}[t]", r"\centering", r"\small", r"\begin{tabular}{l" + "r" * (len(TEX_COLUMNS) - 1) + "}",
              r"\toprule", " & ".join(h for _, h, _ in TEX_COLUMNS) + r" \\", r"\midrule"]
    for r in m.sort_values(["draft", "k"]).itertuples():
        lines.append(" & ".join(fmt(getattr(r, c)) for c, _, fmt in TEX_COLUMNS) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", rf"\caption{{{caption}}}", rf"\label{{{label}}}", r"\end{table}", ""]
    return "\n".join(lines)


def fidelity_md(measured: pd.DataFrame) -> str:
    """Median / worst |predicted - measured| / measured per group of runs and time basis
    (:func:`harness.speedup.sweep.tables.fidelity`, the figures of ``fidelity.json``, as a markdown table)."""
    lines = ["| runs | time | cells | analytic median | analytic worst | measured model median | measured model worst "
             "| accounting median | accounting worst |", "|---|---|---|---|---|---|---|---|---|"]
    for name, fid in fidelity(measured).items():
        for basis in ("clock", "cpu"):
            if "analytic" not in fid.get(basis, {}):
                continue
            f = fid[basis]
            lines.append(f"| {name} | {basis} | {f['analytic']['cells']} | " + " | ".join(
                f"{f[m]['median']:.1%} | {f[m]['worst']:.1%}" for m in PREDICTIONS) + " |")
    return "\n".join(lines) + "\n"


def summary_md(measured: pd.DataFrame, meta: dict) -> str:
    sw = meta.get("sweep", {})
    la = sw.get("loadavg_1min", {})
    m = meta.get("machine", {})
    out = [f"# Sweep `{meta.get('config', {}).get('name', '?')}`", "",
           f"- commit {meta.get('commit')} (dirty: {meta.get('dirty')}), created {meta.get('created_utc')}",
           f"- machine: {m.get('cpu')}, {m.get('cpus_available')} cores, torch {meta.get('versions', {}).get('torch')}"
           + (f", GPU {m['gpu']}" if m.get("gpu") else ", no GPU"),
           f"- cells stored {sw.get('cells_stored')} of {sw.get('cells_planned')}, compute time "
           f"{sw.get('cell_seconds_total', 0) / 60:.1f} min",
           f"- machine load during the cells (1-min load average, {m.get('cpus_available')} cores): median "
           f"{la.get('median')}, max {la.get('max')}", "", "## Fidelity: |predicted - measured| / measured", "",
           fidelity_md(measured), "## Negative-speedup cells (measured S < 1)", ""]
    neg = measured[measured.speedup_measured < 1].sort_values(["group", "c_profiled", "alpha_hat", "k"])
    if len(neg):
        out.append(f"{len(neg)} of {len(measured)} measured cells.")
        out.append("")
        out.append("| runs | draft | alpha_hat | c (profiled) | k | S measured | S analytic | S model |")
        out.append("|---|---|---|---|---|---|---|---|")
        for r in neg.itertuples():
            out.append(f"| {r.group} | {r.draft} | {r.alpha_hat:.2f} | {r.c_profiled:.3f} | {r.k} | "
                       f"{r.speedup_measured:.2f} | {r.speedup_analytic:.2f} | {r.speedup_measured_model:.2f} |")
    else:
        out.append("none")
    out.append("")
    return "\n".join(out)


# -- registries -----------------------------------------------------------------------------------
SUITE_STYLES = {
    "synthetic": SuiteStyle(_synthetic_panels, "o", "x", "alpha_set", True, (
        "synthetic_table", "synthetic_table.tex", "Synthetic-cost runs (set call costs, exact acceptance).",
        "tab:synthetic")),
    "real": SuiteStyle(_real_panels, "s", "+", "draft", False, (
        "measured_table", "measured_table.tex", "Speculative sampling with the shipped tiny pair: measured against "
        "target-only decoding (interleaved, same run). Bold: negative speedup.", "tab:measured")),
    "membound": SuiteStyle(lambda m: [], "D", "1", "draft", False, (  # its speedup figure: harness.speedup.report.membound
        "membound_table", "membound_table.tex", "The memory-bound pair (the tiny target widened, same law): "
        "measured against target-only decoding (interleaved, same run).", "tab:membound")),
}


@dataclass(frozen=True)
class Output:
    """One figure or table: written when ``applies(results)``; ``make(plt, results, out, formats)`` -> paths
    (figures) or ``make(results)`` -> text (tables, written to ``file``)."""

    name: str
    applies: Callable[[SweepResults], bool]
    make: Callable
    file: Optional[str] = None


def _has_grid(res: SweepResults) -> bool:
    return res.grid is not None


def _has_measured(res: SweepResults) -> bool:
    return res.has_measured


FIGURES = (
    Output("speedup_vs_alpha", lambda r: r.grid is not None or r.measured is not None, fig_speedup_vs_alpha),
    Output("speedup_heatmap", _has_grid, fig_heatmap),
    Output("optimal_k", _has_grid, fig_optimal_k),
    Output("pred_vs_meas", _has_measured, fig_pred_vs_meas),
    Output("tokens_per_call", _has_measured, fig_tokens_per_call),
    Output("cost_curves", lambda r: r.profiles is not None and "suite" in r.profiles, fig_cost_curves),
)


def _suite_table(suite: str, style: SuiteStyle) -> Output:
    key, file, caption, label = style.table
    return Output(key, lambda r: len(r.suite(suite)) > 0,
                  lambda r: latex_table(r.suite(suite), caption, label, r.meta_of("measured.csv")), file)


TABLES = tuple(_suite_table(s, st) for s, st in SUITE_STYLES.items()) + (
    Output("fidelity", _has_measured, lambda r: f"Fidelity, {results_line(r.meta_of('measured.csv'))}.\n\n" + fidelity_md(r.measured),
           "fidelity.md"),
    Output("summary", _has_measured, lambda r: summary_md(r.measured, r.meta_of("measured.csv")), "summary.md"),
)

from harness.speedup.report import algorithms as _algorithms  # noqa: E402  issue 12's suite (imports this module lazily)
FIGURES += tuple(Output(*f) for f in _algorithms.FIGURES)
TABLES += tuple(Output(*t) for t in _algorithms.TABLES)
from harness.speedup.report import roofline as _roofline  # noqa: E402  issue 14's roofline figures (roofline.csv)
FIGURES += tuple(Output(*f) for f in _roofline.FIGURES)
from harness.speedup.report import membound as _membound  # noqa: E402  issue 14's memory-bound pair
FIGURES += tuple(Output(*f) for f in _membound.FIGURES)
TABLES += tuple(Output(*t) for t in _membound.TABLES)


# -- driver ---------------------------------------------------------------------------------------
# The files a report writes (a folder's earlier report without a manifest is cleaned of these only).
REPORT_FILES = tuple(f"{f.name}.{ext}" for f in FIGURES for ext in ("png", "pdf", "svg", "eps", "ps")) + \
    tuple(t.file for t in TABLES)


def make_report(results: Path, out: Path = None, formats=("png", "pdf")) -> dict:
    """Draw every figure and write every table that applies to the results in ``results``; returns
    {name: path or [paths]}."""
    return draw_report(SweepResults.load(results), out, formats)


def draw_report(res: SweepResults, out: Path = None, formats=("png", "pdf")) -> dict:
    """:func:`make_report` of results already loaded (their schema checked before the output is claimed)."""
    out = res.path / "figures" if out is None else Path(out)
    plt = _plt()
    written = {}
    with staged_report(out, "report", REPORT_FILES) as staged:  # every file moves into out together
        for fig in FIGURES:
            if fig.applies(res):
                paths = fig.make(plt, res, staged.dir, formats)
                if paths:
                    written[fig.name] = paths
        for table in TABLES:
            if table.applies(res):
                written[table.name] = str(atomic_write_text(staged.dir / table.file, table.make(res)))
        plt.close("all")
    return {name: (str(staged.final(p)) if isinstance(p, str) else [str(staged.final(q)) for q in p])
            for name, p in written.items()}


def add_arguments(parser) -> None:
    parser.add_argument("--results", type=Path, default=RESULTS / "sweep" / "default",
                        help="a sweep's results directory (default results/sweep/default)")
    parser.add_argument("--out", type=Path, default=None,
                        help="where figures go (default: runs/report/<results>-<hash of the options>; the figures "
                             "beside committed results are redrawn only by --out <results>/figures)")
    parser.add_argument("--formats", default="png,pdf", help="comma-separated figure formats")


FORMATS = ("png", "pdf", "svg")


def check_arguments(args) -> tuple:
    """The options, checked before anything is drawn (UsageError naming the option); the formats."""
    results = Path(args.results)
    if not results.is_dir():
        raise UsageError(f"`--results` must be a sweep's results folder; got {str(results)!r}, which "
                         f"{'is not a folder' if results.exists() else 'does not exist'}")
    check_option((results / "meta.json").is_file(), "--results", str(results),
                 "a sweep's results folder (holding meta.json; run `python -m harness sweep` first)")
    formats = tuple(f.strip() for f in args.formats.split(",") if f.strip())
    check_option(bool(formats) and all(f in FORMATS for f in formats), "--formats", args.formats,
                 f"a comma-separated list drawn from {','.join(FORMATS)}")
    check_out(args.out)
    return formats


def run(args) -> int:
    formats = check_arguments(args)
    res = SweepResults.load(args.results)  # read (and its schema checked) before anything is written
    # --out, or runs/report/<results>-<hash>; locked.  Quiet: the tables are read (and a bad one refused, exit 2
    # on one line) while drawing; every file written is named below
    claim_out(args, "report", ("results",), quiet=True)
    written = draw_report(res, args.out, formats)
    for name, paths in written.items():
        for p in ([paths] if isinstance(paths, str) else paths):
            print(f"wrote {p}", file=sys.stderr)
    summ = Path(args.out or Path(args.results) / "figures") / "summary.md"
    if summ.exists():
        print(summ.read_text())
    return 0
