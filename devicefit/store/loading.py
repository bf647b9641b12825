"""Loading sources: each source's rows replaced in one transaction, each row stored once by its
natural key (run_id, config_key) whatever file brought it."""
from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Callable

import duckdb

from benchmark_runners import registry
from benchmark_runners.hardware.inventory import host_qualified, qualify_host_runtimes
from benchmark_runners.records import BenchmarkResult
from devicefit.landing_schema import LandingFileError, parse_timestamp, validated_rows
from devicefit.store.connection import DATA_ERRORS, _now, _rollback, _write_failure, database_file
from devicefit.store.devices import document_probes, future_stamped, kept_probe, register_measured, row_device_id
from devicefit.store.model_identity import check_one_model_per_name
from devicefit.store.schema import _LEGACY_REASON_CODES, HISTORY_COLUMNS, JSON_FIELDS, MEASUREMENT_COLUMNS


def host_fingerprint(document: dict[str, Any]) -> str | None:
    """The fingerprint of the CPU of the host that wrote `document` (its hardware block); an empty
    one is none (see _measurement_values)."""
    hardware = document.get("hardware")
    platforms = hardware.get("platforms") if isinstance(hardware, dict) else None
    cpu = platforms.get("cpu") if isinstance(platforms, dict) else None
    devices = cpu.get("devices") if isinstance(cpu, dict) else None
    found = devices[0].get("fingerprint") if isinstance(devices, list) and devices and isinstance(devices[0], dict) else None
    return found if isinstance(found, str) and found else None


def partition_identity(source_key: Any, document: dict[str, Any]) -> list[str] | None:
    """[partition source key, host CPU fingerprint, hostname] of a partition's document from a
    machine that says which it is; None for anything else. What an ingest of the file is keyed by
    (ingest_key): one partition of one machine is one source wherever its file was landed."""
    host = host_fingerprint(document)
    if not isinstance(source_key, str) or not source_key.startswith("partition:") or not host:
        return None
    hardware = document.get("hardware") if isinstance(document.get("hardware"), dict) else {}
    return [source_key, host, str(hardware.get("hostname") or "")]


def ingest_key(identity: Any) -> str:
    """The source key `devicefit ingest` lands a document under: its partition_identity, or its
    rows where it has none (another tool's output, a file from before source keys)."""
    return f"ingest:{hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]}"


def on_software_adapter(backend_config: Any) -> bool:
    """Whether a row's backend_config (a dict, or the JSON text DuckDB hands back) says it ran on
    a software device (WebGPU on SwiftShader)."""
    if isinstance(backend_config, str):
        try:
            backend_config = json.loads(backend_config)
        except ValueError:
            return False
    return bool(isinstance(backend_config, dict) and backend_config.get("software_adapter"))


def host_qualifier(document: dict[str, Any]) -> tuple[dict[str, Any], Callable[[str, str | None, Any], str | None]]:
    """A landing document's hardware block with every device that runs on the host's CPU
    (OpenVINO's CPU plugin, wasm, software WebGPU) named by its host-qualified fingerprint, as
    detection names it since CACHE_SCHEMA 2 (inventory.host_qualified), and the rule that names
    a row's device alike: (device, fingerprint, backend_config) -> fingerprint. A file written
    before names such a device by a fingerprint every machine shares ("openvino-4ebbcabb1705" on
    the AMD EPYC and on the Xeon), so its rows would land on the other machine's device."""
    hardware = copy.deepcopy(document.get("hardware") or {})
    platforms = hardware.get("platforms") if isinstance(hardware, dict) else None
    devices = {k: v["devices"] for k, v in platforms.items() if isinstance(v, dict) and isinstance(v.get("devices"), list)} \
        if isinstance(platforms, dict) else {}
    renamed = qualify_host_runtimes(devices)
    host = host_fingerprint(document)

    def qualify(device: str, fingerprint: str | None, backend_config: Any) -> str | None:
        if not isinstance(fingerprint, str):  # none, or a hostile file's: left for the reader's own checks
            return fingerprint
        if fingerprint in renamed:
            return renamed[fingerprint]
        on_host = device.split(":")[0] != "cpu" and registry.runs_on_host_cpu(device, on_software_adapter(backend_config))
        return host_qualified(fingerprint, host) if on_host else fingerprint
    return hardware, qualify


