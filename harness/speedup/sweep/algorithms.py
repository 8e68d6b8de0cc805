"""The sweep suite ``algorithms`` (issue 12): chain, block and tree verification, side by side.

Algorithms are named ``chain`` (token-level, the reference sampler), ``block`` (Sun et al. 2024,
:mod:`specimpl.block`), ``tree<n>`` (n i.i.d. chains verified by recursive rejection sampling,
:mod:`specimpl.tree`) and ``tree<n>-wor`` (the same tree drawn without replacement); k is the depth.
Three kinds of cell, listed in the sweep file's ``[algorithms]`` table:

    scenario   an n-gram scenario of ``make verify`` (its pair, controls, k, length, prompt, EOS): each
               algorithm draws ``sequences`` sequences in ``chunks`` calls; mean accepted drafts per
               round and tokens per target call, measured against the exact laws of
               :mod:`harness.laws.rounds`, with a chunk standard error.  No timing.
    synthetic  synthetic-cost n-gram pairs (:func:`harness.speedup.synthetic.synthetic_pair`: acceptance exactly
               alpha, draft cost c times the target's, calls that sleep): every algorithm at every k and
               target-only decoding, timed with ``time.perf_counter`` side by side in one cell (one
               warm-up run of each arm, then ``repeats`` rounds over the arms in rotated order; medians);
               tokens per target call measured (and in a large untimed run on a virtual clock) against
               exact; speedup measured against the cost model of :mod:`harness.speedup.costmodel_tree`.
    tiny       the shipped tiny HF pair with a draft variant: the same timed protocol (tree attention
               in one target forward per round); no exact law.

A cell's payload is ``rows``: one record per (algorithm, k) (:func:`algorithms_table` gathers them
with the cell's settings).  The suite is registered in :data:`harness.speedup.sweep.suites.SUITES` by
:func:`algorithms_suite`; the figures are in :mod:`harness.speedup.report.algorithms`.
"""
from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import pandas as pd
import torch

from harness.core.provenance import check_schema
from harness.core.jsonfile import read_json
from harness.laws.algorithms import Algorithm
from harness.speedup.sweep.cell import Cell, Suite
from harness.speedup.sweep.models import check_tiny_names, resolve_model
from harness.speedup.costmodel_tree import TimedTreeModel, tree_speedup
from harness.laws.rounds import ExactRounds, acceptance_law
from specimpl.errors import check_arg
from specimpl.sampling import SamplingConfig
from harness.laws.scenarios import load_scenario
from specimpl.autoregressive import autoregressive_generate
from harness.speedup.synthetic import CallCost, synthetic_pair
from harness.speedup.synthetic import VirtualClock, WallClock
from specimpl.ngram import context_of
from specimpl.hf import tiny_pair_prompts
from specimpl.tree_adapters import as_tree_model

__all__ = ["Algorithm", "AlgorithmParams", "algorithms_suite", "algorithms_table", "KINDS"]

KINDS = ("scenario", "synthetic", "tiny")


# -- cell settings ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class AlgorithmParams:
    """One cell of the suite; fields a kind does not use are None (they still enter the cell's hash)."""

    kind: str
    source: str  # scenario name, "synthetic", or the tiny pair's draft variant
    algorithms: list
    k: list
    sequences: Optional[int]
    chunks: Optional[int]
    alpha: Optional[float]
    c: Optional[float]
    target_ms: Optional[float]
    token_slope: Optional[float]
    vocab_size: Optional[int]
    support: Optional[int]
    count_sequences: Optional[int]
    batch: Optional[int]
    prompt_len: Optional[int]
    max_new_tokens: Optional[int]
    repeats: Optional[int]
    temperature: Optional[float]
    dtype: Optional[str]
    device: Optional[str]

    @classmethod
    def from_settings(cls, settings: dict) -> "AlgorithmParams":
        return cls(**{f.name: settings[f.name] for f in fields(cls)})


_SCENARIO_KEYS = ("sequences", "chunks")
_TIMED_KEYS = ("batch", "prompt_len", "max_new_tokens", "repeats", "temperature")
_SYNTHETIC_KEYS = ("target_ms", "token_slope", "vocab_size", "support", "count_sequences")


def _params(table: dict, kind: str, source: str, keys: tuple, **more) -> AlgorithmParams:
    vals = {f.name: None for f in fields(AlgorithmParams)}
    vals.update(kind=kind, source=source, algorithms=list(table["algorithms"]), k=list(table["k"]))
    vals.update({key: table[key] for key in keys})
    vals.update(more)
    return AlgorithmParams(**vals)


