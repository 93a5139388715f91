# Every target creates or reuses .venv by itself: `make run` and `make test` work on a fresh clone.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: run test test-hosts lint typecheck bench format clean lock

$(STAMP): pyproject.toml requirements.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check -r requirements.lock
	$(BIN)/python -m pip install -q --disable-pip-version-check --no-deps -e '.[bench,dev,peers,multilingual]'
	touch $(STAMP)

## run: the demo on an embedded SQLite file (2,000 agents x 5 turns, scripted model)
run: $(STAMP)
	$(BIN)/dormant demo

## test: the whole test suite (unit, contract, integration, acceptance, faults)
test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

## test-hosts: every multi-host scenario (network namespaces, root; about two minutes)
test-hosts: $(STAMP)
	$(BIN)/python -m pytest tests/faults/test_hosts.py -m "hosts or not hosts" -q

lint: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests

format: $(STAMP)
	$(BIN)/ruff check --fix src tests
	$(BIN)/ruff format src tests

typecheck: $(STAMP)
	$(BIN)/mypy

## bench: the agent_scale benchmark on SQLite and on the in-memory baseline
bench: $(STAMP)
	$(BIN)/dormant bench scale --store sqlite --store memory --out bench-out/scale

## lock: refresh requirements.lock from the current environment
lock: $(STAMP)
	$(BIN)/python -m pip freeze --exclude-editable | grep -iv '^dormant' > requirements.lock

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache bench-out
