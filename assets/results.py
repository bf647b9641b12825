"""The store and what is derived from it: benchmark_results (the landing files loaded into
DuckDB), and the table assets aggregated_results, compatibility_matrix and training_frame,
polars frames stored in the store by the store_tables IO manager. Each writes DuckDB from one
process at a time (pool duckdb_writer). Table assets carry their row count and column schema
(the asset page shows both)."""

import dagster as dg
import polars as pl
from dagster_duckdb import DuckDBResource

from assets.automation import AFTER_NEW_MEASUREMENTS, EAGER
from assets.metadata import OWNERS, rows_table, table_metadata
from assets.resources import STORE_TABLES, DevicefitData, same_store
from assets.store_tables import StoreTablesManager
from devicefit import store
from devicefit.benchmark_snapshot import snapshot_path
from devicefit.compatibility import compatibility_matrix as build_compatibility_matrix
from devicefit.compatibility import summary_rows
from devicefit.compatibility import table_frame as compatibility_table
from devicefit.fleet.inventory import read_fleet_inventory, this_machine
from devicefit.pipeline import aggregate_frame, load_results, write_output_json


@dg.asset(deps=["measurements"], group_name="store", pool="duckdb_writer", automation_condition=AFTER_NEW_MEASUREMENTS,
          kinds={"duckdb"}, owners=OWNERS,
          description="Landing files loaded into DuckDB (measurements, runs, hardware, models); bad files quarantined.")
def benchmark_results(context: dg.AssetExecutionContext, devicefit_data: DevicefitData, duckdb: DuckDBResource) -> dg.MaterializeResult:
    paths = same_store(devicefit_data, duckdb)
    paths.database.parent.mkdir(parents=True, exist_ok=True)
    with duckdb.get_connection() as con:
        report = load_results(paths, con)
        counts, columns = store.table_counts(con), store.table_columns(con, "measurements")
        by_status, failures = store.status_counts(con), store.recent_failures(con)
    for name, reason in report.quarantined:
        context.log.error(f"quarantined {name}: {reason}")
    for line in report.future_probe_lines():
        context.log.warning(line)
    for line in report.duplicate_lines() + report.superseded_lines():
        context.log.info(line)
    for name in report.kept_newer:
        context.log.warning(f"kept raw/{name}: written after the landing share's copy, which would have replaced it")
    return dg.MaterializeResult(metadata={
        **table_metadata(counts["measurements"], columns),
        "dagster/table_name": "measurements",
        "database": dg.MetadataValue.path(str(paths.database)),
        "sources_loaded": len(report.loaded),
        "rows_loaded": report.rows_loaded,
        "sources_unchanged": len(report.unchanged),
        "quarantined": dg.MetadataValue.json([{"file": f, "reason": r} for f, r in report.quarantined]),
        "future_probes": dg.MetadataValue.json(report.future_probe_rows()),
        "duplicates": dg.MetadataValue.json([{"source": key, "rows_skipped": n} for key, n in report.duplicates]),
        "superseded": dg.MetadataValue.json([{"source": old, "replaced_by": new} for old, new in report.superseded]),
        "table_rows": dg.MetadataValue.json(counts),
        "by_status": rows_table(by_status, ["status", "rows"]),
        "failures": rows_table(failures, ["model", "device", "precision", "mode", "batch_size", "error"])
        if failures else dg.MetadataValue.text("none"),
    })


HEADLINE = ["model", "device_kind", "mode", "batch_size", "best_precision", "p50_ms", "throughput_samples_per_s",
            "speedup_vs_cpu_fp32", "runs"]

# The table assets: each returns a polars frame that the store_tables IO manager stores as the
# store's table of the asset's name, and hands to downstream assets as their input; the IO
# manager adds the row count, column schema and table name to the materialization.


@dg.asset(deps=[benchmark_results], group_name="store", pool="duckdb_writer", automation_condition=EAGER,
          io_manager_key=STORE_TABLES, kinds={"duckdb", "polars", "json"}, owners=OWNERS,
          description="Median over runs per config, speedup vs the same host's CPU fp32, best precision per config "
                      "(table aggregated_results); published as outputs/benchmarks.json for readers that must not "
                      "open DuckDB (the API).")
def aggregated_results(devicefit_data: DevicefitData, duckdb_reader: DuckDBResource,
                       store_tables: dg.ResourceParam[StoreTablesManager]) -> dg.Output[pl.DataFrame]:
    paths = same_store(devicefit_data, duckdb_reader, store_tables)
    with duckdb_reader.get_connection() as con:
        frame = aggregate_frame(paths, con)
    best = frame.filter(pl.col("is_best_precision")).select(HEADLINE).to_dicts()
    return dg.Output(frame, metadata={"snapshot": dg.MetadataValue.path(str(snapshot_path(paths))),
                                      "headline": rows_table(best, HEADLINE)})


@dg.asset(deps=[benchmark_results], group_name="store", pool="duckdb_writer", automation_condition=EAGER,
          io_manager_key=STORE_TABLES, kinds={"duckdb", "polars", "json"}, owners=OWNERS,
          description="Family x hardware compatibility from measured statuses (table compatibility_matrix, one row "
                      "per family x kind; spec 002 JSON in outputs/); unmeasured support labelled; availability "
                      "and probes from the fleet's registered devices.")
def compatibility_matrix(devicefit_data: DevicefitData, duckdb_reader: DuckDBResource,
                         store_tables: dg.ResourceParam[StoreTablesManager]) -> dg.Output[pl.DataFrame]:
    paths = same_store(devicefit_data, duckdb_reader, store_tables)
    with duckdb_reader.get_connection() as con:
        # The fleet's registered devices decide availability, probes and memory, not this host's detection.
        matrix = build_compatibility_matrix(con, read_fleet_inventory(con, *this_machine()))
    path = write_output_json(paths, "compatibility_matrix.json", matrix)
    rows = summary_rows(matrix)
    return dg.Output(compatibility_table(matrix), metadata={"path": dg.MetadataValue.path(path),
                                                            "matrix": rows_table(rows, list(rows[0]))})


@dg.asset(deps=[benchmark_results], group_name="prediction", pool="duckdb_writer", automation_condition=EAGER,
          io_manager_key=STORE_TABLES, kinds={"duckdb", "polars"}, owners=OWNERS,
          description="What the predictors train on: every ok measurement (table training_frame), without the "
                      "per-iteration sample lists.")
def training_frame(devicefit_data: DevicefitData, duckdb_reader: DuckDBResource,
                   store_tables: dg.ResourceParam[StoreTablesManager]) -> dg.Output[pl.DataFrame]:
    same_store(devicefit_data, duckdb_reader, store_tables)
    with duckdb_reader.get_connection() as con:
        frame = store.training_frame(con)
    return dg.Output(frame, metadata={"models": frame["model"].n_unique() if frame.height else 0})
