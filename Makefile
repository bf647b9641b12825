# devicefit: `make run` measures this machine, `make test` runs the test suite.
# Both create .venv when it is missing. torch is installed first and pinned, so pip
# takes the local CPU wheel instead of resolving a multi-GB CUDA build.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

export DAGSTER_HOME := $(CURDIR)/dagster_home
HOST ?= 127.0.0.1
UI_PORT ?= 3000

.PHONY: run test test-slow install ui serve clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# Detect this machine, then materialize the quick profile through Dagster and print a summary.
run: $(STAMP)
	$(VENV)/bin/devicefit detect
	$(VENV)/bin/devicefit run --profile quick

# The Dagster UI on this machine only, with the workspace (runs, lineage, schedule, checks).
ui: $(STAMP)
	$(VENV)/bin/dagster dev -w workspace.yaml -h $(HOST) -p $(UI_PORT)

# The REST API (spec 000) on this machine only; docs at http://127.0.0.1:8000/docs.
serve: $(STAMP)
	$(VENV)/bin/devicefit serve --host $(HOST) --port 8000

test: $(STAMP)
	$(PY) -m pytest

test-slow: $(STAMP)
	$(PY) -m pytest -m slow

clean:
	rm -rf $(VENV) data .pytest_cache
