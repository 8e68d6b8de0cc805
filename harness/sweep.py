"""`python -m harness sweep`: speedup as a function of alpha, c and k — model grid, measured runs, cost curves.

A sweep is data: ``harness/experiments/sweep/default.toml`` (commented) and overlays on it.  The plan is a
list of cells; each cell writes one JSON file under ``results/sweep/<name>/cells/<suite>/`` (atomic
write), named by a hash of its settings, so a re-run skips every cell already computed and an
interrupt loses at most the cell in flight.  After the cells, :func:`finalize` turns the stored
cells into tables (``measured.csv``, ``timings.csv``, ``profiles.csv``, ``grid.parquet``,
``fidelity.json``) that carry provenance; ``python -m harness report`` draws from those alone.

Suites
    grid       the analytic model S(alpha, c, k) on a grid
    synthetic  timed n-gram pairs with exact alpha and set c (:mod:`harness.synthetic`)
    real       the shipped tiny HF pair and its draft variants
    profile    per-call cost curves T(n, B) of named models (random weights allowed)

A measured cell runs ``repeats`` interleaved pairs (target-only, speculative; the order alternates)
after one warm-up pair, and between pairs one pass of the profiler over exactly the calls the cost
model needs, so the predictions use costs profiled under the same machine load as the runs.
"""
from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import sys
import time
import tomllib
from pathlib import Path
from typing import Any, Optional

import numpy as np
import pandas as pd
import torch

from harness import costmodel as cm
from harness.config import RESULTS, SWEEP_DIR
from harness.profiler import profile_model, profile_pair, summarise
from harness.provenance import (atomic_write_csv, atomic_write_json, atomic_write_parquet, metadata)
from harness.synthetic import CallCost, HybridClock, VirtualClock, WallClock, synthetic_pair
from specimpl.autoregressive import autoregressive_generate
from specimpl.errors import check_arg
from specimpl.sampling import SamplingConfig
from specimpl.speculative import speculative_generate

__all__ = ["add_arguments", "run", "load_config", "plan", "run_cell", "finalize", "SHAPES", "DEFAULT_CONFIG"]

DEFAULT_CONFIG = SWEEP_DIR / "default.toml"
SUITES = ("grid", "synthetic", "real", "profile")
CLOCKS = ("wall", "hybrid", "spin", "virtual")

# Llama-shaped architectures for cost curves with random weights (timing does not depend on weights).
SHAPES = {
    "llama-1.1b": dict(hidden_size=2048, num_hidden_layers=22, num_attention_heads=32, num_key_value_heads=4,
                       intermediate_size=5632, vocab_size=32000),  # TinyLlama-1.1B
    "llama-160m": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, num_key_value_heads=12,
                       intermediate_size=3072, vocab_size=32000),  # JackFram/llama-160m
    "llama-68m": dict(hidden_size=768, num_hidden_layers=2, num_attention_heads=12, num_key_value_heads=12,
                      intermediate_size=3072, vocab_size=32000),  # JackFram/llama-68m
}


# -- configuration --------------------------------------------------------------------------------
def _merge(base: dict, over: dict, where: str = "") -> dict:
    out = copy.deepcopy(base)
    for key, v in over.items():
        if key not in base:
            raise ValueError(f"unknown setting `{where}{key}` in the sweep config; known: {sorted(base)}")
        out[key] = _merge(base[key], v, f"{where}{key}.") if isinstance(base[key], dict) and isinstance(v, dict) else v
    return out


def _read(path: Path) -> dict:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"`--config` {str(path)!r} does not exist")
    if path.suffix == ".json":
        return json.loads(path.read_text())
    with open(path, "rb") as f:
        return tomllib.load(f)


