"""The store and what is derived from it: benchmark_results (DuckDB), aggregated_results,
compatibility_matrix. Each writes DuckDB from one process at a time (pool duckdb_writer)."""

import dagster as dg

from assets.automation import AFTER_NEW_MEASUREMENTS, EAGER
from assets.resources import DevicefitData
from benchmark_runners.hardware import detect_hardware
from devicefit import store
from devicefit.benchmark_snapshot import snapshot_path
from devicefit.compatibility import compatibility_matrix as build_compatibility_matrix
from devicefit.compatibility import summary_rows
from devicefit.pipeline import load_results, markdown_table, refresh_aggregates, write_output_json


@dg.asset(deps=["measurements"], group_name="store", pool="duckdb_writer", automation_condition=AFTER_NEW_MEASUREMENTS,
          description="Landing files loaded into DuckDB (measurements, runs, hardware, models); bad files quarantined.")
def benchmark_results(context: dg.AssetExecutionContext, devicefit_data: DevicefitData) -> dg.MaterializeResult:
    paths = devicefit_data.paths()
    report = load_results(paths)
    for name, reason in report.quarantined:
        context.log.error(f"quarantined {name}: {reason}")
    con = store.connect(paths.database, read_only=True)
    try:
        counts = store.table_counts(con)
        by_status = store.status_counts(con)
        failures = store.recent_failures(con)
    finally:
        con.close()
    return dg.MaterializeResult(metadata={
        "database": dg.MetadataValue.path(str(paths.database)),
        "sources_loaded": len(report.loaded),
        "rows_loaded": report.rows_loaded,
        "sources_unchanged": len(report.unchanged),
        "quarantined": dg.MetadataValue.json([{"file": f, "reason": r} for f, r in report.quarantined]),
        "table_rows": dg.MetadataValue.json(counts),
        "by_status": dg.MetadataValue.md(markdown_table(by_status, ["status", "rows"])),
        "failures": dg.MetadataValue.md(markdown_table(failures, ["model", "device", "precision", "mode", "batch_size", "error"]))
        if failures else dg.MetadataValue.text("none"),
    })


@dg.asset(deps=[benchmark_results], group_name="store", pool="duckdb_writer", automation_condition=EAGER,
          description="Median over runs per config, speedup vs the same host's CPU fp32, best precision per config; "
                      "published as outputs/benchmarks.json for readers that must not open DuckDB (the API).")
def aggregated_results(devicefit_data: DevicefitData) -> dg.MaterializeResult:
    paths = devicefit_data.paths()
    rows = refresh_aggregates(paths)
    snapshot = snapshot_path(paths)
    best = [r for r in rows if r["is_best_precision"]]
    return dg.MaterializeResult(metadata={
        "rows": len(rows),
        "snapshot": dg.MetadataValue.path(str(snapshot)),
        "headline": dg.MetadataValue.md(markdown_table(best, ["model", "device_kind", "mode", "batch_size", "best_precision",
                                                              "p50_ms", "throughput_samples_per_s", "speedup_vs_cpu_fp32", "runs"])),
    })


@dg.asset(deps=[benchmark_results], group_name="store", pool="duckdb_writer", automation_condition=EAGER,
          description="Family x hardware compatibility from measured statuses (spec 002 JSON); unmeasured support labelled.")
def compatibility_matrix(devicefit_data: DevicefitData) -> dg.Output[dict]:
    paths = devicefit_data.paths()
    con = store.connect(paths.database, read_only=True)
    try:
        matrix = build_compatibility_matrix(con, detect_hardware(probe=False).to_json())
    finally:
        con.close()
    path = write_output_json(paths, "compatibility_matrix.json", matrix)
    rows = summary_rows(matrix)
    return dg.Output(matrix, metadata={"path": dg.MetadataValue.path(path),
                                       "matrix": dg.MetadataValue.md(markdown_table(rows, list(rows[0])))})
