# Every target creates or reuses .venv and installs what it needs (a stamp file
# re-installs only when pyproject.toml changes).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint typecheck bench soak clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/outcomes migrate
	$(BIN)/outcomes serve

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/python -m pytest -m "not soak"

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# Each prints ours beside its baseline and the ratio; none asserts a speed.
bench: $(STAMP)
	$(BIN)/python -m bench.append
	$(BIN)/python -m bench.throughput
	$(BIN)/python -m bench.reconcile
	$(BIN)/python -m bench.poll
	$(BIN)/python -m bench.scrub
	$(BIN)/python -m bench.mcp

soak: $(STAMP)
	$(BIN)/python -m pytest -m soak

clean:
	rm -rf $(VENV) .outcomes .pytest_cache .mypy_cache .ruff_cache
