#!/usr/bin/env bash
# The one prepared GPU check of the sweep issue: < 8 minutes on one H100/H200-class GPU.
#   1. cost curves T(n, B) of realistic shapes with random weights (a ~1.1B Llama-shaped target, ~68M and
#      ~160M drafts; bfloat16; n = 1..9 tokens scored, batch 1..32; CUDA events after warm-up),
#   2. the measured tiny-pair sweep on the GPU (k in {1, 2, 4, 8}, batch 1 and 8, interleaved arms),
#   3. the figures and tables, from the stored results.
# Settings: harness/experiments/sweep/gpu.toml.  Results: results/sweep/gpu/ (device named in every cell's metadata).
# The sweep is resumable: if the time limit cuts it, run this script again and it continues.
#
#   bash experiments/gpu_sweep.sh            # uses .venv/bin/python if present, else python3 (needs CUDA torch)
#   PY=python bash experiments/gpu_sweep.sh  # a Python whose torch has CUDA
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
OUT=${OUT:-results/sweep/gpu}
LIMIT=${LIMIT:-450}   # seconds for the sweep itself; the report takes ~20 s more

if ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "gpu_sweep.sh: torch in $PY sees no CUDA device; install a CUDA build of torch (make setup TORCH=system)" >&2
  exit 2
fi
"$PY" -c 'import specimpl, harness' 2>/dev/null || "$PY" -m pip install -q -e .
"$PY" -c 'import torch; print("GPU:", torch.cuda.get_device_name(0), "| torch", torch.__version__, "| CUDA", torch.version.cuda)'

rc=0
timeout -s INT "$LIMIT" "$PY" -m harness sweep --config harness/experiments/sweep/gpu.toml --device cuda --out "$OUT" --no-progress || rc=$?
if [ "$rc" -ne 0 ]; then
  echo "gpu_sweep.sh: the sweep stopped (exit $rc); stored cells are kept, run again to resume" >&2
  "$PY" -m harness sweep --config harness/experiments/sweep/gpu.toml --device cuda --out "$OUT" --list | grep -c todo || true
fi
"$PY" -m harness report --results "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/nvidia-smi.csv" 2>/dev/null || true
exit "$rc"
