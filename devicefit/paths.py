"""Where the pipeline's files live, all under one data directory (DEVICEFIT_DATA_DIR or ./data)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from benchmark_runners.paths import data_dir


@dataclass(frozen=True)
class DataPaths:
    root: Path
    # A DuckDB file named explicitly (`--database FILE`, BENCHMARK_DB_PATH): the store is that
    # file, whatever its name; predictors, outputs and landing files stay beside it, in `root`.
    database_file: Path | None = None

    @classmethod
    def default(cls) -> "DataPaths":
        return cls(data_dir())

    @classmethod
    def of_database(cls, database: str | Path) -> "DataPaths":
        """The data directory of a DuckDB file given by name: the file itself is the store."""
        database = Path(database).expanduser().resolve()
        return cls(database.parent, database)

    @property
    def database(self) -> Path:
        return self.database_file or self.root / "devicefit.duckdb"

    @property
    def raw(self) -> Path:
        return self.root / "raw"

    @property
    def outputs(self) -> Path:
        return self.root / "outputs"
