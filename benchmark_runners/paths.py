"""Where measurement artefacts live. DEVICEFIT_DATA_DIR overrides ./data."""
from __future__ import annotations

import os
from pathlib import Path


def data_dir() -> Path:
    return Path(os.environ.get("DEVICEFIT_DATA_DIR", "data")).resolve()


def hardware_cache_path() -> Path:
    return data_dir() / "hardware.json"


def cache_home() -> Path:
    """The machine's cache of derived facts that are the same whatever the data directory
    (a catalog model's parameter and FLOP counts): DEVICEFIT_CACHE_DIR, else
    $XDG_CACHE_HOME/devicefit, else ~/.cache/devicefit. Entries are keyed by what decides them,
    so two data directories, or two checkouts, can share it."""
    explicit = os.environ.get("DEVICEFIT_CACHE_DIR")
    if explicit:
        return Path(explicit).resolve()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "devicefit"