def load_config(path: Optional[Path] = None, overrides: Optional[dict] = None) -> dict:
    """The default config, overlaid with ``path`` (TOML or JSON) and then ``overrides``."""
    cfg = _read(DEFAULT_CONFIG)
    if path is not None and Path(path).resolve() != DEFAULT_CONFIG.resolve():
        cfg = _merge(cfg, _read(path))
    if overrides:
        cfg = _merge(cfg, overrides)
    bad = [s for s in cfg["suites"] if s not in SUITES]
    check_arg(not bad, "suites", cfg["suites"], f"a list drawn from {list(SUITES)}")
    check_arg(cfg["device"] in ("cpu", "cuda") or str(cfg["device"]).startswith("cuda:"), "device", cfg["device"],
              "'cpu' or 'cuda'")
    if str(cfg["device"]).startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError("`device` is 'cuda' but torch.cuda.is_available() is False on this machine")
    s = cfg["synthetic"]
    clocks = s["clock"] if isinstance(s["clock"], list) else [s["clock"]]
    check_arg(len(clocks) > 0 and all(c in CLOCKS for c in clocks), "synthetic.clock", s["clock"],
              f"one of {list(CLOCKS)} or a list of them")
    s["clock"] = clocks
    for suite in ("synthetic", "real"):
        for key in ("k", "batch"):
            v = cfg[suite][key]
            check_arg(isinstance(v, list) and v and all(isinstance(x, int) and x >= 1 for x in v), f"{suite}.{key}", v,
                      "a non-empty list of integers >= 1")
        check_arg(isinstance(cfg[suite]["repeats"], int) and cfg[suite]["repeats"] >= 1, f"{suite}.repeats",
                  cfg[suite]["repeats"], "an integer >= 1")
    for a in s["alpha"]:
        check_arg(0 <= a <= 1, "synthetic.alpha", s["alpha"], "numbers in [0, 1]")
    return cfg


def _hash(obj) -> str:
    return hashlib.sha1(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:10]


def _seed(cfg_seed: int, params: dict) -> int:
    return int(hashlib.sha1(json.dumps([cfg_seed, params], sort_keys=True).encode()).hexdigest()[:8], 16)


# -- the plan -------------------------------------------------------------------------------------
def plan(cfg: dict) -> list[dict]:
    """Cells in run order: {'suite', 'id', 'params'}; ``id`` = readable name + hash of every setting."""
    cells = []
    dev = cfg["device"]

    def add(suite, name, params):
        params = {**params, "suite": suite}
        cells.append({"suite": suite, "id": f"{name}-{_hash(params)}", "params": params})

    for suite in cfg["suites"]:
        sc = cfg[suite]
        if suite == "grid":
            add("grid", "grid", dict(sc))
        elif suite == "synthetic":
            common = {key: sc[key] for key in ("target_ms", "token_slope", "batch_slope", "vocab_size", "support",
                                               "prompt_len", "max_new_tokens", "repeats", "profile_repeats", "temperature")}
            for clock in sc["clock"]:
                for B in sc["batch"]:
                    for c in sc["c"]:
                        for a in sc["alpha"]:
                            for k in sc["k"]:
                                add("synthetic", f"syn_{clock}_a{a:g}_c{c:g}_k{k}_B{B}",
                                    {**common, "alpha": a, "c": c, "k": k, "batch": B, "clock": clock})
        elif suite == "real":
            common = {key: sc[key] for key in ("prompt_len", "max_new_tokens", "repeats", "profile_repeats", "temperature",
                                               "dtype")}
            for B in sc["batch"]:
                for d in sc["drafts"]:
                    for k in sc["k"]:
                        add("real", f"real_{d}_k{k}_B{B}".replace("+", "_"),
                            {**common, "draft": d, "k": k, "batch": B, "device": dev})
        elif suite == "profile":
            for m in sc["models"]:
                add("profile", f"prof_{m}".replace(":", "_").replace("+", "_"),
                    {key: sc[key] for key in ("n", "batch", "context_len", "repeats", "dtype")} | {"model": m, "device": dev})
    return cells


# -- models ---------------------------------------------------------------------------------------
def _dtype(name: str):
    check_arg(name in ("float32", "float16", "bfloat16", "float64"), "dtype", name,
              "'float32', 'float16', 'bfloat16' or 'float64'")
    return getattr(torch, name)


_PAIRS: dict = {}


def _tiny(name: str, device: str, dtype: str):
    """The shipped tiny pair's target ('target'), or a draft variant (names of specimpl.hf_drafts.tiny_pair_variants)."""
    from specimpl.hf import load_tiny_pair
    from specimpl.hf_drafts import tiny_pair_variants
    key = (str(device), dtype)
    if key not in _PAIRS:
        _PAIRS.clear()  # one pair in memory at a time
        _PAIRS[key] = load_tiny_pair(device=device, dtype=_dtype(dtype))
    target, draft = _PAIRS[key]
    if name == "target":
        return target
    return tiny_pair_variants(target, draft, [name])[name]


