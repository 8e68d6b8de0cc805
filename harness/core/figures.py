"""Shared plotting and saving: one matplotlib set-up, one figure writer, one line of provenance under a table.

    plt = pyplot()                                     # the Agg backend, the project's font sizes
    save_figure(fig, out, "speedup", meta, ("png", "pdf"))  # atomic, provenance in each file's metadata
"""
from __future__ import annotations

from pathlib import Path

from harness.core.provenance import atomic_savefig

__all__ = ["pyplot", "save_figure", "results_line", "md_table"]


def pyplot():
    """matplotlib's pyplot on the Agg backend (no screen), with the project's font sizes."""
    import matplotlib  # heavy: loaded on first use only
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plt.rcParams.update({"font.size": 8, "axes.titlesize": 9, "legend.fontsize": 7, "figure.dpi": 150})
    return plt


def save_figure(fig, out: Path, name: str, meta: dict, formats) -> list[str]:
    """Write ``fig`` as ``out/name.<fmt>`` for each format (tight layout, room for a footer line)."""
    paths = []
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    for fmt in formats:
        paths.append(str(atomic_savefig(fig, out / f"{name}.{fmt}", meta)))
    return paths


def results_line(meta: dict) -> str:
    """Where a table's numbers come from: the stored results' name, commit, seed and time of creation."""
    commit = (meta.get("commit") or "unknown")[:10] + ("+dirty" if meta.get("dirty") else "")
    name = meta.get("config", {}).get("name", "?")
    return (f"drawn from the stored results of sweep `{name}` (commit {commit}, seed {meta.get('seed')}, "
            f"created {meta.get('created_utc')}, schema {meta.get('schema_version', 0)})")


def md_table(rows: list[dict], cols: list[str]) -> str:
    """A Markdown table of ``rows`` over ``cols`` (floats to 3 significant digits, missing or NaN cells empty)."""
    def cell(v):
        if v is None or (isinstance(v, float) and v != v):
            return ""
        return f"{v:.3g}" if isinstance(v, float) else str(v)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(cell(r.get(c)) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"
