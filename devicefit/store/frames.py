"""The store's tables as polars frames: what the pipeline's table assets hand each other.

A frame is read with `relation.pl()` (DuckDB to Arrow to polars, no row-by-row Python), and
stored back as a whole table by `replace_table`, which the pipeline's DuckDB IO manager calls. `rows_of` turns a frame into the row dicts the
plain functions (training, reports, the snapshot) take, decoding the JSON columns as
`iter_results` does, so a function fed from a frame sees exactly what it would read itself."""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from devicefit.store.connection import StoreError
from devicefit.store.queries import AGGREGATES_TABLE, MEASUREMENT_ORDER, aggregate_select
from devicefit.store.schema import JSON_FIELDS, RESERVED_TABLES

if TYPE_CHECKING:
    import duckdb
    import polars as pl

# Per-iteration sample lists (timed, warm-up, per phase): the predictors read each row's summary
# figures (p50, mean, throughput, peak memory), never its samples, which are most of a row's bytes.
TRAINING_EXCLUDED = ("samples_ms", "warmup_ms", "phase_samples_ms", "token_times_ms")


def aggregate_frame(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """Median over runs per config, speedups and best precision (aggregate_select) as a frame."""
    return con.sql(aggregate_select()).pl()


def replace_table(con: duckdb.DuckDBPyConnection, table: str, frame: pl.DataFrame, schema: str = "main") -> None:
    """The table becomes the frame: its rows and its columns (a changed column list included; an
    empty frame leaves an empty table with the frame's columns). Atomic inside the caller's
    transaction."""
    if schema == "main" and table in RESERVED_TABLES:
        raise StoreError(f"refusing to replace the store's own table {table!r} with a frame: name the asset otherwise")
    name = "devicefit_replacing_frame"
    con.register(name, frame.to_arrow())
    try:
        con.execute(f'CREATE OR REPLACE TABLE "{schema}"."{table}" AS SELECT * FROM {name}')
    finally:
        con.unregister(name)


def refresh_aggregates(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """Recompute the aggregates table from the measurements (outside the pipeline: tests,
    scripts); returns the frame it stored."""
    frame = aggregate_frame(con)
    replace_table(con, AGGREGATES_TABLE, frame)
    return frame


def training_frame(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """Every ok measurement the predictors train on, in a fixed order, without the sample lists."""
    return con.sql(f"SELECT * EXCLUDE ({', '.join(TRAINING_EXCLUDED)}) FROM measurements "
                   f"WHERE status = 'ok' ORDER BY {MEASUREMENT_ORDER}").pl()


def rows_of(frame: pl.DataFrame) -> list[dict[str, Any]]:
    """The frame's rows as dicts, JSON columns decoded (a frame stored and loaded again carries
    them as text)."""
    rows = frame.to_dicts()
    json_columns = [c for c in frame.columns if c in JSON_FIELDS]
    for row in rows:
        for column in json_columns:
            if isinstance(row[column], str):
                row[column] = json.loads(row[column])
    return rows
