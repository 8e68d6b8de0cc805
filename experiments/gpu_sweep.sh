#!/usr/bin/env bash
# The one prepared GPU check of the sweep and roofline issues: < 8 minutes on one H100/H200-class GPU.
#   1. cost curves T(n, B) of realistic shapes with random weights (a ~1.1B Llama-shaped target, ~68M and
#      ~160M drafts; bfloat16; n = 1..9 tokens scored, batch 1..32; CUDA events after warm-up),
#   2. the measured tiny-pair sweep on the GPU (k in {1, 2, 4, 8}, batch 1 and 8, interleaved arms),
#   3. T(n, B, L) of the ~1.1B target and ~68M draft (random weights built from their configs, no
#      downloads) over n = 1..17, batch 1..64, context 128..2048, CUDA events; the GPU's hardware file's
#      roofline fitted to them; the speedup grid from the measured costs (harness.speedup.roofline.measure),
#   4. the figures and tables, from the stored results (the roofline ones titled "measured on GPU").
# Settings: harness/configs/sweep/gpu.toml.  Results: results/sweep/gpu/ and results/roofline/gpu/
# (device named in every cell's metadata).  The sweep is resumable: if the time limit cuts it, run this
# script again and it continues.
#
#   bash experiments/gpu_sweep.sh            # uses .venv/bin/python if present, else python3 (needs CUDA torch)
#   PY=python bash experiments/gpu_sweep.sh  # a Python whose torch has CUDA
#   DRY_RUN=1 bash experiments/gpu_sweep.sh  # on a CPU: the sweep's plan (--list), stage 3 on the tiny pair
#                                            # with tiny sizes, and the report: tests the pipeline (fast)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
OUT=${OUT:-results/sweep/gpu}
ROOF_OUT=${ROOF_OUT:-results/roofline/gpu}
LIMIT=${LIMIT:-330}        # seconds for the sweep itself
ROOF_LIMIT=${ROOF_LIMIT:-90}  # seconds for the T(n, B, L) measurement; the reports take ~30 s more
DRY_RUN=${DRY_RUN:-0}

if [ "$DRY_RUN" = 1 ]; then
  echo "gpu_sweep.sh: dry run on the CPU (no GPU needed): plan, stage 3 at tiny sizes, report"
  "$PY" -m harness sweep --config harness/configs/sweep/gpu.toml --device cpu --out "$OUT" --list | tail -3
  "$PY" -m harness.speedup.roofline.measure --dry-run --out "$ROOF_OUT"
  "$PY" -m harness report --results "$ROOF_OUT" --out "$ROOF_OUT/figures" --formats png
  exit 0
fi

if ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "gpu_sweep.sh: torch in $PY sees no CUDA device; install a CUDA build of torch (make setup TORCH=system)" >&2
  exit 2
fi
"$PY" -c 'import specimpl, harness' 2>/dev/null || "$PY" -m pip install -q -e .
"$PY" -c 'import torch; print("GPU:", torch.cuda.get_device_name(0), "| torch", torch.__version__, "| CUDA", torch.version.cuda)'

rc=0
timeout -s INT "$LIMIT" "$PY" -m harness sweep --config harness/configs/sweep/gpu.toml --device cuda --out "$OUT" --no-progress || rc=$?
if [ "$rc" -ne 0 ]; then
  echo "gpu_sweep.sh: the sweep stopped (exit $rc); stored cells are kept, run again to resume" >&2
  "$PY" -m harness sweep --config harness/configs/sweep/gpu.toml --device cuda --out "$OUT" --list | grep -c todo || true
fi
rrc=0
timeout -s INT "$ROOF_LIMIT" "$PY" -m harness.speedup.roofline.measure --device cuda --out "$ROOF_OUT" || rrc=$?
[ "$rrc" -eq 0 ] || echo "gpu_sweep.sh: the T(n, B, L) measurement stopped (exit $rrc)" >&2
"$PY" -m harness report --results "$OUT" --out "$OUT/figures"
[ "$rrc" -ne 0 ] || "$PY" -m harness report --results "$ROOF_OUT" --out "$ROOF_OUT/figures"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/nvidia-smi.csv" 2>/dev/null || true
[ "$rc" -ne 0 ] && exit "$rc"
exit "$rrc"