def _random_hf(shape: str, device: str, dtype: str, seed: int):
    """A Llama-shaped causal LM with random weights (for cost curves only)."""
    check_arg(shape in SHAPES, "shape", shape, f"one of {sorted(SHAPES)}")
    from transformers import LlamaConfig, LlamaForCausalLM
    from specimpl.hf import HFModel
    torch.manual_seed(seed)
    conf = LlamaConfig(**SHAPES[shape], max_position_embeddings=4096)
    with torch.device(device):
        net = LlamaForCausalLM(conf).to(_dtype(dtype)).eval()
    return HFModel(net, name=f"random-{shape}", logits_dtype=torch.float32)


def resolve_model(spec: str, device: str, dtype: str = "float32", seed: int = 0):
    """'tiny:<variant>' (shipped pair) or 'random:<shape>' (random weights, see SHAPES)."""
    kind, _, name = spec.partition(":")
    if kind == "tiny":
        return _tiny(name, device, dtype)
    if kind == "random":
        return _random_hf(name, device, dtype, seed)
    raise ValueError(f"`model` must be 'tiny:<variant>' or 'random:<shape>'; got {spec!r}")


def _tiny_prompts(B: int, prompt_len: int, seed: int) -> list[list[int]]:
    from specimpl.hf import tiny_pair_prompts
    return tiny_pair_prompts(B, prompt_len, seed=seed % 2**31)


# -- measured cells -------------------------------------------------------------------------------
def _merge_profiles(frames: list[pd.DataFrame]) -> pd.DataFrame:
    f = pd.concat(frames, ignore_index=True)
    samples, cpu, meta = {}, {}, {}
    for r in f.itertuples():
        key = (r.op, int(r.n), int(r.batch))
        samples.setdefault(key, []).extend(r.samples_s)
        cpu.setdefault(key, []).extend(r.cpu_samples_s)
        meta[key] = {"model": r.model, "device": r.device, "timer": r.timer, "context_len": r.context_len}
    rows = []
    for key, xs in samples.items():
        rows.append(summarise({key: xs}, meta[key], cpu={key: cpu[key]}))
    return pd.concat(rows, ignore_index=True).sort_values(["op", "batch", "n"], ignore_index=True)


def measure_pair(target, draft, prompts, *, k: int, max_new_tokens: int, config: SamplingConfig, repeats: int,
                 seed: int, clock, device: str = "cpu", profile_repeats: int = 1) -> dict:
    """Interleaved target-only / speculative runs of one cell, with in-cell profiling between pairs."""
    dev = torch.device(device)
    g = torch.Generator(device=dev).manual_seed(seed)
    B, N = len(prompts), max_new_tokens
    P = len(prompts[0])

    def timed(fn):
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        c0 = time.process_time()
        t0 = clock.now()
        out = fn()
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        dt = clock.now() - t0
        return out, dt, (dt if getattr(clock, "virtual", False) else time.process_time() - c0)

    def ar():
        return autoregressive_generate(target, prompts, max_new_tokens=N, config=config, generator=g)

    def spec():
        return speculative_generate(target, draft, prompts, k=k, max_new_tokens=N, config=config, generator=g)

    with torch.no_grad():
        ar(), spec()  # warm-up pair, discarded
        timings, profiles = [], []
        hist = np.zeros(k + 1, dtype=np.int64)
        emitted = target_calls = draft_calls = 0
        round_batches: list[list[int]] = []
        for rep in range(repeats):
            order = ("ar", "spec") if rep % 2 == 0 else ("spec", "ar")
            for arm in order:
                res, dt, ct = timed(ar if arm == "ar" else spec)
                row = {"rep": rep, "arm": arm, "seconds": dt, "cpu_seconds": ct, "tokens": int(res.lengths.sum())}
                if arm == "spec":
                    st = res.stats
                    hist += st.accepted_hist
                    f = st.frame()
                    emitted += int(f["emitted"].sum())
                    target_calls += int(f["target_calls"].sum())
                    draft_calls += int(f["draft_calls"].sum())
                    round_batches.append(f["batch"].astype(int).tolist())
                    row["rounds"] = len(f)
                timings.append(row)
            profiles.append(profile_pair(target, draft, [k], [B], prompt_len=P, max_new_tokens=N, config=config,
                                         repeats=profile_repeats, warmup=0, clock=clock, seed=seed + rep))
    prof = _merge_profiles(profiles)
    return {"timings": timings, "accepted_hist": hist.tolist(), "emitted": emitted, "target_calls": target_calls,
            "draft_calls": draft_calls, "round_batches": round_batches,
            "profile": prof.to_dict(orient="records")}


