"""The store and what is derived from it: benchmark_results (DuckDB), aggregated_results,
compatibility_matrix. Each writes DuckDB from one process at a time (pool duckdb_writer).
Table assets carry their row count and column schema (the asset page shows both)."""

import dagster as dg
from dagster_duckdb import DuckDBResource

from assets.automation import AFTER_NEW_MEASUREMENTS, EAGER
from assets.metadata import OWNERS, rows_table, table_metadata
from assets.resources import DevicefitData
from benchmark_runners.hardware import detect_hardware
from devicefit import store
from devicefit.benchmark_snapshot import snapshot_path
from devicefit.compatibility import compatibility_matrix as build_compatibility_matrix
from devicefit.compatibility import summary_rows
from devicefit.pipeline import load_results, refresh_aggregates, write_output_json


@dg.asset(deps=["measurements"], group_name="store", pool="duckdb_writer", automation_condition=AFTER_NEW_MEASUREMENTS,
          kinds={"duckdb"}, owners=OWNERS,
          description="Landing files loaded into DuckDB (measurements, runs, hardware, models); bad files quarantined.")
def benchmark_results(context: dg.AssetExecutionContext, devicefit_data: DevicefitData, duckdb: DuckDBResource) -> dg.MaterializeResult:
    paths = devicefit_data.paths()
    paths.database.parent.mkdir(parents=True, exist_ok=True)
    with duckdb.get_connection() as con:
        report = load_results(paths, con)
        counts, columns = store.table_counts(con), store.table_columns(con, "measurements")
        by_status, failures = store.status_counts(con), store.recent_failures(con)
    for name, reason in report.quarantined:
        context.log.error(f"quarantined {name}: {reason}")
    return dg.MaterializeResult(metadata={
        **table_metadata(counts["measurements"], columns),
        "dagster/table_name": "measurements",
        "database": dg.MetadataValue.path(str(paths.database)),
        "sources_loaded": len(report.loaded),
        "rows_loaded": report.rows_loaded,
        "sources_unchanged": len(report.unchanged),
        "quarantined": dg.MetadataValue.json([{"file": f, "reason": r} for f, r in report.quarantined]),
        "table_rows": dg.MetadataValue.json(counts),
        "by_status": rows_table(by_status, ["status", "rows"]),
        "failures": rows_table(failures, ["model", "device", "precision", "mode", "batch_size", "error"])
        if failures else dg.MetadataValue.text("none"),
    })


HEADLINE = ["model", "device_kind", "mode", "batch_size", "best_precision", "p50_ms", "throughput_samples_per_s",
            "speedup_vs_cpu_fp32", "runs"]


@dg.asset(deps=[benchmark_results], group_name="store", pool="duckdb_writer", automation_condition=EAGER,
          kinds={"duckdb", "json"}, owners=OWNERS,
          description="Median over runs per config, speedup vs the same host's CPU fp32, best precision per config; "
                      "published as outputs/benchmarks.json for readers that must not open DuckDB (the API).")
def aggregated_results(devicefit_data: DevicefitData, duckdb: DuckDBResource) -> dg.MaterializeResult:
    paths = devicefit_data.paths()
    with duckdb.get_connection() as con:
        rows = refresh_aggregates(paths, con)
        columns = store.table_columns(con, "aggregates")
    best = [r for r in rows if r["is_best_precision"]]
    return dg.MaterializeResult(metadata={
        **table_metadata(len(rows), columns),
        "dagster/table_name": "aggregates",
        "snapshot": dg.MetadataValue.path(str(snapshot_path(paths))),
        "headline": rows_table(best, HEADLINE),
    })


@dg.asset(deps=[benchmark_results], group_name="store", pool="duckdb_writer", automation_condition=EAGER,
          kinds={"json"}, owners=OWNERS,
          description="Family x hardware compatibility from measured statuses (spec 002 JSON); unmeasured support labelled.")
def compatibility_matrix(devicefit_data: DevicefitData, duckdb: DuckDBResource) -> dg.MaterializeResult:
    paths = devicefit_data.paths()
    with duckdb.get_connection() as con:
        matrix = build_compatibility_matrix(con, detect_hardware(probe=False).to_json())
    path = write_output_json(paths, "compatibility_matrix.json", matrix)
    rows = summary_rows(matrix)
    return dg.MaterializeResult(metadata={"path": dg.MetadataValue.path(path),
                                          **table_metadata(len(rows), [(c, "string") for c in rows[0]]),
                                          "matrix": rows_table(rows, list(rows[0]))})
