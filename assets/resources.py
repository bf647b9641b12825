"""The resources: where the data directory is, and DuckDB through dagster-duckdb.

Every asset and check reaches the store through a `DuckDBResource`, whose `get_connection()`
retries with backoff while another process holds DuckDB's lock instead of failing at once.
`duckdb` writes and is used only by assets in the `duckdb_writer` pool (one writer process at a
time); `duckdb_reader` opens read-only (DuckDB's `access_mode`), for checks outside the pool
(both StoreDuckDB, assets/store_duckdb.py). Assets whose value is a table hand it on through
`store_tables` (assets/store_tables.py)."""

from pathlib import Path
from typing import Any

import dagster as dg
from dagster_duckdb import DuckDBResource

from assets.store_duckdb import READ_ONLY, StoreDuckDB
from assets.store_tables import StoreTables, StoreTablesManager
from benchmark_runners.paths import data_dir
from devicefit.errors import DevicefitError
from devicefit.paths import DataPaths


class DevicefitData(dg.ConfigurableResource):
    """The data directory (DuckDB, landing files, outputs). Default: DEVICEFIT_DATA_DIR or ./data."""

    data_dir: str = ""

    def paths(self) -> DataPaths:
        return DataPaths(Path(self.data_dir).resolve() if self.data_dir else data_dir())


class StoreMismatch(DevicefitError, ValueError):
    """The DuckDB resources open another store than the data directory's (run config changed one)."""


def same_store(devicefit_data: DevicefitData, *stores: DuckDBResource | StoreTablesManager) -> DataPaths:
    """The data directory's paths, once each DuckDB resource, and the table IO manager where an
    asset hands a table on, is seen to open its store. Run config may set `devicefit_data`'s
    `data_dir` alone: the assets then read that directory's landing files and wrote their rows
    into the other directory's store; or leave `store_tables` behind, and the tables went there.
    Refused, naming both."""
    paths = devicefit_data.paths()
    for resource in stores:
        database = resource.database_path() if isinstance(resource, (StoreDuckDB, StoreTablesManager)) else Path(resource.database)
        if database.resolve() != paths.database.resolve():
            what = "the table IO manager (store_tables)" if isinstance(resource, StoreTablesManager) else "the DuckDB resource"
            raise StoreMismatch(f"the data directory is {paths.root} but {what} opens {database}: set "
                                f"DEVICEFIT_DATA_DIR, or give resources duckdb, duckdb_reader and store_tables the "
                                f"database {paths.database} too")
    return paths


STORE_TABLES = "store_tables"  # the IO manager key of the assets whose value is a table


def devicefit_resources(directory: str = "") -> dict[str, Any]:
    """The resources for one data directory ("": DEVICEFIT_DATA_DIR or ./data when used), so the
    DuckDB resources and the table assets' IO manager always open the store the assets write."""
    data = DevicefitData(data_dir=directory)
    database = str(data.paths().database) if directory else ""
    return {"devicefit_data": data,
            "duckdb": StoreDuckDB(database=database),
            "duckdb_reader": StoreDuckDB(database=database, connection_config=READ_ONLY),
            STORE_TABLES: StoreTables(database=database)}
