# The two commands of the README. Both install what they need into .venv first.
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SEED ?= 7
FRAMES ?= 30
UDACITY ?= ../shared/data/udacity
CAMERA_MODELS ?= dave-orig,epoch,dave2
CAMERA_FRAMES ?= 20

.PHONY: demo test lint bench clean-demo

$(STAMP): pyproject.toml scripts/setup.sh
	VENV=$(VENV) bash scripts/setup.sh

## demo: simulate the demo recording and map (once), then run the main job on it
demo: $(STAMP)
	@test -f bags/demo.bag -a -f hdmaps/demo/base_map.bin || \
	  $(BIN)/lidarmt simulate --seed $(SEED) --frames $(FRAMES) --out bags/demo.bag --map-out hdmaps/demo
	$(BIN)/lidarmt info bags/demo.bag
	$(BIN)/lidarmt fuzz --bag bags/demo.bag --map hdmaps/demo --n 10,100,1000 --out runs/demo --force
	@# the first frames with the obstacles Apollo's pipeline finds, for Foxglove (runs/demo/report.html has the rest)
	$(BIN)/lidarmt export bags/demo.bag --map hdmaps/demo --frames 0:5 --out runs/demo/demo.mcap
	@# the camera half: the shared real Udacity frames when present, else the demo bag's own camera and steering
	@if [ -d $(UDACITY) ]; then cam=$(UDACITY); else cam=bags/demo.bag; fi; \
	  $(BIN)/lidarmt camera info $$cam && \
	  $(BIN)/lidarmt camera fuzz --images $$cam --model $(CAMERA_MODELS) --transforms all --frames $(CAMERA_FRAMES) \
	    --out runs/demo-camera --force

## test: the test suite (CI runs exactly this)
test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check lidarmt tests benchmarks

bench: $(STAMP)
	for b in benchmarks/bench_*.py; do $(BIN)/python $$b || exit 1; done

clean-demo:
	rm -rf bags/demo.bag hdmaps/demo runs/demo runs/demo-camera
