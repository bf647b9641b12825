"""The ASGI app `devicefit serve` runs (`devicefit.api.main:app`), configured from the
environment so that every worker process builds the same one: DEVICEFIT_DATA_DIR (or
BENCHMARK_DIR), CONFIG_PATH, DEBUG, API_CACHE_SIZE (answers kept per predictor; 0 = off),
DEVICEFIT_MODEL_DIRS (the --model-dir allow-list, a JSON list: api.state.encode_model_dirs) and
DEVICEFIT_WARM_UP (0 skips preparing every model's traces at start-up)."""
import os
from pathlib import Path

from devicefit.api.app import Settings, create_app
from devicefit.api.state import decode_model_dirs


def _cache_size() -> int:
    """API_CACHE_SIZE, refused by name when it is not a whole number >= 0 (`devicefit serve`
    checks it as --cache-size's value; an ASGI server importing this module directly gets this)."""
    raw = os.environ.get("API_CACHE_SIZE", "4096")
    try:
        size = int(raw)
    except ValueError:
        size = -1
    if size < 0:
        raise ValueError(f"API_CACHE_SIZE must be a whole number >= 0 (answers kept per predictor; 0 = off), got {raw!r}")
    return size


_dir = os.environ.get("BENCHMARK_DIR")
_db = os.environ.get("BENCHMARK_DB_PATH")
app = create_app(Settings(benchmark_dir=Path(_dir) if _dir else None, database=Path(_db) if _db and not _dir else None,
                          config_path=Path(os.environ["CONFIG_PATH"]) if os.environ.get("CONFIG_PATH") else None,
                          debug=os.environ.get("DEBUG", "0") == "1",
                          response_cache_size=_cache_size(),
                          model_dirs=decode_model_dirs(os.environ.get("DEVICEFIT_MODEL_DIRS", "")),
                          warm_models=None if os.environ.get("DEVICEFIT_WARM_UP", "1") != "0" else ()))