def _cells(table: dict, cfg: dict) -> list:

    def cell(name, p):  # id = readable name + hash of every setting and the suite's name, as the other suites
        digest = hashlib.sha1(json.dumps({**asdict(p), "suite": "algorithms"}, sort_keys=True, default=str).encode())
        return Cell("algorithms", f"{name}-{digest.hexdigest()[:10]}", p)

    out = []
    for s in table["scenarios"]:
        k = load_scenario(s).k
        out.append(cell(f"alg_scn_{s}", _params(table, "scenario", s, _SCENARIO_KEYS, k=[k])))
    for c in table["c"]:
        for a in table["alpha"]:
            out.append(cell(f"alg_syn_a{a:g}_c{c:g}", _params(table, "synthetic", "synthetic",
                                                              _TIMED_KEYS + _SYNTHETIC_KEYS, alpha=a, c=c)))
    for d in table["drafts"]:
        out.append(cell(f"alg_tiny_{d}".replace("+", "_").replace(":", "_").replace("[", "").replace("]", ""),
                        _params(table, "tiny", d, _TIMED_KEYS, dtype=table["dtype"], device=cfg["device"])))
    return out


def _check(table: dict) -> None:
    for name in table["algorithms"]:
        Algorithm.parse(name)
    check_arg(len(table["algorithms"]) > 0, "algorithms.algorithms", table["algorithms"], "a non-empty list")
    for key in ("k", "scenarios", "alpha", "c", "drafts"):
        check_arg(isinstance(table[key], list), f"algorithms.{key}", table[key], "a list")
    if table["drafts"]:
        check_tiny_names("algorithms.drafts", table["drafts"])
    check_arg(all(isinstance(k, int) and k >= 1 for k in table["k"]) and table["k"], "algorithms.k", table["k"],
              "a non-empty list of integers >= 1")
    check_arg(all(0 <= a <= 1 for a in table["alpha"]), "algorithms.alpha", table["alpha"], "numbers in [0, 1]")
    for key in ("sequences", "chunks", "repeats", "batch", "max_new_tokens", "count_sequences"):
        check_arg(isinstance(table[key], int) and table[key] >= 1, f"algorithms.{key}", table[key], "an integer >= 1")
    check_arg(table["sequences"] >= 2 * table["chunks"], "algorithms.sequences", table["sequences"],
              f"at least 2 sequences per chunk (chunks = {table['chunks']})")


# -- measured against exact -----------------------------------------------------------------------
def _counts(res) -> dict:
    """Acceptance counts of one run: hist (D+1,), emitted, sequence_rounds."""
    f = res.stats.frame()
    return {"hist": np.asarray(res.stats.accepted_hist, np.float64), "emitted": float(f["emitted"].sum()),
            "rounds": float(f["sequence_rounds"].sum())}


def _mean_accepted(hist: np.ndarray) -> float:
    return float(hist @ np.arange(hist.size) / max(hist.sum(), 1.0))


def _exact_columns(algo: Algorithm, rounds: Optional[ExactRounds], k: int, starts, disjoint: bool) -> dict:
    """Exact mean accepted drafts per round and tokens per target call over a generation (averaged over
    the prompts' start contexts), or NaN with the reason."""
    if rounds is None:
        return {"exact_mean_accepted": math.nan, "exact_tokens_per_call": math.nan, "exact_method": "no exact law"}
    law, how = algo.exact_law(rounds, k, disjoint)
    if law is None:
        return {"exact_mean_accepted": math.nan, "exact_tokens_per_call": math.nan, "exact_method": how}
    laws = [acceptance_law(law, int(s), rounds.n_tokens) for s in starts]
    hist = np.mean([a.hist for a in laws], 0)
    n_rounds = float(np.mean([a.rounds for a in laws]))
    tpc = rounds.n_tokens / n_rounds if rounds.eos is None else math.nan  # E[emitted] = N without EOS
    return {"exact_mean_accepted": _mean_accepted(hist), "exact_tokens_per_call": tpc, "exact_method": how}


def _run_scenario(p: AlgorithmParams, seed: int) -> dict:
    """Each algorithm on ``sequences`` sequences of one n-gram scenario, in ``chunks`` calls."""
    sc = load_scenario(p.source)
    check_arg(sc.exact, "algorithms.scenarios", p.source, "n-gram scenarios (builder 'ngram')")
    target, draft = sc.build()
    rounds = ExactRounds(target, draft, list(sc.prompt), sc.max_new_tokens, sc.config, sc.eos_token_id)
    k, per = p.k[0], p.sequences // p.chunks
    prompts = torch.tensor([list(sc.prompt)] * per, dtype=torch.long)
    rows = []
    for i, name in enumerate(p.algorithms):
        algo = Algorithm.parse(name)
        g = torch.Generator().manual_seed((seed + i) % 2**63)
        chunks = [_counts(algo.generate(target, draft, prompts, k=k, max_new_tokens=sc.max_new_tokens,
                                        config=sc.config, eos_token_id=sc.eos_token_id, generator=g))
                  for _ in range(p.chunks)]
        rows.append({"algorithm": name, "n": algo.n, "k": k, **_chunk_summary(chunks),
                     **_exact_columns(algo, rounds, k, [rounds.start], False)})
    return {"rows": rows}


