"""The DuckDB store: schema, migrations, reads and writes. The one place for SQL.

Rows arrive per *source* (a partition's landing file, or an ingested file). Loading a source
replaces all of its rows in one transaction, so re-materializing a partition or re-ingesting a
file never duplicates rows, and a failed load leaves the previous rows intact. A row is stored
once by its natural key (run_id, config_key) whatever file brought it: a copy arriving in another
source is skipped and counted. Failures say whose fault they are: the file's (LandingFileError,
quarantined by the loader) or the machine's (StoreError: disk full, lock held, corrupt file).
"""
from __future__ import annotations

import errno
import json
from dataclasses import dataclass, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

import duckdb

from benchmark_runners.records import BenchmarkResult
from devicefit.errors import DevicefitError
from devicefit.landing_schema import LandingFileError, parse_timestamp, validated_rows

# Each migration moves the schema from version N-1 to N; they run in order, each in a transaction.
MIGRATIONS: dict[int, list[str]] = {
    1: [
        """CREATE TABLE schema_version (version INTEGER NOT NULL, applied_at TIMESTAMP NOT NULL)""",
        """CREATE TABLE sources (
            source_key VARCHAR PRIMARY KEY, origin VARCHAR NOT NULL, path VARCHAR, sha256 VARCHAR,
            rows INTEGER NOT NULL, loaded_at TIMESTAMP NOT NULL)""",
        """CREATE TABLE runs (
            run_id VARCHAR NOT NULL, source_key VARCHAR NOT NULL, written_at TIMESTAMP, hostname VARCHAR,
            git_commit VARCHAR, git_dirty BOOLEAN, versions JSON, rows INTEGER NOT NULL,
            PRIMARY KEY (run_id, source_key))""",
        """CREATE TABLE hardware (
            fingerprint VARCHAR PRIMARY KEY, kind VARCHAR NOT NULL, name VARCHAR, hostname VARCHAR,
            details JSON, probe JSON, last_seen TIMESTAMP NOT NULL)""",
        """CREATE TABLE models (
            name VARCHAR PRIMARY KEY, source VARCHAR, architecture VARCHAR, family VARCHAR,
            parameters BIGINT, last_seen TIMESTAMP NOT NULL)""",
        """CREATE TABLE measurements (
            source_key VARCHAR NOT NULL, run_id VARCHAR NOT NULL, config_key VARCHAR NOT NULL,
            status VARCHAR NOT NULL, model VARCHAR NOT NULL, backend VARCHAR NOT NULL, device VARCHAR NOT NULL,
            device_kind VARCHAR NOT NULL, precision VARCHAR NOT NULL, mode VARCHAR NOT NULL,
            batch_size INTEGER NOT NULL, seq_length INTEGER, input_dims VARCHAR, timestamp TIMESTAMP, error VARCHAR,
            model_source VARCHAR, model_path VARCHAR, family VARCHAR, architecture VARCHAR, parameters BIGINT,
            weights VARCHAR, input JSON, forward_flops_per_sample BIGINT, weight_bytes BIGINT,
            precision_recipe VARCHAR, device_name VARCHAR, hardware_fingerprint VARCHAR, hostname VARCHAR,
            samples_ms DOUBLE[], warmup_ms DOUBLE[], warmup_steady BOOLEAN, iterations INTEGER,
            stop_reason VARCHAR, ci_target DOUBLE, mean_ms DOUBLE, p50_ms DOUBLE, p90_ms DOUBLE,
            p95_ms DOUBLE, p99_ms DOUBLE, min_ms DOUBLE, max_ms DOUBLE, stdev_ms DOUBLE, cv DOUBLE,
            ci_low_ms DOUBLE, ci_high_ms DOUBLE, ci_rel_half_width DOUBLE, throughput_samples_per_s DOUBLE,
            tokens_per_s DOUBLE, load_time_s DOUBLE, first_inference_ms DOUBLE, forward_ms DOUBLE,
            backward_ms DOUBLE, optimizer_ms DOUBLE, phase_samples_ms JSON, loss_kind VARCHAR,
            peak_rss_bytes BIGINT, rss_after_load_bytes BIGINT, rss_before_load_bytes BIGINT,
            memory_method VARCHAR, device_allocated_peak_bytes BIGINT, device_reserved_peak_bytes BIGINT,
            environment JSON, policy JSON,
            PRIMARY KEY (source_key, run_id, config_key))""",
    ],
}
MIGRATIONS[2] = [
    """CREATE TABLE predictor_versions (
        version VARCHAR PRIMARY KEY, trained_at TIMESTAMP NOT NULL, rows INTEGER NOT NULL, models JSON,
        artifact_path VARCHAR NOT NULL, validation JSON NOT NULL, within_bars BOOLEAN NOT NULL)""",
]
MIGRATIONS[3] = [
    """CREATE TABLE predictions (
        source_file VARCHAR NOT NULL, recorded_at TIMESTAMP NOT NULL, predictor_version VARCHAR, origin VARCHAR,
        model VARCHAR NOT NULL, device_kind VARCHAR NOT NULL, backend VARCHAR NOT NULL, precision VARCHAR NOT NULL,
        mode VARCHAR NOT NULL, batch_size INTEGER NOT NULL, seq_length INTEGER, latency_ms DOUBLE, throughput DOUBLE,
        memory_bytes DOUBLE, source VARCHAR)""",
]
# Every ok measurement's samples, kept when its source is later replaced by a newer run of the
# same partition, so a run can be compared with any earlier one (regression tracking).
HISTORY_COLUMNS = ("run_id", "config_key", "source_key", "model", "backend", "device_kind", "device_name", "precision", "mode",
                   "batch_size", "input_dims", "hardware_fingerprint", "hostname", "timestamp", "samples_ms", "p50_ms",
                   "throughput_samples_per_s", "peak_rss_bytes")
