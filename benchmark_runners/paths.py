"""Where measurement artefacts live. DEVICEFIT_DATA_DIR overrides ./data."""
from __future__ import annotations

import os
from pathlib import Path


def data_dir() -> Path:
    return Path(os.environ.get("DEVICEFIT_DATA_DIR", "data")).resolve()


def hardware_cache_path() -> Path:
    return data_dir() / "hardware.json"
