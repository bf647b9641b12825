"""The Dagster code location (workspace.yaml points here)."""
import dagster as dg

from assets.checks import ALL_CHECKS
from assets.inventory import hardware_inventory, model_catalog
from assets.measurements import measurements
from assets.predictors import PREDICTOR_CHECKS, prediction_matrix, prediction_validation, predictors
from assets.reports import benchmark_reports, no_performance_regression, regression_report
from assets.resources import devicefit_resources
from assets.results import aggregated_results, benchmark_results, compatibility_matrix, training_frame
from assets.selection import selection_map
from pipelines.jobs import inventory_job, measurements_job, results_job
from pipelines.loggers import console_logger
from pipelines.schedules import nightly_benchmarks
from pipelines.sensors import register_partitions

# Rebuild benchmark_results and everything derived from it whenever new measurements land.
automation_sensor = dg.AutomationConditionSensorDefinition(
    "rebuild_after_measurements", target=dg.AssetSelection.all(), default_status=dg.DefaultSensorStatus.RUNNING,
)

defs = dg.Definitions(
    assets=[hardware_inventory, model_catalog, measurements, benchmark_results, aggregated_results, compatibility_matrix, training_frame,
            predictors, prediction_matrix, prediction_validation, selection_map, benchmark_reports, regression_report],
    asset_checks=[*ALL_CHECKS, *PREDICTOR_CHECKS, no_performance_regression],
    jobs=[measurements_job, results_job, inventory_job],
    schedules=[nightly_benchmarks],
    sensors=[automation_sensor, register_partitions],
    resources=devicefit_resources(),  # the data directory, and DuckDB through dagster-duckdb
    loggers={"console": console_logger},  # Dagster's, less the tracebacks of SIGINT/SIGTERM stops
    # Steps of a run execute one after another in one process: DuckDB allows one writing
    # process, and benchmarks already run in their own isolated workers. Across runs, the
    # duckdb_writer pool (dagster.yaml) keeps writers apart.
    executor=dg.in_process_executor,
)
