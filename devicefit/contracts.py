"""Versioned output contracts: the published JSON documents as pydantic models.

Each document carries a `format` ("devicefit.<name>/<version>"); its JSON Schema is generated
from the model below and written next to the outputs (data/outputs/schemas/<name>.schema.json),
so a consumer reading the maps can validate what it reads with any JSON Schema validator.
devicefit validates every document against its model before writing it: a document that breaks
its own contract is never published. A change that a reader could trip on bumps the version.

Free-form corners (a cell's `excluded` reasons, a row's input dims) stay open objects; what a
consumer keys on (formats, families, hardware, batch sizes, the numbers and their `source`) is
typed."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from devicefit.errors import DevicefitError
from devicefit.landing_schema import HardwareInventory, ResultRow, describe
from devicefit.results_io import FORMAT as LANDING_FORMAT

SELECTION_MAP_FORMAT = "devicefit.selection_map/1"
PREDICTION_MATRIX_FORMAT = "devicefit.prediction_matrix/1"
COMPATIBILITY_MATRIX_FORMAT = "devicefit.compatibility_matrix/1"
BENCHMARK_SNAPSHOT_FORMAT = "devicefit.benchmark_snapshot/1"


class ContractError(DevicefitError, ValueError):
    """A document that does not match its published contract (said with the field)."""


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Part(BaseModel):
    model_config = ConfigDict(extra="allow")


# --- selection_map.json (spec 002) ---
class SelectionCell(_Part):
    primary: Optional[str] = Field(description="The recommended hardware kind (null: nothing compatible)")
    fallbacks: list[str] = Field(description="Further kinds, best first")
    model: Optional[str] = Field(None, description="The catalog model the cell was decided on")
    batch_size: Optional[int] = Field(None, ge=1)
    prediction_source: Optional[str] = Field(None, description="measured, a predictor's name, or the static rule")
    excluded: dict[str, str] = Field(default_factory=dict, description="kind -> why it was left out")


class FamilySelection(_Part):
    model_sizes: dict[str, dict[str, SelectionCell]] = Field(description="size category -> mode -> cell")
    no_model: list[str] = Field(default_factory=list, description="size categories the catalog has no model of")
    inference: Optional[dict[str, dict[str, SelectionCell]]] = Field(None, description="batch_sizes -> batch size -> cell")


class SelectionMap(_Doc):
    format: Literal[SELECTION_MAP_FORMAT]
    timestamp: str
    model_families: dict[str, FamilySelection]
    batch_sizes: list[int]
    hardware_platforms: list[str]
    config_source: str
    predictor_version: Optional[str]


# --- prediction_matrix.json (spec 001) ---
class Prediction(_Part):
    latency_mean: float = Field(gt=0, description="ms per batch")
    throughput: float = Field(gt=0, description="samples/s")
    memory_usage: float = Field(gt=0, description="bytes")
    source: str = Field(description="measured, the predictor, or the static rule: where the number came from")
    latency_interval: Optional[list[float]] = Field(None, min_length=2, max_length=2)
    throughput_interval: Optional[list[float]] = Field(None, min_length=2, max_length=2)
    memory_interval: Optional[list[float]] = Field(None, min_length=2, max_length=2)
    interval_level: Optional[float] = Field(None, gt=0, lt=1)


class ModelPredictions(_Part):
    name: str
    category: str
    predictions: dict[str, dict[str, dict[str, Prediction]]] = Field(description="hardware -> batch size -> precision -> prediction")


class PredictionMatrix(_Doc):
    format: Literal[PREDICTION_MATRIX_FORMAT]
    timestamp: str
    predictor_version: Optional[str]
    mode: str
    batch_sizes: list[int]
    precision_options: list[str]
    hardware_platforms: list[str]
    models: dict[str, ModelPredictions]
    unpredictable: dict[str, str] = Field(default_factory=dict, description="hardware -> why nothing is predicted there")


# --- compatibility_matrix.json (spec 002) ---
class PrecisionCounts(_Part):
    ok: int = Field(ge=0)
    skipped: int = Field(ge=0)
    failed: int = Field(ge=0)


class Compatibility(_Part):
    compatible: Optional[bool] = Field(description="null: not measured and not declared")
    source: str = Field(description="measured, declared_unmeasured, ...")
    available: Optional[bool] = Field(default=None, description="a device of this kind is registered in the fleet")
    registered_devices: list[str] = Field(default_factory=list, description="the registered devices of this kind (device ids)")
    performance_rating: Optional[Literal["high", "medium", "low"]] = None
    performance_basis: Optional[str] = None
    models_measured: list[str] = Field(default_factory=list)
    precisions: dict[str, PrecisionCounts] = Field(default_factory=dict)


class FamilyCompatibility(_Part):
    hardware_compatibility: dict[str, Compatibility]


class CompatibilityMatrix(_Doc):
    format: Literal[COMPATIBILITY_MATRIX_FORMAT]
    timestamp: str
    hardware_types: list[str]
    model_families: dict[str, FamilyCompatibility]


# --- benchmarks.json (the aggregates snapshot the API serves) ---
class AggregateRow(_Part):
    model: str
    family: Optional[str] = None
    device_kind: str
    backend: str
    precision: str
    mode: str
    batch_size: int = Field(ge=1)
    seq_length: Optional[int] = None
    p50_ms: float = Field(ge=0)  # as the landing format admits; timings_valid fails a zero
    p95_ms: Optional[float] = None
    throughput_samples_per_s: Optional[float] = None
    peak_rss_bytes: Optional[float] = None
    speedup_vs_cpu_fp32: Optional[float] = None
    is_best_precision: bool
    runs: int = Field(ge=1)
    hardware_fingerprint: Optional[str] = None


class BenchmarkSnapshot(_Doc):
    format: Literal[BENCHMARK_SNAPSHOT_FORMAT]
    generated_at: str
    database: str
    rows: list[AggregateRow]


# --- landing files (data/raw/*.json, and what `devicefit ingest` accepts) ---
class LandingDocument(_Part):
    format: Literal[LANDING_FORMAT]
    run_id: Optional[str] = None
    written_at: Optional[str] = None
    source_key: Optional[str] = None
    hardware: Optional[HardwareInventory] = None
    results: list[ResultRow]


CONTRACTS: dict[str, type[BaseModel]] = {
    "selection_map.json": SelectionMap,
    "prediction_matrix.json": PredictionMatrix,
    "compatibility_matrix.json": CompatibilityMatrix,
    "benchmarks.json": BenchmarkSnapshot,
    "landing_file.json": LandingDocument,
}


def schema_name(document_name: str) -> str:
    return document_name.removesuffix(".json") + ".schema.json"


def json_schema(document_name: str) -> dict[str, Any]:
    model = CONTRACTS[document_name]
    schema = model.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = schema_name(document_name)
    return schema


def validate(document_name: str, document: Any) -> None:
    """Raise ContractError naming the first field that breaks `document_name`'s contract."""
    model = CONTRACTS.get(document_name)
    if model is None:
        return
    try:
        model.model_validate(document)
    except ValidationError as exc:
        raise ContractError(f"{document_name} breaks its contract ({model.__name__}): {describe(exc)}") from None


def publish(path: Path, document: Any) -> None:
    """Validate `document` against the contract of its file name, write it atomically, and keep
    the schemas current under schemas/ beside it (a reader finds them where the maps are)."""
    from devicefit.results_io import write_json_atomic

    validate(Path(path).name, document)
    write_json_atomic(path, document)
    if Path(path).name in CONTRACTS:
        write_schemas(Path(path).parent / "schemas")


def write_schemas(directory: Path) -> list[Path]:
    """Every contract's JSON Schema under `directory` (data/outputs/schemas/), rewritten only when changed."""
    from devicefit.results_io import write_json_atomic

    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name in CONTRACTS:
        path = directory / schema_name(name)
        schema = json_schema(name)
        try:
            current = json.loads(path.read_text())
        except (OSError, ValueError):
            current = None
        if current != schema:
            write_json_atomic(path, schema)  # a temp file of its own: publishers may race
        written.append(path)
    return written
