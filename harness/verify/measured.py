"""The measured false-inconclusive rate of the default `verify` command, as `verify`'s summary.md quotes it.

``python -m harness calibrate --inconclusive --out results/calibrate`` (:mod:`harness.verify.calibrate_inconclusive`)
simulates whole default commands from the exact laws and commits the rates to
``results/calibrate/inconclusive_default/rates.csv``; :func:`measured_line` reads its per-command row back, so the
report states the measured figure (named, with its source) beside the planner's normal approximation.  Kept apart
from the calibration (which imports the whole pipeline) so the report can import it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import pandas as pd

__all__ = ["NAME", "MEASURED", "STOP_MEASURED", "measured_line", "stop_measured_line"]

NAME = "inconclusive_default"  # results/calibrate/<NAME>
MEASURED = Path(__file__).resolve().parents[2] / "results" / "calibrate" / NAME / "rates.csv"
# the default since issue 42 (stop at the need): the exact-law runs at their caps and the real-model run, per command
STOP_MEASURED = Path(__file__).resolve().parents[2] / "results" / "calibrate" / "stop_at_need" / "real.csv"


def measured_line(path: Path = MEASURED) -> Optional[str]:
    """The measured per-command false-inconclusive rate of the default command, in words, from the committed
    calibration ``path``; None without it (a missing or unreadable file)."""
    row = _command_row(path, lambda t: t.runs.str.startswith("reference"), ("inconclusive", "inconclusive_cp_high"))
    if row is None:
        return None
    k, n, high = row
    return (f"measured at the default configuration: {k} of {n:,} simulated default commands (the reference run "
            f"of every default exact-law scenario drawn from its exact law and judged by this certificate code; not "
            f"the real-model scenario, which has no enumerable law here) ended "
            f"inconclusive: P(inconclusive | lossless) per command ≤ {high:.2g} (exact Clopper–Pearson 95 %; "
            f"results/calibrate/{NAME}/rates.csv, `python -m harness calibrate --inconclusive`)")


def stop_measured_line(path: Path = STOP_MEASURED) -> Optional[str]:
    """The measured per-command false-inconclusive rate of the default command, which stops each exact-law run at
    the need (`python experiments/stop_at_need.py`: the exact-law runs at their caps, paired with the real-model
    run's certificate on the exact pair); None without it."""
    row = _command_row(path, lambda t: True, ("not_certified", "cp_high"))
    if row is None:
        return None
    k, n, high = row
    return (f"measured at the default configuration: {k} of {n:,} simulated default commands (every default "
            f"exact-law scenario's reference run, and the real-model run on the exact transformer pair, each at its "
            f"stop-at-need cap, where alone it can end inconclusive, drawn from its exact law and judged by this "
            f"certificate code) ended inconclusive: P(inconclusive | lossless) per command ≤ {high:.2g} (exact "
            f"Clopper–Pearson 95 %; results/calibrate/stop_at_need/real.csv, `python experiments/stop_at_need.py`)")


def _command_row(path: Path, select, columns: tuple) -> Optional[tuple]:
    """(count, commands, upper bound) from the first per-command row of the rates table ``path`` that ``select``
    keeps, ``columns`` naming the count and the bound; None for a missing or unreadable file."""
    try:
        t = pd.read_csv(path)
        r = t[(t.level == "command") & select(t)].iloc[0]
        return int(r[columns[0]]), int(r.commands), float(r[columns[1]])
    except (OSError, ValueError, KeyError, IndexError, AttributeError, TypeError):
        return None