MIGRATIONS[4] = [
    """CREATE TABLE sample_history (
        run_id VARCHAR NOT NULL, config_key VARCHAR NOT NULL, source_key VARCHAR NOT NULL, model VARCHAR NOT NULL,
        backend VARCHAR NOT NULL, device_kind VARCHAR NOT NULL, device_name VARCHAR, precision VARCHAR NOT NULL,
        mode VARCHAR NOT NULL, batch_size INTEGER NOT NULL, input_dims VARCHAR, hardware_fingerprint VARCHAR,
        hostname VARCHAR, timestamp TIMESTAMP, samples_ms DOUBLE[] NOT NULL, p50_ms DOUBLE,
        throughput_samples_per_s DOUBLE, peak_rss_bytes BIGINT, PRIMARY KEY (run_id, config_key))""",
    f"""INSERT INTO sample_history SELECT {', '.join(HISTORY_COLUMNS)} FROM measurements
        WHERE status = 'ok' AND samples_ms IS NOT NULL ON CONFLICT DO NOTHING""",
]
MIGRATIONS[5] = ["ALTER TABLE measurements ADD COLUMN backend_config JSON"]
# A row is stored once by its natural key (run_id, config_key), whatever file brought it. Before
# this, ingesting a partition's landing file (or the same rows in another document) stored them
# again under a new source key. 6 keeps one copy (the partition's, else the first loaded) and
# records on each losing source how many of its rows were dropped; 7 enforces the key. They are
# two migrations because DuckDB builds a unique index over rows deleted in the same transaction.
_DUPLICATE_ROWS = """
    SELECT m.rowid AS row_id, m.source_key FROM measurements m LEFT JOIN sources s ON s.source_key = m.source_key
    QUALIFY row_number() OVER (PARTITION BY m.run_id, m.config_key
                               ORDER BY coalesce(s.origin = 'partition', FALSE) DESC, s.loaded_at NULLS LAST, m.source_key) > 1"""
