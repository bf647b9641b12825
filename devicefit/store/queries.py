"""Reads: aggregates, the checks' offending rows, status, predictor versions, served
predictions and their errors, and the measurements the predictors, selectors and reports use."""
from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any, Iterator

import duckdb

from devicefit.store.connection import (
    SCHEMA_VERSION,
    Source,
    StoreError,
    _rollback,
    _write_failure,
    connect,
    database_file,
    is_disk_full,
    opened,
    schema_version,
)
from devicefit.store.schema import JSON_FIELDS

# The table of aggregated configs, named after the Dagster asset whose frame it stores (the
# pipeline's IO manager writes it; plain callers use frames.refresh_aggregates): one table, one
# query (aggregate_select), one way of replacing it (frames.replace_table).
AGGREGATES_TABLE = "aggregated_results"
# A total order (a config is unique on these), so every reader lists the rows alike.
AGGREGATE_ORDER = "model, device_kind, mode, batch_size, precision, backend, host, accelerator, input_dims"
# A GPU's own fingerprint (hardware_specs.accelerator_of): two GPUs behind one host CPU are two
# devices, never one median. {own_device_kinds} is filled from the registry (aggregate_select).
_ACCELERATOR = """CASE WHEN device_kind IN ({own_device_kinds}) AND hardware_fingerprint IS DISTINCT FROM host_fingerprint
                AND coalesce(backend_config->>'software_adapter', 'false') <> 'true'
           THEN hardware_fingerprint END"""
_AGGREGATE_TEMPLATE = """
WITH per_config AS (
    SELECT model, any_value(family) AS family, backend, device_kind, any_value(hostname) AS hostname,
           coalesce(host_fingerprint, hostname) || coalesce('+' || device_profile, '') AS host,
           {accelerator} AS accelerator,
           any_value(hardware_fingerprint) AS hardware_fingerprint, any_value(device_name) AS device_name,
           any_value(device_id) AS device_id, any_value(device_profile) AS device_profile,
           precision, mode, batch_size, coalesce(input_dims, '{}') AS input_dims, any_value(seq_length) AS seq_length,
           count(DISTINCT run_id) AS runs, count(*) AS rows,
           median(p50_ms) AS p50_ms, median(p95_ms) AS p95_ms,
           median(throughput_samples_per_s) AS throughput_samples_per_s,
           median(peak_rss_bytes) AS peak_rss_bytes, max(ci_rel_half_width) AS worst_ci_rel_half_width,
           median(device_reserved_peak_bytes) AS device_reserved_peak_bytes,  -- a GPU's own memory (NULL on the host's)
           max(timestamp) AS last_measured,
           -- the generation scenario's figures (NULL for a forward pass) and its memory breakdown
           median(ttft_ms) AS ttft_ms, median(tpot_p50_ms) AS tpot_p50_ms, median(tpot_p90_ms) AS tpot_p90_ms,
           median(decode_tokens_per_s) AS decode_tokens_per_s, median(prefill_tokens_per_s) AS prefill_tokens_per_s,
           median(kv_cache_bytes) AS kv_cache_bytes,
           median(CAST(memory_breakdown->>'weights_bytes' AS DOUBLE)) AS breakdown_weights_bytes,
           median(CAST(memory_breakdown->>'activation_bytes' AS DOUBLE)) AS breakdown_activation_bytes,
           median(CAST(memory_breakdown->>'expert_copy_bytes' AS DOUBLE)) AS breakdown_expert_copy_bytes,
           median(CAST(memory_breakdown->>'process_bytes' AS DOUBLE)) AS breakdown_process_bytes,
           median(CAST(memory_breakdown->>'measured_peak_bytes' AS DOUBLE)) AS breakdown_measured_peak_bytes
    FROM measurements WHERE status = 'ok'
    GROUP BY model, backend, device_kind, coalesce(host_fingerprint, hostname) || coalesce('+' || device_profile, ''),
             {accelerator}, precision, mode, batch_size, coalesce(input_dims, '{}')
)
SELECT p.*,
       -- versus the same model/batch/input on the same host's CPU in fp32 (torch); NULL when not measured.
       -- A host is its CPU's fingerprint (hostnames repeat across machines), else its hostname;
       -- a constraint profile ("+t1") makes it another device of its own.
       base.p50_ms / p.p50_ms AS speedup_vs_cpu_fp32,
       first_value(p.precision) OVER (
           PARTITION BY p.model, p.backend, p.device_kind, p.host, p.accelerator, p.mode, p.batch_size, p.input_dims
           ORDER BY p.p50_ms) AS best_precision,
       p.p50_ms = min(p.p50_ms) OVER (
           PARTITION BY p.model, p.backend, p.device_kind, p.host, p.accelerator, p.mode, p.batch_size, p.input_dims) AS is_best_precision
FROM per_config p
LEFT JOIN per_config base
  ON base.model = p.model AND base.mode = p.mode AND base.batch_size = p.batch_size
 AND base.input_dims = p.input_dims AND base.host IS NOT DISTINCT FROM p.host
 AND base.device_kind = 'cpu' AND base.precision = 'fp32' AND base.backend = 'torch'
ORDER BY p.model, p.device_kind, p.mode, p.batch_size, p.precision, p.backend, p.host, p.accelerator, p.input_dims  -- AGGREGATE_ORDER
"""


