"""The model catalog's facts (parameters, FLOPs per sample, weight bytes, input), as the
inventory shows them, kept on disk between runs.

Counting them traces every catalog model on the meta device: about 30 s for the 40 models on a
2-core AMD EPYC, most of a small run's wall time (a one-config `devicefit run` took 56 s, 32 of
them in `model_catalog`). The counts depend only on the model's config and on the code and
library versions that count them, so each model's row is cached under a digest of exactly those
(`benchmark_runners.code_version.measurement_code_version` covers `models/`) in
`benchmark_runners.paths.cache_home()`; a change to any of them is a new entry, and an entry
that cannot be read is counted again."""
from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from benchmark_runners.code_version import measurement_code_version
from benchmark_runners.paths import cache_home
from models.catalog import ModelSpec, load_catalog

log = logging.getLogger("devicefit.catalog")
FIELDS = ("name", "family", "subfamily", "architecture", "parameters", "forward_gflops_per_sample", "weight_bytes", "input")


def _key(spec: ModelSpec) -> str:
    import torch
    import transformers

    identity = {"name": spec.name, "source": spec.source, "path": str(spec.path) if spec.path else None,
                "architecture": spec.architecture, "config": spec.config, "code": measurement_code_version(),
                "torch": torch.__version__, "transformers": transformers.__version__}
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:24]


def _count(spec: ModelSpec) -> dict[str, Any]:
    from models.analysis import model_facts
    from models.classifier import classify_spec

    facts = model_facts(spec)
    c = classify_spec(spec)
    return {"name": spec.name, "family": c.family, "subfamily": c.subfamily, "architecture": spec.architecture,
            "parameters": facts.parameters, "forward_gflops_per_sample": round(facts.forward_flops_per_sample / 1e9, 3),
            "weight_bytes": facts.weight_bytes, "input": facts.input}


def _read(path: Path) -> dict[str, Any] | None:
    try:
        row = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return row if isinstance(row, dict) and set(row) == set(FIELDS) else None


def _write(path: Path, row: dict[str, Any]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(row, default=str))
        tmp.replace(path)  # whole or absent, whoever else writes the same entry
    except OSError as exc:  # a read-only home: counted again next time, nothing lost
        log.info("catalog facts not cached (%s): %s", path, exc)


def catalog_facts() -> list[dict[str, Any]]:
    """One row per catalog model, read from the cache where its entry exists."""
    rows = []
    for spec in load_catalog().values():
        path = cache_home() / "catalog_facts" / f"{_key(spec)}.json"
        row = _read(path)
        if row is None:
            row = _count(spec)
            _write(path, row)
        rows.append(row)
    return rows
