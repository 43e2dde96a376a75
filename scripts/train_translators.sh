#!/usr/bin/env bash
# Reproduce lidarmt's shipped weather translators (UNIT and MUNIT x night, rain, snow).
#
#   scripts/train_translators.sh [UDACITY_DIR] [WORK_DIR]
#
# 1. makes the unpaired domains: the first 1,200 Udacity frames (clear) and one procedural night/rain/snow
#    version of each with random intensity (0.6-1) and style (scripts/make_weather_domains.py);
# 2. trains the six translators with the shipped settings, all at once in the background (one torch thread
#    each: with one thread a CPU run is repeatable), each up to the iteration count it was shipped at
#    (ITER_<arch>_<weather> overrides; the shipped runs were stopped by the session's clock, not converged);
# 3. measures them on the held-back frames 1200..1499 and writes the weights, cards, metrics and the sheet
#    (scripts/ship_translators.py).
# On a GPU add --device cuda to the train-translator line; TACTIC's size is --size 256 --dim 64 --n-res 4.
set -euo pipefail
DATA=${1:-../shared/data/udacity}
WORK=${2:-/tmp/lidarmt-translators}
PY=${PYTHON:-.venv/bin/python}
export OMP_NUM_THREADS=1

"$PY" scripts/make_weather_domains.py --udacity "$DATA" --out "$WORK/domains" --weathers night,rain,snow
pids=()
for arch in unit munit; do
  for weather in night rain snow; do
    var="ITER_${arch}_${weather}"
    iters=${!var:-$(
      "$PY" -c "import json,sys; print(json.load(open('lidarmt/camera/translate/weights/$arch-$weather.json'))['iterations'])" \
        2>/dev/null || echo 4000)}
    "$PY" -m lidarmt camera train-translator --arch "$arch" \
      --domain-a "$WORK/domains/clear" --domain-b "$WORK/domains/$weather" --out "$WORK/runs/$arch-$weather" \
      --size 128 --load-size 128 --dim 16 --n-res 2 --style-dim 8 --mlp-dim 256 \
      --dis-dim 32 --dis-layers 4 --dis-scales 3 --set recon_x_cyc_w=10 --set log_every=50 \
      --seed 1 --threads 1 --precision bf16 --sample-every 500 --checkpoint-every 500 \
      --iterations "$iters" --resume > "$WORK/$arch-$weather.log" 2>&1 &
    pids+=($!)
  done
done
for p in "${pids[@]}"; do wait "$p"; done
"$PY" scripts/ship_translators.py --runs "$WORK/runs"