def _clock(name: str):
    return {"wall": WallClock(), "spin": WallClock(spin=True), "hybrid": HybridClock(), "virtual": VirtualClock()}[name]


def run_cell(cell: dict, cfg: dict) -> dict:
    """Compute one cell; returns its JSON-able record (provenance included)."""
    p, suite = cell["params"], cell["suite"]
    seed = _seed(cfg["seed"], p)
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    rec: dict[str, Any] = {"id": cell["id"], "suite": suite, "params": p}
    if suite == "grid":
        a = np.linspace(*p["alpha"][:2], int(p["alpha"][2]))
        c = np.logspace(math.log10(p["c"][0]), math.log10(p["c"][1]), int(p["c"][2]))
        c = np.unique(np.concatenate([c, np.asarray(p.get("c_extra", []), dtype=float)]))
        ks = np.arange(1, p["k_max"] + 1)
        A, C, K = np.meshgrid(a, c, ks, indexing="ij")
        S = cm.analytic_speedup(A, C, K)
        E = cm.expected_tokens(A, K)
        rec["grid"] = pd.DataFrame({"alpha": A.ravel(), "c": C.ravel(), "k": K.ravel().astype(np.int16),
                                    "speedup": S.ravel(), "expected_tokens": E.ravel()})
    elif suite == "synthetic":
        clock = _clock(p["clock"])
        tc = CallCost(p["target_ms"] / 1e3, p["token_slope"], p["batch_slope"])
        target, draft, _, _ = synthetic_pair(p["alpha"], p["c"], tc, p["vocab_size"], p["support"], seed=seed % 2**31,
                                             clock=clock)
        g = torch.Generator().manual_seed(seed)
        prompts = torch.randint(0, p["vocab_size"], (p["batch"], p["prompt_len"]), generator=g).tolist()
        rec.update(measure_pair(target, draft, prompts, k=p["k"], max_new_tokens=p["max_new_tokens"],
                                config=SamplingConfig(temperature=p["temperature"]), repeats=p["repeats"],
                                seed=seed, clock=clock, profile_repeats=p["profile_repeats"]))
        rec["c_set"] = p["c"]
        rec["alpha_exact"] = p["alpha"]
    elif suite == "real":
        dev = p["device"]
        target = _tiny("target", dev, p["dtype"])
        draft = _tiny(p["draft"], dev, p["dtype"])
        prompts = _tiny_prompts(p["batch"], p["prompt_len"], seed)
        rec.update(measure_pair(target, draft, prompts, k=p["k"], max_new_tokens=p["max_new_tokens"],
                                config=SamplingConfig(temperature=p["temperature"]), repeats=p["repeats"],
                                seed=seed, clock=WallClock(), device=dev,
                                profile_repeats=p["profile_repeats"]))
    elif suite == "profile":
        model = resolve_model(p["model"], p["device"], p["dtype"], seed)
        prof = profile_model(model, "model", p["n"], p["batch"], context_len=p["context_len"],
                             repeats=p["repeats"], warmup=2, seed=seed)
        prof["model"] = p["model"]
        rec["profile"] = prof.to_dict(orient="records")
        del model
    rec["seconds"] = time.perf_counter() - t0
    rec["loadavg_before_after"] = [load0, os.getloadavg()[0]]
    rec["meta"] = metadata(p, seed)
    return rec


# -- tables from stored cells ---------------------------------------------------------------------
def _cell_path(out: Path, cell: dict) -> Path:
    return out / "cells" / cell["suite"] / f"{cell['id']}.json"