MIGRATIONS[6] = [
    "ALTER TABLE sources ADD COLUMN duplicate_rows INTEGER DEFAULT 0",
    f"""UPDATE sources SET duplicate_rows = duplicate_rows + d.n
        FROM (SELECT source_key, count(*) AS n FROM ({_DUPLICATE_ROWS}) GROUP BY source_key) d
        WHERE sources.source_key = d.source_key""",
    f"DELETE FROM measurements WHERE rowid IN (SELECT row_id FROM ({_DUPLICATE_ROWS}))",
    """UPDATE sources SET rows = (SELECT count(*) FROM measurements m WHERE m.source_key = sources.source_key)""",
    """UPDATE runs SET rows = (SELECT count(*) FROM measurements m WHERE m.source_key = runs.source_key AND m.run_id = runs.run_id)""",
    "DELETE FROM runs WHERE rows = 0",
    """UPDATE sample_history SET source_key = m.source_key FROM measurements m
        WHERE m.run_id = sample_history.run_id AND m.config_key = sample_history.config_key
          AND m.source_key <> sample_history.source_key""",
]
MIGRATIONS[7] = ["CREATE UNIQUE INDEX measurements_natural_key ON measurements (run_id, config_key)"]
# Skip and failure reasons as codes (benchmark_runners.records.REASON_CODES). Rows written before
# the code existed (stored ones, and landing files from older versions loaded later) get it from
# the wording the code replaced: the one place that wording is read.
_LEGACY_REASON_CODES = """UPDATE measurements SET reason_code = CASE
        WHEN status = 'skipped' AND (error LIKE '% is not available here:%' OR error LIKE '% does not exist here (%') THEN 'device_unavailable'
        WHEN status = 'skipped' AND error LIKE 'needs at least % refused before allocating%' THEN 'insufficient_memory'
        WHEN status = 'skipped' THEN 'unsupported'
        WHEN error LIKE 'timed out after %' THEN 'timeout'
        WHEN error LIKE 'worker process %' OR error LIKE 'worker sent malformed output%' THEN 'worker_died'
        WHEN error LIKE 'OutputMismatch:%' THEN 'output_mismatch'
        ELSE 'exception' END
       WHERE status IN ('skipped', 'failed') AND reason_code IS NULL"""
MIGRATIONS[8] = ["ALTER TABLE measurements ADD COLUMN reason_code VARCHAR", _LEGACY_REASON_CODES]
SCHEMA_VERSION = max(MIGRATIONS)
# Result fields stored as JSON text; every other BenchmarkResult field has a column of its name.
JSON_FIELDS = {"input", "environment", "policy", "phase_samples_ms", "backend_config"}
DERIVED_COLUMNS = ("source_key", "device_kind", "seq_length", "input_dims", "hostname")
MEASUREMENT_COLUMNS = [*DERIVED_COLUMNS, *(f.name for f in fields(BenchmarkResult))]


class StoreError(DevicefitError, RuntimeError):
    """A database that is missing, too new, locked, corrupt, or on a full disk, said in words."""
    http_status = 503


# Insert failures caused by a row's content (the file is at fault: quarantine it), as opposed to
# the machine's (disk full, I/O error, a lock: the file is fine, retry later).
# Only DuckDB's own verdicts on a row: a Python error here is a bug to see, not a file to hide.
DATA_ERRORS = (duckdb.DataError, duckdb.IntegrityError, duckdb.InvalidInputException)
_LOCK_WORDS = ("conflicting lock", "could not set lock", "lock on file")
_CORRUPT_WORDS = ("not a valid duckdb database", "could not read enough bytes", "corrupt", "checksum", "invalid magic",
                  "unrecognized file format", "serialization error")


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def is_disk_full(exc: BaseException) -> bool:
    return any((isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT))
               or "no space left on device" in str(e).lower() or "disk quota exceeded" in str(e).lower()
               for e in _chain(exc))


def _write_failure(path: str, exc: BaseException, doing: str) -> StoreError:
    """The machine's reason a write failed, in words, with the disk being full said first."""
    if is_disk_full(exc):
        return StoreError(f"cannot {doing} {path}: disk full (no space left on the device holding it; "
                          f"nothing was half-written, free space and run it again): {exc}")
    return StoreError(f"cannot {doing} {path}: {type(exc).__name__}: {exc}")


def _rollback(con: duckdb.DuckDBPyConnection) -> None:
    """Roll back if a transaction is still active. A failed COMMIT or a fatal I/O error already
    ended it; DuckDB then says "no transaction is active", which must not mask the real cause."""
    try:
        con.execute("ROLLBACK")
    except duckdb.Error:
        pass


def database_file(con: duckdb.DuckDBPyConnection) -> str:
    try:
        row = con.execute("SELECT path FROM duckdb_databases() WHERE database_name = current_database()").fetchone()
        return row[0] if row and row[0] else "the database"
    except duckdb.Error:
        return "the database"


