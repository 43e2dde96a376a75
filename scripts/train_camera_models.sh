#!/usr/bin/env bash
# Reproduces every shipped camera steering model (lidarmt/camera/models/weights/*.{pt,md,json,profile.npz}).
#
# Trains each architecture with its recipe (lidarmt/camera/models/train.py: RECIPES; epochs, learning rate and
# augmentations chosen on the validation split only, as each card says) on the shared Udacity frames (2,200 frames with the drive's
# ground-truth angles; the last 20 % validate), seed 0, one torch thread (bit-deterministic), ships the weights,
# model card and metrics (--ship), then recomputes the model's neuron coverage profile over the training split
# (lidarmt camera profile). The models train one after another. The training times the shipped cards record
# (train_seconds) add up to 75 min (chauffeur 15, dave-dropout 4, dave-norminit 5, dave-orig 4, dave2 8, epoch 21,
# rambo 17), each measured on a core shared with other jobs; the profiles add a few minutes. Not re-run end to end
# since the recipes were tuned one model at a time.
# Usage: scripts/train_camera_models.sh [DATA] [RUNS]   (defaults: ../shared/data/udacity runs/camera)
# ARCHS="dave2 epoch" scripts/train_camera_models.sh     trains only those.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA="${1:-../shared/data/udacity}"
RUNS="${2:-runs/camera}"
ARCHS="${ARCHS:-dave2 dave-orig chauffeur rambo epoch dave-dropout dave-norminit}"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
mkdir -p "$RUNS"
for arch in $ARCHS; do
    echo "=== train $arch $(date -u +%H:%M:%S)"
    .venv/bin/lidarmt camera train --arch "$arch" --data "$DATA" --out "$RUNS/$arch" --seed 0 --threads 1 \
        --force --ship > "$RUNS/$arch.log" 2>&1
    grep -A1 "validation RMSE" "$RUNS/$arch.log" | tail -n 2
done
# coverage profiles over the training split (Chauffeur: 400 evenly spaced training windows, each encoded whole)
for arch in $ARCHS; do
    echo "=== profile $arch $(date -u +%H:%M:%S)"
    frames=()
    [ "$arch" = chauffeur ] && frames=(--frames 400)
    .venv/bin/lidarmt camera profile --model "$arch" --images "$DATA" --split train --force "${frames[@]}" \
        > "$RUNS/$arch.profile.log" 2>&1
    tail -n 2 "$RUNS/$arch.profile.log"
done
for arch in $ARCHS; do
    .venv/bin/lidarmt camera train --arch "$arch" --data "$DATA" --validate "lidarmt/camera/models/weights/$arch.pt"
done
echo "=== done $(date -u +%H:%M:%S)"
