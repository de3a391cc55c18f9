# The two set-up commands of the README: `make demo` and `make test`. Both start from a fresh machine
# with only Python and make: they create .venv and install ctxrank with the pinned versions.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip

.PHONY: install dev demo test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: $(BIN)/python pyproject.toml constraints.txt
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -c constraints.txt -e .
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	$(PIP) install --quiet -c constraints.txt -e '.[dev]'
	touch $@

install: $(VENV)/.installed
dev: $(VENV)/.installed-dev

demo: install
	$(BIN)/ctxrank demo

lint: dev
	$(BIN)/ruff check .

test: dev
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q

bench: install
	$(BIN)/python benchmarks/bench_parser.py

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .ruff_cache