def store_cell(out: Path, cell: dict, rec: dict) -> Path:
    """Write a cell atomically; a grid's table goes to a parquet file beside it, written first."""
    path = _cell_path(out, cell)
    if "grid" in rec:
        atomic_write_parquet(path.with_suffix(".parquet"), rec.pop("grid"), rec["meta"])
        rec["grid_file"] = path.with_suffix(".parquet").name
    return atomic_write_json(path, rec)


def _basis(rec: dict, alphas: list, alpha_hat: float, basis: str, n_sim: int) -> dict:
    """Measured and predicted speedups on one time basis: 'clock' (the cell's clock: perf_counter for real
    models and wall-clock synthetic cells, the hybrid clock for hybrid cells) or 'cpu' (process CPU time)."""
    p = rec["params"]
    k, B, N, P = p["k"], p["batch"], p["max_new_tokens"], p["prompt_len"]
    col, val = ("seconds", "mean_s") if basis == "clock" else ("cpu_seconds", "cpu_mean_s")
    t = pd.DataFrame(rec["timings"])
    # throughput over all repeats (total tokens / total time): the mean run time of each arm
    t_ar, t_spec = float(t.loc[t.arm == "ar", col].mean()), float(t.loc[t.arm == "spec", col].mean())
    costs = cm.CostTable(pd.DataFrame(rec["profile"]), value=val)
    c_prof = costs.c(B)
    pred = cm.predict_measured(costs, alphas, B, N, P, n_sim=n_sim, seed=0)
    acc_runs = [cm.predict_from_counts(costs, k, rb, B, N, P) for rb in rec["round_batches"]]
    s_acc = acc_runs[0]["t_ar_s"] / float(np.mean([r["t_spec_s"] for r in acc_runs]))
    s_meas = t_ar / t_spec
    s_an = cm.analytic_speedup(alpha_hat, c_prof, k)
    paired = t.pivot(index="rep", columns="arm", values=col)
    ratio = paired["ar"] / paired["spec"]
    return {
        "t_ar_mean_s": t_ar, "t_spec_mean_s": t_spec,
        "t_ar_median_s": float(t.loc[t.arm == "ar", col].median()),
        "t_spec_median_s": float(t.loc[t.arm == "spec", col].median()),
        "tokens_per_s_ar": B * N / t_ar, "tokens_per_s_spec": B * N / t_spec,
        "speedup_measured": s_meas, "speedup_paired_median": float(ratio.median()),
        "speedup_spread": float(ratio.max() - ratio.min()),
        "t_target_1_s": costs("target.forward", 1, B), "t_target_k1_s": costs("target.forward", k + 1, B),
        "t_draft_1_s": costs("draft.forward", 1, B), "overhead_round_s": costs.get("spec.overhead", k, B),
        "overhead_token_ar_s": costs.get("ar.overhead", 1, B), "c_profiled": c_prof,
        "speedup_analytic": s_an, "speedup_measured_model": pred["speedup"], "speedup_accounting": s_acc,
        "t_spec_pred_s": pred["t_spec_s"], "t_ar_pred_s": pred["t_ar_s"],
        "err_analytic": abs(s_an - s_meas) / s_meas, "err_measured_model": abs(pred["speedup"] - s_meas) / s_meas,
        "err_accounting": abs(s_acc - s_meas) / s_meas,
    }


