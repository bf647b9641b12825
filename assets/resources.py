"""The resources: where the data directory is, and DuckDB through dagster-duckdb.

Every asset and check reaches the store through a `DuckDBResource`, whose `get_connection()`
retries with backoff while another process holds DuckDB's lock instead of failing at once.
`duckdb` writes and is used only by assets in the `duckdb_writer` pool (one writer process at a
time); `duckdb_reader` opens read-only (DuckDB's `access_mode`), for checks outside the pool."""

from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dagster as dg
import duckdb
from dagster_duckdb import DuckDBResource

from benchmark_runners.paths import data_dir
from devicefit import store
from devicefit.paths import DataPaths


class DevicefitData(dg.ConfigurableResource):
    """The data directory (DuckDB, landing files, outputs). Default: DEVICEFIT_DATA_DIR or ./data."""

    data_dir: str = ""

    def paths(self) -> DataPaths:
        return DataPaths(Path(self.data_dir).resolve() if self.data_dir else data_dir())


class StoreDuckDB(DuckDBResource):
    """dagster-duckdb's resource on devicefit's store. `database` empty: the store of the data
    directory in force when a connection is opened (DEVICEFIT_DATA_DIR or ./data), like
    DevicefitData, so a code location loaded before the variable was set still opens the right file."""

    database: str = ""

    @contextmanager
    def get_connection(self):
        path = Path(self.database) if self.database else DataPaths(data_dir()).database
        path.parent.mkdir(parents=True, exist_ok=True)
        opening = DuckDBResource(database=str(path), connection_config=self.connection_config).get_connection()
        try:
            con = opening.__enter__()
        except duckdb.Error as exc:  # after its retries: said as the store says it (lock, corrupt, disk full)
            raise store.open_failure(path, exc) from exc
        failed = True
        try:
            yield con
            failed = False
        finally:
            # dagster-duckdb closes only after a clean exit; a connection left open after an error
            # would make the next plain connect in this process fail ("different configuration").
            store.close(con, path, failed)


READ_ONLY = {"access_mode": "READ_ONLY"}


def devicefit_resources(directory: str = "") -> dict[str, Any]:
    """The three resources for one data directory ("": DEVICEFIT_DATA_DIR or ./data when used),
    so the DuckDB resources always open the store of the data directory the assets write."""
    data = DevicefitData(data_dir=directory)
    database = str(data.paths().database) if directory else ""
    return {"devicefit_data": data,
            "duckdb": StoreDuckDB(database=database),
            "duckdb_reader": StoreDuckDB(database=database, connection_config=READ_ONLY)}
