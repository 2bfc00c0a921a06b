# Two entry points for a fresh machine: `make demo` (CPU quickstart) and `make test`.
# Each creates .venv and installs what it needs first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo demo-figure test lint results tiny clean

$(STAMP): requirements.txt requirements-dev.txt setup.py
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q -r requirements-dev.txt
	$(BIN)/pip install -q --no-deps -e .
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	PYTHON=$(abspath $(BIN))/python bash examples/quickstart.sh

# The README's picture: the demo's summary.png (a demo already in outputs/quickstart is not rerun)
demo-figure: demo
	cp outputs/quickstart/summary.png docs/demo_summary.png

# The suite in TEST_WORKERS processes (pytest-xdist; worksteal: a worker that is done takes over queued
# tests of the other), each with its share of the cores (tests/conftest.py); then the 10 slowest
# tests, so a new slow one is seen when it lands. TEST_WORKERS=0 runs it in this one process.
TEST_WORKERS ?= 2
test: $(STAMP)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal --durations=10 tests

# docs/RESULTS.md and the README's demo table, from the records in docs/results/ (tests/test_results.py
# checks that the committed pages are what the records give)
results: $(STAMP)
	$(BIN)/python -m verl.tools.results

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports   # the floors of verl/ (pyproject.toml, docs/ARCHITECTURE.md)

clean:
	rm -rf $(VENV) outputs

tiny: $(STAMP)
	PYTHON=$(abspath $(BIN))/python bash examples/prepare_tiny.sh
