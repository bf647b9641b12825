"""The code version of a measurement: a digest of the sources that decide a measured number
(the harness, the backends, the worker, and how models are built and calibrated). Dagster shows
a partition measured under other code as out of date, so a change to the harness is visible
in the UI before anyone compares numbers across it."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from models.derived_cache import source_digest

_ROOT = Path(__file__).resolve().parents[1]
_PACKAGES = ("benchmark_runners", "models")


@lru_cache(maxsize=1)
def measurement_code_version() -> str:
    return source_digest(_ROOT, _PACKAGES)[:12]
