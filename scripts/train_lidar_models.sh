#!/usr/bin/env bash
# Rebuild the shipped LiDAR CNN weights (lidarmt/perception/apollo/weights/cnnseg640.pt and cnnseg512.pt) from
# scratch data, with lidarmt's own commands. Every step is seeded; see the model card (weights/MODEL_CARD.md)
# for what each step did and the numbers it gave.
#
#   scripts/train_lidar_models.sh data      # simulate the training (400) and held-out (120) frames
#   scripts/train_lidar_models.sh init      # the starting checkpoints (fine-tuning from the v1 640 weights)
#   scripts/train_lidar_models.sh train     # both networks, in parallel, 1 thread each, nice 10, logs in $LOGS
#   MINUTES=50 scripts/train_lidar_models.sh train640   # continue one of them (the cap counts the time so far)
#   scripts/train_lidar_models.sh ship      # copy the trained weights into the package
#   scripts/train_lidar_models.sh eval      # lidarmt evaluate of both networks (simulated + KITTI), and the
#                                           # issue-11 KITTI target (cars within 40 m in the road-label ROI)
#   scripts/train_lidar_models.sh kitti40 GRID WEIGHTS [key=value ...]   # that target for any weights
#   scripts/train_lidar_models.sh all       # all of the above, in order
#
# Environment: DATA (default runs/data), RUNS (default runs), LOGS (default /tmp), MINUTES (training wall-time cap
# per network, default 33), STEPS (schedule length, default 400), KITTI (default ../shared/data/kitti/training).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
LIDARMT=.venv/bin/lidarmt
DATA=${DATA:-runs/data}
RUNS=${RUNS:-runs}
LOGS=${LOGS:-/tmp}
MINUTES=${MINUTES:-33}
STEPS=${STEPS:-400}
KITTI=${KITTI:-../shared/data/kitti/training}
# The weights shipped before issue 11 (trained from scratch on the older simulator, see the model card's history):
# both networks start from them. The 640 and 512 networks share one topology (the grid only sets the input size).
V1_COMMIT=7a072f3
V1_WEIGHTS=lidarmt/perception/apollo/weights/cnnseg640.pt

data() {
  nice -n 10 $LIDARMT simulate --dataset "$DATA/train3" --frames 400 --seed 1
  nice -n 10 $LIDARMT simulate --dataset "$DATA/val3" --frames 120 --seed 2
  $PY -c "from lidarmt.perception.apollo.evaluate import save_dataset_maps as s; s('$DATA/val3')"
}

init() {
  mkdir -p "$RUNS/init"
  git show "$V1_COMMIT:$V1_WEIGHTS" > "$RUNS/init/cnnseg640_v1.pt"
  for grid in 640 512; do
    $PY -c "from lidarmt.perception.apollo.train import write_start_checkpoint as w; \
w('$RUNS/init/cnnseg640_v1.pt', '$RUNS/cnnseg${grid}_v2', grid=$grid, lr=1e-3)"
  done
}

train_one() {  # grid seed
  nice -n 10 $LIDARMT train --data "$DATA/train3" --out "$RUNS/cnnseg$1_v2" --grid "$1" --seed "$2" \
    --steps "$STEPS" --crop 256 --batch 4 --lr 1e-3 --warmup 20 --threads 1 --checkpoint-minutes 4 \
    --max-minutes "$MINUTES" --pos-weight 1.5 --class-weights 1.5,1,0.7,1.5,1.5 --resume \
    > "$LOGS/lidarmt_train$1.log" 2>&1
}

train() {
  train_one 640 0 &
  train_one 512 1 &
  wait
}

ship() {
  cp "$RUNS/cnnseg640_v2/cnnseg640.pt" lidarmt/perception/apollo/weights/cnnseg640.pt
  cp "$RUNS/cnnseg512_v2/cnnseg512.pt" lidarmt/perception/apollo/weights/cnnseg512.pt
}