def _measured_row(rec: dict, n_sim: int = 400) -> dict:
    """One row of measured.csv: the cell's settings, acceptance metrics, measured and predicted speedups.

    Columns without prefix are on the cell's own clock; ``cpu_*`` repeat them on process CPU time
    (real models on a CPU device only: there CPU time is robust to other processes on the machine,
    wall time is what a user sees).
    """
    p = rec["params"]
    k, B, N, P = p["k"], p["batch"], p["max_new_tokens"], p["prompt_len"]
    acc = cm.acceptance_metrics(rec["accepted_hist"], emitted=rec["emitted"])
    alphas = [a if a == a else 0.0 for a in acc["alpha_per_position"]]  # never-reached positions: 0
    row = {
        "suite": rec["suite"], "cell": rec["id"], "draft": p.get("draft", f"alpha={p.get('alpha')}"),
        "clock": p.get("clock", "wall"),
        "group": f"synthetic/{p.get('clock')}" if rec["suite"] == "synthetic" else f"tiny-pair/{p.get('device', 'cpu')}",
        "alpha_set": p.get("alpha", np.nan), "c_set": p.get("c", np.nan), "k": k, "batch": B, "max_new_tokens": N,
        "prompt_len": P, "repeats": p["repeats"], "device": p.get("device", "cpu"),
        "alpha_hat": acc["alpha_hat"], "acceptance_rate": acc["acceptance_rate"],
        "mean_acceptance_length": acc["mean_acceptance_length"],
        "tokens_per_target_call": rec["emitted"] / max(rec["target_calls"], 1),
        "alpha_per_position": json.dumps([round(a, 4) for a in alphas]),
        "rounds": acc["rounds"], "target_calls": rec["target_calls"], "draft_calls": rec["draft_calls"],
    }
    row.update(_basis(rec, alphas, acc["alpha_hat"], "clock", n_sim))
    cpu_ok = rec["suite"] == "real" and str(p.get("device", "cpu")) == "cpu"
    cpu = _basis(rec, alphas, acc["alpha_hat"], "cpu", n_sim) if cpu_ok else {}
    for key in ("speedup_measured", "speedup_analytic", "speedup_measured_model", "speedup_accounting",
                "c_profiled", "err_analytic", "err_measured_model", "err_accounting", "tokens_per_s_ar",
                "tokens_per_s_spec"):
        row[f"cpu_{key}"] = cpu.get(key, np.nan)
    row.update({"load_1min": float(np.mean(rec["loadavg_before_after"])), "cell_seconds": rec["seconds"],
                "commit": rec["meta"].get("commit")})
    if rec["suite"] == "synthetic":
        row["speedup_analytic_set"] = cm.analytic_speedup(p["alpha"], p["c"], k)
    return row


def fidelity(measured: pd.DataFrame) -> dict:
    """Median and worst |predicted - measured| / measured per model, per group of runs and overall, on the
    runs' own clock ('clock') and, for real models on CPU, on process CPU time ('cpu')."""
    out = {}
    for name, g in [("all", measured)] + [(s, g) for s, g in measured.groupby("group")]:
        out[name] = {"cells": int(len(g))}
        for basis, pre in (("clock", ""), ("cpu", "cpu_")):
            for model in ("analytic", "measured_model", "accounting"):
                e = g[f"{pre}err_{model}"].dropna()
                if len(e):
                    out[name].setdefault(basis, {})[model] = {
                        "median": float(e.median()), "worst": float(e.max()), "cells": int(len(e)),
                        "worst_cell": str(g.loc[e.idxmax(), "cell"])}
    return out


def finalize(out: Path, cfg: dict, cells: list[dict]) -> dict:
    """Build the tables from the stored cells of this plan (cells missing from disk are listed, not faked)."""
    recs, missing = [], []
    for cell in cells:
        path = _cell_path(out, cell)
        if path.exists():
            recs.append(json.loads(path.read_text()))
        else:
            missing.append(cell["id"])
    meta = metadata(cfg, cfg["seed"])
    loads = [x for r in recs for x in r.get("loadavg_before_after", [])]
    meta["sweep"] = {"cells_planned": len(cells), "cells_stored": len(recs), "missing": missing,
                     "loadavg_1min": {"median": float(np.median(loads)) if loads else None,
                                      "max": float(np.max(loads)) if loads else None},
                     "cell_seconds_total": float(sum(r.get("seconds", 0.0) for r in recs))}
    written = {}
    grid = [r for r in recs if r["suite"] == "grid"]
    if grid:
        gpath = _cell_path(out, {"suite": "grid", "id": grid[-1]["id"]}).with_suffix(".parquet")
        written["grid"] = atomic_write_parquet(out / "grid.parquet", pd.read_parquet(gpath), meta)
    mrecs = [r for r in recs if r["suite"] in ("synthetic", "real")]
    if mrecs:
        measured = pd.DataFrame([_measured_row(r) for r in mrecs])
        written["measured"] = atomic_write_csv(out / "measured.csv", measured, meta)
        tim = pd.concat([pd.DataFrame(r["timings"]).assign(cell=r["id"], suite=r["suite"]) for r in mrecs],
                        ignore_index=True)
        written["timings"] = atomic_write_csv(out / "timings.csv", tim, meta)
        fid = fidelity(measured)
        meta["fidelity"] = fid
        written["fidelity"] = atomic_write_json(out / "fidelity.json", {"fidelity": fid, "meta": meta})
    profs = []
    for r in recs:
        if "profile" in r:
            f = pd.DataFrame(r["profile"]).assign(cell=r["id"], suite=r["suite"])
            for col in ("samples_s", "cpu_samples_s"):
                if col in f:
                    f[col] = f[col].map(json.dumps)
            profs.append(f)
    if profs:
        written["profiles"] = atomic_write_csv(out / "profiles.csv", pd.concat(profs, ignore_index=True), meta)
    written["meta"] = atomic_write_json(out / "meta.json", meta)
    return {"written": {k: str(v) for k, v in written.items()}, "missing": missing, "meta": meta}


