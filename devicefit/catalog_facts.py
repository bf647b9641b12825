"""The model catalog's facts (parameters, FLOPs per sample, weight bytes, input), as the
inventory shows them, kept on disk between runs.

Counting them traces every catalog model on the meta device: about 30 s for the 33 models on a
2-core AMD EPYC, most of a small run's wall time (a one-config `devicefit run` took 56 s, 32 of
them in `model_catalog`). The counts depend only on the model's config and on the code and
library versions that count them, so each model's row is a `models.derived_cache` entry keyed
by exactly those (the whole ModelSpec: config, inputs, tasks; the source of `models/`, which
builds, counts and classifies; this module's own source; torch and transformers): a change to
any of them is a new entry, and an entry that cannot be read, or is not a row of this model,
is counted again. A change to the harness (`benchmark_runners/`) does not count them again."""
from __future__ import annotations

import dataclasses
import hashlib
from functools import lru_cache
from pathlib import Path
from typing import Any

from models.catalog import ModelSpec, load_catalog
from models.derived_cache import disk_cached, entry_path, number

FIELDS = ("name", "family", "subfamily", "architecture", "parameters", "forward_gflops_per_sample", "weight_bytes", "input")


@lru_cache(maxsize=1)
def _own() -> str:
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]


def _count(spec: ModelSpec) -> dict[str, Any]:
    from models.analysis import model_facts
    from models.classifier import classify_spec

    facts = model_facts(spec)
    c = classify_spec(spec)
    return {"name": spec.name, "family": c.family, "subfamily": c.subfamily, "architecture": spec.architecture,
            "parameters": facts.parameters, "forward_gflops_per_sample": round(facts.forward_flops_per_sample / 1e9, 3),
            "weight_bytes": facts.weight_bytes, "input": facts.input}


def _decode(row: Any, spec: ModelSpec) -> dict[str, Any]:
    """The cached row, refused (ValueError, TypeError) where it is not this model's row as
    `_count` writes it (a truncated, edited or foreign file)."""
    if not isinstance(row, dict) or set(row) != set(FIELDS) or row["name"] != spec.name:
        raise ValueError(f"not {spec.name}'s catalog row")
    for key in ("parameters", "forward_gflops_per_sample"):
        number(row[key])
    if not isinstance(row["weight_bytes"], dict):
        raise TypeError("weight_bytes is not a mapping")
    return row


def _identity(spec: ModelSpec) -> dict[str, Any]:
    return {"spec": dataclasses.asdict(spec), "counted_by": _own()}


def catalog_row(spec: ModelSpec) -> dict[str, Any]:
    """One catalog model's row, read from the cache where its entry exists."""
    return disk_cached("catalog_facts", _identity(spec), lambda: _count(spec), encode=lambda row: row,
                       decode=lambda row: _decode(row, spec))


def catalog_row_cached(spec: ModelSpec) -> bool:
    """Whether the cache has an entry for this model's row (readable or not: `catalog_row` decides)."""
    try:
        return entry_path("catalog_facts", _identity(spec)).is_file()
    except (OSError, RuntimeError, KeyError):  # no cache directory: nothing is cached
        return False


def catalog_facts() -> list[dict[str, Any]]:
    """One row per catalog model, read from the cache where its entry exists."""
    return [catalog_row(spec) for spec in load_catalog().values()]