evaluate() {
  for grid in 640 512; do
    nice -n 10 $LIDARMT evaluate --grid "$grid" --weights "lidarmt/perception/apollo/weights/cnnseg$grid.pt" \
      --data "$DATA/val3" --frames 24 --kitti "$KITTI" --out "$RUNS/eval_$grid.json" > "$LOGS/lidarmt_eval_$grid.log" 2>&1
  done
  kitti40 640 lidarmt/perception/apollo/weights/cnnseg640.pt
  kitti40 640 lidarmt/perception/apollo/weights/cnnseg640.pt low_object_filter=true filter_noise=true
  kitti40 512 lidarmt/perception/apollo/weights/cnnseg512.pt
}

# The issue-11 target: car precision and recall on the 7 KITTI frames within 40 m of the sensor, in the
# road-label ROI (the ROI `lidarmt evaluate` uses, cut to a 40 m disk; only the camera's field of view counts).
# kitti40 GRID WEIGHTS [key=value ...]: prints one line and appends it as JSON to $RUNS/kitti40.jsonl
kitti40() {
  nice -n 10 $PY - "$KITTI" "$RUNS/kitti40.jsonl" "$@" <<'PY'
import json, sys
import numpy as np
from lidarmt.io import open_recording
from lidarmt.perception.apollo.config import ApolloConfig
from lidarmt.perception.apollo.evaluate import evaluate_frames, kitti_roi
from lidarmt.perception.apollo.pipeline import ApolloLOP
from lidarmt.types import ObstacleClass

kitti, out, grid, weights, *sets = sys.argv[1:]
RADIUS = 40.0

class Within:
    """A ROI cut to a disk of RADIUS metres around the sensor."""
    empty = False
    def __init__(self, roi):
        self.roi = roi
    def _xy(self, xy):
        if getattr(xy, "dtype", None) is not None and xy.dtype.names:
            return np.c_[xy["x"], xy["y"]].astype(np.float64)
        return np.asarray(xy, dtype=np.float64)[:, :2]
    def contains(self, xy):
        a = self._xy(xy)
        return self.roi.contains(xy) & (np.hypot(a[:, 0], a[:, 1]) < RADIUS)
    def indices(self, frame):
        idx = np.asarray(self.roi.indices(frame), dtype=np.int64)
        p = frame.points[idx]
        return idx[np.hypot(p["x"], p["y"]) < RADIUS]

cfg = ApolloConfig(grid=int(grid), weights=weights).with_overrides(sets)
lop = ApolloLOP(cfg)
with open_recording(kitti) as rec:
    res = evaluate_frames("kitti40", list(rec), lop, lambda f: Within(kitti_roi(f)), fov_deg=82.0,
                          count_unknown_fp=False)
car = res.counts[ObstacleClass.CAR].to_dict()
line = {"grid": int(grid), "weights": weights, "sets": sets, "radius_m": RADIUS, "frames": res.frames,
        "detections": res.detections, "car": car,
        "all": {c.value: res.counts[c].to_dict() for c in res.counts}}
print(f"grid {grid} {' '.join(sets) or '(defaults)'}: car GT {car['gt']} det {car['det']} TP {car['tp']} "
      f"FP {car['fp']} P {car['precision']} R {car['recall']} found {car['found_recall']}")
with open(out, "a") as fh:
    fh.write(json.dumps(line) + "\n")
PY
}

case "${1:-all}" in
  data) data ;;
  init) init ;;
  train) train ;;
  train640) train_one 640 0 ;;  # continue one network (--resume), e.g. with a larger MINUTES
  train512) train_one 512 1 ;;
  ship) ship ;;
  eval) evaluate ;;
  kitti40) shift; kitti40 "$@" ;;
  all) data; init; train; ship; evaluate ;;
  *) echo "usage: $0 data|init|train|ship|eval|all" >&2; exit 2 ;;
esac
