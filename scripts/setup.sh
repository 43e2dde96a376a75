#!/usr/bin/env bash
# Create .venv and install lidarmt with everything it needs, on a fresh machine.
# Idempotent: a second run only re-installs the project itself.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
# the extras to install: everything by default (make test, CI); `make demo` asks for sim only
EXTRAS=${EXTRAS:-sim,dev,ray,onnx}
STAMP_NAME=${STAMP_NAME:-.installed}
step() { echo "setup: $(date +%H:%M:%S) $*"; }

# open3d (the simulator's ray caster) needs these shared libraries at import time.
need=()
for pkg in libusb-1.0-0 libgl1 libegl1 libgomp1; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if ((${#need[@]})); then
  if [ "$(id -u)" = 0 ]; then
    echo "setup: installing Debian packages: ${need[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  elif command -v sudo >/dev/null; then
    sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "setup: warning: missing Debian packages ${need[*]} (open3d will not import; install them as root)" >&2
  fi
fi

# Optional: headless Chromium for the browser tests of report.html (they skip without it). Opt in with
# LIDARMT_BROWSER=1: it is a large download; a failure here only warns.
if [ "${LIDARMT_BROWSER:-0}" = 1 ] && ! command -v chromium >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) ||
      echo "setup: warning: could not install chromium; the browser tests will skip" >&2
  else
    echo "setup: warning: LIDARMT_BROWSER=1 needs root to install chromium; the browser tests will skip" >&2
  fi
fi

step "virtual environment $VENV"
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
# The CPU wheel of torch first: a bare 'torch' requirement would pull several GB of CUDA packages.
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  step "torch 2.13.0 (CPU wheel)"
  "$VENV/bin/python" -m pip install -q "torch==2.13.0"
fi
step "lidarmt and its dependencies (extras: $EXTRAS)"
"$VENV/bin/python" -m pip install -q -e ".[$EXTRAS]"
touch "$VENV/$STAMP_NAME"
echo "setup: ready ($("$VENV/bin/python" -c 'import lidarmt, torch; print("lidarmt", lidarmt.__version__, "torch", torch.__version__)'))"
