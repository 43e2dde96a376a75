#!/usr/bin/env bash
# Rebuild the shipped LiDAR CNN weights (lidarmt/lidar/perception/apollo/weights/) with lidarmt's own commands. Every
# step is seeded; the model card (weights/MODEL_CARD.md) says what each step did and the numbers it gave.
#
# v3 (issue 19, the shipped cnnseg640.pt): the simulated-only v2 640 network (cnnseg640_sim.pt, `weights=sim`)
# fine-tuned on the real KITTI raw drive 2011_09_26_drive_0001 (sweeps 0-85, tracklet labels, only camera 2's
# view labelled) together with simulated frames, in two phases.
#
#   scripts/train_lidar_models.sh data      # simulate the training (150 + 400) and held-out (24) frames
#   scripts/train_lidar_models.sh init      # phase 1 starts from the v2 weights (cnnseg640_sim.pt)
#   scripts/train_lidar_models.sh train     # phase 1 (500 steps), phase 2 (550 steps from phase 1's weights),
#                                           # then the 512 network (350 steps on its grid from phase 2's weights)
#   scripts/train_lidar_models.sh ship      # copy phase 2's weights as cnnseg640.pt, the 512 run's as cnnseg512.pt
#   scripts/train_lidar_models.sh eval      # every number of the card (test, validation, simulated)
#   scripts/train_lidar_models.sh kitti40 GRID WEIGHTS [key=value ...]   # THE TARGET for any weights: cars,
#                                           # pedestrians, cyclists within 40 m on the 7 KITTI object frames
#   scripts/train_lidar_models.sh all       # all of the above, in order (v3)
#
# v4 (issue 32; shipped as the named weights `streets`, cnnseg640_streets.pt, beside the v3 default: see the model
# card): v3 fine-tuned on drive 0001 + SemanticKITTI sequences (whole sweep) + simulated frames:
#   lidarmt simulate --dataset runs/data/sim_train --frames 80 --seed 1   # (and sim_val: --frames 24 --seed 2)
#   scripts/train_lidar_models.sh ft runs/v4_a1 640 300 3e-4 11 1,2,0 01,02,03,04,05,06,07            # candidate A1
#   scripts/train_lidar_models.sh ft runs/v4_a2 640 300 3e-4 11 1,2,1 01,02,03,04,05,06,07 runs/data/sim_train  # A2
#   scripts/train_lidar_models.sh ft runs/v4_a3 640 300 3e-4 11 1,2,2 01,02,03,04,05,06,07 runs/data/sim_train  # A3
#   scripts/train_lidar_models.sh ft runs/v4_b1 640 900 3e-4 11 1,2,2 01,02,03,04,05,06,07 runs/data/sim_train  # B1
#   scripts/train_lidar_models.sh ft runs/v4_b2 640 300 1e-3 11 1,2,2 01,02,03,04,05,06,07 runs/data/sim_train  # B2
#   scripts/train_lidar_models.sh final640 | final512 | loso SEQ...  # the chosen recipe B1 (STEPS, LR, DW below)
#   scripts/train_lidar_models.sh shipstreets   # copy final640's weights as cnnseg640_streets.pt
#
# Environment: DATA (default runs/data), RUNS (default runs), LOGS (default runs/logs), MINUTES (wall-time cap of
# phase 2, default 50), KITTI (default ../shared/data/kitti/training), DRIVE (the KITTI raw drive 0001 folder).
# One torch thread per run (the machine is shared). KITTI's licence (CC BY-NC-SA 3.0, non-commercial) applies to
# weights trained on its sweeps.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
LIDARMT=.venv/bin/lidarmt
DATA=${DATA:-runs/data}
RUNS=${RUNS:-runs}
LOGS=${LOGS:-runs/logs}
MINUTES=${MINUTES:-50}
KITTI=${KITTI:-../shared/data/kitti/training}
DRIVE=${DRIVE:-../shared/data/kitti_raw/2011_09_26/2011_09_26_drive_0001_sync}
WEIGHTS=lidarmt/lidar/perception/apollo/weights
export OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 RUNS KITTI DRIVE
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's code, whatever the venv points at
mkdir -p "$LOGS"

data() {
  nice -n 10 $LIDARMT simulate --dataset "$DATA/sim_train" --frames 150 --seed 1
  nice -n 10 $LIDARMT simulate --dataset "$DATA/train3" --frames 400 --seed 1
  nice -n 10 $LIDARMT simulate --dataset "$DATA/sim_val" --frames 24 --seed 2
}

init() {
  $PY -c "from lidarmt.lidar.perception.apollo.train import write_start_checkpoint as w; \
w('$WEIGHTS/cnnseg640_sim.pt', '$RUNS/cnnseg640_v3', grid=640, lr=1e-3)"
}

