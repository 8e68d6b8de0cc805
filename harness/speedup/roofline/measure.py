"""T(n, B, L) measured on this device, the roofline fitted to it, and the speedup grid from the measured costs.

    python -m harness.speedup.roofline.measure --device cuda --out results/roofline/gpu          # experiments/gpu_sweep.sh
    python -m harness.speedup.roofline.measure --dry-run --out /tmp/x                           # CPU, tiny sizes (tests)

Models are built from their configs with random weights (timing does not depend on weights; nothing is
downloaded): ``random:<shape>`` of :data:`harness.speedup.sweep.models.SHAPES` (default: a ~1.1B Llama-shaped
target, TinyLlama-1.1B's shape, and a ~68M draft), or ``tiny:target`` / ``tiny:draft``.  Each forward
scoring n tokens for B sequences at context L is timed by :func:`harness.speedup.profiler.profile_model` (CUDA
events and synchronize on a GPU, perf_counter on a CPU; warm-up passes discarded, medians).  Then:

    costs.csv                 the measured T (op, n, batch, context, median_s, ...; on a CPU the process CPU
                              time, cpu_median_s, is what the rest uses)
    roofline_vs_measured.csv  the hardware file's roofline, its efficiencies and overheads fitted to the
                              measured points (:func:`harness.speedup.roofline.model.calibrate`), and each point's error
    roofline.csv              the speedup grid (:mod:`harness.speedup.roofline.speedup`) from the *measured* costs at
                              an assumed iid alpha (random weights have no meaningful acceptance), source
                              'measured-gpu' on a GPU: its figures say "measured on GPU"
    meta.json                 provenance (device named)

``python -m harness report --results <out>`` draws the roofline figures from them.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd
import torch
from harness.speedup.roofline.model import ModelShape
from harness.speedup.roofline.local import tiny_shape
from harness.speedup.sweep.models import SHAPES
from harness.speedup.profiler import profile_model
from harness.speedup.costmodel import CostTable
from harness.speedup.roofline.speedup import PairCosts
from harness.speedup.roofline.model import Roofline, calibrate, load_hardware
from harness.core.provenance import atomic_write_csv, atomic_write_json, metadata
from harness.core.errors import UsageError
from harness.core.outdir import claim_out
from harness.speedup.roofline.speedup import speedup_table
from harness.speedup.sweep.models import resolve_model

__all__ = ["shape_of", "measure_costs", "measured_pair_costs", "fit_roofline", "detect_hardware", "main"]

GPU_NAMES = (("H200", "h200"), ("H100", "h100"), ("A100", "a100"), ("A40", "a40"), ("3090", "rtx3090"))


def shape_of(spec: str, dtype: str):
    """The :class:`harness.speedup.roofline.model.ModelShape` of a 'random:<shape>' or 'tiny:<role>' model spec."""
    kind, _, name = spec.partition(":")
    if kind == "tiny":
        return tiny_shape(name)
    s = ModelShape.from_dict(SHAPES[name], where=f"SHAPES[{name!r}]", dtype=dtype, name=spec)
    return ModelShape(**{**s.__dict__, "logits_bytes": 4})


def detect_hardware(device: str) -> str:
    if torch.device(device).type != "cuda":
        return "local"
    name = torch.cuda.get_device_name(0)
    return next((hw for key, hw in GPU_NAMES if key in name), "local")


def measure_costs(models: dict, ns, batches, contexts, repeats: int, seed: int = 0) -> pd.DataFrame:
    """{role: model} -> rows of profile_model for each context (column ``context``)."""
    frames = []
    for i, L in enumerate(contexts):
        for role, m in models.items():
            print(f"roofline_measure: {role} at context {L}", file=sys.stderr)
            f = profile_model(m, role, ns, batches, context_len=L, prompt_len=8, repeats=repeats, warmup=2,
                              seed=seed + i)
            frames.append(f.assign(context=L))
    return pd.concat(frames, ignore_index=True).drop(columns=["samples_s", "cpu_samples_s"], errors="ignore")


def measured_pair_costs(costs: pd.DataFrame, value: str = "median_s"):
    """PairCosts whose T(n, B, L) interpolates the measured table (column ``value``) at each measured context."""
    tables = {int(L): CostTable(g, value=value) for L, g in costs.groupby("context")}

    def t(role):
        return lambda n, B, L: tables[int(L)](f"{role}.forward", int(n), int(B))

    return PairCosts(t("target"), t("draft"))


def fit_roofline(costs: pd.DataFrame, shapes: dict, hardware: str, value: str = "median_s") -> pd.DataFrame:
    """Each measured forward beside the hardware file's roofline, before and after fitting its efficiencies."""
    hw = load_hardware(hardware)
    fw = costs[costs.op.str.endswith(".forward")]
    pts = [(shapes[r.op.split(".")[0]], int(r.n), int(r.batch), int(r.context), float(getattr(r, value)))
           for r in fw.itertuples()]
    cal = calibrate(hw, pts, fit=("eff_bandwidth", "eff_compute", "overhead_s"), eff_max=1.0 if hardware != "local" else 20.0)
    rows = []
    for (shape, n, B, L, t), r in zip(pts, fw.itertuples()):
        rows.append({"role": r.op.split(".")[0], "n": n, "batch": B, "context": L, "measured_s": t,
                     "datasheet_s": float(Roofline(shape, hw)(n, B, L)), "fitted_s": float(Roofline(shape, cal.hardware)(n, B, L)),
                     "eff_bandwidth": cal.hardware.eff_bandwidth, "eff_compute": cal.hardware.eff_compute,
                     "overhead_s": cal.hardware.overhead_s, "hardware": hardware})
    out = pd.DataFrame(rows)
    return out.assign(err_datasheet=out.datasheet_s / out.measured_s - 1, err_fitted=out.fitted_s / out.measured_s - 1)


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.speedup.roofline.measure", description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--target", default="random:llama-1.1b")
    ap.add_argument("--draft", default="random:llama-68m")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--n", default="1,2,3,5,9,17")
    ap.add_argument("--batch", default="1,4,16,64")
    ap.add_argument("--context", default="128,512,2048")
    ap.add_argument("--k", default="1,2,4,8")
    ap.add_argument("--alpha", type=float, default=0.8, help="assumed iid acceptance of the speedup grid")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--hardware", default=None, help="hardware file to fit (default: from the device name)")
    ap.add_argument("--dry-run", action="store_true", help="CPU, the tiny pair, 2 repeats: tests the pipeline")
    ap.add_argument("--out", type=Path, default=None,
                    help="output folder (default: runs/roofline-measure/<device>-<hash>; the committed one is "
                         "written only by --out results/roofline/gpu)")
    args = ap.parse_args(argv)
    if args.dry_run:
        args.device, args.target, args.draft, args.dtype = "cpu", "tiny:target", "tiny:draft", "float32"
        args.n, args.batch, args.context, args.k, args.repeats = "1,2", "1,2", "16", "1", 1
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("roofline_measure: error: `--device` cuda, but torch sees no CUDA device", file=sys.stderr)
        return 2
    try:
        claim_out(args, "roofline-measure", ("device", "target"))
    except UsageError as e:
        print(f"roofline_measure: error: {e}", file=sys.stderr)
        return 2
    hardware = args.hardware or detect_hardware(args.device)
    models = {"target": resolve_model(args.target, args.device, args.dtype, 0),
              "draft": resolve_model(args.draft, args.device, args.dtype, 1)}
    ks = _ints(args.k)
    ns = sorted(set(_ints(args.n)) | {1, 2} | {k + 1 for k in ks})
    costs = measure_costs(models, ns, _ints(args.batch), _ints(args.context), args.repeats)
    shapes = {"target": shape_of(args.target, args.dtype), "draft": shape_of(args.draft, args.dtype)}
    gpu = args.device.startswith("cuda")
    value = "median_s" if gpu else "cpu_median_s"  # CUDA events; on a (shared) CPU the process's CPU time
    fit = fit_roofline(costs, shapes, hardware, value)
    grid = speedup_table(f"{args.target}+{args.draft}", measured_pair_costs(costs, value), args.alpha, ["chain"], ks,
                         _ints(args.batch), _ints(args.context)).assign(
        source="measured-gpu" if gpu else "measured", alpha=args.alpha,
        hardware=torch.cuda.get_device_name(0) if gpu else "cpu")
    meta = metadata({**vars(args), "out": str(args.out), "name": "roofline-measured", "hardware_fitted": hardware},
                    None)
    for name, df in (("costs.csv", costs), ("roofline_vs_measured.csv", fit), ("roofline.csv", grid)):
        atomic_write_csv(args.out / name, df, meta)
    atomic_write_json(args.out / "meta.json", meta)
    f = fit.iloc[0]
    print(f"roofline_measure: {len(costs)} cost rows; {hardware} fitted: eff_bandwidth {f.eff_bandwidth:.3g}, "
          f"eff_compute {f.eff_compute:.3g}, overhead {f.overhead_s * 1e3:.3g} ms; |error| median "
          f"{fit.err_fitted.abs().median():.1%} fitted vs {fit.err_datasheet.abs().median():.1%} datasheet; wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