def aggregate_select() -> str:
    """The aggregates' query, with the registry's kinds whose devices are hardware of their own."""
    from benchmark_runners import registry

    kinds = ", ".join("'" + k.replace("'", "''") + "'" for k in registry.kind_names() if registry.own_device(k)) or "NULL"
    return _AGGREGATE_TEMPLATE.replace("{accelerator}", _ACCELERATOR.replace("{own_device_kinds}", kinds))


def query(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
    cur = con.execute(sql, params or [])
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row)) for row in cur.fetchall()]


def table_counts(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    tables = [r[0] for r in con.execute("SELECT table_name FROM information_schema.tables ORDER BY table_name").fetchall()]
    return {t: con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}


def table_columns(con: duckdb.DuckDBPyConnection, table: str) -> list[tuple[str, str]]:
    """(column, DuckDB type) of a table, in order: the column schema the Dagster UI shows."""
    return [(name, type_) for name, type_ in con.execute(
        "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ? ORDER BY ordinal_position",
        [table]).fetchall()]


def status(path: Path) -> dict[str, Any]:
    """What `devicefit db status` prints: version, row counts, sources, latest runs."""
    con = connect(path, read_only=True)
    try:
        version = schema_version(con)
        out: dict[str, Any] = {"path": str(path), "size_bytes": Path(path).stat().st_size,
                               "schema_version": version, "current_schema_version": SCHEMA_VERSION,
                               "tables": table_counts(con)}
        if version >= 1:
            out["statuses"] = dict(con.execute("SELECT status, count(*) FROM measurements GROUP BY status ORDER BY status").fetchall())
            out["latest_runs"] = query(con, "SELECT run_id, source_key, written_at, hostname, git_commit, rows FROM runs ORDER BY written_at DESC LIMIT 5")
        return out
    finally:
        con.close()


# A total order of measurements (a row is unique on run_id, config_key): every reader, the
# training frame included, lists the rows alike, so training on either gives the same artifact.
MEASUREMENT_ORDER = "model, device, precision, mode, batch_size, source_key, run_id, config_key"


def iter_results(con: duckdb.DuckDBPyConnection, where: str = "TRUE", params: list[Any] | None = None) -> Iterator[dict[str, Any]]:
    for row in query(con, f"SELECT * FROM measurements WHERE {where} ORDER BY {MEASUREMENT_ORDER}", params):
        for col in JSON_FIELDS:
            if isinstance(row.get(col), str):
                row[col] = json.loads(row[col])
        yield row


# --- Named reads used by the pipeline, its checks and the CLI -------------------------------

OFFENDER_LIMIT = 20
_OK_ROW_COLUMNS = "model, device, precision, mode, batch_size, source_key"


def _ok_rows_where(con, predicate: str, columns: str = _OK_ROW_COLUMNS) -> list[dict[str, Any]]:
    return query(con, f"SELECT {columns} FROM measurements WHERE status = 'ok' AND ({predicate}) LIMIT {OFFENDER_LIMIT}")


def invalid_timing_rows(con) -> list[dict[str, Any]]:
    """Measured rows with a NaN, zero or negative timing anywhere."""
    return _ok_rows_where(con, "p50_ms IS NULL OR isnan(p50_ms) OR p50_ms <= 0 OR isnan(mean_ms) OR mean_ms <= 0 "
                               "OR len(samples_ms) = 0 OR list_min(samples_ms) <= 0 "
                               "OR list_bool_or(list_transform(samples_ms, x -> isnan(x)))")


def inconsistent_throughput_rows(con, tolerance: float) -> list[dict[str, Any]]:
    """Rows whose throughput is not batch x iterations / timed seconds within `tolerance`."""
    return _ok_rows_where(con, "abs(throughput_samples_per_s - batch_size * len(samples_ms) * 1000.0 / list_sum(samples_ms)) "
                               f"> {float(tolerance)} * throughput_samples_per_s")


WIDE_CI = "ci_rel_half_width IS NULL OR ci_rel_half_width > ci_target"


def wide_ci_rows(con) -> list[dict[str, Any]]:
    return _ok_rows_where(con, WIDE_CI, "model, device, precision, mode, batch_size, ci_rel_half_width, ci_target, stop_reason")


def wide_ci_counts(con) -> tuple[int, int]:
    """(rows over their CI target, measured rows)."""
    return con.execute(f"SELECT count(*) FILTER (WHERE {WIDE_CI}), count(*) FROM measurements WHERE status = 'ok'").fetchone()


def source_rows(con) -> list[dict[str, Any]]:
    return query(con, "SELECT source_key, rows, coalesce(duplicate_rows, 0) AS duplicate_rows FROM sources ORDER BY source_key")


def invalid_aggregate_rows(con) -> list[dict[str, Any]]:
    return query(con, f"SELECT model, device_kind, precision, batch_size FROM {AGGREGATES_TABLE} WHERE p50_ms IS NULL OR isnan(p50_ms) "
                      "OR p50_ms <= 0 OR (speedup_vs_cpu_fp32 IS NOT NULL AND (isnan(speedup_vs_cpu_fp32) OR speedup_vs_cpu_fp32 <= 0)) "
                      f"LIMIT {OFFENDER_LIMIT}")


def status_counts(con) -> list[dict[str, Any]]:
    return query(con, "SELECT status, count(*) AS rows FROM measurements GROUP BY status ORDER BY status")


def recent_failures(con, limit: int = 20) -> list[dict[str, Any]]:
    return query(con, "SELECT model, device, precision, mode, batch_size, error FROM measurements "
                      f"WHERE status = 'failed' ORDER BY timestamp DESC LIMIT {int(limit)}")


def aggregates_relation(con) -> str | None:
    """What to select the aggregates from: the table, or for a table written before a GPU's own
    fingerprint was a column, the table with an empty `accelerator` (read as it is until the
    pipeline rewrites it); None without the table (checked by name: DuckDB's replacement scan
    would otherwise look for a Python object of that name and fail with a confusing message)."""
    columns = {c for c, _ in table_columns(con, AGGREGATES_TABLE)}
    if not columns:
        return None
    return AGGREGATES_TABLE if "accelerator" in columns else f"(SELECT *, NULL AS accelerator FROM {AGGREGATES_TABLE})"


def aggregates(con) -> list[dict[str, Any]]:
    relation = aggregates_relation(con)
    if relation is None:
        raise StoreError(f"{database_file(con)} holds no aggregates yet: materialize aggregated_results "
                         "(`devicefit run`) first")
    return query(con, f"SELECT * FROM {relation} ORDER BY {AGGREGATE_ORDER}")


def aggregates_as_measured(con) -> tuple[list[dict[str, Any]], str | None]:
    """The aggregates table, and a note where it does not hold what the measurements give now
    (the aggregates' own query, read-only): `ingest` stores rows without aggregating them, and a
    partition run outside the rebuild replaces rows, so a report, an analysis or the
    recommendations read from the table alone left out, silently, every config stored since (337
    of the 537 configs of a store after a second machine's dataset was ingested). A store that
    was never aggregated (ingested only) is reported from its measurements, saying so."""
    rows = query(con, f"SELECT * FROM ({aggregate_select()}) ORDER BY {AGGREGATE_ORDER}")
    relation = aggregates_relation(con)
    stored = query(con, f"SELECT * FROM {relation} ORDER BY {AGGREGATE_ORDER}") if relation else None
    if not rows and not stored:
        raise StoreError(f"{database_file(con)} holds no measured configs yet: run `devicefit run` or `devicefit ingest` first")
    rebuild = "`dagster asset materialize -m pipelines.definitions --select 'key:benchmark_results+'` (or `devicefit run`)"
    if stored is None:
        return rows, (f"the store has not aggregated its measurements yet: reported from the measurements as they are; {rebuild} "
                      "aggregates them and publishes the API's benchmark snapshot")

    def key(r: dict[str, Any]) -> tuple:
        return tuple(str(r.get(c)) for c in ("model", "device_kind", "backend", "precision", "mode", "batch_size", "input_dims",
                                              "host", "runs", "rows", "p50_ms", "peak_rss_bytes"))
    if sorted(map(key, stored)) != sorted(map(key, rows)):
        return stored, (f"the store's aggregates ({len(stored)} configs) are older than its measurements ({len(rows)} configs "
                        f"now: rows were ingested or replaced since); these figures are the aggregates'; {rebuild} brings them up to date")
    return stored, None


def record_predictor_version(con, version: str, artifact: dict[str, Any], path: str, within_bars: bool) -> None:
    con.execute("DELETE FROM predictor_versions WHERE version = ?", [version])
    con.execute("INSERT INTO predictor_versions VALUES (?, ?, ?, ?, ?, ?, ?)",
                [version, datetime.fromisoformat(artifact["trained_at"]).replace(tzinfo=None), artifact["rows"],
                 json.dumps(artifact["models"]), path, json.dumps(artifact["validation"]), within_bars])


def predictor_versions(con) -> list[dict[str, Any]]:
    return query(con, "SELECT version, trained_at, rows, models, artifact_path, within_bars, validation "
                      "FROM predictor_versions ORDER BY trained_at DESC")


PREDICTION_COLUMNS = ("recorded_at", "predictor_version", "origin", "model", "device_kind", "device", "backend", "precision", "mode",
                      "batch_size", "seq_length", "latency_ms", "throughput", "memory_bytes", "source")


def replace_served_predictions(con, source_file: str, rows: list[dict[str, Any]]) -> None:
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute("DELETE FROM predictions WHERE source_file = ?", [source_file])
        if rows:
            con.executemany(f"INSERT INTO predictions (source_file, {', '.join(PREDICTION_COLUMNS)}) "
                            f"VALUES (?, {', '.join('?' for _ in PREDICTION_COLUMNS)})",
                            [[source_file, *(r.get(c) for c in PREDICTION_COLUMNS)] for r in rows])
        con.execute("COMMIT")
    except BaseException as exc:
        _rollback(con)
        if isinstance(exc, (duckdb.IOException, OSError)) and is_disk_full(exc):
            raise _write_failure(database_file(con), exc, "record predictions in") from exc
        raise


def prediction_errors_sql() -> str:
    """The prediction_errors table's query. A prediction is scored against the first ok
    measurement taken after it on the device it was answered for: the measurement's device key,
    built as hardware_specs.row_device builds it (kind@host, a GPU's own fingerprint, a profile),
    equals the prediction's `device`. A prediction recorded without one (before the column, or for
    a kind never measured, whose key is the bare kind) is matched by kind, on a device as it is.
    Memory is compared as predicted (devicefit.predict.memory_model.memory_target): the card
    allocator's peak on the kinds the registry says have memory of their own, the process's RSS
    elsewhere."""
    from benchmark_runners import registry

    memory_kinds = ", ".join("'" + k.replace("'", "''") + "'" for k in registry.own_memory_kinds()) or "NULL"
    device_kinds = ", ".join("'" + k.replace("'", "''") + "'" for k in registry.kind_names() if registry.own_device(k)) or "NULL"
    return (_PREDICTION_ERRORS_TEMPLATE.replace("{own_memory_kinds}", memory_kinds)
            .replace("{accelerator}", _ACCELERATOR.replace("{own_device_kinds}", device_kinds)))


_PREDICTION_ERRORS_TEMPLATE = """
CREATE OR REPLACE TABLE prediction_errors AS
SELECT p.*, m.run_id AS measured_run_id, m.timestamp AS measured_at, m.device_key AS measured_device,
       m.mean_ms AS measured_latency_ms, m.throughput_samples_per_s AS measured_throughput, m.memory_bytes AS measured_memory_bytes,
       abs(p.latency_ms - m.mean_ms) / m.mean_ms AS latency_ape,
       abs(p.throughput - m.throughput_samples_per_s) / m.throughput_samples_per_s AS throughput_ape,
       abs(p.memory_bytes - m.memory_bytes) / m.memory_bytes AS memory_ape
FROM predictions p
-- memory as predicted (devicefit.predict.memory_model.memory_target): the allocator's peak on a
-- card with memory of its own (the kinds prediction_errors_sql fills in), the process's RSS elsewhere
JOIN (SELECT *, CASE WHEN device_kind IN ({own_memory_kinds}) AND device_reserved_peak_bytes IS NOT NULL
                     THEN device_reserved_peak_bytes ELSE peak_rss_bytes END AS memory_bytes,
             CASE WHEN coalesce(host_fingerprint, hostname) IS NULL THEN device_kind  -- hardware_specs.row_device
                  ELSE device_kind || '@' || coalesce(host_fingerprint, hostname) || coalesce('+' || ({accelerator}), '')
                       || coalesce('+' || device_profile, '') END AS device_key
      FROM measurements) m
  ON m.status = 'ok' AND m.model = p.model AND m.device_kind = p.device_kind AND m.backend = p.backend
 AND CASE WHEN p.device LIKE '%@%' THEN m.device_key = p.device
          ELSE m.device_profile IS NULL END  -- a prediction asked by kind alone is for a device as it is
 AND m.precision = p.precision AND m.mode = p.mode AND m.batch_size = p.batch_size
 AND m.seq_length IS NOT DISTINCT FROM p.seq_length
 AND m.timestamp > p.recorded_at  -- only measurements taken after the prediction was served
-- one row per prediction: two origins (or predictor versions) answering one config in one instant are two predictions
QUALIFY row_number() OVER (PARTITION BY p.source_file, p.recorded_at, p.origin, p.predictor_version, p.model, p.device_kind, p.device,
                                        p.backend, p.precision, p.mode, p.batch_size, p.seq_length ORDER BY m.timestamp, m.run_id) = 1
"""


def refresh_prediction_errors(con) -> list[dict[str, Any]]:
    """Predicted versus measured, per source of the prediction."""
    con.execute(prediction_errors_sql())
    return query(con, "SELECT source, count(*) AS n, avg(latency_ape) AS latency_mape, avg(throughput_ape) AS throughput_mape, "
                      "avg(memory_ape) AS memory_mape FROM prediction_errors GROUP BY source ORDER BY source")


def ok_measurements(con) -> list[dict[str, Any]]:
    return list(iter_results(con, "status = 'ok'"))


def fp32_inference_gflops(con) -> list[dict[str, Any]]:
    """Achieved GFLOP/s of each ok fp32 inference row (forward FLOPs x batch / mean time), by
    family and device kind and the device it ran on (its host, and the profile it ran under)."""
    return query(con, """
        SELECT family, device_kind, hardware_fingerprint, host_fingerprint, device_profile,
               forward_flops_per_sample * batch_size / (mean_ms / 1e3) / 1e9 AS gflops
        FROM measurements
        WHERE status = 'ok' AND precision = 'fp32' AND mode = 'inference' AND family IS NOT NULL
          AND forward_flops_per_sample > 0 AND mean_ms > 0""")


def read_ok_measurements(source: "Source") -> list[dict[str, Any]]:
    """The ok rows of the store (a path is opened read-only and closed at once)."""
    with opened(source, read_only=True) as con:
        return ok_measurements(con)


def read_hardware_rows(source: "Source") -> list[tuple]:
    """`hardware_rows` of the store (a path is opened read-only and closed at once)."""
    with opened(source, read_only=True) as con:
        return hardware_rows(con)


def status_by_family_and_kind(con) -> list[dict[str, Any]]:
    """Counts per family x device kind x precision x status, the models and the reasons. A skip
    because hardware was absent, or because the profile's call budget left the config to the
    predictors (benchmark_runners.call_budget), is left out: it says nothing about compatibility."""
    return query(con, """
        SELECT family, device_kind, precision, status, count(*) AS n, list(DISTINCT model ORDER BY model) AS models,
               list(DISTINCT error ORDER BY error) FILTER (WHERE status <> 'ok') AS reasons
        FROM measurements
        WHERE family IS NOT NULL AND coalesce(reason_code, '') NOT IN ('device_unavailable', 'over_call_budget')
        GROUP BY family, device_kind, precision, status""")


_HISTORY_SELECT = ("SELECT run_id, model, device_kind, backend, precision, mode, batch_size, input_dims, samples_ms, p50_ms, "
                   "hardware_fingerprint, config_key, contended, other_cpu_share, device_profile, speed_reference, minor_faults_per_iteration, allocator "
                   "FROM sample_history")


def sample_history(con, run_id: str | None = None, latest_only: bool = False) -> list[tuple]:
    """Sample sets (run_id, model, device_kind, backend, precision, mode, batch_size, input_dims,
    samples_ms, p50_ms, hardware_fingerprint, config_key, contended, other_cpu_share, device_profile,
    speed_reference, minor_faults_per_iteration, allocator): one run's, the latest of each config on
    each device (`latest_only`), or every one, newest first."""
    if run_id:
        return con.execute(f"{_HISTORY_SELECT} WHERE run_id = ?", [run_id]).fetchall()
    if latest_only:
        return con.execute(f"{_HISTORY_SELECT} QUALIFY row_number() OVER (PARTITION BY config_key, hardware_fingerprint "
                           "ORDER BY timestamp DESC) = 1").fetchall()
    return con.execute(f"{_HISTORY_SELECT} ORDER BY timestamp DESC").fetchall()


def unmeasured_rows(con, run_id: str) -> list[tuple]:
    """(model, device_kind, backend, precision, mode, batch_size, device_profile, input_dims,
    hardware_fingerprint, status, reason_code, error) of one run's skipped and failed rows."""
    return con.execute("SELECT model, device_kind, backend, precision, mode, batch_size, device_profile, input_dims, hardware_fingerprint, "
                       "status, reason_code, error FROM measurements WHERE run_id = ? AND status IN ('skipped', 'failed') "
                       "ORDER BY timestamp", [run_id]).fetchall()


def hardware_rows(con) -> list[tuple]:
    """(fingerprint, kind, name, probe) of every device the store knows: the detected hardware,
    and each registered device under a constraint profile by its device id (its probe is the
    one taken under the profile), so rows measured under a profile find their own peaks."""
    rows = con.execute("SELECT fingerprint, kind, name, probe FROM hardware").fetchall()
    if con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'devices'").fetchone()[0]:
        rows += con.execute("SELECT id, kind, name || ' (' || split_part(id, '+', 2) || ')', probe FROM devices "
                            "WHERE id LIKE '%+%' AND probe IS NOT NULL").fetchall()
    return rows


def measured_inputs(con) -> list[tuple]:
    """(model, input_dims, forward FLOPs per sample, model path) of each model's measured inputs."""
    return con.execute("SELECT model, any_value(input_dims), any_value(forward_flops_per_sample), any_value(model_path) "
                       "FROM measurements WHERE status = 'ok' GROUP BY model, input_dims").fetchall()