def _chunk_summary(chunks: list) -> dict:
    """Pooled measurements of the chunks, and the chunk standard error of the mean accepted per round."""
    hist = np.sum([c["hist"] for c in chunks], 0)
    per = np.array([_mean_accepted(c["hist"]) for c in chunks])
    emitted, n_rounds = sum(c["emitted"] for c in chunks), sum(c["rounds"] for c in chunks)
    return {"mean_accepted": _mean_accepted(hist), "se_mean_accepted": float(per.std(ddof=1) / np.sqrt(per.size)),
            "tokens_per_call": emitted / max(n_rounds, 1.0), "rounds": n_rounds, "accepted_hist": hist.tolist()}


# -- timed cells ------------------------------------------------------------------------------------
def _timed_runs(arms: dict, repeats: int) -> dict:
    """``repeats`` passes over the arms (order rotated each pass) after one warm-up run of each; returns
    {arm: [(seconds, result), ...]}."""
    names = list(arms)
    with torch.no_grad():
        for name in names:
            arms[name]()  # warm-up, discarded
        out = {name: [] for name in names}
        for rep in range(repeats):
            shift = (rep * len(names)) // repeats
            for name in names[shift:] + names[:shift]:
                t0 = time.perf_counter()
                res = arms[name]()
                out[name].append((time.perf_counter() - t0, res))
    return out


def _timed_rows(runs: dict, grid: list, exact: Callable[[Algorithm, int], dict]) -> list:
    """One row per (algorithm, k) arm: medians, speedup over the 'ar' arm, measured acceptance and exact."""
    t_ar = float(np.median([dt for dt, _ in runs["ar"]]))
    rows = []
    for algo, k in grid:
        arm = runs[f"{algo.name}/k{k}"]
        t = float(np.median([dt for dt, _ in arm]))
        counts = [_counts(res) for _, res in arm]
        hist = np.sum([c["hist"] for c in counts], 0)
        rows.append({"algorithm": algo.name, "n": algo.n, "k": k, "seconds_median": t, "ar_seconds_median": t_ar,
                     "speedup": t_ar / t, "seconds": [dt for dt, _ in arm], "ar_seconds": [dt for dt, _ in runs["ar"]],
                     "mean_accepted": _mean_accepted(hist), "accepted_hist": hist.tolist(),
                     "tokens_per_call": sum(c["emitted"] for c in counts) / max(sum(c["rounds"] for c in counts), 1.0),
                     **exact(algo, k)})
    return rows


def _arms(target, draft, tree_target, tree_draft, prompts, p: AlgorithmParams, g: torch.Generator):
    """{'ar': target-only, '<algorithm>/k<k>': ...} closures over one generator; the (algorithm, k) grid."""
    config = SamplingConfig(temperature=p.temperature)
    N = p.max_new_tokens
    arms = {"ar": lambda: autoregressive_generate(target, prompts, max_new_tokens=N, config=config, generator=g)}
    grid = [(Algorithm.parse(a), k) for a in p.algorithms for k in p.k]
    for algo, k in grid:
        t, d = (tree_target, tree_draft) if algo.kind == "tree" else (target, draft)
        arms[f"{algo.name}/k{k}"] = (lambda algo=algo, k=k, t=t, d=d: algo.generate(
            t, d, prompts, k=k, max_new_tokens=N, config=config, generator=g))
    return arms, grid


def _synthetic_models(p: AlgorithmParams, seed: int, clock):
    tc = CallCost(p.target_ms / 1e3, p.token_slope)
    target, draft, ptab, qtab = synthetic_pair(p.alpha, p.c, tc, p.vocab_size, p.support, seed=seed % 2**31,
                                               clock=clock)
    return target, draft, ptab, qtab, tc


