"""The store's schema: migrations from version 1 to the current one, and the columns rows are
written to. Each migration moves the schema from version N-1 to N; they run in order, each in a
transaction."""
from __future__ import annotations

import re
from dataclasses import fields

from benchmark_runners.records import BenchmarkResult

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
HISTORY_COLUMNS_V4 = ("run_id", "config_key", "source_key", "model", "backend", "device_kind", "device_name", "precision", "mode",
                   "batch_size", "input_dims", "hardware_fingerprint", "hostname", "timestamp", "samples_ms", "p50_ms",
                   "throughput_samples_per_s", "peak_rss_bytes")
MIGRATIONS[4] = [
    """CREATE TABLE sample_history (
        run_id VARCHAR NOT NULL, config_key VARCHAR NOT NULL, source_key VARCHAR NOT NULL, model VARCHAR NOT NULL,
        backend VARCHAR NOT NULL, device_kind VARCHAR NOT NULL, device_name VARCHAR, precision VARCHAR NOT NULL,
        mode VARCHAR NOT NULL, batch_size INTEGER NOT NULL, input_dims VARCHAR, hardware_fingerprint VARCHAR,
        hostname VARCHAR, timestamp TIMESTAMP, samples_ms DOUBLE[] NOT NULL, p50_ms DOUBLE,
        throughput_samples_per_s DOUBLE, peak_rss_bytes BIGINT, PRIMARY KEY (run_id, config_key))""",
    f"""INSERT INTO sample_history SELECT {', '.join(HISTORY_COLUMNS_V4)} FROM measurements
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
# Measurement provenance added with realistic activations and contention detection: how the
# weights were set, the denormal policy, the measured output's figures, and the share of the
# host's CPU other processes used while timing. Older rows keep NULL: not recorded.
MIGRATIONS[9] = [
    "ALTER TABLE measurements ADD COLUMN weights_recipe VARCHAR",
    "ALTER TABLE measurements ADD COLUMN denormal_policy VARCHAR",
    "ALTER TABLE measurements ADD COLUMN output_check JSON",
    "ALTER TABLE measurements ADD COLUMN other_cpu_share DOUBLE",
    "ALTER TABLE measurements ADD COLUMN contended BOOLEAN",
    "ALTER TABLE measurements ADD COLUMN contention_attempts INTEGER",
    "ALTER TABLE sample_history ADD COLUMN other_cpu_share DOUBLE",
    "ALTER TABLE sample_history ADD COLUMN contended BOOLEAN",
]
# The host a row was measured on, by its CPU's fingerprint (the document's hardware block): two
# machines can share a hostname ("vm"), and a row of OpenVINO's CPU device belongs with the torch
# rows of the same CPU. Rows loaded before this keep NULL until their source is loaded again.
MIGRATIONS[10] = ["ALTER TABLE measurements ADD COLUMN host_fingerprint VARCHAR"]
# The aggregates table takes the name of the Dagster asset whose frame it stores
# (aggregated_results, through the pipeline's DuckDB IO manager), so the store holds one table of
# aggregates whichever path (pipeline or CLI) refreshed it last.
def _rename_aggregates(con) -> None:
    """Renamed when only the old table exists; dropped when a newer aggregated_results exists too
    (both are derived from the measurements; the newer is kept)."""
    names = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'").fetchall()}
    if "aggregates" in names:
        con.execute("DROP TABLE aggregates" if "aggregated_results" in names else "ALTER TABLE aggregates RENAME TO aggregated_results")


MIGRATIONS[11] = [_rename_aggregates]  # a step is SQL text, or a function of the connection
# Devices as entities (the fleet): a registered device per (hardware, constraint profile), with
# its host and its own probe under that profile. `id` is the hardware fingerprint (what every
# measured row's hardware_fingerprint holds) plus the profile's slug.
MIGRATIONS[12] = ["""CREATE TABLE devices (
    id VARCHAR PRIMARY KEY, kind VARCHAR NOT NULL, name VARCHAR, hostname VARCHAR, host_fingerprint VARCHAR,
    hardware_fingerprint VARCHAR NOT NULL, profile JSON, details JSON, probe JSON,
    registered_at TIMESTAMP NOT NULL, last_seen TIMESTAMP NOT NULL)"""]
# The device a row ran on: its constraint profile (a field of the row; NULL for rows measured
# as the device is) and its device id, derived at load (hardware fingerprint + "+" + profile),
# the id the fleet's `devices` table registers. Rows stored before have no profile: their id is
# their hardware fingerprint, which is the unprofiled device's id.
MIGRATIONS[13] = ["ALTER TABLE measurements ADD COLUMN IF NOT EXISTS device_profile VARCHAR",
                  "ALTER TABLE measurements ADD COLUMN IF NOT EXISTS device_id VARCHAR",
                  "UPDATE measurements SET device_id = hardware_fingerprint WHERE device_id IS NULL AND device_profile IS NULL"]
# Rows stored before devices registered themselves on load: register the devices they ran on
# (one per device id; the unprofiled ones with the hardware table's probe), so every device with
# rows is a registered device without reloading its sources.
def _register_stored_devices(con) -> None:
    con.execute("""
        INSERT INTO devices (id, kind, name, hostname, host_fingerprint, hardware_fingerprint, profile, details, probe,
                             registered_at, last_seen)
        SELECT m.device_id, any_value(m.device_kind), any_value(m.device_name), any_value(m.hostname),
               any_value(m.host_fingerprint), any_value(m.hardware_fingerprint),
               json_object('threads', NULL, 'isa', NULL), NULL, any_value(nullif(h.probe, 'null')),
               coalesce(min(m.timestamp), now()), now()
        FROM measurements m LEFT JOIN hardware h ON h.fingerprint = m.device_id
        WHERE m.device_id IS NOT NULL AND m.device_profile IS NULL AND m.device_id NOT IN (SELECT id FROM devices)
        GROUP BY m.device_id""")


MIGRATIONS[14] = [_register_stored_devices]
# A run's samples keep the constraint profile they were measured under, so regression tracking
# compares a 1-thread run with the previous 1-thread run, never with the same CPU unconstrained.
MIGRATIONS[15] = ["ALTER TABLE sample_history ADD COLUMN IF NOT EXISTS device_profile VARCHAR",
                  """UPDATE sample_history SET device_profile = m.device_profile FROM measurements m
                     WHERE m.run_id = sample_history.run_id AND m.config_key = sample_history.config_key
                       AND m.device_profile IS NOT NULL"""]
# The generation scenario (benchmark_runners/generation.py), and the forward-pass rate by its
# name: `tokens_per_s` was one forward pass over the whole sequence, which for a decoder is a
# prefill rate, hundreds of times the rate it generates at. DuckDB refuses to alter a table that
# an index depends on, and refuses to drop and recreate one in a single transaction, so the
# natural-key index is dropped here and recreated by the next migration.
def _rename_forward_rate(con) -> None:
    columns = {c for (c,) in con.execute("SELECT column_name FROM information_schema.columns "
                                         "WHERE table_name = 'measurements'").fetchall()}
    if "tokens_per_s" in columns and "forward_tokens_per_s" not in columns:
        con.execute("DROP INDEX IF EXISTS measurements_natural_key")
        con.execute("ALTER TABLE measurements RENAME COLUMN tokens_per_s TO forward_tokens_per_s")


MIGRATIONS[16] = [
    _rename_forward_rate,
    *(f"ALTER TABLE measurements ADD COLUMN IF NOT EXISTS {column}" for column in (
        "prompt_tokens INTEGER", "new_tokens INTEGER", "ttft_ms DOUBLE", "ttft_p90_ms DOUBLE", "tpot_p50_ms DOUBLE",
        "tpot_p90_ms DOUBLE", "decode_tokens_per_s DOUBLE", "prefill_tokens_per_s DOUBLE", "token_times_ms JSON",
        "kv_cache_bytes BIGINT", "kv_cache JSON", "memory_breakdown JSON")),
]
MIGRATIONS[17] = [MIGRATIONS[7][0].replace("CREATE UNIQUE INDEX", "CREATE UNIQUE INDEX IF NOT EXISTS")]
# A served prediction keeps the device it was answered for ("cuda@<host>+cuda-<fingerprint>"), so
# it is scored against that device's measurements: matched by kind alone, a prediction for one
# GPU (or one host's CPU) was scored against another's. Older predictions keep NULL: by kind.
MIGRATIONS[18] = ["ALTER TABLE predictions ADD COLUMN IF NOT EXISTS device VARCHAR"]
# The host CPU's rate on a fixed kernel just before and after each config was timed
# (benchmark_runners/speed_reference.py). Older rows keep NULL: not recorded.
MIGRATIONS[19] = ["ALTER TABLE measurements ADD COLUMN IF NOT EXISTS speed_reference JSON"]
# ...and the sample history keeps it, for the regression report (a store already at 19 gets it here).
MIGRATIONS[20] = ["ALTER TABLE sample_history ADD COLUMN IF NOT EXISTS speed_reference JSON"]
# Devices that run on the host's CPU (OpenVINO's CPU plugin, wasm, software WebGPU) are named by
# their host-qualified fingerprint (benchmark_runners.hardware.inventory.host_qualified): rows
# stored before named them by one fingerprint on every machine, so an AMD EPYC's and a Xeon's
# OpenVINO rows were one device (one device id, one registered device, one baseline). Each stored
# row gets its host's name, as loading gives a file written before; its sample history follows
# it, and history whose rows were since replaced takes the host of its run (the run's other rows
# name it; a run seen on two hosts is left as it is). Each device is registered under its new id
# with what its old entry said where that entry was its host's, and an old id left with no rows
# is dropped.
def _qualify_host_cpu_devices(con) -> None:
    from benchmark_runners import registry
    from benchmark_runners.hardware.inventory import device_fingerprint, host_qualified

    software = "coalesce(json_extract_string(backend_config, '$.software_adapter'), 'false') = 'true'"
    found = con.execute(f"SELECT DISTINCT device, hardware_fingerprint, host_fingerprint, {software} FROM measurements "
                        "WHERE device_kind <> 'cpu' AND hardware_fingerprint IS NOT NULL AND host_fingerprint IS NOT NULL").fetchall()
    renamed: dict[tuple[str, str], str] = {}  # (old fingerprint, host) -> new
    for device, old, host, on_software in found:
        new = host_qualified(old, host) if registry.runs_on_host_cpu(device, on_software) else old
        if new != old:
            renamed[(old, host)] = new
            con.execute(f"UPDATE measurements SET hardware_fingerprint = ?, device_id = ? || coalesce('+' || device_profile, '') "
                        f"WHERE device = ? AND hardware_fingerprint = ? AND host_fingerprint = ? AND ({software}) = ?",
                        [new, new, device, old, host, on_software])
    con.execute("""UPDATE sample_history SET hardware_fingerprint = m.hardware_fingerprint FROM measurements m
                   WHERE m.run_id = sample_history.run_id AND m.config_key = sample_history.config_key
                     AND m.hardware_fingerprint IS DISTINCT FROM sample_history.hardware_fingerprint""")
    olds = sorted({old for old, _ in renamed} | {device_fingerprint("openvino", {"name": "CPU"})})
    runs = con.execute("""SELECT run_id, min(host) FROM (
                            SELECT run_id, host_fingerprint AS host FROM measurements WHERE host_fingerprint IS NOT NULL
                            UNION ALL SELECT run_id, hardware_fingerprint FROM sample_history
                              WHERE device_kind = 'cpu' AND device_profile IS NULL AND hardware_fingerprint IS NOT NULL)
                          GROUP BY run_id HAVING count(DISTINCT host) = 1""").fetchall()
    for run_id, host in runs:
        for (old,) in con.execute("SELECT DISTINCT hardware_fingerprint FROM sample_history WHERE run_id = ? AND "
                                  "(hardware_fingerprint IN (SELECT unnest(?)) OR device_kind = 'wasm')", [run_id, olds]).fetchall():
            if (new := host_qualified(old, host)) != old:
                con.execute("UPDATE sample_history SET hardware_fingerprint = ? WHERE run_id = ? AND hardware_fingerprint = ?", [new, run_id, old])
    if not renamed:
        return
    for (old, host), new in renamed.items():  # the old entry, where it was this host's, describes the new id
        con.execute("INSERT INTO devices SELECT ?, kind, name, hostname, host_fingerprint, ?, profile, details, probe, registered_at, "
                    "last_seen FROM devices WHERE id = ? AND host_fingerprint = ? AND ? NOT IN (SELECT id FROM devices)", [new, new, old, host, new])
    # The hardware table describes each new id by the old one's kind and name (the same on every
    # machine for OpenVINO's "CPU"); the old row, describing whichever machine loaded last, goes.
    con.execute("""INSERT INTO hardware (fingerprint, kind, name, hostname, details, probe, last_seen)
                   SELECT m.hardware_fingerprint, any_value(h.kind), any_value(h.name), any_value(m.hostname), NULL, NULL, now()
                   FROM measurements m JOIN hardware h ON m.hardware_fingerprint LIKE h.fingerprint || '-%'
                   WHERE m.hardware_fingerprint NOT IN (SELECT fingerprint FROM hardware) GROUP BY m.hardware_fingerprint""")
    _register_stored_devices(con)
    # a WebGPU device registered without its old entry still says it is a software one (select/devices.py reads it)
    con.execute(f"""UPDATE devices SET details = json_object('software', true) WHERE kind = 'webgpu' AND details IS NULL
                    AND id IN (SELECT device_id FROM measurements WHERE {software})""")
    gone = sorted({old for old, _ in renamed})
    held = f"IN ({', '.join('?' for _ in gone)})"
    con.execute(f"DELETE FROM devices WHERE id {held} AND id NOT IN (SELECT device_id FROM measurements WHERE device_id IS NOT NULL)", gone)
    con.execute(f"DELETE FROM hardware WHERE fingerprint {held} AND fingerprint NOT IN "
                "(SELECT hardware_fingerprint FROM measurements WHERE hardware_fingerprint IS NOT NULL)", gone)


MIGRATIONS[21] = [_qualify_host_cpu_devices]
# Minor page faults per timed iteration (benchmark_runners.records). Older rows keep NULL: not counted.
MIGRATIONS[22] = ["ALTER TABLE measurements ADD COLUMN IF NOT EXISTS minor_faults_per_iteration DOUBLE"]
# ...and the sample history keeps it, so a regression comparison can say that the count moved
# (devicefit/reports/regression.py); rows stored since migration 22 have it back.
MIGRATIONS[23] = ["ALTER TABLE sample_history ADD COLUMN IF NOT EXISTS minor_faults_per_iteration DOUBLE",
                  """UPDATE sample_history SET minor_faults_per_iteration = m.minor_faults_per_iteration FROM measurements m
                     WHERE m.run_id = sample_history.run_id AND m.config_key = sample_history.config_key
                       AND m.minor_faults_per_iteration IS NOT NULL"""]
# The partition sources each partition's document replaces (its `supersedes`), kept so that an
# older partition's file the store never loaded is not stored beside its successor when it turns
# up later (devicefit/store/loading.py). Partition sources load once more to record theirs.
MIGRATIONS[24] = ["ALTER TABLE sources ADD COLUMN IF NOT EXISTS supersedes VARCHAR[]",
                  "UPDATE sources SET sha256 = NULL WHERE origin = 'partition'"]
# The allocator the measuring process ran with (its row's environment.allocator: glibc's
# MALLOC_* settings, LD_PRELOAD), so that a regression comparison can say when the two sides ran
# with different ones (devicefit/reports/regression.py). Rows that did not record it keep NULL.
MIGRATIONS[25] = ["ALTER TABLE sample_history ADD COLUMN IF NOT EXISTS allocator JSON",
                  """UPDATE sample_history SET allocator = json_extract(m.environment, '$.allocator') FROM measurements m
                     WHERE m.run_id = sample_history.run_id AND m.config_key = sample_history.config_key
                       AND json_extract(m.environment, '$.allocator') IS NOT NULL"""]
# What sample_history keeps of each ok measurement now, in its column order, each as read from
# its measurements row (migration 4's columns, then 9's, 15's, 20's, 23's, 25's).
HISTORY_COLUMNS = (*HISTORY_COLUMNS_V4, "other_cpu_share", "contended", "device_profile", "speed_reference", "minor_faults_per_iteration",
                   "json_extract(environment, '$.allocator')")
SCHEMA_VERSION = max(MIGRATIONS)
# The tables the store's own code creates and writes; a pipeline table asset may not take one's name.
RESERVED_TABLES = frozenset({*(m.group(1) for steps in MIGRATIONS.values() for step in steps if isinstance(step, str)
                               for m in re.finditer(r"CREATE TABLE (?:IF NOT EXISTS )?(\w+)", step)),
                             "prediction_errors"})
# Result fields stored as JSON text; every other BenchmarkResult field has a column of its name.
JSON_FIELDS = {"input", "environment", "policy", "phase_samples_ms", "backend_config", "output_check", "token_times_ms", "kv_cache", "memory_breakdown", "speed_reference"}
DERIVED_COLUMNS = ("source_key", "device_kind", "seq_length", "input_dims", "hostname", "host_fingerprint", "device_id")
MEASUREMENT_COLUMNS = [*DERIVED_COLUMNS, *(f.name for f in fields(BenchmarkResult))]
