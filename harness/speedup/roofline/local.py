"""This machine as a roofline: measure its bandwidth and matmul throughput, fit the rest to profiles.

    python -m harness.speedup.roofline.local                      # probe, fit to the committed tiny-pair profile,
                                                          # write runs/roofline-local/<hash>/local.toml
    python -m harness.speedup.roofline.local --out harness/configs/hardware/local.toml   # replace the shipped one
    python -m harness.speedup.roofline.local --profiles P.csv --out my.toml

:func:`probe` measures, with the threads torch is set to (1 by default here, as the sweep runs):
    bandwidth   a 256 MiB float32 tensor copied (read + write = 2 x 256 MiB per copy), fastest of 15
    peak        a 1024 x 1024 float32 matmul (2 n^3 FLOPs), fastest of 15 after a warm-up
:func:`profile_points` turns forward rows of :mod:`harness.speedup.profiler` (``<role>.forward`` or
``model.forward``: n, batch, context_len, median_s) of the tiny pair into roofline points, and
:func:`harness.speedup.roofline.model.calibrate` fits the efficiency factors and the per-call and per-layer overheads.
The probe is a timing of this machine at one moment (under whatever load it had): the file records the
load average and says so.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from harness.speedup.roofline.model import HARDWARE_DIR, Calibration, Hardware, ModelShape, calibrate
from specimpl.hf import TINY_PAIR_DIR
from harness.core.provenance import atomic_write_text, checked_provenance, read_table_csv
from harness.core.errors import UsageError
from harness.core.outdir import claim_out

__all__ = ["probe", "profile_points", "calibrate_local", "local_toml"]

TINY_SHAPES = {"tiny:target": "target", "tiny:draft": "draft"}
# The probe runs on a machine shared with other work and reads its peak low; an efficiency above 1 then
# says the profile saw more of the machine than the probe did (the fit's number is the effective one).
EFF_MAX = 20.0


def _best_time(fn, repeats: int = 15) -> float:
    """The fastest of ``repeats`` timed calls after a warm-up: on a shared machine the least-disturbed one
    is the closest to what the hardware can do (a median would measure the neighbours' load)."""
    fn()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.min(ts))


def probe(threads: int = 1) -> dict:
    """{'bandwidth_gbps', 'peak_tflops_float32', 'threads', 'loadavg'} of this machine, measured now."""
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        x = torch.empty(64 * 2 ** 20, dtype=torch.float32).fill_(1.0)  # 256 MiB
        y = torch.empty_like(x)
        t_copy = _best_time(lambda: y.copy_(x))
        a = torch.randn(1024, 1024)
        b = torch.randn(1024, 1024)
        t_mm = _best_time(lambda: a @ b)
    finally:
        torch.set_num_threads(old)
    return {"bandwidth_gbps": 2 * x.numel() * 4 / t_copy / 1e9, "peak_tflops_float32": 2 * 1024 ** 3 / t_mm / 1e12,
            "threads": threads, "loadavg": list(os.getloadavg())}


def tiny_shape(role: str) -> ModelShape:
    """The shipped tiny pair's target or draft, as run here (float32 weights, float64 logits)."""
    s = ModelShape.from_config(TINY_PAIR_DIR / role / "config.json", dtype="float32", name=f"tiny:{role}")
    return ModelShape(**{**s.__dict__, "logits_bytes": 8})


def profile_points(profiles: pd.DataFrame, shapes: dict) -> list:
    """(shape, n, B, L, median seconds) of every forward row whose model is in ``shapes`` ({model: ModelShape})."""
    rows = profiles[profiles.op.str.endswith(".forward") & profiles.model.isin(list(shapes))]
    return [(shapes[r.model], int(r.n), int(r.batch), int(r.context_len), float(r.median_s)) for r in rows.itertuples()]


def calibrate_local(profiles: pd.DataFrame, measured: dict) -> Calibration:
    """The 'local' hardware: probed bandwidth and peak, efficiencies and overheads fitted to the profile."""
    hw = Hardware(name="local", bandwidth_gbps=measured["bandwidth_gbps"],
                  peak_tflops={"float32": measured["peak_tflops_float32"]}, overhead_s=1e-4,
                  overhead_per_layer_s=1e-4, eff_bandwidth=0.5, eff_compute=0.5, source="measured", path="local.toml")
    pts = profile_points(profiles, {m: tiny_shape(r) for m, r in TINY_SHAPES.items()})
    return calibrate(hw, pts, eff_max=EFF_MAX)


def local_toml(measured: dict, cal: Calibration, profiles_path: str) -> str:
    h = cal.hardware
    return "\n".join([
        "# This machine, measured: bandwidth and float32 matmul peak probed by `python -m harness.speedup.roofline.local`",
        f"# ({measured['threads']} thread(s), load average {', '.join(f'{v:.2f}' for v in measured['loadavg'])} at the time:",
        "# a shared machine's numbers vary with its load); efficiency factors and overheads fitted by least squares",
        f"# on log T to the tiny pair's forward profile {profiles_path} ({cal.points} points; relative error",
        f"# median {cal.median_abs_rel_err:.1%}, worst {cal.max_abs_rel_err:.1%}).",
        'name = "local"',
        f'source = "measured on this machine ({measured["threads"]} thread(s)): {measured["bandwidth_gbps"]:.2f} GB/s copy '
        f'bandwidth, {measured["peak_tflops_float32"] * 1e3:.2f} GFLOP/s float32 matmul"',
        f"bandwidth_gbps = {h.bandwidth_gbps:.4g}",
        f"overhead_s = {h.overhead_s:.4g}",
        f"overhead_per_layer_s = {h.overhead_per_layer_s:.4g}",
        f"eff_bandwidth = {h.eff_bandwidth:.4g}",
        f"eff_compute = {h.eff_compute:.4g}",
        f'calibrated = "fitted to {profiles_path} ({cal.points} forwards of the tiny pair): median error '
        f'{cal.median_abs_rel_err:.1%}, worst {cal.max_abs_rel_err:.1%}"',
        "",
        "[peak_tflops]",
        f"float32 = {h.peak_tflops['float32']:.4g}",
        ""])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.speedup.roofline.local", description=__doc__.splitlines()[0])
    ap.add_argument("--profiles", default="results/sweep/default/profiles.csv")
    ap.add_argument("--out", type=Path, default=None,
                    help=f"hardware file to write (default: runs/roofline-local/<name>-<hash>/local.toml, for "
                         f"`--hardware <that path>`; the shipped {HARDWARE_DIR / 'local.toml'} only by an explicit --out)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    try:
        claim_out(args, "roofline-local", filename="local.toml")
    except UsageError as e:
        print(f"python -m harness.speedup.roofline.local: error: {e}", file=sys.stderr)
        return 2
    checked_provenance(args.profiles)  # before the probe: an unknown schema_version is refused at once
    measured = probe(args.threads)
    cal = calibrate_local(read_table_csv(args.profiles), measured)
    text = local_toml(measured, cal, args.profiles)
    atomic_write_text(args.out, text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
