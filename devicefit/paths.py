"""Where the pipeline's files live, all under one data directory (DEVICEFIT_DATA_DIR or ./data)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from benchmark_runners.paths import data_dir


@dataclass(frozen=True)
class DataPaths:
    root: Path

    @classmethod
    def default(cls) -> "DataPaths":
        return cls(data_dir())

    @property
    def database(self) -> Path:
        return self.root / "devicefit.duckdb"

    @property
    def raw(self) -> Path:
        return self.root / "raw"

    @property
    def outputs(self) -> Path:
        return self.root / "outputs"
