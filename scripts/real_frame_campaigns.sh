#!/bin/bash
# The README's real-frame MR1 campaigns (issue 19): the 7 shared KITTI object frames (road labels as the ROI, 2 trials)
# and 12 frames of KITTI raw drive 0001 (its tracklets' labelled view as the ROI, and a GeoJSON corridor), each with
# n = 10, 100, 1000 in the disk and the grid region. Three chains run side by side, one process each.
#
#   scripts/real_frame_campaigns.sh OUT [WEIGHTS]     # e.g. runs/real; WEIGHTS: a .pt file or a shipped name (sim, v3; default: the default weights)
#
# Every report (OUT/<name>_<region>/report.md, summary.json) splits the lost obstacles into labelled objects and
# unlabelled junk. Bundles: 1 per n, not minimised (--ddmin-budget 0) to keep the runs to minutes.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: scripts/real_frame_campaigns.sh OUT [WEIGHTS]}
W=${2:-}
K=${KITTI:-../shared/data/kitti/training}
D=${DRIVE:-../shared/data/kitti_raw/2011_09_26/2011_09_26_drive_0001_sync}
mkdir -p "$OUT"
run() {  # name roi bag region extra...
  local name=$1 roi=$2 bag=$3 reg=$4; shift 4
  OMP_NUM_THREADS=1 nice -n 10 .venv/bin/lidarmt fuzz --bag "$bag" --roi "$roi" --n 10,100,1000 --region "$reg" "$@" \
    --bundles 1 --ddmin-budget 0 ${W:+--sut-option weights=$W} --out "$OUT/${name}_$reg" --force --quiet \
    > "$OUT/${name}_$reg.log" 2>&1 || echo "$name $reg failed: see $OUT/${name}_$reg.log"
}
(run kitti labels "$K" disk --trials 2; run kitti labels "$K" grid --trials 2) &
(run drive labels "$D" disk --frames 12; run drive labels "$D" grid --frames 12) &
(run corridor examples/kitti-raw-corridor.geojson "$D" disk --frames 12
 run corridor examples/kitti-raw-corridor.geojson "$D" grid --frames 12) &
wait
