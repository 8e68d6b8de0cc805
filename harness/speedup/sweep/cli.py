"""`python -m harness sweep`: speedup as a function of alpha, c and k — model grid, measured runs, cost curves.

A sweep is data: ``harness/configs/sweep/default.toml`` (commented) and overlays on it, read with
:func:`harness.core.config.read_toml` and laid over strictly (:func:`harness.core.config.overlay`: an unknown key is
an error).  The plan is a list of cells (:class:`harness.speedup.sweep.suites.Cell`); each cell writes one JSON
file under ``results/sweep/<name>/cells/<suite>/`` (atomic write), named by a hash of its settings and holding its
*key* (:func:`cell_key`: a fingerprint of the project's code by content, the settings and the seed), so
a re-run skips every cell already computed by the same code, recomputes a cell whose key differs, and an
interrupt loses at most the cell in flight.  A reused cell keeps its own provenance.  A cell's
seed is :func:`harness.core.config.derive_seed` of the sweep's seed and the cell's id.  After the cells,
:func:`finalize` turns the stored cells into tables (``measured.csv``, ``timings.csv``, ``profiles.csv``,
``grid.parquet``, ``fidelity.json``; :mod:`harness.speedup.sweep.tables`) that carry provenance, and writes
``meta.json``; ``python -m harness report`` draws from those alone.

The suites (grid, synthetic, real, profile) and how a cell of each is computed live in
:mod:`harness.speedup.sweep.suites` (the registry ``SUITES``).
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Optional

import numpy as np
import pandas as pd
import torch

from harness.core.backends import SerialBackend, TaskLost, add_backend_arguments, check_backend_options, make_backend
from harness.core.config import SWEEP_DIR, derive_seed, overlay, read_toml
from harness.core.atomic import staged_report
from harness.core.fingerprint import code_fingerprint, fingerprint, short
from harness.core import jsonfile
from harness.core.jsonfile import read_json
from harness.core.provenance import (atomic_write_csv, atomic_write_json, atomic_write_parquet, check_schema, metadata,
                                     read_provenance, sidecar_path)
from harness.speedup.sweep.suites import SUITES, Cell
from harness.speedup.sweep.tables import StoredCell, fidelity, measured_row, profiles_table, timings_table
from harness.core.errors import UsageError
from harness.core.options import THREADS_PER_CORE, check_option, check_out, check_unique
from harness.core.outdir import claim_out, own_subfolder, resolve_out
from specimpl.errors import check_arg
from harness.speedup.report.cli import make_report

__all__ = ["add_arguments", "run", "load_config", "plan", "run_cell", "cell_key", "store_cell", "read_cell",
           "not_owned",
           "finalize", "DEFAULT_CONFIG"]

DEFAULT_CONFIG = SWEEP_DIR / "default.toml"


# -- configuration --------------------------------------------------------------------------------
def _read(path: Path) -> dict:
    path = Path(path)
    if path.suffix == ".json" and path.is_file():
        try:
            data = jsonfile.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise UsageError(f"`--config` {str(path)!r} is not valid JSON: {e}") from None
        if not isinstance(data, dict):
            raise UsageError(f"`--config` {str(path)!r} must hold a JSON object; got {type(data).__name__}")
        return data
    return read_toml(path, "`--config`")


def _check(cfg: dict, source: str = "the sweep config") -> None:
    """The whole config, before any cell runs; UsageError naming ``source`` and the key."""
    try:
        check_arg(isinstance(cfg["suites"], list) and len(cfg["suites"]) > 0, "suites", cfg["suites"],
                  f"a non-empty list drawn from {list(SUITES)}")
        bad = [s for s in cfg["suites"] if s not in SUITES]
        check_arg(not bad, "suites", cfg["suites"], f"a list drawn from {list(SUITES)}")
        dup = sorted({s for s in cfg["suites"] if cfg["suites"].count(s) > 1})
        check_arg(not dup, "suites", cfg["suites"], "a list naming each suite once")
        check_arg(isinstance(cfg["name"], str) and cfg["name"].strip() not in ("", ".", "..") and "/" not in cfg["name"]
                  and "\\" not in cfg["name"], "name", cfg["name"], "a folder name (not empty, '.' or '..', no '/')")
        check_arg(isinstance(cfg["seed"], int) and not isinstance(cfg["seed"], bool) and cfg["seed"] >= 0, "seed",
                  cfg["seed"], "an integer >= 0")
        most = THREADS_PER_CORE * (os.cpu_count() or 1)  # as --threads (harness.core.options.check_threads)
        check_arg(isinstance(cfg["threads"], int) and not isinstance(cfg["threads"], bool) and 1 <= cfg["threads"] <= most,
                  "threads", cfg["threads"], f"an integer in [1, {most}] on this machine ({THREADS_PER_CORE} per core)")
        check_arg(cfg["device"] in ("cpu", "cuda") or str(cfg["device"]).startswith("cuda:"), "device", cfg["device"],
                  "'cpu' or 'cuda'")
        if str(cfg["device"]).startswith("cuda") and not torch.cuda.is_available():
            raise ValueError("`device` is 'cuda' but torch.cuda.is_available() is False on this machine")
        for name, suite in SUITES.items():
            suite.check(cfg[name])
    except UsageError:
        raise
    except (ValueError, TypeError, KeyError) as e:
        msg = f"lacks the key {e.args[0]!r}" if isinstance(e, KeyError) else str(e)
        raise UsageError(f"{source}: {msg}") from None


def load_config(path: Optional[Path] = None, overrides: Optional[dict] = None) -> dict:
    """The default config, overlaid with ``path`` (TOML or JSON) and then ``overrides``; every key and value
    checked (UsageError, a ValueError, naming the file and key)."""
    cfg = read_toml(DEFAULT_CONFIG, "sweep file")
    sources = [str(DEFAULT_CONFIG)]
    if path is not None and Path(path).resolve() != DEFAULT_CONFIG.resolve():
        cfg = overlay(cfg, _read(path), strict=True, source=str(path))
        sources = [str(path)]
    if overrides:
        cfg = overlay(cfg, overrides, strict=True, source="the command line")
        sources.append("the command line")
    _check(cfg, " + ".join(sources))
    return cfg


def plan(cfg: dict) -> list[Cell]:
    """Cells in run order, suite by suite as ``cfg['suites']`` lists them."""
    return [cell for name in cfg["suites"] for cell in SUITES[name].cells(cfg[name], cfg)]


# -- cells ----------------------------------------------------------------------------------------
def cell_key(cell: Cell, cfg: dict, code: Optional[str] = None) -> str:
    """Fingerprint of what computes ``cell``: the project's code (by content), the cell's settings and seed
    (:mod:`harness.core.fingerprint`).  A stored cell with another key is recomputed, never reused."""
    return fingerprint(code or code_fingerprint(), cell.suite, cell.settings, derive_seed(cfg["seed"], cell.id))


def run_cell(cell: Cell, cfg: dict, code: Optional[str] = None) -> dict:
    """Compute one cell; returns its JSON-able record (provenance and :func:`cell_key` included)."""
    seed = derive_seed(cfg["seed"], cell.id)
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    rec: dict[str, Any] = {"id": cell.id, "suite": cell.suite, "params": cell.settings,
                           "key": cell_key(cell, cfg, code)}
    rec.update(SUITES[cell.suite].run(cell.params, seed))
    rec["seconds"] = time.perf_counter() - t0
    rec["loadavg_before_after"] = [load0, os.getloadavg()[0]]
    rec["meta"] = metadata(cell.settings, seed)
    return rec


def _cell_path(out: Path, cell) -> Path:
    return out / "cells" / cell.suite / f"{cell.id}.json"


def store_cell(out: Path, cell: Cell, rec: dict) -> Path:
    """Write a cell atomically; a DataFrame in its record (the grid's table) goes to a parquet file beside
    it, written first, and the record names that file (``<key>_file``)."""
    path = _cell_path(out, cell)
    frames = [key for key, v in rec.items() if isinstance(v, pd.DataFrame)]
    check_arg(len(frames) <= 1, "rec", f"DataFrames under {frames}", "at most one DataFrame per cell")
    for key in frames:
        atomic_write_parquet(path.with_suffix(".parquet"), rec.pop(key), rec["meta"])
        rec[f"{key}_file"] = path.with_suffix(".parquet").name
    return atomic_write_json(path, rec)


def read_cell(path: Path) -> dict:
    """A stored cell's record, refused (UsageError, one line naming the file) when its provenance names a
    ``schema_version`` this harness does not read (:func:`harness.core.provenance.check_schema`)."""
    rec = read_json(path, "stored cell")
    check_schema(rec.get("meta") if isinstance(rec, dict) else None, path)
    return rec


def _stored_key(out: Path, cell: Cell) -> Optional[str]:
    """The key a stored cell was computed under (None: not stored, unreadable, or written without a key);
    a cell of an unknown ``schema_version`` is refused (:func:`read_cell`), never silently recomputed."""
    path = _cell_path(out, cell)
    if not path.is_file():  # absent, or not a regular file (a FIFO would block the read): not stored
        return None
    try:
        rec = jsonfile.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(rec, dict):
        return None
    check_schema(rec.get("meta"), path)
    return rec.get("key")


def _is_current(out: Path, cell: Cell, cfg: dict, code: str) -> bool:
    """Whether ``cell`` is stored under the current :func:`cell_key` (same code, settings and seed)."""
    return _cell_path(out, cell).exists() and _stored_key(out, cell) == cell_key(cell, cfg, code)


def _stored(out: Path, cells: list[Cell], current: Optional[set] = None) -> tuple[list[StoredCell], list[str]]:
    """The stored cells of ``cells`` (only those whose ids are in ``current``, when given) and the ids of
    the others."""
    recs, missing = [], []
    for cell in cells:
        path = _cell_path(out, cell)
        if path.exists() and (current is None or cell.id in current):
            recs.append(StoredCell.from_record(read_cell(path)))
        else:
            missing.append(cell.id)
    return recs, missing


# -- tables from stored cells ---------------------------------------------------------------------
TABLE_FILES = ("grid.parquet", "measured.csv", "timings.csv", "fidelity.json", "profiles.csv", "meta.json",
               "measured.csv.meta.json", "timings.csv.meta.json", "profiles.csv.meta.json")


def _cells_provenance(recs: list[StoredCell], keys: dict) -> list[dict]:
    """Each distinct (commit, dirty, key) the stored cells were computed under, with their count: a cell
    reused by a rerun keeps the provenance of the run that computed it."""
    groups: dict[tuple, int] = {}
    for r in recs:
        g = (r.meta.get("commit"), r.meta.get("dirty"), short(r.key), r.key is not None and r.key == keys.get(r.id))
        groups[g] = groups.get(g, 0) + 1
    return [{"commit": c, "dirty": d, "key": k, "current_code": cur, "cells": n}
            for (c, d, k, cur), n in groups.items()]


def _sweep_meta(cfg: dict, cells: list[Cell], recs: list[StoredCell], missing: list[str], keys: dict) -> dict:
    """The tables' provenance.  ``commit``/``dirty`` are those of the cells when all share one (a rerun that
    only reuses cells does not re-stamp them with the current commit), else the current ones; per-cell
    provenance is under ``sweep.cells_provenance`` (and measured.csv's ``commit`` column)."""
    meta = metadata(cfg, cfg["seed"])
    prov = _cells_provenance(recs, keys)
    if len({(p["commit"], p["dirty"]) for p in prov}) == 1:
        meta["tables_built_by"] = {"commit": meta["commit"], "dirty": meta["dirty"]}
        meta["commit"], meta["dirty"] = prov[0]["commit"], prov[0]["dirty"]
    loads = [x for r in recs for x in r.loadavg_before_after]
    meta["sweep"] = {"cells_planned": len(cells), "cells_stored": len(recs), "missing": missing,
                     "cells_provenance": prov,
                     "loadavg_1min": {"median": float(np.median(loads)) if loads else None,
                                      "max": float(np.max(loads)) if loads else None},
                     "cell_seconds_total": float(sum(r.seconds for r in recs))}
    return meta


def finalize(out: Path, cfg: dict, cells: list[Cell], current_only: bool = True,
             config_suites: Optional[list] = None) -> dict:
    """Build the tables from the stored cells of this plan (cells missing from disk are listed, not faked);
    with ``current_only``, cells stored under another :func:`cell_key` (other code) count as missing.
    The tables are staged and moved into ``out`` together (:func:`harness.core.atomic.staged_report`);
    ``config_suites`` (the sweep file's suites, when ``cfg['suites']`` is a ``--suites`` subset): the tables
    also fed by the suites not run are kept as they are (:func:`not_owned`)."""
    code = code_fingerprint()
    keys = {c.id: cell_key(c, cfg, code) for c in cells}
    current = {c.id for c in cells if _stored_key(out, c) == keys[c.id]} if current_only else None
    recs, missing = _stored(out, cells, current)
    meta = _sweep_meta(cfg, cells, recs, missing, keys)
    meta["sweep"]["config_suites"] = list(config_suites or cfg["suites"])  # what the report may draw from cells
    keep = not_owned(out, cfg["suites"], config_suites or cfg["suites"])
    if keep:  # meta.json describes this run; the tables it keeps keep their own provenance, recorded here too
        meta["kept_tables"] = {name: kept_provenance(out / name) for name in sorted(keep)}
    skipped = [s for s in (config_suites or cfg["suites"]) if s not in cfg["suites"]]
    previous = read_provenance(out / "meta.json") if skipped and (out / "meta.json").is_file() else None
    if previous:  # the run that stored the cells of the suites this one skipped (report: SweepResults.meta_for_suite)
        meta["previous_run"] = previous
    kept_files = keep | {sidecar_path(n).name for n in keep if n.endswith(".csv")}  # a kept CSV keeps its sidecar
    with staged_report(out, "sweep", TABLE_FILES, keep=kept_files) as staged:
        written = _write_tables(out, staged.dir, recs, meta)
        for name, path in list(written.items()):
            if Path(path).name in keep:  # the previous table stays as it is
                Path(path).unlink()
                sidecar_path(path).unlink(missing_ok=True)
                del written[name]
    for name in sorted(keep):
        print(f"sweep: kept {out / name} (also fed by suite(s) this run did not run; a sweep of every suite "
              "rebuilds it)", file=sys.stderr)
    return {"written": {k: str(staged.final(v)) for k, v in written.items()}, "missing": missing, "meta": meta,
            "kept": sorted(keep)}


def kept_provenance(path: Path) -> Optional[dict]:
    """The provenance a kept table carries (its CSV / parquet header, or fidelity.json's ``meta``): the run that
    made it, which a partial rerun does not re-stamp (harness.speedup.report reads it per table)."""
    meta = read_provenance(path)
    if Path(path).name == "fidelity.json" and isinstance(meta, dict):
        meta = meta.get("meta")
    return meta if isinstance(meta, dict) else None


# which cell feed each table is built from (meta.json describes the run itself and is always rewritten)
TABLE_FEEDS = {"grid.parquet": "grid", "measured.csv": "measured", "timings.csv": "measured",
               "fidelity.json": "measured", "profiles.csv": "profiles"}


def not_owned(out: Path, run_suites, config_suites) -> set:
    """Tables in ``out`` a run of ``run_suites`` must leave as they are: those fed by a suite of the sweep
    file (``config_suites``) that the run does not run (a partial ``--suites`` run rebuilds only the
    tables all of whose suites it ran; a table not there yet is written from what the run has)."""
    skipped = [s for s in config_suites if s not in run_suites]
    return {name for name, feed in TABLE_FEEDS.items()
            if (Path(out) / name).is_file() and any(feed in SUITES[s].feeds for s in skipped)}


def _write_tables(out: Path, d: Path, recs: list[StoredCell], meta: dict) -> dict:
    """The sweep's tables from ``recs`` (cells stored under ``out``), written into folder ``d``."""
    written = {}
    grid = [r for r in recs if "grid" in r.feeds]
    if grid:
        gpath = out / "cells" / grid[-1].suite / f"{grid[-1].id}.parquet"
        written["grid"] = atomic_write_parquet(d / "grid.parquet", pd.read_parquet(gpath), meta)
    mrecs = [r for r in recs if "measured" in r.feeds]
    if mrecs:
        measured = pd.DataFrame([measured_row(r) for r in mrecs])
        written["measured"] = atomic_write_csv(d / "measured.csv", measured, meta)
        written["timings"] = atomic_write_csv(d / "timings.csv", timings_table(mrecs), meta)
        fid = fidelity(measured)
        meta["fidelity"] = fid
        written["fidelity"] = atomic_write_json(d / "fidelity.json", {"fidelity": fid, "meta": meta})
    profs = profiles_table([r for r in recs if "profiles" in r.feeds and "profile" in r.payload])
    if profs is not None:
        written["profiles"] = atomic_write_csv(d / "profiles.csv", profs, meta)
    written["meta"] = atomic_write_json(d / "meta.json", meta)
    return written


# -- command line ---------------------------------------------------------------------------------
def add_arguments(parser) -> None:
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG,
                        help="sweep file (TOML/JSON overlay on harness/configs/sweep/default.toml)")
    parser.add_argument("--out", type=Path, default=None, help="results directory (default: runs/sweep/<name>-<hash of the "
                        "options>; the committed default sweep is written only by --out results/sweep/default)")
    parser.add_argument("--device", default=None, help="cpu or cuda (overrides the config)")
    parser.add_argument("--seed", default=None, help="the sweep's seed (overrides the config): another seed is an "
                        "independent run, other prompts and other draws")
    parser.add_argument("--suites", default=None, help="comma-separated subset of grid,synthetic,real,profile")
    parser.add_argument("--redo", action="store_true", help="recompute cells that are already stored")
    parser.add_argument("--list", action="store_true", help="print the plan (stored / to do) and exit")
    parser.add_argument("--tables", action="store_true",
                        help="only rebuild the tables from the cells already stored (run nothing)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--report", action="store_true", help="draw the figures and tables when done "
                        "(python -m harness report on the results)")
    add_backend_arguments(parser, "processes computing cells (default 1: cells are timings, and cells measured side by side on one "
                                  "machine contend for its cores; a cluster gives each its own)")