def _now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def connect(path: Path, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    path = Path(path)
    if read_only and not path.is_file():
        raise StoreError(f"no database at {path}: run `devicefit db init` or materialize the pipeline first")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        return duckdb.connect(str(path), read_only=read_only)
    except duckdb.Error as exc:
        raise open_failure(path, exc) from exc


def open_failure(path: Path, exc: BaseException) -> StoreError:
    """Why DuckDB would not open `path`: another process's lock, a corrupt or foreign file, a
    full disk, or something else, each said as such."""
    text = str(exc).lower()
    if any(w in text for w in _LOCK_WORDS):
        return StoreError(f"cannot open {path}: another process holds its lock (DuckDB allows one writing process "
                          f"at a time; wait for it to finish): {exc}")
    if any(w in text for w in _CORRUPT_WORDS):
        return StoreError(f"cannot open {path}: the file is corrupt or not a DuckDB database (restore it from a "
                          f"backup, or move it aside and rebuild it with `devicefit db init` and a load): {exc}")
    if is_disk_full(exc):
        return _write_failure(str(path), exc, "open")
    return StoreError(f"cannot open {path}: {type(exc).__name__}: {exc}")


def schema_version(con: duckdb.DuckDBPyConnection) -> int:
    exists = con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'schema_version'").fetchone()[0]
    if not exists:
        return 0
    return con.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchone()[0]


def migrate(con: duckdb.DuckDBPyConnection) -> list[int]:
    """Apply pending migrations; returns the versions applied. A newer database is refused."""
    current = schema_version(con)
    if current > SCHEMA_VERSION:
        raise StoreError(f"database schema version {current} is newer than this devicefit ({SCHEMA_VERSION}); upgrade devicefit")
    applied = []
    for version in range(current + 1, SCHEMA_VERSION + 1):
        con.execute("BEGIN TRANSACTION")
        try:
            for statement in MIGRATIONS[version]:
                con.execute(statement)
            con.execute("INSERT INTO schema_version VALUES (?, ?)", [version, _now()])
            con.execute("COMMIT")
        except BaseException as exc:
            _rollback(con)
            if isinstance(exc, (duckdb.Error, OSError)):
                raise _write_failure(database_file(con), exc, f"apply migration {version} to") from exc
            raise
        applied.append(version)
    return applied


def init_db(path: Path) -> list[int]:
    con = connect(path)
    try:
        return migrate(con)
    finally:
        con.close()


def _measurement_values(source_key: str, r: BenchmarkResult) -> list[Any]:
    row = r.to_json()
    dims = (row.get("input") or {}).get("dims") or {}
    derived = {
        "source_key": source_key,
        "device_kind": r.device.split(":")[0],
        "seq_length": dims.get("seq_length"),
        "input_dims": json.dumps(dims, sort_keys=True) if dims else None,
        "hostname": (r.environment or {}).get("hostname"),
        "timestamp": parse_timestamp(r.timestamp),  # naive UTC, whatever offset the file wrote
    }
    out = []
    for col in MEASUREMENT_COLUMNS:
        value = derived[col] if col in derived else row[col]
        out.append(json.dumps(value) if col in JSON_FIELDS else value)
    return out


@dataclass(frozen=True)
class SourceLoad:
    """What loading one source did: rows it now holds, and rows skipped because another source
    already holds the same (run_id, config_key)."""
    rows: int
    duplicates: int = 0


def _held_elsewhere(con, source_key: str, results: list[BenchmarkResult]) -> set[tuple[str, str]]:
    run_ids = sorted({r.run_id for r in results})
    if not run_ids:
        return set()
    found = con.execute(f"SELECT run_id, config_key FROM measurements WHERE source_key <> ? AND run_id IN "
                        f"({', '.join('?' for _ in run_ids)})", [source_key, *run_ids]).fetchall()
    return {(a, b) for a, b in found}


def replace_source(con: duckdb.DuckDBPyConnection, source_key: str, origin: str, document: dict[str, Any],
                   path: str | None = None, sha256: str | None = None) -> SourceLoad:
    """Replace every row of `source_key` with the rows of `document`, in one transaction.

    Rows are validated against the column types first (LandingFileError names the bad field).
    A row whose natural key (run_id, config_key) another source already holds is skipped and
    counted, never stored twice: the first source to store a row owns it (load_landing_files
    loads partitions first), and a source reloading its own rows deletes them before inserting.
    A failure rolls everything back: LandingFileError when the content is at fault, StoreError
    (naming a full disk as such) when the machine is."""
    results = [BenchmarkResult.from_json(r) for r in validated_rows(document, f"rows for {source_key}")]
    now = _now()
    con.execute("BEGIN TRANSACTION")
    try:
        replaced = con.execute("SELECT count(*) FROM measurements WHERE source_key = ?", [source_key]).fetchone()[0]
        for table in ("measurements", "runs", "sources"):
            con.execute(f"DELETE FROM {table} WHERE source_key = ?", [source_key])
        if replaced:
            # Rows this source held may have been skipped in others as duplicates: those sources
            # offer them again at the next load, so a row leaves the store only with its last source.
            con.execute("UPDATE sources SET sha256 = NULL WHERE duplicate_rows > 0")
        held = _held_elsewhere(con, source_key, results)
        kept = [r for r in results if (r.run_id, r.config_key) not in held]
        placeholders = ", ".join("?" for _ in MEASUREMENT_COLUMNS)
        if kept:
            con.executemany(f"INSERT INTO measurements ({', '.join(MEASUREMENT_COLUMNS)}) VALUES ({placeholders})",
                            [_measurement_values(source_key, r) for r in kept])
            if any(r.status != "ok" and r.reason_code is None for r in kept):
                con.execute(_LEGACY_REASON_CODES + " AND source_key = ?", [source_key])
        by_run: dict[str, list[BenchmarkResult]] = {}
        for r in kept:
            by_run.setdefault(r.run_id, []).append(r)
        for run_id, rows in by_run.items():
            env = rows[0].environment or {}
            git = env.get("git") or {}
            con.execute("INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        [run_id, source_key, min(parse_timestamp(r.timestamp) for r in rows), env.get("hostname"),
                         git.get("commit"), git.get("dirty"), json.dumps(env.get("versions")), len(rows)])
        con.execute(f"""INSERT INTO sample_history SELECT {', '.join(HISTORY_COLUMNS)} FROM measurements
                        WHERE source_key = ? AND status = 'ok' AND samples_ms IS NOT NULL ON CONFLICT DO NOTHING""", [source_key])
        _upsert_hardware(con, document.get("hardware") or {}, now)
        _upsert_models(con, kept, now)
        con.execute("INSERT INTO sources (source_key, origin, path, sha256, rows, loaded_at, duplicate_rows) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)", [source_key, origin, path, sha256, len(kept), now, len(results) - len(kept)])
        con.execute("COMMIT")
    except BaseException as exc:
        _rollback(con)
        if isinstance(exc, LandingFileError):
            raise
        if isinstance(exc, DATA_ERRORS):
            raise LandingFileError(f"rows for {source_key}: the store refused a row ({type(exc).__name__}: {exc})") from exc
        if isinstance(exc, (duckdb.Error, OSError)):
            raise _write_failure(database_file(con), exc, f"load {source_key} into") from exc
        raise
    return SourceLoad(len(kept), len(results) - len(kept))


