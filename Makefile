# psbench: the commands that matter. `make demo` and `make test` set everything up first.
VENV ?= .venv
PSBENCH = $(VENV)/bin/psbench
PYTEST_ARGS ?=
PYTEST = $(VENV)/bin/python -m pytest -v -rs --durations=30

.PHONY: setup setup-runtime demo paper perf test test-all test-quick doctor clean

setup:
	bash scripts/setup.sh

# optional: the PRRTE 5 runtime that survives a lost node in place (--runtime prrte5; needs root)
setup-runtime:
	bash scripts/setup_runtime.sh

doctor: setup
	$(PSBENCH) doctor

demo: setup
	bash scripts/demo.sh

paper: setup
	$(PSBENCH) sweep benchmarks/sweeps/paper.toml

perf: setup
	$(PSBENCH) perf

# CI's: the suite without the matrix (tests/conftest.py MATRIX: the same cases in more modes), about 50 min on
# 2 cores; the 30 slowest tests are listed at the end
test: setup
	$(PYTEST) -m "not matrix" $(PYTEST_ARGS)

# every case, the matrix too: about 62 min on 2 cores
test-all: setup
	$(PYTEST) $(PYTEST_ARGS)

test-quick: setup
	$(VENV)/bin/python -m pytest -v -m "not slow and not matrix" $(PYTEST_ARGS)

clean:
	rm -rf runs .pytest_cache