def with_host_qualified_devices(document: dict[str, Any], results: list[BenchmarkResult]) -> tuple[dict[str, Any], list[BenchmarkResult]]:
    """The document and its rows under host_qualifier's names (rows already qualified unchanged)."""
    hardware, qualify = host_qualifier(document)
    out = []
    for r in results:
        fingerprint = qualify(r.device, r.hardware_fingerprint, r.backend_config)
        out.append(r if fingerprint == r.hardware_fingerprint else replace(r, hardware_fingerprint=fingerprint))
    return {**document, "hardware": hardware}, out


def _measurement_values(source_key: str, r: BenchmarkResult, host: str | None = None) -> list[Any]:
    row = r.to_json()
    dims = (row.get("input") or {}).get("dims") or {}
    derived = {
        "source_key": source_key,
        "device_kind": r.device.split(":")[0],
        "seq_length": dims.get("seq_length"),
        "input_dims": json.dumps(dims, sort_keys=True) if dims else None,
        # An empty name is stored as none: the SQL device keys (coalesce) and the predictors'
        # (hardware_specs.row_device, which reads "" as absent) must name a row's device alike.
        "hostname": (r.environment or {}).get("hostname") or None,
        "host_fingerprint": host or None,
        "hardware_fingerprint": r.hardware_fingerprint or None,
        "device_id": row_device_id(r.hardware_fingerprint, r.device_profile),
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
    differing: int = 0  # of the duplicates, rows whose figures differ from the stored row's (the stored one is kept)
    # older partition sources whose rows this one replaced: a kind-level partition a device
    # partition re-measured, or this partition's other copy (its own file, an ingested one)
    superseded: tuple[str, ...] = ()
    superseded_by: str | None = None  # a stored source holds a later run of it: nothing of it was stored
    # {fingerprint: stamp}: its probes stamped past the store's clock, not taken as newer than a stamped probe
    future_probes: dict[str, str] = field(default_factory=dict)


def _held_elsewhere(con, source_key: str, results: list[BenchmarkResult]) -> set[tuple[str, str]]:
    run_ids = sorted({r.run_id for r in results})
    if not run_ids:
        return set()
    found = con.execute(f"SELECT run_id, config_key FROM measurements WHERE source_key <> ? AND run_id IN "
                        f"({', '.join('?' for _ in run_ids)})", [source_key, *run_ids]).fetchall()
    return {(a, b) for a, b in found}


def _differing(con, results: list[BenchmarkResult], held: set[tuple[str, str]]) -> int:
    """How many of the rows skipped as another source's differ from the stored row in what was
    measured (status, p50, samples): a corrected copy of a file ingested before was skipped as a
    plain duplicate, without a word that its figures were not the stored ones."""
    if not held:
        return 0
    theirs = [r for r in results if (r.run_id, r.config_key) in held]
    stored = {}
    for i in range(0, len(theirs), 500):
        chunk = theirs[i:i + 500]
        rows = con.execute(f"SELECT run_id, config_key, status, p50_ms, samples_ms FROM measurements WHERE (run_id, config_key) IN "
                           f"({', '.join('(?, ?)' for _ in chunk)})", [v for r in chunk for v in (r.run_id, r.config_key)]).fetchall()
        stored.update({(a, b): (st, p50, list(samples or [])) for a, b, st, p50, samples in rows})
    return sum(stored.get((r.run_id, r.config_key)) != (r.status, r.p50_ms, list(r.samples_ms or [])) for r in theirs)


def replace_source(con: duckdb.DuckDBPyConnection, source_key: str, origin: str, document: dict[str, Any],
                   path: str | None = None, sha256: str | None = None) -> SourceLoad:
    """Replace every row of `source_key` with the rows of `document`, in one transaction.

    Rows are validated against the column types first (LandingFileError names the bad field).
    A row whose natural key (run_id, config_key) another source already holds is skipped and
    counted, never stored twice: the first source to store a row owns it (load_landing_files
    loads partitions first), and a source reloading its own rows deletes them before inserting.
    An older partition that a stored partition supersedes (`_stored_successor`) is not stored:
    its rows, if any, are removed and SourceLoad.superseded_by names the successor. A partition's
    own file and an ingested copy of it from the same machine (`_partition_twin`) keep the later
    run: the other's rows are removed (SourceLoad.superseded) or this one is not stored.
    A failure rolls everything back: LandingFileError when the content is at fault, StoreError
    (naming a full disk as such) when the machine is."""
    results = [BenchmarkResult.from_json(r) for r in validated_rows(document, f"rows for {source_key}")]
    document, results = with_host_qualified_devices(document, results)
    now = _now()
    con.execute("BEGIN TRANSACTION")
    try:
        if origin == "partition" and (successor := _stored_successor(con, source_key, results)) is not None:
            _delete_source(con, source_key)
            con.execute("COMMIT")
            return SourceLoad(0, superseded_by=successor)
        twin_replaced: tuple[str, ...] = ()
        if (twin := _partition_twin(con, source_key, origin, document)) is not None:
            later = _later_run(con, twin, results, ties_to_ours=origin == "partition")
            if later is False:  # the twin holds a later run of this partition of this machine
                _delete_source(con, source_key)
                con.execute("COMMIT")
                return SourceLoad(0, superseded_by=twin)
            if later:
                _delete_source(con, twin)
                twin_replaced = (twin,)
        # What this partition superseded stays superseded when it is measured again: the old
        # file was retired then, so the new document no longer names it.
        recorded = con.execute("SELECT supersedes FROM sources WHERE source_key = ?", [source_key]).fetchone()
        supersedes = sorted(set(document.get("supersedes") or ()) | set((recorded[0] if recorded else None) or ()))
        replaced = con.execute("SELECT count(*) FROM measurements WHERE source_key = ?", [source_key]).fetchone()[0]
        _delete_source(con, source_key)
        if replaced:
            # Rows this source held may have been skipped in others as duplicates: those sources
            # offer them again at the next load, so a row leaves the store only with its last source.
            con.execute("UPDATE sources SET sha256 = NULL WHERE duplicate_rows > 0")
        check_one_model_per_name(con, source_key, results, document.get("supersedes") or () if origin == "partition" else ())
        held = _held_elsewhere(con, source_key, results)
        differing = _differing(con, results, held)
        kept = [r for r in results if (r.run_id, r.config_key) not in held]
        placeholders = ", ".join("?" for _ in MEASUREMENT_COLUMNS)
        host = host_fingerprint(document)
        if kept:
            con.executemany(f"INSERT INTO measurements ({', '.join(MEASUREMENT_COLUMNS)}) VALUES ({placeholders})",
                            [_measurement_values(source_key, r, host) for r in kept])
            if any(r.status != "ok" and r.reason_code is None for r in kept):
                con.execute(_LEGACY_REASON_CODES + " AND source_key = ?", [source_key])
        by_run: dict[str, list[BenchmarkResult]] = {}
        for r in kept:
            by_run.setdefault(r.run_id, []).append(r)
        for run_id, rows in by_run.items():
            env = rows[0].environment or {}
            git = env.get("git") or {}
            con.execute("INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        [run_id, source_key, min(parse_timestamp(r.timestamp) for r in rows), env.get("hostname") or None,
                         git.get("commit"), git.get("dirty"), json.dumps(env.get("versions")), len(rows)])
        _record_history(con, source_key)
        # Only a partition's document replaces older partitions: an ingested file naming one in
        # `supersedes` would delete rows measured here that nobody replaced.
        superseded = _drop_superseded(con, source_key, document.get("supersedes") or [], kept) if origin == "partition" else ()
        superseded = (*twin_replaced, *superseded)
        _upsert_hardware(con, document.get("hardware") or {}, now)
        register_measured(con, kept, document, host, now)
        _upsert_models(con, kept, now)
        con.execute("INSERT INTO sources (source_key, origin, path, sha256, rows, loaded_at, duplicate_rows, supersedes) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", [source_key, origin, path, sha256, len(kept), now, len(results) - len(kept),
                                                        (supersedes or None) if origin == "partition" else None])
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
    return SourceLoad(len(kept), len(results) - len(kept), differing, superseded,
                      future_probes=future_stamped(document.get("hardware") or {}, now))


