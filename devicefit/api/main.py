"""The ASGI app `devicefit serve` runs (`devicefit.api.main:app`), configured from the
environment so that every worker process builds the same one: DEVICEFIT_DATA_DIR (or
BENCHMARK_DIR), CONFIG_PATH, DEBUG, API_CACHE_SIZE (answers kept per predictor; 0 = off)."""
import os
from pathlib import Path

from devicefit.api.app import Settings, create_app

_dir = os.environ.get("BENCHMARK_DIR")
app = create_app(Settings(benchmark_dir=Path(_dir) if _dir else None,
                          config_path=Path(os.environ["CONFIG_PATH"]) if os.environ.get("CONFIG_PATH") else None,
                          debug=os.environ.get("DEBUG", "0") == "1",
                          response_cache_size=int(os.environ.get("API_CACHE_SIZE", "4096"))))
