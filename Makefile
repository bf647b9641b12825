# devicefit: `make run` measures this machine, `make test` runs the test suite.
# Both create .venv when it is missing. torch is installed first and pinned, so pip
# takes the local CPU wheel instead of resolving a multi-GB CUDA build.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

# An exported DAGSTER_HOME wins (dagster_home/multihost/ for a fleet); else this checkout's.
export DAGSTER_HOME ?= $(CURDIR)/dagster_home
HOST ?= 127.0.0.1
UI_PORT ?= 3000

.PHONY: run test test-slow install install-browser genai-export ui serve report fleet-deps clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# The browser kinds (wasm, webgpu, webnn: onnxruntime-web in headless Chromium). Debian's chromium
# with apt-get when missing and possible (root); onnxruntime-web with `npm ci` from the kept lock
# file. Never fatal: where either cannot be installed, `devicefit detect` reports the browser
# kinds unavailable with the reason and their tests skip saying so.
WEB := benchmark_runners/browser/web
$(WEB)/node_modules/.package-lock.json: $(WEB)/package-lock.json
	@command -v npm >/dev/null && (cd $(WEB) && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error) || \
	  echo "npm missing or npm ci failed: the browser kinds will report onnxruntime-web missing"

install-browser: $(WEB)/node_modules/.package-lock.json
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
	  { command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] && apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null && \
	    echo "installed chromium for the browser kinds and PNG export"; } || \
	  echo "no Chromium and none installable here (needs root and apt-get): the browser kinds are reported unavailable"

# The generation scenario on OpenVINO (openvino-genai's LLMPipeline, installed with the package)
# reads a stateful IR that optimum-intel exports. optimum-intel 2.2.0 pins transformers<5.6 and
# this project runs 5.x, so the exporter gets a venv of its own, run as a subprocess
# (benchmark_runners/backends/openvino_genai.py). Its dependencies are named one by one: its
# torchvision requirement would pull a CUDA torch (no CPU torchvision wheel here), and the export
# never imports it. Never fatal: without it, OpenVINO generation rows are skipped, saying why.
OVX := .venv-ovexport
$(OVX)/.installed-stamp: $(STAMP)
	@{ { test -x $(OVX)/bin/python || $(PYTHON) -m venv $(OVX); } && \
	  $(OVX)/bin/python -m pip install --quiet torch==2.13.0 && \
	  $(OVX)/bin/python -m pip install --quiet --no-deps optimum-intel==2.2.0 && \
	  $(OVX)/bin/python -m pip install --quiet "optimum~=2.3.0" transformers==4.57.6 "huggingface-hub>=0.23.2,<1.22" \
	    "nncf>=3.3.0" "requests>=2.33,<3" setuptools \
	    "openvino==$$($(PY) -c 'from importlib.metadata import version; print(version("openvino"))')" \
	    "openvino-tokenizers==$$($(PY) -c 'from importlib.metadata import version; print(version("openvino-tokenizers"))')" && \
	  touch $@ && echo "the OpenVINO GenAI exporter is in $(OVX)"; } || \
	  echo "the OpenVINO GenAI exporter could not be installed in $(OVX): OpenVINO generation rows are skipped with the reason"

genai-export: $(OVX)/.installed-stamp

# Detect this machine, then materialize the quick profile through Dagster and print a summary.
run: $(STAMP) install-browser genai-export
	$(VENV)/bin/devicefit detect --refresh
	$(VENV)/bin/devicefit run --profile quick

# The Dagster UI on this machine only, with the workspace (runs, lineage, schedule, checks).
ui: $(STAMP)
	$(VENV)/bin/dagster dev -w workspace.yaml -h $(HOST) -p $(UI_PORT)

# The REST API (spec 000) on this machine only; docs at http://127.0.0.1:8000/docs.
serve: $(STAMP)
	$(VENV)/bin/devicefit serve --host $(HOST) --port 8000

# Figures, dashboard, comparative analysis and recommendations from the store (make run writes
# them too). PNGs need a Chromium binary: installed with apt-get when missing and possible.
report: $(STAMP)
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
	  { command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] && apt-get update -qq && \
	    apt-get install -y -qq --no-install-recommends chromium >/dev/null && echo "installed chromium for PNG export"; } || \
	  echo "no Chromium binary and none installable here: the report is HTML only"
	$(VENV)/bin/devicefit report

# Services for a multi-host fleet (dagster_home/multihost): PostgreSQL holds Dagster's runs, events
# and schedules, Redis is the Celery broker. Installed with apt-get when missing and possible; the
# slow fleet tests (tests/fleet/test_postgres_instance.py) start a throwaway server from these
# binaries and skip, saying to run this target, where there are none.
fleet-deps:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && command -v redis-server >/dev/null && \
	  echo "postgresql and redis-server already installed" || \
	  { command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] && apt-get update -qq && \
	    apt-get install -y -qq --no-install-recommends postgresql redis-server >/dev/null && \
	    echo "installed postgresql and redis-server"; } || \
	  echo "postgresql or redis-server missing and not installable here (needs root and apt-get): install them with the system's package manager"

# ruff first (pyflakes, import order; configured in pyproject.toml), then the suite. fleet-deps
# installs Redis (and PostgreSQL) where apt-get can, so the Celery dispatch tests run for real.
# The 25 slowest tests are listed at the end: the suite must stay near 20 minutes on 2 cores.
test: $(STAMP) install-browser genai-export fleet-deps
	$(VENV)/bin/ruff check .
	$(PY) -m pytest --durations=25

test-slow: $(STAMP)
	$(PY) -m pytest -m slow

clean:
	rm -rf $(VENV) $(OVX) data .pytest_cache
