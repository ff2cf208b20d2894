# psbench: the commands that matter. `make demo` and `make test` set everything up first.
VENV ?= .venv
PSBENCH = $(VENV)/bin/psbench
PYTEST_ARGS ?=

.PHONY: setup setup-runtime demo paper perf test test-quick doctor clean

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

test: setup
	$(VENV)/bin/python -m pytest -v -rs $(PYTEST_ARGS)

test-quick: setup
	$(VENV)/bin/python -m pytest -v -m "not slow" $(PYTEST_ARGS)

clean:
	rm -rf runs .pytest_cache
