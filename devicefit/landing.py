"""Landing files: each partition (or ingested file) writes its rows to one JSON file under
data/raw/ by temp file + rename, so a file is either whole or absent. One loader moves them
into DuckDB; a file that fails validation is quarantined with its reason, never half-loaded."""
from __future__ import annotations

import hashlib
import json
import re
import shutil
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from benchmark_runners.records import MODES, PRECISIONS, STATUSES, BenchmarkResult
from devicefit import store
from devicefit.results_io import FORMAT, write_json_atomic

QUARANTINE_DIR = "quarantine"
REQUIRED_RESULT_FIELDS = ("run_id", "config_key", "status", "model", "backend", "device", "precision", "mode",
                          "batch_size", "timestamp")
_RESULT_FIELDS = {f.name for f in fields(BenchmarkResult)}


class LandingFileError(ValueError):
    """A landing or ingest file that is not a valid devicefit results document."""


def safe_name(source_key: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "__", source_key)


def landing_path(raw_dir: Path, source_key: str) -> Path:
    return Path(raw_dir) / f"{safe_name(source_key)}.json"


def write_landing(raw_dir: Path, source_key: str, document: dict[str, Any]) -> Path:
    validate_document(document, f"rows for {source_key}")
    path = landing_path(raw_dir, source_key)
    write_json_atomic(path, {**document, "source_key": source_key})
    return path


def _number_ok(value: Any) -> bool:
    return value is None or (isinstance(value, (int, float)) and value == value and value >= 0)


def validate_document(document: Any, what: str) -> None:
    """Raise LandingFileError naming the first problem; accept only what the store can hold."""
    if not isinstance(document, dict):
        raise LandingFileError(f"{what}: expected a JSON object, got {type(document).__name__}")
    if document.get("format") != FORMAT:
        raise LandingFileError(f"{what}: format is {document.get('format')!r}, expected {FORMAT!r}")
    results = document.get("results")
    if not isinstance(results, list):
        raise LandingFileError(f"{what}: 'results' must be a list")
    for i, row in enumerate(results):
        where = f"{what}: results[{i}]"
        if not isinstance(row, dict):
            raise LandingFileError(f"{where} is not an object")
        missing = [k for k in REQUIRED_RESULT_FIELDS if row.get(k) in (None, "")]
        if missing:
            raise LandingFileError(f"{where} lacks {', '.join(missing)}")
        unknown = sorted(set(row) - _RESULT_FIELDS)
        if unknown:
            raise LandingFileError(f"{where} has unknown fields {', '.join(unknown)}")
        if row["status"] not in STATUSES:
            raise LandingFileError(f"{where} has status {row['status']!r} (expected one of {', '.join(STATUSES)})")
        if row["precision"] not in PRECISIONS or row["mode"] not in MODES:
            raise LandingFileError(f"{where} has precision {row['precision']!r} / mode {row['mode']!r}")
        if not isinstance(row["batch_size"], int) or row["batch_size"] < 1:
            raise LandingFileError(f"{where} has batch_size {row['batch_size']!r}")
        if row["status"] == "ok":
            samples = row.get("samples_ms")
            if not isinstance(samples, list) or not samples:
                raise LandingFileError(f"{where} is 'ok' without samples_ms")
            if not all(isinstance(s, (int, float)) and s == s and s > 0 for s in samples):
                raise LandingFileError(f"{where} has a NaN, zero or negative timing sample")
            for key in ("p50_ms", "mean_ms", "throughput_samples_per_s"):
                if row.get(key) is None or not _number_ok(row.get(key)):
                    raise LandingFileError(f"{where} has {key}={row.get(key)!r}")
        elif not row.get("error"):
            raise LandingFileError(f"{where} is {row['status']!r} without the reason in 'error'")


def read_document(path: Path) -> dict[str, Any]:
    try:
        document = json.loads(Path(path).read_text())
    except json.JSONDecodeError as exc:
        raise LandingFileError(f"{path}: not valid JSON ({exc})") from exc
    except UnicodeDecodeError as exc:
        raise LandingFileError(f"{path}: not UTF-8 text ({exc})") from exc
    validate_document(document, str(path))
    return document


def quarantine(path: Path, reason: str) -> Path:
    target_dir = path.parent / QUARANTINE_DIR
    target_dir.mkdir(parents=True, exist_ok=True)
    target = target_dir / path.name
    shutil.move(str(path), target)
    (target_dir / f"{path.name}.reason.txt").write_text(reason + "\n")
    return target


@dataclass
class LoadReport:
    loaded: list[tuple[str, int]] = field(default_factory=list)  # (source_key, rows)
    unchanged: list[str] = field(default_factory=list)
    quarantined: list[tuple[str, str]] = field(default_factory=list)  # (file, reason)

    @property
    def rows_loaded(self) -> int:
        return sum(n for _, n in self.loaded)


def load_landing_files(db_path: Path, raw_dir: Path) -> LoadReport:
    """Load every landing file whose content changed since its last load; quarantine bad ones."""
    report = LoadReport()
    raw_dir = Path(raw_dir)
    con = store.connect(db_path)
    try:
        store.migrate(con)
        for path in sorted(raw_dir.glob("*.json")) if raw_dir.is_dir() else []:
            data = path.read_bytes()
            sha = hashlib.sha256(data).hexdigest()
            try:
                document = read_document(path)
                source_key = document.get("source_key") or path.stem
                if store.source_sha(con, source_key) == sha:
                    report.unchanged.append(source_key)
                    continue
                origin = "ingest" if source_key.startswith("ingest:") else "partition"
                rows = store.replace_source(con, source_key, origin, document, str(path), sha)
                report.loaded.append((source_key, rows))
            except LandingFileError as exc:
                quarantine(path, str(exc))
                report.quarantined.append((path.name, str(exc)))
    finally:
        con.close()
    return report
