"""Predictions that were served, kept so they can be checked against measurements that arrive
later. Servers never take the DuckDB write lock: they append JSON lines to
data/predictions/served-<date>.jsonl (one write per batch, O_APPEND), and the pipeline loads
them into DuckDB and joins them with the measurements."""
from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from devicefit.paths import DataPaths
from devicefit.predict.predictor import Prediction, Request


def served_dir(paths: DataPaths) -> Path:
    return paths.root / "predictions"


def record(paths: DataPaths, version: str, origin: str, requests: list[Request], predictions: list[Prediction]) -> int:
    now = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
    lines = []
    for r, p in zip(requests, predictions):
        if p.latency_ms is None:
            continue
        lines.append(json.dumps({
            "recorded_at": now, "predictor_version": version, "origin": origin, "model": r.point.name,
            "device_kind": r.kind, "backend": r.backend, "precision": r.precision, "mode": r.mode,
            "batch_size": r.batch_size, "seq_length": r.point.seq_length or None, "latency_ms": p.latency_ms,
            "throughput": p.throughput, "memory_bytes": p.memory_bytes, "source": p.source}))
    if not lines:
        return 0
    directory = served_dir(paths)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"served-{now[:10]}.jsonl"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, ("\n".join(lines) + "\n").encode())
    finally:
        os.close(fd)
    return len(lines)


def read_served(path: Path) -> list[dict[str, Any]]:
    """Complete lines only: a line cut short by a crash is not a prediction."""
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows
