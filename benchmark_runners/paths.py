"""Where measurement artefacts live. DEVICEFIT_DATA_DIR overrides ./data."""
from __future__ import annotations

import os
from pathlib import Path


def data_dir() -> Path:
    return Path(os.environ.get("DEVICEFIT_DATA_DIR", "data")).resolve()


def hardware_cache_path() -> Path:
    return data_dir() / "hardware.json"


# A directory the sweep makes for each worker and removes after reaping it, however the worker
# ended: a worker killed at its config's timeout (SIGKILL to its process group) cannot remove
# what it made, so what it keeps outside itself for its lifetime (the browser's temporary files)
# goes here. Not TMPDIR: the device locks' default directory is under the temporary directory,
# and a worker must find the same locks as every other process.
WORKER_SCRATCH_ENV = "DEVICEFIT_WORKER_SCRATCH"


def worker_scratch() -> Path | None:
    """This worker's scratch directory (WORKER_SCRATCH_ENV), or None outside a sweep's worker or
    where it is gone."""
    value = os.environ.get(WORKER_SCRATCH_ENV)
    return Path(value) if value and Path(value).is_dir() else None
