"""DuckDB through dagster-duckdb on devicefit's store: the resource every asset and check opens
the store with, and the read-only configuration of its readers."""

from contextlib import contextmanager
from pathlib import Path

import duckdb
from dagster_duckdb import DuckDBResource

from benchmark_runners.paths import data_dir
from devicefit import store
from devicefit.paths import DataPaths

READ_ONLY = {"access_mode": "READ_ONLY"}


class StoreDuckDB(DuckDBResource):
    """dagster-duckdb's resource on devicefit's store. `database` empty: the store of the data
    directory in force when a connection is opened (DEVICEFIT_DATA_DIR or ./data), like
    DevicefitData, so a code location loaded before the variable was set still opens the right file."""

    database: str = ""

    def database_path(self) -> Path:
        """The file a connection opens now."""
        return Path(self.database) if self.database else DataPaths(data_dir()).database

    @contextmanager
    def get_connection(self):
        path = self.database_path()
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
