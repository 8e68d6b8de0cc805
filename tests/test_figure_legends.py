"""Figures get the error bars their data has and a legend entry for every mark (issue 40, item 8): drawn from the
committed results, the figure objects inspected before they are written."""
import pathlib

import pandas as pd

import harness.speedup.report.cli as report
import harness.verify.report as vreport
from harness.core.figures import pyplot

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _capture(monkeypatch, module):
    figs = []

    def keep(fig, path, meta=None, **kw):
        figs.append(fig)
        return pathlib.Path(path)
    monkeypatch.setattr(module, "atomic_savefig", keep)
    return figs


def test_speedup_vs_alpha_has_spread_bars_and_a_legend_for_alpha_equals_c(monkeypatch, tmp_path):
    figs = _capture(monkeypatch, report)
    res = report.SweepResults.load(ROOT / "results" / "sweep" / "default")
    assert res.measured.speedup_spread.notna().any()
    report.fig_speedup_vs_alpha(pyplot(), res, tmp_path, ("png",))
    fig = figs[0]
    labels = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    assert any("= c" in lab for lab in labels) and "S = 1 (target-only)" in labels
    assert any(lab.startswith("bar: spread of S") for lab in labels)
    bars = [c for ax in fig.axes for c in ax.containers if c.__class__.__name__ == "ErrorbarContainer"]
    points = sum(len(c.get_offsets()) for ax in fig.axes for c in ax.collections
                 if c.__class__.__name__ == "PathCollection")
    assert bars and sum(len(c.lines[2][0].get_segments()) for c in bars) == points  # a bar on every measured point


def test_positions_figure_has_a_legend_for_its_symbol_colours(monkeypatch, tmp_path):
    figs = _capture(monkeypatch, vreport)
    dist = pd.read_parquet(ROOT / "results" / "verify" / "distributions.parquet")
    d = dist[dist.role.isin(["reference"])]
    vreport._grid_figure(d, vreport._residual_panel, 2.4, "positions", tmp_path / "positions.png", {})
    labels = [t.get_text() for leg in figs[0].legends for t in leg.get_texts()]
    assert labels == [f"symbol {s}" for s in sorted(d.symbol.unique())]
