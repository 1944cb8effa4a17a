# Every target creates or reuses .venv and installs what it needs (a stamp file
# re-installs only when pyproject.toml changes).
ROOT := $(dir $(abspath $(lastword $(MAKEFILE_LIST))))
PYTHON ?= python3
PORT ?= 8000
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint typecheck bench bench-growth bench-proofs soak chaos lock clean

# Paths to the project go through ROOT, so `make -f <clone>/Makefile run` works from another
# folder (the README test serves from a temporary one). setuptools' notice that an editable
# install maps folders (the client's) is no fault of the configuration: a first install prints
# nothing but errors. (Comments stay out of recipes: make echoes a recipe's lines, `#` too.)
$(STAMP): $(ROOT)pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	PYTHONWARNINGS='ignore:Editable installation' $(BIN)/python -m pip install --quiet -e '$(ROOT).[dev]'
	touch $(STAMP)

# The quickstart serves the example tools, so the README's first call is accepted; set
# OUTCOMES_TOOLS to load yours instead.
run: export OUTCOMES_TOOLS ?= examples.seed_tools
run: $(STAMP)
	$(BIN)/outcomes migrate
	$(BIN)/outcomes serve --port $(PORT)

# Most tests wait on services and processes, not on the CPU: three at a time, a file to each
# (its fixtures stay together); those that stop a shared service run alone after. Each run
# names its 25 slowest tests, so what makes the suite long is in every CI log.
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/python -m pytest -m "not soak and not serial" -n 3 --dist loadfile --durations=25
	$(BIN)/python -m pytest -m "serial and not soak" --durations=10

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# Each prints ours beside its baseline and the ratio; none asserts a speed.
bench: $(STAMP)
	$(BIN)/python -m bench.append
	$(BIN)/python -m bench.roundtrips
	$(BIN)/python -m bench.contention
	$(BIN)/python -m bench.throughput
	$(BIN)/python -m bench.throughput --pool threads --concurrency 16 --producers 16 --hold-open-s 30
	$(BIN)/python -m bench.http
	$(BIN)/python -m bench.reconcile
	$(BIN)/python -m bench.poll
	$(BIN)/python -m bench.scrub
	$(BIN)/python -m bench.mcp

# The product as its ledger grows (docs/capacity.md): every figure at each stage's number of
# jobs, in one run; ARCHIVE=1 archives the oldest 90% at the end. Long: about 10 minutes of
# filling per million jobs, and a verify and a rebuild at each stage.
STAGES ?= 0,100000
ARCHIVE ?=
bench-growth: $(STAMP)
	$(BIN)/python -m bench.growth --stages $(STAGES) $(if $(ARCHIVE),--archive)

# What checking against a tree head costs (docs/integrity.md): a full `audit verify` against
# `--since HEAD` after MORE jobs, `--sample 100`, the head's size and `audit prove` p50/p99.
JOBS ?= 100000
MORE ?= 10000
bench-proofs: $(STAMP)
	$(BIN)/python -m bench.proofs --jobs $(JOBS) --more $(MORE)

soak: $(STAMP)
	$(BIN)/python -m pytest -m soak

# A nemesis campaign (docs/reliability.md, "Nemesis campaign"): private PostgreSQL and RabbitMQ,
# the product under a seeded fault schedule at RATE_SHARE of the measured maximum throughput,
# then the checker. The table and the JSON land in .outcomes/chaos/SEED/.
SEED ?= 1
DURATION ?= 600
RATE_SHARE ?= 0.5
chaos: $(STAMP)
	$(BIN)/python -m nemesis --seed $(SEED) --duration $(DURATION) --rate-share $(RATE_SHARE) \
		--out .outcomes/chaos/$(SEED)

# requirements.lock, what the Docker image installs with --require-hashes: pyproject.toml's
# dependencies, the client's extra and the build backend (build-system.requires, read on
# stdin), pinned for every platform of Python 3.11 with every file's hash. Versions already in
# the lock are kept; `make lock LOCK_FLAGS=--upgrade` takes the newest (or
# `LOCK_FLAGS='--upgrade-package NAME'`). uv is installed into .venv as a tool, nothing more.
UV_VERSION ?= 0.13.9
LOCK_FLAGS ?=
lock: $(STAMP)
	$(BIN)/python -m pip install --quiet 'uv==$(UV_VERSION)'
	cd '$(ROOT)' && '$(abspath $(BIN))/python' -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"], sep="\n")' \
		| '$(abspath $(BIN))/uv' pip compile --quiet --universal --python-version 3.11 \
			--generate-hashes --extra client --custom-compile-command 'make lock' $(LOCK_FLAGS) \
			--output-file requirements.lock pyproject.toml -

clean:
	rm -rf $(VENV) .outcomes .pytest_cache .mypy_cache .ruff_cache