def _record_history(con, source_key: str) -> None:
    """The source's ok rows into sample_history, where a row already recorded under its key (a
    file of the same run landed again with its figures changed) takes the new figures: with DO
    NOTHING, `compare` and baseline exports read the first version's samples for good while
    the measurements held the second's."""
    columns = [d[0] for d in con.execute("SELECT * FROM sample_history LIMIT 0").description]
    updated = ", ".join(f"{c} = EXCLUDED.{c}" for c in columns if c not in ("run_id", "config_key"))
    con.execute(f"""INSERT INTO sample_history SELECT {', '.join(HISTORY_COLUMNS)} FROM measurements
                    WHERE source_key = ? AND status = 'ok' AND samples_ms IS NOT NULL
                    ON CONFLICT (run_id, config_key) DO UPDATE SET {updated}""", [source_key])


def _stored_successor(con, source_key: str, results: list[BenchmarkResult]) -> str | None:
    """The stored partition whose document supersedes `source_key` and measured every device
    and model of these rows (the rule `_drop_superseded` applies the other way round). An older
    partition's file loaded after its successor (a partition killed before retiring it sorts
    after the device partition's file; or a copy put back in raw/) would otherwise be stored
    beside it: two runs of one device and model. Rows measured after the successor's latest run
    began (the old partition materialized again, from the UI) are newer, and stay."""
    if not results:
        return None
    devices = {row_device_id(r.hardware_fingerprint, r.device_profile) for r in results} - {None}
    models = {r.model for r in results}
    newest = max(parse_timestamp(r.timestamp) for r in results)
    for (successor,) in con.execute("SELECT source_key FROM sources WHERE origin = 'partition' AND source_key <> ? AND "
                                    "list_contains(supersedes, ?) ORDER BY source_key", [source_key, source_key]).fetchall():
        held_devices, held_models, latest = con.execute(
            "SELECT list(DISTINCT device_id), list(DISTINCT model), (SELECT max(written_at) FROM runs WHERE source_key = $1) "
            "FROM measurements WHERE source_key = $1", [successor]).fetchone()
        if devices <= set(held_devices or ()) and models <= set(held_models or ()) and latest is not None and newest <= latest:
            return successor
    return None


