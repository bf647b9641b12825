"""The DuckDB store: schema, migrations, reads and writes. The one place for SQL (this package).

Rows arrive per *source* (a partition's landing file, or an ingested file). Loading a source
replaces all of its rows in one transaction, so re-materializing a partition or re-ingesting a
file never duplicates rows, and a failed load leaves the previous rows intact. A row is stored
once by its natural key (run_id, config_key) whatever file brought it: a copy arriving in another
source is skipped and counted. Failures say whose fault they are: the file's (LandingFileError,
quarantined by the loader) or the machine's (StoreError: disk full, lock held, corrupt file).

schema.py (migrations, columns), connection.py (open, migrate, failures), loading.py (sources),
queries.py (reads). Callers use `from devicefit import store` and the names below."""
from devicefit.store.connection import (
    DATA_ERRORS,
    Source,
    StoreError,
    close,
    connect,
    database_file,
    init_db,
    is_disk_full,
    is_duckdb_file,
    migrate,
    open_failure,
    opened,
    schema_version,
    transaction,
)
from devicefit.store.devices import devices, register_device
from devicefit.store.frames import aggregate_frame, refresh_aggregates, replace_table, rows_of, training_frame
from devicefit.store.loading import SourceLoad, _measurement_values, replace_source, source_loaded_from, source_sha
from devicefit.store.queries import (
    AGGREGATES_TABLE,
    OFFENDER_LIMIT,
    PREDICTION_COLUMNS,
    WIDE_CI,
    aggregate_select,
    aggregates,
    aggregates_as_measured,
    aggregates_relation,
    fp32_inference_gflops,
    hardware_rows,
    inconsistent_throughput_rows,
    invalid_aggregate_rows,
    invalid_timing_rows,
    iter_results,
    measured_inputs,
    ok_measurements,
    prediction_errors_sql,
    predictor_versions,
    query,
    read_hardware_rows,
    read_ok_measurements,
    recent_failures,
    record_predictor_version,
    refresh_prediction_errors,
    replace_served_predictions,
    sample_history,
    source_rows,
    status,
    status_by_family_and_kind,
    status_counts,
    table_columns,
    table_counts,
    unmeasured_rows,
    wide_ci_counts,
    wide_ci_rows,
)
from devicefit.store.schema import DERIVED_COLUMNS, HISTORY_COLUMNS, JSON_FIELDS, MEASUREMENT_COLUMNS, MIGRATIONS, SCHEMA_VERSION

__all__ = ['MIGRATIONS', 'HISTORY_COLUMNS', 'SCHEMA_VERSION', 'JSON_FIELDS', 'DERIVED_COLUMNS', 'MEASUREMENT_COLUMNS', 'StoreError', 'DATA_ERRORS', 'is_disk_full', 'is_duckdb_file', 'database_file', 'close', 'connect', 'opened', 'Source', 'open_failure', 'schema_version', 'transaction', 'devices', 'register_device', 'aggregate_frame', 'rows_of', 'training_frame', 'replace_table', 'migrate', 'init_db', '_measurement_values', 'SourceLoad', 'replace_source', 'source_loaded_from', 'source_sha', 'aggregate_select', 'AGGREGATES_TABLE', 'refresh_aggregates', 'query', 'table_columns', 'table_counts', 'status', 'iter_results', 'OFFENDER_LIMIT', 'invalid_timing_rows', 'inconsistent_throughput_rows', 'WIDE_CI', 'wide_ci_rows', 'wide_ci_counts', 'source_rows', 'invalid_aggregate_rows', 'status_counts', 'recent_failures', 'aggregates', 'aggregates_as_measured', 'aggregates_relation', 'record_predictor_version', 'predictor_versions', 'PREDICTION_COLUMNS', 'replace_served_predictions', 'prediction_errors_sql', 'refresh_prediction_errors', 'ok_measurements', 'fp32_inference_gflops', 'read_ok_measurements', 'status_by_family_and_kind', 'sample_history', 'unmeasured_rows', 'hardware_rows', 'read_hardware_rows', 'measured_inputs']