# phase 1: 500 steps, 60 % of the samples from the drive's sweeps 0-85 (86-107 are the validation)
train1() {
  nice -n 5 $LIDARMT train --data "$DRIVE@0:86" --data "$DATA/sim_train" --data-weights 3,2 \
    --out "$RUNS/cnnseg640_v3" --grid 640 --seed 0 --steps 500 --crop 256 --batch 4 --lr 1e-3 --warmup 20 \
    --threads 1 --checkpoint-minutes 8 --max-minutes 80 --pos-weight 1.5 --class-weights 1.5,1,0.7,1.5,1.5 \
    --resume > "$LOGS/train640_v3.log" 2>&1
}

# phase 2: 550 more steps from phase 1's weights, half drive, half the 400 simulated frames of 7 towns
train2() {
  [ -f "$RUNS/cnnseg640_v4/last.pt" ] || $PY -c "from lidarmt.lidar.perception.apollo.train import \
write_start_checkpoint as w; w('$RUNS/cnnseg640_v3/cnnseg640.pt', '$RUNS/cnnseg640_v4', grid=640, lr=5e-4)"
  nice -n 5 $LIDARMT train --data "$DRIVE@0:86" --data "$DATA/train3" --data-weights 1,1 \
    --out "$RUNS/cnnseg640_v4" --grid 640 --seed 1 --steps 550 --crop 256 --batch 4 --lr 5e-4 --warmup 20 \
    --threads 1 --checkpoint-minutes 8 --max-minutes "$MINUTES" --pos-weight 1.5 \
    --class-weights 1.5,1,0.7,1.5,1.5 --resume > "$LOGS/train640_v4.log" 2>&1
}

# the 512 network (apollo-512): 350 steps on the 512 grid from the shipped 640 weights (phase 2's; one topology)
train512() {
  [ -f "$RUNS/cnnseg512_v3/last.pt" ] || $PY -c "from lidarmt.lidar.perception.apollo.train import \
write_start_checkpoint as w; w('$RUNS/cnnseg640_v4/cnnseg640.pt', '$RUNS/cnnseg512_v3', grid=512, lr=3e-4)"
  nice -n 5 $LIDARMT train --data "$DRIVE@0:86" --data "$DATA/train3" --data-weights 1,1 \
    --out "$RUNS/cnnseg512_v3" --grid 512 --seed 3 --steps 350 --crop 256 --batch 4 --lr 3e-4 --warmup 10 \
    --threads 1 --checkpoint-minutes 6 --max-minutes 22 --pos-weight 1.5 --class-weights 1.5,1,0.7,1.5,1.5 \
    --resume > "$LOGS/train512_v3.log" 2>&1
}

train() {
  train1
  train2
  train512
}

ship() {
  cp "$RUNS/cnnseg640_v4/cnnseg640.pt" "$WEIGHTS/cnnseg640.pt"
  cp "$RUNS/cnnseg512_v3/cnnseg512.pt" "$WEIGHTS/cnnseg512.pt"
}

# every number of the model card: for the simulated-only weights (sim), phase 1 and the shipped ones
evaluate() {
  for w in sim "$RUNS/cnnseg640_v3/cnnseg640.pt" "$WEIGHTS/cnnseg640.pt"; do
    for what in kitti40 drive sim; do
      nice -n 10 $PY scripts/lidar_metrics.py "$what" 640 "$w"
    done
    nice -n 10 $PY scripts/lidar_metrics.py kitti40 640 "$w" low_object_filter=true filter_noise=true
  done
  for w in sim "$WEIGHTS/cnnseg512.pt"; do
    for what in kitti40 drive sim; do
      nice -n 10 $PY scripts/lidar_metrics.py "$what" 512 "$w"
    done
  done
}

# The target (issues 11 and 19): precision and recall on the 7 KITTI object frames within 40 m of the sensor, in
# the road-label ROI and camera 2's view, per class (scripts/lidar_metrics.py says exactly how). Prints a table
# and appends it as JSON to $RUNS/metrics.jsonl.
kitti40() {
  nice -n 10 $PY scripts/lidar_metrics.py kitti40 "$@"
}

# ---------------------------------------------------------------------------------------------------- v4 (issue 32)
# Fine-tunes of the shipped v3 640 weights on drive 0001 (sweeps 0-85) + SemanticKITTI sequences (whole sweep,
# instance labels; ../shared/data/semantickitti/sequences/NN) [+ simulated frames]. Every run: 640 grid, crop 256,
# batch 4, one thread, checkpoints every 4 minutes, --resume (safe to repeat after an interruption).
SK=${SK:-../shared/data/semantickitti/sequences}
V3_640=${V3_640:-$WEIGHTS/cnnseg640.pt}