def _partition_twin(con, source_key: str, origin: str, document: dict[str, Any]) -> str | None:
    """The other stored source holding this partition of this machine (partition_identity): the
    partition's own file and an ingested copy of one of its runs. Each loaded under its own key,
    and a run of one beside a run of the other was stored twice over: every aggregate the median
    of two runs (a partition measured again here after a copy of an earlier run was ingested)."""
    if origin == "partition":
        identity = partition_identity(source_key, document)
        twin = ingest_key(identity) if identity is not None else None
        return twin if twin is not None and _holds_rows(con, twin) else None
    for (key,) in con.execute("SELECT source_key FROM sources WHERE origin = 'partition' ORDER BY source_key").fetchall():
        identity = partition_identity(key, document)  # this document as that partition's, of its own machine
        if identity is not None and ingest_key(identity) == source_key:
            _, host, hostname = identity
            # the partition's own rows measured on this machine: a partition key another host
            # wrote into a shared data directory is not this file's twin
            # (a row's hostname is its environment's, which a row may lack: none is no other host)
            others, rows = con.execute("SELECT count(*) FILTER (WHERE host_fingerprint IS DISTINCT FROM ? OR hostname <> ?), "
                                       "count(*) FROM measurements WHERE source_key = ?", [host, hostname or None, key]).fetchone()
            return key if rows and not others else None
    return None


