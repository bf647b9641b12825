"""The `devicefit` command line, one module per command group:

- measure: detect, benchmark
- data: models (list, add, remove), db (init, status), ingest
- cache: cache (list), cache prune
- fleet: devices (list, register)
- predict: predict, distributed, memory-search
- select: classify, select, map, resources, recommend
- report: analyze, report, recommendations, compare-training-inference, compare
- serve: serve, generate-tests
- guides: guide (the guides' script commands, through one table)

`devicefit run` (materialize the Dagster pipeline) is added by pipelines/cli.py, the console
script's entry, so this package never imports the orchestration layer. Shared options, the data
directory and error handling live in common.py."""
from __future__ import annotations

from devicefit.cli import cache, data, fleet, guides, measure, predict, report, select, serve  # noqa: F401  (each registers its commands)
from devicefit.cli.common import app

guides.register(app)

__all__ = ["app"]

if __name__ == "__main__":  # pragma: no cover
    app()