def _upsert_hardware(con, inventory: dict[str, Any], now: datetime) -> None:
    probes = {p.get("fingerprint"): p for p in (inventory.get("probes") or {}).values()}
    hostname = inventory.get("hostname")
    for kind, info in (inventory.get("platforms") or {}).items():
        for dev in info.get("devices") or []:
            fp = dev.get("fingerprint")
            if not fp:
                continue
            con.execute("DELETE FROM hardware WHERE fingerprint = ?", [fp])
            con.execute("INSERT INTO hardware VALUES (?, ?, ?, ?, ?, ?, ?)",
                        [fp, kind, dev.get("name"), hostname, json.dumps(dev), json.dumps(probes.get(fp)), now])


def _upsert_models(con, results: list[BenchmarkResult], now: datetime) -> None:
    seen = {}
    for r in results:
        if r.parameters is not None:
            seen[r.model] = r
    for name, r in seen.items():
        con.execute("DELETE FROM models WHERE name = ?", [name])
        con.execute("INSERT INTO models VALUES (?, ?, ?, ?, ?, ?)", [name, r.model_source, r.architecture, r.family, r.parameters, now])


def source_loaded_from(con: duckdb.DuckDBPyConnection, path: str, sha256: str) -> str | None:
    """The source last loaded from exactly this file content at this path, if any."""
    row = con.execute("SELECT source_key FROM sources WHERE path = ? AND sha256 = ?", [path, sha256]).fetchone()
    return row[0] if row else None


def source_sha(con: duckdb.DuckDBPyConnection, source_key: str) -> str | None:
    row = con.execute("SELECT sha256 FROM sources WHERE source_key = ?", [source_key]).fetchone()
    return row[0] if row else None


