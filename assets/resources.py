"""The one resource: where the data directory is."""

from pathlib import Path

import dagster as dg

from benchmark_runners.paths import data_dir
from devicefit.paths import DataPaths


class DevicefitData(dg.ConfigurableResource):
    """The data directory (DuckDB, landing files, outputs). Default: DEVICEFIT_DATA_DIR or ./data."""

    data_dir: str = ""

    def paths(self) -> DataPaths:
        return DataPaths(Path(self.data_dir).resolve() if self.data_dir else data_dir())
