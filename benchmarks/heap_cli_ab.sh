#!/usr/bin/env bash
# End to end, through the lidarmt command: glibc untouched (LIDARMT_HEAP=system) against the default (freed memory
# kept, lidarmt._heap), two interleaved rounds of an MR1 campaign on the demo recording (10 frames, n 10,100,1000)
# and a camera campaign (Epoch, Rambo, Chauffeur, every transformation, 2 Udacity frames). Prints the machine, then one JSON line per
# round and setting: the command's wall seconds and the campaign's own (elapsed_s, pairs or verdicts), and writes
# them to $OUT/heap_cli.jsonl (default benchmarks/results). Needs bags/demo.bag (make demo) and ../shared/data.
#   bash benchmarks/heap_cli_ab.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD
OUT=${OUT:-benchmarks/results}
RUNS=$(mktemp -d)
trap 'rm -rf "$RUNS"' EXIT
.venv/bin/python -c "import json; from lidarmt import _machine; m = _machine.describe(); m.pop('heap'); print(json.dumps({'machine': m}))" \
  | tee "$OUT/heap_cli.jsonl"
for round in 1 2; do
  for h in system kept; do
    env_h=$([ $h = system ] && echo system || echo "")
    t0=$(date +%s.%N)
    LIDARMT_HEAP=$env_h .venv/bin/python -m lidarmt fuzz --bag bags/demo.bag --map hdmaps/demo --n 10,100,1000 --frames 10 \
      --bundles 0 --out $RUNS/mr1-$h-$round --force --quiet > /dev/null 2>&1
    t1=$(date +%s.%N)
    LIDARMT_HEAP=$env_h .venv/bin/python -m lidarmt camera fuzz --images ../shared/data/udacity --model epoch,rambo,chauffeur \
      --transforms all --frames 2 --bundles 0 --out $RUNS/cam-$h-$round --force --quiet > /dev/null 2>&1
    t2=$(date +%s.%N)
    .venv/bin/python - "$h" "$round" "$t0" "$t1" "$t2" "$RUNS" <<'PY' | tee -a "$OUT/heap_cli.jsonl"
import json, sys
h, rnd, runs = sys.argv[1], sys.argv[2], sys.argv[6]
t0, t1, t2 = map(float, sys.argv[3:6])
def el(p):  # (the campaign's own seconds, pairs or verdicts): both campaigns' run.json
    with open(f"{runs}/{p}/run.json") as f:
        d = json.load(f)
    return d["elapsed_s"], d["ran"]
print(json.dumps({"heap": h, "round": rnd, "mr1_command_s": round(t1 - t0, 1), "mr1_campaign": el(f"mr1-{h}-{rnd}"),
                  "camera_command_s": round(t2 - t1, 1), "camera_campaign": el(f"cam-{h}-{rnd}")}), flush=True)
PY
  done
done
