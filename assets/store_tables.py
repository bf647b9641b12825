"""The table assets' IO manager: dagster-duckdb-polars' DuckDBPolarsIOManager on devicefit's store.

An asset whose value is a table (aggregated_results, compatibility_matrix, training_frame)
returns a polars frame; this IO manager stores it in the store as the table of the asset's name
(schema `main`), and hands it to downstream assets as a polars frame loaded from there, so their
inputs are real inputs and the UI's lineage is the data's. Three changes to the stock manager,
each for the store's sake:

- the database is the store of the data directory in force when a connection opens (as
  StoreDuckDB, whose retrying, error-naming connections it uses);
- a write replaces the table in one transaction (`CREATE OR REPLACE`, schema changes included;
  the stock delete-then-insert leaves an empty table behind a failed insert, breaks on a changed
  column list, and skips empty frames, leaving downstream loads without a table);
- a write migrates the store first (an older store's tables take their current names), and
  refuses a table name the store's own code uses (store.RESERVED_TABLES);
- a load opens the store read-only (DuckDB's shared lock, with StoreDuckDB's retry); the assets
  that load a table are in the duckdb_writer pool all the same, so no writer waits behind them.
"""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Sequence

import dagster as dg
import polars as pl
from dagster._core.storage.db_io_manager import DbIOManager, DbTypeHandler, TableSlice
from dagster_duckdb.io_manager import DuckDbClient
from dagster_duckdb_polars import DuckDBPolarsIOManager, DuckDBPolarsTypeHandler

from assets.metadata import table_metadata
from assets.store_duckdb import READ_ONLY, StoreDuckDB
from devicefit import store
from devicefit.errors import DevicefitError

SCHEMA = "main"  # where the store's own tables live: one name per table, whoever writes it


class PartitionedTableRefused(DevicefitError, ValueError):
    """The store's tables are whole tables; a partitioned asset would replace its siblings' rows."""


class StoreFrameHandler(DuckDBPolarsTypeHandler):
    """Stores a polars frame as a whole table (replacing it), loads one back as polars."""

    def handle_output(self, context: dg.OutputContext, table_slice: TableSlice, obj: pl.DataFrame, connection) -> None:
        if table_slice.partition_dimensions:
            raise PartitionedTableRefused(f"{table_slice.table}: StoreTables stores unpartitioned tables only")
        store.replace_table(connection, table_slice.table, obj, table_slice.schema)
        context.add_output_metadata({
            **table_metadata(obj.height, store.table_columns(connection, table_slice.table)),
            "dagster/table_name": f"{table_slice.schema}.{table_slice.table}",
        })


class StoreTablesClient(DuckDbClient):
    @staticmethod
    @contextmanager
    def connect(context, _):
        config = context.resource_config
        loading = isinstance(context, dg.InputContext)
        resource = StoreDuckDB(database=config["database"],
                               connection_config={**config["connection_config"], **(READ_ONLY if loading else {})})
        with resource.get_connection() as con:
            if loading:
                yield con
            else:
                store.migrate(con)  # an older store's tables take their current names first (migration 11)
                with store.transaction(con, "store an asset's table in") as con:
                    yield con

    @staticmethod
    def delete_table_slice(context: dg.OutputContext, table_slice: TableSlice, connection) -> None:
        """Nothing to delete first: the handler replaces the whole table in the same transaction."""

    @staticmethod
    def ensure_schema_exists(context: dg.OutputContext, table_slice: TableSlice, connection) -> None:
        if table_slice.schema != SCHEMA:  # `main` always exists (and CREATE SCHEMA needs a writer)
            connection.execute(f'CREATE SCHEMA IF NOT EXISTS "{table_slice.schema}"')


class StoreTablesManager(DbIOManager):
    """The IO manager StoreTables makes, saying which store it opens: the assets that hand a
    table on through it take it as a resource and check it is the data directory's
    (assets.resources.same_store), as they check their DuckDB resources."""

    def __init__(self, configured: str, **kwargs) -> None:
        super().__init__(database=configured or "devicefit store", **kwargs)
        self._configured = configured

    def database_path(self) -> Path:
        """The file a connection opens now (StoreDuckDB.database_path's rule)."""
        return StoreDuckDB(database=self._configured).database_path()


class StoreTables(DuckDBPolarsIOManager):
    """DuckDBPolarsIOManager on the store. `database` empty: the store of the data directory in
    force when a connection opens (DEVICEFIT_DATA_DIR or ./data)."""

    database: str = ""

    @staticmethod
    def type_handlers() -> Sequence[DbTypeHandler]:
        return [StoreFrameHandler()]

    def create_io_manager(self, context) -> StoreTablesManager:
        return StoreTablesManager(self.database, db_client=StoreTablesClient(), schema=self.schema_ or SCHEMA,
                                  type_handlers=self.type_handlers(), default_load_type=pl.DataFrame,
                                  io_manager_name="StoreTables")
