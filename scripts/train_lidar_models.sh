#!/usr/bin/env bash
# Rebuild the shipped LiDAR CNN weights (lidarmt/perception/apollo/weights/cnnseg640.pt and cnnseg512.pt) from
# scratch data, with lidarmt's own commands. Every step is seeded; see the model card (weights/MODEL_CARD.md)
# for what each step did and the numbers it gave.
#
#   scripts/train_lidar_models.sh data      # simulate the training (400) and held-out (120) frames
#   scripts/train_lidar_models.sh init      # the starting checkpoints (fine-tuning from the v1 640 weights)
#   scripts/train_lidar_models.sh train     # both networks, in parallel, 1 thread each, nice 10, logs in $LOGS
#   scripts/train_lidar_models.sh ship      # copy the trained weights into the package
#   scripts/train_lidar_models.sh eval      # lidarmt evaluate of both networks (simulated + KITTI)
#   scripts/train_lidar_models.sh all       # all of the above, in order
#
# Environment: DATA (default runs/data), RUNS (default runs), LOGS (default /tmp), MINUTES (training wall-time cap
# per network, default 38), STEPS (schedule length, default 1500), KITTI (default ../shared/data/kitti/training).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
LIDARMT=.venv/bin/lidarmt
DATA=${DATA:-runs/data}
RUNS=${RUNS:-runs}
LOGS=${LOGS:-/tmp}
MINUTES=${MINUTES:-38}
STEPS=${STEPS:-1500}
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
    --steps "$STEPS" --crop 256 --batch 4 --lr 1e-3 --warmup 50 --threads 1 --checkpoint-minutes 4 \
    --max-minutes "$MINUTES" --pos-weight 2 --class-weights 1.5,1,0.7,1.5,1.5 --resume \
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
  for sut in apollo apollo-512; do
    nice -n 10 $LIDARMT evaluate --sut "$sut" --data "$DATA/val3" --kitti "$KITTI" --out "$RUNS/eval_$sut.json" \
      > "$LOGS/lidarmt_eval_$sut.log" 2>&1
  done
}

case "${1:-all}" in
  data) data ;;
  init) init ;;
  train) train ;;
  ship) ship ;;
  eval) evaluate ;;
  all) data; init; train; ship; evaluate ;;
  *) echo "usage: $0 data|init|train|ship|eval|all" >&2; exit 2 ;;
esac
