#!/usr/bin/env bash
# The GPU measurements of issue 23 in one run, on a machine with an NVIDIA GPU and a CUDA build of torch:
#   1. the tests that need a GPU (tests/test_device.py: those marked needs_cuda run, the CPU-only ones skip);
#   2. bench_perception.py on the GPU: per-stage times, detects/s, the CNN's FLOP/s over the GPU's 8192² matmul
#      peak (fp32 with TF32 off, and bf16/fp16) in the same run, GPU-vs-CPU agreement of exact mode;
#   3. bench_camera_fuzz.py on the GPU: every camera model's throughput, campaign ÷ model-only with the batched
#      transformations (batched-v1: numba kernels on the CPU, made ahead in the prefetch pool while the models run
#      on the GPU) and with the reference ones, each transformation's ms per image, the networks' FLOP/s over the
#      matmul peak;
#   4. bench_translate.py: translators' images/s on the GPU;
#   5. an MR1 campaign on the demo recording with --device cuda (every frame, n ∈ {10, 100, 1000}): its
#      verdicts/s, and the study-size campaign's time (1,000 frames × 3 n) extrapolated from it.
# Everything goes to $OUT (default benchmarks/results/gpu/): one JSON per step, the logs, and gpu_run.json (the
# card, the driver, torch, each step's exit status and wall time). A step that fails is recorded and the next
# one runs. README's GPU figures come only from such a run, stating the card.
#
#   OUT=/tmp/gpu bash benchmarks/gpu_run.sh          # all steps
#   STEPS="tests perception" bash benchmarks/gpu_run.sh
#   STEP_TIMEOUT=480 TIMEOUT_camera=240 CAMERA_MODELS=dave2,epoch CAMERA_FRAMES=6 bash benchmarks/gpu_run.sh
#   HEAP=system OUT=/tmp/gpu-system STEPS="perception camera" bash benchmarks/gpu_run.sh   # glibc's defaults
# Without .venv (a machine whose image already holds torch with CUDA) it runs the project from this checkout with
# python3 (PY=... picks another interpreter).
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PY:-}" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
if [ -n "${LIDARMT:-}" ]; then LIDARMT_CMD=("$LIDARMT"); else LIDARMT_CMD=("$PY" -m lidarmt); fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
CAMERA_MODELS=${CAMERA_MODELS:-}
CAMERA_FRAMES=${CAMERA_FRAMES:-12}
HEAP=${HEAP:-}  # kept | system: the benchmarks' --heap (default kept, as the lidarmt command: lidarmt._heap)
OUT=${OUT:-benchmarks/results/gpu}
STEPS=${STEPS:-tests perception camera translate campaign}
STEP_TIMEOUT=${STEP_TIMEOUT:-480}
mkdir -p "$OUT"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}

if ! "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  "$PY" -c "import torch; print('gpu_run: no usable CUDA GPU (torch', torch.__version__, 'CUDA build', torch.version.cuda, '); install a CUDA build of torch, e.g. pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128')" >&2
  exit 2
fi

STATUS="$OUT/steps.tsv"
: > "$STATUS"
run_step() {  # name, command...
  local name=$1; shift
  local limit_var="TIMEOUT_$name"
  local limit=${!limit_var:-$STEP_TIMEOUT}
  echo "gpu_run: $(date +%H:%M:%S) $name (at most ${limit} s): $*"
  local t0=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - t0))" >> "$STATUS"
  tail -n 25 "$OUT/$name.log"
}

for step in $STEPS; do
  case $step in
    tests) run_step tests "$PY" -m pytest -q -p no:cacheprovider -rs --durations=10 tests/test_device.py \
           --junitxml="$OUT/tests.xml" ;;
    perception) run_step perception "$PY" benchmarks/bench_perception.py --device cuda --skip-cpu --frames 4 \
           ${HEAP:+--heap "$HEAP"} --out "$OUT/perception.json" ;;
    camera) run_step camera "$PY" benchmarks/bench_camera_fuzz.py --device cuda --skip-cpu --frames "$CAMERA_FRAMES" \
           --repeats 2 ${HEAP:+--heap "$HEAP"} ${CAMERA_MODELS:+--models "$CAMERA_MODELS"} --out "$OUT/camera_fuzz.json" ;;
    translate) run_step translate "$PY" benchmarks/bench_translate.py --device cuda --out "$OUT/translate.json" ;;
    campaign)
      if [ ! -f bags/demo.bag ] || [ ! -f hdmaps/demo/base_map.bin ]; then
        run_step simulate "${LIDARMT_CMD[@]}" simulate --seed 7 --frames 30 --out bags/demo.bag --map-out hdmaps/demo
      fi
      run_step campaign "${LIDARMT_CMD[@]}" fuzz --bag bags/demo.bag --map hdmaps/demo --n 10,100,1000 --device cuda \
        --workers 2 --bundles 0 --out "$OUT/campaign" --force --quiet
      "$PY" - "$OUT" <<'EOF'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
run = json.loads((out / "campaign" / "run.json").read_text())
rate = run.get("throughput") or (run["ran"] / run["elapsed_s"])
doc = {"what": "MR1 on the demo recording with --device cuda, --workers 2", "verdicts": run["ran"],
       "elapsed_s": run["elapsed_s"], "verdicts_per_s": rate,
       "study_campaign_s_extrapolated": 3000 / rate, "run": run}
(out / "campaign.json").write_text(json.dumps(doc, indent=2) + "\n")
print(f"gpu_run: {rate:.2f} verdicts/s; the study's 3,000 verdicts ≈ {3000 / rate / 60:.1f} min")
EOF
      ;;
    *) echo "gpu_run: unknown step $step" >&2 ;;
  esac
done

"$PY" - "$OUT" "${HEAP:-kept}" <<'EOF'
import json, subprocess, sys
from pathlib import Path

import torch

from lidarmt._machine import describe

out = Path(sys.argv[1])
steps = [dict(zip(("step", "rc", "wall_s"), line.split("\t"), strict=True))
         for line in (out / "steps.tsv").read_text().splitlines() if line]
try:
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=30).stdout.strip()
except (OSError, subprocess.SubprocessError):
    smi = ""
# heap: the benchmarks' --heap (this summary's own process keeps glibc's defaults, as machine.heap says)
doc = {"gpu": torch.cuda.get_device_name(0), "nvidia_smi": smi, "torch": torch.__version__,
       "cuda": torch.version.cuda, "machine": describe(), "heap": sys.argv[2], "steps": steps}
(out / "gpu_run.json").write_text(json.dumps(doc, indent=2) + "\n")
print(json.dumps(doc, indent=2))
EOF
