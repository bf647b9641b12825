"""The model catalog's facts (parameters, FLOPs per sample, weight bytes, input), as the
inventory shows them, kept on disk between runs.

Counting them traces every catalog model on the meta device: about 30 s for the 33 models on a
2-core AMD EPYC, most of a small run's wall time (a one-config `devicefit run` took 56 s, 32 of
them in `model_catalog`). The counts depend only on the model's config and on the code and
library versions that count them, so each model's row is cached under a digest of exactly those
(the whole ModelSpec: config, inputs, tasks; `measurement_code_version`, which covers `models/`
and `benchmark_runners/`; this module's own source; torch and transformers) in
`benchmark_runners.paths.cache_home()`: a change to any of them is a new entry, and an entry
that cannot be read, or is not a row of this model, is counted again."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any

from benchmark_runners.code_version import measurement_code_version
from benchmark_runners.paths import cache_home
from models.catalog import ModelSpec, load_catalog

log = logging.getLogger("devicefit.catalog")
FIELDS = ("name", "family", "subfamily", "architecture", "parameters", "forward_gflops_per_sample", "weight_bytes", "input")


@lru_cache(maxsize=1)
def _code() -> str:
    import torch
    import transformers

    own = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]
    return f"{measurement_code_version()}|{own}|torch {torch.__version__}|transformers {transformers.__version__}"


def _key(spec: ModelSpec) -> str:
    identity = {"spec": dataclasses.asdict(spec), "code": _code()}
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:24]


def _count(spec: ModelSpec) -> dict[str, Any]:
    from models.analysis import model_facts
    from models.classifier import classify_spec

    facts = model_facts(spec)
    c = classify_spec(spec)
    return {"name": spec.name, "family": c.family, "subfamily": c.subfamily, "architecture": spec.architecture,
            "parameters": facts.parameters, "forward_gflops_per_sample": round(facts.forward_flops_per_sample / 1e9, 3),
            "weight_bytes": facts.weight_bytes, "input": facts.input}


def _read(path: Path, spec: ModelSpec) -> dict[str, Any] | None:
    """The cached row, or None where there is none, or it is not this model's row as `_count`
    writes it (a truncated, edited or foreign file)."""
    try:
        row = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(row, dict) or set(row) != set(FIELDS) or row["name"] != spec.name:
        return None
    numbers = (row["parameters"], row["forward_gflops_per_sample"])
    if not all(isinstance(n, (int, float)) and not isinstance(n, bool) for n in numbers) or not isinstance(row["weight_bytes"], dict):
        return None
    return row


def _write(path: Path, row: dict[str, Any]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp", delete=False) as out:
            out.write(json.dumps(row, default=str))
        Path(out.name).replace(path)  # whole or absent, whoever else writes the same entry
    except OSError as exc:  # a read-only home: counted again next time, nothing lost
        log.info("catalog facts not cached (%s): %s", path, exc)


def catalog_facts() -> list[dict[str, Any]]:
    """One row per catalog model, read from the cache where its entry exists."""
    rows = []
    for spec in load_catalog().values():
        path = cache_home() / "catalog_facts" / f"{_key(spec)}.json"
        row = _read(path, spec)
        if row is None:
            row = _count(spec)
            _write(path, row)
        rows.append(row)
    return rows
