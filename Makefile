# The two commands of the README. Both install what they need into .venv first.
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# the demo needs only the runtime and the simulator (open3d): not pytest, ruff, hypothesis or Ray
DEMO_STAMP := $(VENV)/.installed-demo
SEED ?= 7
FRAMES ?= 30
UDACITY ?= ../shared/data/udacity
CAMERA_MODELS ?= dave-orig,epoch,dave2
CAMERA_FRAMES ?= 20
# the demo bundles one finding per n, minimised by at most DDMIN_BUDGET perception calls (lidarmt fuzz's
# defaults, 3 bundles per n with 200 calls each, took 83 s of the demo's first run; 40 calls took 71 s of a fresh
# clone's 5 min 03 s on 2026-11-27, under a load of 3-4)
DEMO_BUNDLES ?= 1
DDMIN_BUDGET ?= 20
# worker processes of both campaigns (the engine clamps them to the cores, frames and memory; results do not depend
# on them: the journal's verdicts are the same with 1 or 2)
DEMO_WORKERS ?= 2
# pytest options of every test target: the 25 slowest tests in the log (CI keeps them), run by TEST_WORKERS
# pytest-xdist processes (TEST_WORKERS=0: in this process), a test file to a process (its module fixtures, such as a
# campaign several tests read or a local Ray, are made once)
TEST_WORKERS ?= 2
PYTEST_OPTS ?= -q --durations=25 -n $(TEST_WORKERS) --dist loadfile

.PHONY: demo test test-slow test-all lint bench clean-demo

$(STAMP): pyproject.toml scripts/setup.sh
	VENV=$(VENV) bash scripts/setup.sh
	touch $(DEMO_STAMP)

$(DEMO_STAMP): pyproject.toml scripts/setup.sh
	@if [ -f $(STAMP) ] && [ $(STAMP) -nt pyproject.toml ] && [ $(STAMP) -nt scripts/setup.sh ]; then touch $@; \
	  else VENV=$(VENV) EXTRAS=sim STAMP_NAME=.installed-demo bash scripts/setup.sh; fi

## demo: simulate the demo recording and map (once), then run the main job on it
demo: $(DEMO_STAMP)
	@echo "demo: 1/4 the recording and its HD map (simulated once, then reused)"
	@test -f bags/demo.bag -a -f hdmaps/demo/base_map.bin || \
	  $(BIN)/lidarmt simulate --seed $(SEED) --frames $(FRAMES) --out bags/demo.bag --map-out hdmaps/demo
	$(BIN)/lidarmt info bags/demo.bag
	@echo "demo: 2/4 the LiDAR campaign (MR1, n = 10, 100, 1000), $(DEMO_BUNDLES) bundle per n minimised in at most $(DDMIN_BUDGET) calls"
	$(BIN)/lidarmt fuzz --bag bags/demo.bag --map hdmaps/demo --n 10,100,1000 --out runs/demo --force \
	  --bundles $(DEMO_BUNDLES) --ddmin-budget $(DDMIN_BUDGET) --workers $(DEMO_WORKERS)
	@echo "demo: 3/4 the first frames as MCAP for Foxglove"
	@# the first frames with the obstacles Apollo's pipeline finds, for Foxglove (runs/demo/report.html has the rest)
	$(BIN)/lidarmt export bags/demo.bag --map hdmaps/demo --frames 0:5 --out runs/demo/demo.mcap --force
	@# the camera half: the shared real Udacity frames when present, else the demo bag's own camera and steering
	@echo "demo: 4/4 the camera campaign ($(CAMERA_MODELS), every transformation, $(CAMERA_FRAMES) frames)"
	@if [ -d $(UDACITY) ]; then cam=$(UDACITY); else cam=bags/demo.bag; fi; \
	  $(BIN)/lidarmt camera info $$cam && \
	  $(BIN)/lidarmt camera fuzz --images $$cam --model $(CAMERA_MODELS) --transforms all --frames $(CAMERA_FRAMES) \
	    --workers $(DEMO_WORKERS) --out runs/demo-camera --force

## test: the test suite without the slow end-to-end tests (@pytest.mark.slow); CI runs test, then test-slow
## (pytest's exit status 5, "no tests collected", is not a failure: a selection may be empty)
test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_OPTS) -m "not slow" || [ $$? -eq 5 ]

## test-slow: only the slow end-to-end tests
test-slow: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_OPTS) -m slow || [ $$? -eq 5 ]

## test-all: everything
test-all: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_OPTS) || [ $$? -eq 5 ]

lint: $(STAMP)
	$(BIN)/ruff check lidarmt tests benchmarks

bench: $(STAMP)
	for b in benchmarks/bench_*.py; do $(BIN)/python $$b || exit 1; done

clean-demo:
	rm -rf bags/demo.bag hdmaps/demo runs/demo runs/demo-camera