# ft OUT GRID STEPS LR SEED DATA_WEIGHTS SEQS [SIM]: fine-tune V3_640 (or, for GRID 512, FROM) on the drive,
# the SemanticKITTI sequences SEQS (comma-separated) and optionally the simulated folder SIM
ft() {
  local out=$1 grid=$2 steps=$3 lr=$4 seed=$5 dw=$6 seqs=$7 sim=${8:-}
  local from=${FROM:-$V3_640}
  local data=(--data "$DRIVE@0:86")
  local s
  for s in ${seqs//,/ }; do data+=(--data "$SK/$s"); done
  [ -n "$sim" ] && data+=(--data "$sim")
  # one weight for the drive, one shared by all sequences (split evenly), one for the simulated frames
  local w_drive w_sk w_sim n
  IFS=, read -r w_drive w_sk w_sim <<< "$dw"
  n=$(echo "$seqs" | tr ',' '\n' | wc -l)
  local weights=$w_drive
  for s in ${seqs//,/ }; do weights+=",$($PY -c "print(round($w_sk / $n, 6))")"; done
  [ -n "$sim" ] && weights+=",$w_sim"
  [ -f "$out/last.pt" ] || $PY -c "from lidarmt.lidar.perception.apollo.train import write_start_checkpoint as w; \
w('$from', '$out', grid=$grid, lr=$lr)"
  nice -n 5 $LIDARMT train "${data[@]}" --data-weights "$weights" --out "$out" --grid "$grid" --seed "$seed" \
    --steps "$steps" --crop 256 --batch 4 --lr "$lr" --warmup 10 --threads 1 --checkpoint-minutes 4 \
    --pos-weight 1.5 --class-weights 1.5,1,0.7,1.5,1.5 --resume > "$LOGS/$(basename "$out").log" 2>&1
}

ALL_SEQS=01,02,03,04,05,06,07,09,10
TRAIN_SEQS=01,02,03,04,05,06,07   # 09 and 10 are the validation sequences that choose the recipe

# the v4 recipe (chosen on 09, 10, drive sweeps 86-107 and the simulated sim_val; MODEL_CARD.md): set by `recipe`
STEPS=${STEPS:-900}         # B1, chosen on the validation sequences (A2, the first choice: 300 steps, DW 1,2,1)
LR=${LR:-3e-4}
DW=${DW:-1,2,2}            # drive, all SemanticKITTI sequences together, simulated frames
SIM_TRAIN=${SIM_TRAIN:-$DATA/sim_train}

# the sequences of ALL_SEQS but one
all_but() { echo "$ALL_SEQS" | tr ',' '\n' | grep -v "^$1$" | paste -sd, -; }

# loso SEQ...: one fold per sequence: the recipe on the other eight, from the same start (v3), then the fold's
# network on its own held-out sequence (scripts/lidar_metrics.py report sk:SEQ)
loso() {
  local s
  for s in "$@"; do
    ft "$RUNS/v4_loso_$s" 640 "$STEPS" "$LR" 21 "$DW" "$(all_but "$s")" "$SIM_TRAIN"
    OUT="$RUNS/metrics/loso_$s.json" nice -n 8 $PY scripts/lidar_metrics.py report "sk:$s" 640 \
      "$RUNS/v4_loso_$s/cnnseg640.pt" > "$LOGS/eval_loso_$s.log" 2>&1
  done
}

# the shipped v4 networks: the recipe on every sequence, 640 from v3's 640, 512 from v3's 512 (on its grid)
final640() { ft "$RUNS/v4_640" 640 "$STEPS" "$LR" 31 "$DW" "$ALL_SEQS" "$SIM_TRAIN"; }
final512() { FROM=$WEIGHTS/cnnseg512.pt ft "$RUNS/v4_512" 512 "$STEPS" "$LR" 32 "$DW" "$ALL_SEQS" "$SIM_TRAIN"; }

case "${1:-all}" in
  ft) shift; ft "$@" ;;
  loso) shift; loso "$@" ;;
  final640) final640 ;;
  shipstreets) cp "$RUNS/v4_640/cnnseg640.pt" "$WEIGHTS/cnnseg640_streets.pt" ;;
  final512) final512 ;;
  data) data ;;
  init) init ;;
  train) train ;;
  train1) train1 ;;  # one phase (--resume: continues an interrupted run)
  train2) train2 ;;
  train512) train512 ;;
  ship) ship ;;
  eval) evaluate ;;
  kitti40) shift; kitti40 "$@" ;;
  all) data; init; train; ship; evaluate ;;
  *) echo "usage: $0 data|init|train|train1|train2|train512|ship|eval|kitti40|all|ft|loso|final640|final512|shipstreets" >&2; exit 2 ;;
esac