def _run_synthetic(p: AlgorithmParams, seed: int) -> dict:
    target, draft, ptab, qtab, tc = _synthetic_models(p, seed, WallClock())
    g = torch.Generator().manual_seed(seed)
    prompts = torch.randint(0, p.vocab_size, (p.batch, p.prompt_len), generator=g).tolist()
    config = SamplingConfig(temperature=p.temperature)
    rounds = ExactRounds(ptab, qtab, prompts[0], p.max_new_tokens, config)
    order = max(ptab.order, qtab.order)
    starts = [context_of(ptab.as_order(order), pr) for pr in prompts]

    def exact(algo, k):
        cols = _exact_columns(algo, rounds, k, starts, disjoint=True)
        tpr = cols["exact_tokens_per_call"]  # over a generation of max_new_tokens (the last round cut short)
        pred = {how: tree_speedup(tpr, tc, tc.scaled(p.c), algo.n, k, p.batch,
                                  how if algo.kind == "tree" else "cached")  # chain, block: one token per draft call
                for how in ("rescored", "cached")}
        return {**cols, **{f"speedup_predicted_{how}": s for how, s in pred.items()}}

    arms, grid = _arms(target, draft, TimedTreeModel(target), TimedTreeModel(draft), prompts, p, g)
    rows = _timed_rows(_timed_runs(arms, p.repeats), grid, exact)
    _add_count_runs(rows, p, seed, VirtualClock(), grid, starts)
    return {"rows": rows, "c_set": p.c, "alpha_exact": p.alpha}


def _add_count_runs(rows: list, p: AlgorithmParams, seed: int, clock, grid: list, starts: list) -> None:
    """An untimed run of ``count_sequences`` sequences per arm on a virtual clock (same tables, the timed
    cell's start contexts repeated): precise measured acceptance to set against the exact values."""
    target, draft, _, _, _ = _synthetic_models(p, seed, clock)
    g = torch.Generator().manual_seed(seed + 1)
    prompts_all = torch.randint(0, p.vocab_size, (p.batch, p.prompt_len), generator=torch.Generator().manual_seed(seed))
    reps = -(-p.count_sequences // p.batch)
    prompts = prompts_all.repeat(reps, 1)[:p.count_sequences]
    config = SamplingConfig(temperature=p.temperature)
    for row, (algo, k) in zip(rows, grid):
        t, d = (TimedTreeModel(target), TimedTreeModel(draft)) if algo.kind == "tree" else (target, draft)
        c = _counts(algo.generate(t, d, prompts, k=k, max_new_tokens=p.max_new_tokens, config=config, generator=g))
        row.update(count_mean_accepted=_mean_accepted(c["hist"]), count_tokens_per_call=c["emitted"] / c["rounds"],
                   count_rounds=c["rounds"])


def _run_tiny(p: AlgorithmParams, seed: int) -> dict:
    target, draft = resolve_model("tiny:target", p.device, p.dtype), resolve_model(f"tiny:{p.source}", p.device, p.dtype)
    prompts = tiny_pair_prompts(p.batch, p.prompt_len, seed=seed % 2**31)
    g = torch.Generator(device=p.device).manual_seed(seed)
    arms, grid = _arms(target, draft, as_tree_model(target), as_tree_model(draft), prompts, p, g)
    rows = _timed_rows(_timed_runs(arms, p.repeats), grid, lambda algo, k: _exact_columns(algo, None, k, [], False))
    return {"rows": rows}


def _run(p: AlgorithmParams, seed: int) -> dict:
    return {"scenario": _run_scenario, "synthetic": _run_synthetic, "tiny": _run_tiny}[p.kind](p, seed)


# -- registry and table -----------------------------------------------------------------------------
def algorithms_suite():
    """The :class:`harness.speedup.sweep.suites.Suite` of this module (imported lazily: sweep_suites registers it)."""
    return Suite("algorithms", AlgorithmParams, _cells, _run, _check, frozenset())


def algorithms_table(results: Path, meta: dict) -> Optional[pd.DataFrame]:
    """The rows of the stored cells of the plan recorded in ``meta`` (its config), with each cell's kind,
    source, alpha, c and id; None when the sweep planned no ``algorithms`` cell."""
    cfg = meta.get("config", {})
    # a partial run (--suites grid) records the sweep file's suites: the algorithm cells it did not run are
    # still stored, and still drawn
    planned = list(cfg.get("suites", [])) + list(meta.get("sweep", {}).get("config_suites", []))
    if "algorithms" not in planned or "algorithms" not in cfg:
        return None
    frames = []
    for cell in _cells(cfg["algorithms"], cfg):
        path = Path(results) / "cells" / "algorithms" / f"{cell.id}.json"
        if not path.exists():
            continue
        rec = read_json(path, "stored cell")
        check_schema(rec.get("meta"), path)
        f = pd.DataFrame(rec["rows"])
        p = cell.params
        f.insert(0, "cell", cell.id)
        for i, (key, val) in enumerate((("kind", p.kind), ("source", p.source), ("alpha", p.alpha), ("c", p.c))):
            f.insert(1 + i, key, val)
        frames.append(f)
    return pd.concat(frames, ignore_index=True) if frames else None
