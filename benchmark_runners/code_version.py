"""The code version of a measurement: a digest of the sources that decide a measured number
(the harness, the backends, the worker, and how models are built and calibrated). Dagster shows
a partition measured under other code as out of date, so a change to the harness is visible
in the UI before anyone compares numbers across it."""
from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
_PACKAGES = ("benchmark_runners", "models")


@lru_cache(maxsize=1)
def measurement_code_version() -> str:
    digest = hashlib.sha256()
    for package in _PACKAGES:
        for path in sorted((_ROOT / package).rglob("*.py")):
            digest.update(str(path.relative_to(_ROOT)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]