def _cell_task(task: tuple) -> dict:
    """One cell in a worker (:mod:`harness.core.backends`): its record, computed as :func:`run_cell` does."""
    cell, cfg, code = task
    if cfg["device"] == "cpu":
        torch.set_num_threads(int(cfg["threads"]))
    return run_cell(cell, cfg, code)


def _needs_gpu(cell: Cell) -> bool:
    return str(getattr(cell.params, "device", "cpu")).startswith("cuda")


def _compute(out: Path, cfg: dict, todo: list[Cell], code: str, bar, backend) -> None:
    """Compute and store ``todo``: here, one by one, or one cell per task on ``backend`` (cells that need a
    GPU ask for one); each cell is stored by this process as it arrives."""
    if backend is None or isinstance(backend, SerialBackend):
        for cell in todo:
            bar.set_postfix_str(cell.id[:40])
            store_cell(out, cell, run_cell(cell, cfg, code))
            bar.update()
        return
    for gpu in (False, True):
        part = [c for c in todo if _needs_gpu(c) == gpu]
        for i, rec in backend.map_unordered(_cell_task, [(c, cfg, code) for c in part], num_gpus=1 if gpu else 0):
            if isinstance(rec, TaskLost):
                raise RuntimeError(f"sweep cell {part[i].id}: {rec.reason} ({rec.attempts} attempts)")
            store_cell(out, part[i], rec)
            bar.update()


