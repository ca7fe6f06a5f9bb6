# kcore — the two commands of the README's quick start live here.
#
#   make test   create .venv if needed, install kcore with its test dependencies, lint, run the suite
#
# Nothing here assumes anything beyond Python 3.11 and pip on the machine.

PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.kcore-installed

.PHONY: test lint format bench-protocol soak clean

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) on PATH (or: make PYTHON=python3 ...)"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# Slow runs kept out of `make test`: long fuzzing, soak tests.
soak: $(STAMP)
	$(PY) -m pytest -q -m slow --run-slow

bench-protocol: $(STAMP)
	$(PY) bench/protocol_bench.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis build *.egg-info
