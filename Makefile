# devicefit: `make run` measures this machine, `make test` runs the test suite.
# Both create .venv when it is missing. torch is installed first and pinned, so pip
# takes the local CPU wheel instead of resolving a multi-GB CUDA build.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

# Models `make run` measures: one per family, small enough for a 2-core machine.
RUN_MODELS ?= all-MiniLM-L6-v2,gpt2,mobilenet-v2,whisper-tiny,clip-vit-base-patch32
RUN_BATCH_SIZES ?= 1,8
RUN_PRECISIONS ?= fp32,int8

.PHONY: run test test-slow install clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/devicefit detect
	$(VENV)/bin/devicefit benchmark --model $(RUN_MODELS) --device cpu \
		--batch-sizes $(RUN_BATCH_SIZES) --precision $(RUN_PRECISIONS) \
		--max-time 8 --json data/outputs/make_run_results.json

test: $(STAMP)
	$(PY) -m pytest

test-slow: $(STAMP)
	$(PY) -m pytest -m slow

clean:
	rm -rf $(VENV) data .pytest_cache
