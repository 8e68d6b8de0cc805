"""A sweep cell (one unit of work, named by a hash of its settings) and a suite (one kind of cell)."""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any, Callable



__all__ = ["Cell", "Suite"]


@dataclass(frozen=True)
class Cell:
    """One unit of a sweep: ``id`` = readable name + hash of every setting (and the suite's name)."""

    suite: str
    id: str
    params: Any  # the suite's settings record

    @property
    def settings(self) -> dict:
        """The settings as stored in the cell's file (and hashed into its id)."""
        return {**asdict(self.params), "suite": self.suite}


def _hash(obj) -> str:
    return hashlib.sha1(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:10]


def _cell(suite: str, name: str, params) -> Cell:
    return Cell(suite, f"{name}-{_hash({**asdict(params), 'suite': suite})}", params)


# -- the registry -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Suite:
    """One kind of sweep cell.

    params    the settings record of its cells
    cells     (its table of the sweep file, the whole config) -> cells, in run order
    run       (settings, seed) -> payload (JSON-able; a DataFrame value is stored as parquet beside the cell)
    check     validates (and normalises) its table of the sweep file
    feeds     the sweep's tables its cells feed: 'grid' (grid.parquet), 'measured' (measured.csv,
              timings.csv, fidelity.json), 'profiles' (profiles.csv)
    """

    name: str
    params: type
    cells: Callable[[dict, dict], list]
    run: Callable[[Any, int], dict]
    check: Callable[[dict], None] = lambda table: None
    feeds: frozenset = frozenset()

    def params_of(self, settings: dict):
        return self.params.from_settings(settings)
