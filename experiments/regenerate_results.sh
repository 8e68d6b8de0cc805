#!/usr/bin/env bash
# Regenerate every committed reference result from a clean checkout of one commit.
#
#   experiments/regenerate_results.sh [STAGE]      # STAGE: an empty folder outside the repository
#
# Each command writes into STAGE (never into the work tree, so the tree stays clean and every file's
# provenance names this commit with dirty = false); at the end STAGE's folders replace results/verify,
# results/hf/{alpha.csv,pit/}, results/sweep/default, results/numerics and results/roofline, and the files of
# results/calibrate that `calibrate` writes (its experiment subfolders -- worstevent, events, crossu, inconclusive,
# reach -- come from their own experiments/*.py commands and are kept).  Commit them, then run
# `python experiments/gate_probes.py` from that (clean) commit for results/gate/.
# Wall time on 2 cores: about 45 minutes.  PY overrides the interpreter (default .venv/bin/python).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
PY=${PY:-.venv/bin/python}
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  echo "regenerate_results.sh: the work tree has modified tracked files; results must come from a clean checkout" >&2
  exit 2
fi
STAGE=${1:-$(mktemp -d /tmp/specverify_results.XXXXXX)}
mkdir -p "$STAGE"
[ -z "$(ls -A "$STAGE")" ] || { echo "regenerate_results.sh: STAGE '$STAGE' is not empty" >&2; exit 2; }
commit=$(git rev-parse HEAD)
echo "regenerating results of $commit into $STAGE"
export SOURCE_DATE_EPOCH=0 PYTHONHASHSEED=0

step() { echo "== $(date -u +%H:%M:%S) $*"; "$@"; }
step "$PY" -m harness verify --no-progress --out "$STAGE/verify"
# end to end: 1000 seeds of a small base scenario with the real-model tests (16 sequences), 2 processes (~17 min)
step "$PY" -m harness calibrate --seeds 1000 --scenario base --draws 2000 --real-model-sequences 16 --jobs 2 \
  --no-progress --out "$STAGE/calibrate"
# the statistics alone, from the exact law's count vectors (and the exact gate-level tails), into calibrate/null
step "$PY" -m harness calibrate --null --scenario base --replicates 1000000 --no-progress --out "$STAGE/calibrate"
step "$PY" -m harness alpha --no-progress --out "$STAGE/hf/alpha.csv"
step "$PY" -m harness pit --out "$STAGE/hf/pit"
step "$PY" -m harness sweep --redo --out "$STAGE/sweep/default"
step "$PY" -m harness report --results "$STAGE/sweep/default" --out "$STAGE/sweep/default/figures"
step "$PY" -m harness numerics --no-progress --out "$STAGE/numerics"
# the roofline against published GPU measurements (no randomness), its ablation and the model's picks
step "$PY" -m harness.speedup.roofline.fidelity --out "$STAGE/roofline"
step "$PY" -m harness report --results "$STAGE/roofline" --out "$STAGE/roofline/figures"
PYTHONPATH=. step "$PY" experiments/roofline_ablation.py --out "$STAGE/roofline/ablation.md"
step "$PY" experiments/published_picks.py --results "$STAGE/roofline"

[ "$(git rev-parse HEAD)" = "$commit" ] && [ -z "$(git status --porcelain --untracked-files=no)" ] || {
  echo "regenerate_results.sh: the work tree changed while regenerating; not copying" >&2; exit 2; }
rm -rf results/verify results/hf/pit results/hf/pit.csv results/sweep/default results/numerics results/roofline
for f in "$STAGE"/calibrate/*; do rm -rf "results/calibrate/$(basename "$f")"; done
mkdir -p results/hf results/sweep results/calibrate
cp -r "$STAGE/verify" "$STAGE/numerics" "$STAGE/roofline" results/
cp -r "$STAGE/calibrate/." results/calibrate/
cp -r "$STAGE/hf/pit" results/hf/pit
cp "$STAGE/hf/alpha.csv" "$STAGE/hf/alpha.csv.meta.json" results/hf/  # the table and its provenance sidecar
cp -r "$STAGE/sweep/default" results/sweep/default
find results -name '_tmp_*' -prune -exec rm -rf {} +
find results \( -name '.lock' -o -name '.*.lock' \) -type f -delete  # the output locks the commands took
echo "done: results of $commit copied into results/ (git status shows them); commit them"
