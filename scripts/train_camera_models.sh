#!/usr/bin/env bash
# Reproduces every shipped camera steering model (lidarmt/camera/models/weights/*.{pt,md,json}).
#
# Trains each architecture with its default recipe on the shared Udacity frames (1,500 frames, the last 20 %
# validate), one torch thread, seed 0, and ships the result (--ship). About 30 min of one CPU core in all.
# Usage: scripts/train_camera_models.sh [DATA] [RUNS]   (defaults: ../shared/data/udacity runs/camera)
# ARCHS="dave2 epoch" scripts/train_camera_models.sh     trains only those.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA="${1:-../shared/data/udacity}"
RUNS="${2:-runs/camera}"
ARCHS="${ARCHS:-dave2 dave-orig dave-norminit dave-dropout chauffeur epoch}"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
mkdir -p "$RUNS"
for arch in $ARCHS; do
    echo "=== $arch $(date -u +%H:%M:%S)"
    .venv/bin/lidarmt camera train --arch "$arch" --data "$DATA" --out "$RUNS/$arch" --seed 0 --threads 1 \
        --force --ship 2>&1 | tee "$RUNS/$arch.log"
done
