# Everything runs from the project's own virtualenv, created on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build of torch: installed first so that no dependency pulls a CUDA build.
TORCH ?= torch==2.13.0
STAMP := $(VENV)/.installed

.PHONY: install demo test test-fast lint bench e2e clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(TORCH)
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	touch $(STAMP)

install: $(STAMP)

# The main job: a small distributed PPO experiment on this machine that learns CartPole.
demo: install
	SURREAL_HOME=$${SURREAL_HOME:-$$PWD/.surreal} $(BIN)/surreal delete demo >/dev/null 2>&1 || true
	SURREAL_HOME=$${SURREAL_HOME:-$$PWD/.surreal} $(BIN)/surreal create demo --algo ppo --env CartPole-v1 --agents 2 --steps 100000 --seed 1
	SURREAL_HOME=$${SURREAL_HOME:-$$PWD/.surreal} $(BIN)/surreal status demo

# The layer contracts are checked by tests/test_packaging.py, so this is the whole suite.
test: install
	$(BIN)/python -m pytest -q -ra

test-fast: install
	$(BIN)/python -m pytest -q -m "not slow"

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	LINT_IMPORTS=$(BIN)/lint-imports bash scripts/lint-imports.sh
	$(BIN)/mypy surreal

bench: install
	$(BIN)/python benchmarks/ppo_throughput.py

clean:
	rm -rf $(VENV) .surreal .pytest_cache .ruff_cache .mypy_cache
