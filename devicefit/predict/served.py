"""Predictions that were served, kept so they can be checked against measurements that arrive
later. Servers never take the DuckDB write lock: they append JSON lines to
data/predictions/served-<date>.jsonl (one write per batch, O_APPEND), and the pipeline loads
them into DuckDB and joins them with the measurements.

Keeping them is a side effect of answering, never a condition of it: when the data directory
cannot be written (read-only, full, or the predictions path is not a directory), the answer is
still given and one warning per directory says that served predictions are not being kept."""
from __future__ import annotations

import json
import logging
import math
import os
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from devicefit.landing_schema import INT32_MAX
from devicefit.paths import DataPaths
from devicefit.predict.predictor import PerformancePredictor, Prediction, Request

log = logging.getLogger("devicefit.predict.served")
_warned: set[Path] = set()
_warned_lock = threading.Lock()


def served_dir(paths: DataPaths) -> Path:
    return paths.root / "predictions"


def record(paths: DataPaths, predictor: PerformancePredictor, origin: str, requests: list[Request], predictions: list[Prediction]) -> int:
    """Append the answered predictions, each with the device key it was answered for
    (`predictor.device_for`: "cuda@<host>+cuda-<fingerprint>"), so it is later scored against a
    measurement of that device, never of another device of its kind."""
    now = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
    version = predictor.version()
    lines = []
    for r, p in zip(requests, predictions):
        if p.latency_ms is None:
            continue
        lines.append(json.dumps({
            "recorded_at": now, "predictor_version": version, "origin": origin, "model": r.point.name,
            "device_kind": r.kind, "device": predictor.device_for(r), "backend": r.backend, "precision": r.precision, "mode": r.mode,
            "batch_size": r.batch_size, "seq_length": r.point.seq_length or None, "latency_ms": p.latency_ms,
            "throughput": p.throughput, "memory_bytes": p.memory_bytes, "source": p.source}))
    if not lines:
        return 0
    directory = served_dir(paths)
    path = directory / f"served-{now[:10]}.jsonl"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, ("\n".join(lines) + "\n").encode())
        finally:
            os.close(fd)
    except OSError as exc:
        _warn_once(directory, exc)
        return 0
    return len(lines)


def _warn_once(directory: Path, exc: OSError) -> None:
    with _warned_lock:
        if directory in _warned:
            return
        _warned.add(directory)
    log.warning("served predictions are not being kept: cannot write to %s (%s: %s); answers are unaffected",
                directory, type(exc).__name__, exc.strerror or exc)


_TEXT = ("recorded_at", "model", "device_kind", "backend", "precision", "mode")  # NOT NULL in the predictions table


def served_row_problem(row: Any) -> str | None:
    """Why the predictions table cannot hold this line (None: it can). A line the store cannot
    hold (a batch of 1e11 asked before the CLI had a bound, a hand-edited file) would otherwise
    fail the whole file's load on every later run."""
    if not isinstance(row, dict):
        return "not a JSON object"
    missing = [k for k in _TEXT if not isinstance(row.get(k), str) or not row[k]]
    if missing:
        return f"no text for {', '.join(missing)}"
    try:
        datetime.fromisoformat(row["recorded_at"])
    except ValueError:
        return f"recorded_at {row['recorded_at'][:40]!r} is not an ISO 8601 time"
    for key, required in (("batch_size", True), ("seq_length", False)):
        value = row.get(key)
        if (value is not None or required) and (not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= INT32_MAX):
            return f"{key} {value!r} is not an integer from 1 to {INT32_MAX:,}"
    for key in ("latency_ms", "throughput", "memory_bytes"):
        value = row.get(key)
        if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value)):
            return f"{key} {value!r} is not a finite number"
    return None


def read_served(path: Path) -> list[dict[str, Any]]:
    """Complete lines only: a line cut short by a crash is not a prediction, and a line the store
    cannot hold is left out with a warning naming the file, the line and why."""
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            continue
        problem = served_row_problem(row)
        if problem:
            log.warning("%s line %d is not a prediction the store can keep (%s): left out", path, number, problem)
            continue
        rows.append(row)
    return rows
