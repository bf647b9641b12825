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
WORKER_SCRATCH_PREFIX = "devicefit-worker-"  # what the sweep names it: the only directory a worker removes


def worker_scratch() -> Path | None:
    """This worker's scratch directory (WORKER_SCRATCH_ENV), or None outside a sweep's worker,
    where it is gone, or where the variable names a directory the sweep did not make (a worker
    removes its scratch directory when orphaned: never one a user named)."""
    value = os.environ.get(WORKER_SCRATCH_ENV)
    path = Path(value) if value else None
    return path if path is not None and path.name.startswith(WORKER_SCRATCH_PREFIX) and path.is_dir() else None