def _run_cells(out: Path, cfg: dict, cells: list[Cell], todo: list[Cell], progress: bool, code: str,
               backend=None, config_suites: Optional[list] = None) -> bool:
    """Compute and store the cells ``todo`` (keyed on ``code``, the run's :func:`code_fingerprint`) here or on
    ``backend``; False when interrupted (the stored cells are kept)."""
    from tqdm import tqdm
    bar = tqdm(total=len(todo), desc="sweep", unit="cell", disable=not progress, file=sys.stderr)
    try:
        _compute(out, cfg, todo, code, bar, backend)
    except KeyboardInterrupt:
        bar.close()
        done = sum(_cell_path(out, c).exists() for c in cells)
        print(f"\ninterrupted: {done}/{len(cells)} cells are stored in {out}; run the same command again to resume",
              file=sys.stderr)
        if done:
            finalize(out, cfg, cells, config_suites=config_suites)  # tables of what is stored, the missing cells listed
        return False
    bar.close()
    return True


def _print_fidelity(fidelity_: dict) -> None:
    for suite, fid in fidelity_.items():
        for basis, f in fid.items():
            if basis == "cells":
                continue
            when = "own clock" if basis == "clock" else "CPU time"
            print(f"fidelity, {suite} ({f['analytic']['cells']} cells, {when}): |pred - meas| / meas  analytic "
                  f"median {f['analytic']['median']:.1%} worst {f['analytic']['worst']:.1%};  measured model median "
                  f"{f['measured_model']['median']:.1%} worst {f['measured_model']['worst']:.1%}", file=sys.stderr)


