"""The aggregated measurements as one published file (`outputs/benchmarks.json`), so that readers
that must never take DuckDB's lock (the REST API) can answer "what was measured" while a sweep
writes. The pipeline rewrites it atomically after each aggregation; readers reload it when its
modification time changes.
"""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from devicefit import store
from devicefit.contracts import BENCHMARK_SNAPSHOT_FORMAT, ContractError, publish, validate
from devicefit.errors import DevicefitError
from devicefit.paths import DataPaths

FORMAT = BENCHMARK_SNAPSHOT_FORMAT
SNAPSHOT_NAME = "benchmarks.json"

#: Columns of `aggregates` carried into the snapshot, in the order a reader sees them.
COLUMNS = ("model", "family", "backend", "device_kind", "device_name", "hardware_fingerprint", "device_profile", "hostname", "precision",
           "mode", "batch_size", "input_dims", "seq_length", "runs", "rows", "p50_ms", "p95_ms",
           "throughput_samples_per_s", "peak_rss_bytes", "device_reserved_peak_bytes", "worst_ci_rel_half_width", "speedup_vs_cpu_fp32",
           "is_best_precision", "last_measured",
           # the generation scenario's (None on forward-pass rows)
           "ttft_ms", "tpot_p50_ms", "tpot_p90_ms", "decode_tokens_per_s", "kv_cache_bytes")


class SnapshotError(DevicefitError, RuntimeError):
    """The snapshot file is missing or unreadable; the message names the file and the cause."""
    http_status = 503


def snapshot_path(paths: DataPaths) -> Path:
    return paths.outputs / SNAPSHOT_NAME


def _row(aggregate: dict[str, Any]) -> dict[str, Any]:
    row = {c: aggregate.get(c) for c in COLUMNS}
    row["input_dims"] = json.loads(row["input_dims"]) if isinstance(row["input_dims"], str) else row["input_dims"]
    if isinstance(row["last_measured"], datetime):
        row["last_measured"] = row["last_measured"].replace(tzinfo=timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
    return row


def build_snapshot(aggregates: list[dict[str, Any]], database: Path) -> dict[str, Any]:
    return {"format": FORMAT, "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z"),
            "database": str(database), "rows": [_row(a) for a in aggregates]}


def publish_snapshot(paths: DataPaths, aggregates: list[dict[str, Any]] | None = None) -> Path:
    """Write the snapshot from `aggregates` (or the store's current aggregates table)."""
    if aggregates is None:
        con = store.connect(paths.database, read_only=True)
        try:
            aggregates = store.aggregates(con)
        finally:
            con.close()
    path = snapshot_path(paths)
    publish(path, build_snapshot(aggregates, paths.database))  # validated against its contract first
    return path


def load_snapshot(path: Path) -> dict[str, Any]:
    try:
        document = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise SnapshotError(f"no benchmark snapshot at {path}: materialize the pipeline (`make run`) first") from None
    except (OSError, ValueError, RecursionError) as exc:  # not JSON, not UTF-8, or nested past the decoder
        raise SnapshotError(f"benchmark snapshot {path} is unreadable: {exc}") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT or not isinstance(document.get("rows"), list):
        raise SnapshotError(f"benchmark snapshot {path} is not a {FORMAT} document")
    try:  # a damaged one (a row that is not an object, a field of another type) is refused, not a 500 per query
        validate(SNAPSHOT_NAME, document)
    except ContractError as exc:
        raise SnapshotError(f"benchmark snapshot {path} is damaged: {exc}") from None
    return document


@dataclass
class MeasuredLookup:
    """Queries over one loaded snapshot."""

    document: dict[str, Any]

    @property
    def rows(self) -> list[dict[str, Any]]:
        return self.document["rows"]

    def query(self, model: str | None = None, hardware: str | None = None, precision: str | None = None,
              batch_size: int | None = None, mode: str | None = None, backend: str | None = None) -> list[dict[str, Any]]:
        wanted = {"model": model, "device_kind": hardware, "precision": precision, "batch_size": batch_size, "mode": mode,
                  "backend": backend}
        wanted = {k: v for k, v in wanted.items() if v is not None}
        return [r for r in self.rows if all(r.get(k) == v for k, v in wanted.items())]

    def measured(self, model: str, hardware: str, precision: str, mode: str, batch_size: int,
                 input_dims: dict[str, Any]) -> dict[str, Any] | None:
        """The torch row for exactly this config and input shape (the most recent host's, if several),
        measured on the device as it is: a row under a constraint profile (one thread, an ISA cap)
        answers for that profile's device only, never for the kind."""
        rows = [r for r in self.query(model, hardware, precision, batch_size, mode, "torch")
                if r.get("input_dims") == input_dims and not r.get("device_profile")]
        return max(rows, key=lambda r: r.get("last_measured") or "") if rows else None


@dataclass
class SnapshotReader:
    """The current snapshot, reloaded when the file changes."""

    path: Path
    _lookup: MeasuredLookup | None = None
    _stamp: float | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def current(self) -> MeasuredLookup:
        try:
            stamp = self.path.stat().st_mtime
        except FileNotFoundError:
            raise SnapshotError(f"no benchmark snapshot at {self.path}: materialize the pipeline (`make run`) first") from None
        with self._lock:
            if self._lookup is None or stamp != self._stamp:
                self._lookup, self._stamp = MeasuredLookup(load_snapshot(self.path)), stamp
            return self._lookup

    def current_or_none(self) -> MeasuredLookup | None:
        """The current snapshot, or None where none is published yet. A damaged one (cut short, of
        another format, a row the contract refuses) raises SnapshotError naming it: taken for none,
        `analyze` and /analysis/model answered every measured config as predicted, saying nothing,
        while /benchmarks refused the same file."""
        try:
            return self.current()
        except SnapshotError:
            if self.path.exists():
                raise
            return None