AGGREGATE_SQL = """
CREATE OR REPLACE TABLE aggregates AS
WITH per_config AS (
    SELECT model, any_value(family) AS family, backend, device_kind, hostname,
           any_value(hardware_fingerprint) AS hardware_fingerprint, any_value(device_name) AS device_name,
           precision, mode, batch_size, coalesce(input_dims, '{}') AS input_dims, any_value(seq_length) AS seq_length,
           count(DISTINCT run_id) AS runs, count(*) AS rows,
           median(p50_ms) AS p50_ms, median(p95_ms) AS p95_ms,
           median(throughput_samples_per_s) AS throughput_samples_per_s,
           median(peak_rss_bytes) AS peak_rss_bytes, max(ci_rel_half_width) AS worst_ci_rel_half_width,
           max(timestamp) AS last_measured
    FROM measurements WHERE status = 'ok'
    GROUP BY model, backend, device_kind, hostname, precision, mode, batch_size, coalesce(input_dims, '{}')
)
SELECT p.*,
       -- versus the same model/batch/input on the same host's CPU in fp32 (torch); NULL when not measured
       base.p50_ms / p.p50_ms AS speedup_vs_cpu_fp32,
       first_value(p.precision) OVER (
           PARTITION BY p.model, p.backend, p.device_kind, p.hostname, p.mode, p.batch_size, p.input_dims
           ORDER BY p.p50_ms) AS best_precision,
       p.p50_ms = min(p.p50_ms) OVER (
           PARTITION BY p.model, p.backend, p.device_kind, p.hostname, p.mode, p.batch_size, p.input_dims) AS is_best_precision
FROM per_config p
LEFT JOIN per_config base
  ON base.model = p.model AND base.mode = p.mode AND base.batch_size = p.batch_size
 AND base.input_dims = p.input_dims AND base.hostname IS NOT DISTINCT FROM p.hostname
 AND base.device_kind = 'cpu' AND base.precision = 'fp32' AND base.backend = 'torch'
ORDER BY p.model, p.device_kind, p.mode, p.batch_size, p.precision
"""


def refresh_aggregates(con: duckdb.DuckDBPyConnection) -> int:
    con.execute(AGGREGATE_SQL)
    return con.execute("SELECT count(*) FROM aggregates").fetchone()[0]


def query(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
    cur = con.execute(sql, params or [])
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row)) for row in cur.fetchall()]