def _holds_rows(con, source_key: str) -> bool:
    return con.execute("SELECT count(*) FROM measurements WHERE source_key = ?", [source_key]).fetchone()[0] > 0


def _later_run(con, twin: str, results: list[BenchmarkResult], ties_to_ours: bool) -> bool | None:
    """Whether these rows are a later run of the partition than the twin's stored rows (their
    newest row's time); None where both hold the same runs (a copy: its rows are skipped as
    duplicates) or these hold no rows. A tie between different runs goes to the partition's own
    file (`ties_to_ours` when loading it)."""
    stored = {run for (run,) in con.execute("SELECT DISTINCT run_id FROM measurements WHERE source_key = ?", [twin]).fetchall()}
    if not results or {r.run_id for r in results} == stored:
        return None
    ours = max(parse_timestamp(r.timestamp) for r in results)
    (theirs,) = con.execute("SELECT max(timestamp) FROM measurements WHERE source_key = ?", [twin]).fetchone()
    if theirs is None:
        return None
    return ours > theirs or (ours == theirs and ties_to_ours)


_SOURCE_TABLES = ("measurements", "runs", "sources")


def _delete_source(con, source_key: str) -> None:
    """A source's rows gone (their samples stay in sample_history), inside the caller's transaction."""
    for table in _SOURCE_TABLES:
        con.execute(f"DELETE FROM {table} WHERE source_key = ?", [source_key])


def _drop_superseded(con, source_key: str, keys: list[str], kept: list[BenchmarkResult]) -> tuple[str, ...]:
    """Remove the rows of the older partitions this document replaces (a kind-level partition
    that measured the same device and model), as reloading a source replaces its own rows: their
    samples stay in sample_history. Only a partition whose every row ran on a device and model
    this document measured is dropped, so a document cannot remove anyone else's rows."""
    devices = {row_device_id(r.hardware_fingerprint, r.device_profile) for r in kept} - {None}
    models = {r.model for r in kept}
    dropped = []
    for key in keys:
        if key == source_key:
            continue
        held = con.execute("SELECT count(*), count(*) FILTER (WHERE device_id NOT IN (SELECT unnest(?))"
                           " OR model NOT IN (SELECT unnest(?))) FROM measurements WHERE source_key = ?",
                           [sorted(devices), sorted(models), key]).fetchone()
        origin = con.execute("SELECT origin FROM sources WHERE source_key = ?", [key]).fetchone()
        if origin is None or origin[0] != "partition" or held[1]:
            continue
        _delete_source(con, key)
        dropped.append(key)
    return tuple(dropped)


def _upsert_hardware(con, inventory: dict[str, Any], now: datetime) -> None:
    probes = document_probes(inventory)
    hostname = inventory.get("hostname")
    for kind, info in (inventory.get("platforms") or {}).items():
        for dev in info.get("devices") or []:
            fp = dev.get("fingerprint")
            if not fp:
                continue
            probe = probes.get(fp)
            held = con.execute("SELECT probe FROM hardware WHERE fingerprint = ?", [fp]).fetchone()
            old = json.loads(held[0]) if held and held[0] else None
            probe = kept_probe(old, probe, now)
            con.execute("DELETE FROM hardware WHERE fingerprint = ?", [fp])
            con.execute("INSERT INTO hardware VALUES (?, ?, ?, ?, ?, ?, ?)",
                        [fp, kind, dev.get("name"), hostname, json.dumps(dev), json.dumps(probe), now])


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