def _overrides(args) -> dict:
    """The config keys the options override; UsageError naming the option."""
    over = {}
    if args.device is not None:
        check_option(bool(args.device.strip()), "--device", args.device, "'cpu', 'cuda' or 'cuda:N'")
        over["device"] = args.device
    if getattr(args, "seed", None) is not None:
        check_option(args.seed.strip().isdigit(), "--seed", args.seed, "an integer >= 0")
        over["seed"] = int(args.seed)
    if args.suites is not None:
        suites = [s.strip() for s in args.suites.split(",") if s.strip()]
        check_option(bool(suites) and all(s in SUITES for s in suites), "--suites", args.suites,
                     f"a comma-separated list drawn from {','.join(SUITES)}")
        check_unique(suites, "--suites")
        over["suites"] = suites
    return over


def run(args) -> int:
    check_out(args.out)
    check_backend_options(args.backend, args.workers, args.address)
    over = _overrides(args)
    cfg = load_config(args.config, over)
    # the file's own suites (every other override applied): a --suites run keeps the tables of the others
    config_suites = load_config(args.config, {k: v for k, v in over.items() if k != "suites"})["suites"]
    try:
        cells = plan(cfg)  # the whole plan, before the first cell
    except ValueError as e:
        raise UsageError(f"{args.config}: {e}") from None
    # --out, or runs/sweep/<name>-<hash of the options>: locked, but by --list, which only reads it
    out = (resolve_out if args.list else claim_out)(args, "sweep", default_name=cfg["name"])
    if not args.list:  # stored cells live inside --out: a linked cells/ or cells/<suite> is removed, not followed
        for sub in ["cells", *(f"cells/{s}" for s in dict.fromkeys(c.suite for c in cells))]:
            own_subfolder(out / sub)
    code = code_fingerprint()
    current = {c.id for c in cells if _is_current(out, c, cfg, code)}
    stale = [c for c in cells if c.id not in current and _cell_path(out, c).exists()]
    todo = [c for c in cells if args.redo or c.id not in current]
    if args.list:
        for c in cells:
            print(("todo  " if c in todo else "stored") + f"  {c.suite:9s} {c.id}"
                  + ("  (stored by other code: recomputed)" if c in stale else ""))
        return 0
    if args.tables:
        todo = []
    elif stale:
        print(f"sweep: {len(stale)} stored cell(s) were computed by other code or settings (their key differs); "
              "recomputing them", file=sys.stderr)
    if cfg["device"] == "cpu":
        torch.set_num_threads(int(cfg["threads"]))
    print(f"sweep {cfg['name']!r}: {len(cells)} cells, {len(cells) - len(todo)} stored, {len(todo)} to run -> {out}",
          file=sys.stderr)
    with make_backend(args.backend, args.workers or 1, args.address) as backend:
        if not _run_cells(out, cfg, cells, todo, not args.no_progress, code, backend, config_suites):
            return 130
    res = finalize(out, cfg, cells, current_only=not args.tables, config_suites=config_suites)
    _print_fidelity(res["meta"].get("fidelity", {}))
    for v in res["written"].values():
        print(f"wrote {v}", file=sys.stderr)
    if args.report:
        for paths in make_report(out).values():
            for path in ([paths] if isinstance(paths, str) else paths):
                print(f"wrote {path}", file=sys.stderr)
    return 0