# -- command line ---------------------------------------------------------------------------------
def add_arguments(parser) -> None:
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG,
                        help="sweep file (TOML/JSON overlay on harness/experiments/sweep/default.toml)")
    parser.add_argument("--out", type=Path, default=None, help="results directory (default results/sweep/<name>)")
    parser.add_argument("--device", default=None, help="cpu or cuda (overrides the config)")
    parser.add_argument("--suites", default=None, help="comma-separated subset of grid,synthetic,real,profile")
    parser.add_argument("--redo", action="store_true", help="recompute cells that are already stored")
    parser.add_argument("--list", action="store_true", help="print the plan (stored / to do) and exit")
    parser.add_argument("--tables", action="store_true",
                        help="only rebuild the tables from the cells already stored (run nothing)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--report", action="store_true", help="draw the figures and tables when done "
                        "(python -m harness report on the results)")


def run(args) -> int:
    over = {}
    if args.device:
        over["device"] = args.device
    if args.suites:
        over["suites"] = [s.strip() for s in args.suites.split(",") if s.strip()]
    cfg = load_config(args.config, over)
    out = Path(args.out) if args.out else RESULTS / "sweep" / cfg["name"]
    cells = plan(cfg)
    todo = [c for c in cells if args.redo or not _cell_path(out, c).exists()]
    if args.list:
        for c in cells:
            print(("todo  " if c in todo else "stored") + f"  {c['suite']:9s} {c['id']}")
        return 0
    if args.tables:
        todo = []
    if cfg["device"] == "cpu":
        torch.set_num_threads(int(cfg["threads"]))
    print(f"sweep {cfg['name']!r}: {len(cells)} cells, {len(cells) - len(todo)} stored, {len(todo)} to run -> {out}",
          file=sys.stderr)
    from tqdm import tqdm
    bar = tqdm(todo, desc="sweep", unit="cell", disable=args.no_progress, file=sys.stderr)
    try:
        for cell in bar:
            bar.set_postfix_str(cell["id"][:40])
            store_cell(out, cell, run_cell(cell, cfg))
    except KeyboardInterrupt:
        bar.close()
        done = sum(_cell_path(out, c).exists() for c in cells)
        print(f"\ninterrupted: {done}/{len(cells)} cells are stored in {out}; run the same command again to resume",
              file=sys.stderr)
        if done:
            finalize(out, cfg, cells)  # tables of what is stored, the missing cells listed in meta.json
        return 130
    bar.close()
    res = finalize(out, cfg, cells)
    for suite, fid in res["meta"].get("fidelity", {}).items():
        for basis, f in fid.items():
            if basis == "cells":
                continue
            when = "own clock" if basis == "clock" else "CPU time"
            print(f"fidelity, {suite} ({f['analytic']['cells']} cells, {when}): |pred - meas| / meas  analytic "
                  f"median {f['analytic']['median']:.1%} worst {f['analytic']['worst']:.1%};  measured model median "
                  f"{f['measured_model']['median']:.1%} worst {f['measured_model']['worst']:.1%}", file=sys.stderr)
    for k, v in res["written"].items():
        print(f"wrote {v}", file=sys.stderr)
    if args.report:
        from harness.report import make_report
        for name, paths in make_report(out).items():
            for path in ([paths] if isinstance(paths, str) else paths):
                print(f"wrote {path}", file=sys.stderr)
    return 0
