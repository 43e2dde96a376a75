# The two commands of the README. Both install what they need into .venv first.
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SEED ?= 7
FRAMES ?= 30

.PHONY: demo test lint bench clean-demo

$(STAMP): pyproject.toml scripts/setup.sh
	VENV=$(VENV) bash scripts/setup.sh

## demo: simulate the demo recording and map (once), then run the main job on it
demo: $(STAMP)
	$(BIN)/python -m lidarmt.demo

## test: the test suite (CI runs exactly this)
test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check lidarmt tests benchmarks

bench: $(STAMP)
	for b in benchmarks/bench_*.py; do $(BIN)/python $$b || exit 1; done

clean-demo:
	rm -rf bags/demo.bag hdmaps/demo runs/demo