def table_counts(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    tables = [r[0] for r in con.execute("SELECT table_name FROM information_schema.tables ORDER BY table_name").fetchall()]
    return {t: con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}


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


def iter_results(con: duckdb.DuckDBPyConnection, where: str = "TRUE", params: list[Any] | None = None) -> Iterator[dict[str, Any]]:
    for row in query(con, f"SELECT * FROM measurements WHERE {where} ORDER BY model, device, precision, mode, batch_size", params):
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
    return query(con, "SELECT model, device_kind, precision, batch_size FROM aggregates WHERE p50_ms IS NULL OR isnan(p50_ms) "
                      "OR p50_ms <= 0 OR (speedup_vs_cpu_fp32 IS NOT NULL AND (isnan(speedup_vs_cpu_fp32) OR speedup_vs_cpu_fp32 <= 0)) "
                      f"LIMIT {OFFENDER_LIMIT}")


def status_counts(con) -> list[dict[str, Any]]:
    return query(con, "SELECT status, count(*) AS rows FROM measurements GROUP BY status ORDER BY status")


def recent_failures(con, limit: int = 20) -> list[dict[str, Any]]:
    return query(con, "SELECT model, device, precision, mode, batch_size, error FROM measurements "
                      f"WHERE status = 'failed' ORDER BY timestamp DESC LIMIT {int(limit)}")


def aggregates(con, best_only: bool = False) -> list[dict[str, Any]]:
    # Checked by name first: without the table, DuckDB's replacement scan would find this very
    # Python function called `aggregates` and fail with a confusing message.
    if not con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'aggregates'").fetchone()[0]:
        raise StoreError(f"{database_file(con)} holds no aggregates yet: materialize benchmark_results "
                         "(`devicefit run`) first")
    return query(con, "SELECT * FROM aggregates" + (" WHERE is_best_precision" if best_only else "") +
                 " ORDER BY model, device_kind, mode, batch_size, precision")


def record_predictor_version(con, version: str, artifact: dict[str, Any], path: str, within_bars: bool) -> None:
    con.execute("DELETE FROM predictor_versions WHERE version = ?", [version])
    con.execute("INSERT INTO predictor_versions VALUES (?, ?, ?, ?, ?, ?, ?)",
                [version, datetime.fromisoformat(artifact["trained_at"]).replace(tzinfo=None), artifact["rows"],
                 json.dumps(artifact["models"]), path, json.dumps(artifact["validation"]), within_bars])


def predictor_versions(con) -> list[dict[str, Any]]:
    return query(con, "SELECT version, trained_at, rows, models, artifact_path, within_bars, validation "
                      "FROM predictor_versions ORDER BY trained_at DESC")


PREDICTION_COLUMNS = ("recorded_at", "predictor_version", "origin", "model", "device_kind", "backend", "precision", "mode",
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


PREDICTION_ERRORS_SQL = """
CREATE OR REPLACE TABLE prediction_errors AS
SELECT p.*, m.run_id AS measured_run_id, m.timestamp AS measured_at,
       m.mean_ms AS measured_latency_ms, m.throughput_samples_per_s AS measured_throughput, m.peak_rss_bytes AS measured_memory_bytes,
       abs(p.latency_ms - m.mean_ms) / m.mean_ms AS latency_ape,
       abs(p.throughput - m.throughput_samples_per_s) / m.throughput_samples_per_s AS throughput_ape,
       abs(p.memory_bytes - m.peak_rss_bytes) / m.peak_rss_bytes AS memory_ape
FROM predictions p
JOIN measurements m
  ON m.status = 'ok' AND m.model = p.model AND m.device_kind = p.device_kind AND m.backend = p.backend
 AND m.precision = p.precision AND m.mode = p.mode AND m.batch_size = p.batch_size
 AND m.seq_length IS NOT DISTINCT FROM p.seq_length
 AND m.timestamp > p.recorded_at  -- only measurements taken after the prediction was served
QUALIFY row_number() OVER (PARTITION BY p.source_file, p.recorded_at, p.model, p.device_kind, p.backend, p.precision,
                                        p.mode, p.batch_size ORDER BY m.timestamp) = 1
"""


def refresh_prediction_errors(con) -> list[dict[str, Any]]:
    """Predicted versus measured, per source of the prediction."""
    con.execute(PREDICTION_ERRORS_SQL)
    return query(con, "SELECT source, count(*) AS n, avg(latency_ape) AS latency_mape, avg(throughput_ape) AS throughput_mape, "
                      "avg(memory_ape) AS memory_mape FROM prediction_errors GROUP BY source ORDER BY source")


def ok_measurements(con) -> list[dict[str, Any]]:
    return list(iter_results(con, "status = 'ok'"))


def fp32_inference_gflops(con) -> list[dict[str, Any]]:
    """Achieved GFLOP/s of each ok fp32 inference row (forward FLOPs x batch / mean time), by
    family and device kind and the device it ran on."""
    return query(con, """
        SELECT family, device_kind, hardware_fingerprint,
               forward_flops_per_sample * batch_size / (mean_ms / 1e3) / 1e9 AS gflops
        FROM measurements
        WHERE status = 'ok' AND precision = 'fp32' AND mode = 'inference' AND family IS NOT NULL
          AND forward_flops_per_sample > 0 AND mean_ms > 0""")


def read_ok_measurements(path: Path) -> list[dict[str, Any]]:
    """The ok rows of the database at `path`, through a read-only connection closed at once."""
    con = connect(path, read_only=True)
    try:
        return ok_measurements(con)
    finally:
        con.close()


def status_by_family_and_kind(con) -> list[dict[str, Any]]:
    """Counts per family x device kind x precision x status, the models and the reasons. A skip
    because hardware was absent is left out: it says nothing about compatibility."""
    return query(con, """
        SELECT family, device_kind, precision, status, count(*) AS n, list(DISTINCT model ORDER BY model) AS models,
               list(DISTINCT error ORDER BY error) FILTER (WHERE status <> 'ok') AS reasons
        FROM measurements
        WHERE family IS NOT NULL AND reason_code IS DISTINCT FROM 'device_unavailable'
        GROUP BY family, device_kind, precision, status""")
