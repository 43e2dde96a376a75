#!/usr/bin/env bash
# The README's pictures of a demo run, taken in headless Chromium (Debian's `chromium`):
#   docs/images/report-lidar.png   runs/demo/report.html           (the MR1 campaign's page)
#   docs/images/report-camera.png  runs/demo-camera/report.html    (the camera campaign's page)
#   docs/images/bundle-mcap.png    the first LiDAR bundle's bundle.mcap, drawn from its decoded messages
# Usage: scripts/screenshots.sh [LIDAR_RUN] [CAMERA_RUN]   (defaults: runs/demo runs/demo-camera; run `make demo` first)
set -euo pipefail
LIDAR=${1:-runs/demo}
CAMERA=${2:-runs/demo-camera}
OUT=${OUT:-docs/images}
PY=${PY:-.venv/bin/python}
CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$CHROMIUM" ]; then
  echo "screenshots.sh: needs headless Chromium: apt-get install chromium" >&2
  exit 2
fi
SANDBOX=()
[ "$(id -u)" = 0 ] && SANDBOX=(--no-sandbox)  # Chromium refuses its sandbox as root
mkdir -p "$OUT"
shot() {  # page, picture, height
  [ -f "$1" ] || { echo "screenshots.sh: $1 is missing (run make demo first)" >&2; exit 2; }
  HOME=$(mktemp -d) "$CHROMIUM" --headless "${SANDBOX[@]}" --disable-gpu --hide-scrollbars --no-first-run \
    --window-size="1400,$3" --virtual-time-budget=8000 --screenshot="$2" "file://$(realpath "$1")" 2>/dev/null
  echo "wrote $2"
}
shot "$LIDAR/report.html" "$OUT/report-lidar.png" 2300
shot "$CAMERA/report.html" "$OUT/report-camera.png" 2100
bundle=$(ls -d "$LIDAR"/violations/*/ 2>/dev/null | head -1 || true)
if [ -n "$bundle" ]; then
  "$PY" scripts/mcap_preview.py "${bundle}bundle.mcap" "$OUT/bundle-mcap.png"
else
  echo "screenshots.sh: $LIDAR has no bug bundle; no MCAP picture" >&2
fi
