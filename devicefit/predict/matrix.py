"""Spec 001's prediction matrix: models x hardware x batch sizes x precisions, predicted in one
call, as the nested JSON the spec shows and as flat rows for figures and counts."""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from benchmark_runners import registry
from devicefit.contracts import PREDICTION_MATRIX_FORMAT
from devicefit.predict.features import model_point
from devicefit.predict.predictor import PerformancePredictor, Request
from models.resolve import resolve_model

DEFAULT_MATRIX_MODELS = ("bert-base-uncased", "t5-small", "gpt2", "vit-base-patch16-224", "whisper-tiny", "clip-vit-base-patch32")
DEFAULT_MATRIX_BATCH_SIZES = (1, 8, 32)
DEFAULT_MATRIX_PRECISIONS = ("fp32", "fp16", "int8")
MB = 2**20


def prediction_matrix(predictor: PerformancePredictor, models: list[dict] | None = None, batch_sizes: list[int] | None = None,
                      hardware_platforms: list[str] | None = None, precision: str | list[str] | None = None,
                      mode: str = "inference", on_predictions=None) -> dict[str, Any]:
    """Spec 001's prediction-matrix JSON. Each precision entry adds `source` and intervals; hardware
    with nothing to predict from is left out of `predictions` and named in `unpredictable`."""
    models = models or [{"name": n} for n in DEFAULT_MATRIX_MODELS]
    batch_sizes = list(batch_sizes or DEFAULT_MATRIX_BATCH_SIZES)
    hardware = list(hardware_platforms or registry.kind_names())
    precisions = [precision] if isinstance(precision, str) else list(precision or DEFAULT_MATRIX_PRECISIONS)
    requests, owners = [], []
    for m in models:
        point = model_point(resolve_model(m["name"]))
        for hw in hardware:
            for b in batch_sizes:
                for p in precisions:
                    requests.append(Request(point, b, p, mode, hw))
                    owners.append((m, point))
    preds = predictor.predict(requests)
    if on_predictions:
        on_predictions(requests, preds)
    out_models: dict[str, Any] = {}
    unpredictable: dict[str, str] = {}
    for req, (m, point), pred in zip(requests, owners, preds):
        entry = out_models.setdefault(m["name"], {"name": m["name"], "category": m.get("family") or point.family, "predictions": {}})
        if pred.latency_ms is None:
            unpredictable[req.kind] = pred.detail
            continue
        entry["predictions"].setdefault(req.kind, {}).setdefault(str(req.batch_size), {})[req.precision] = {
            "throughput": pred.throughput, "latency_mean": pred.latency_ms, "memory_usage": pred.memory_bytes / MB,
            "source": pred.source, "interval_level": pred.interval_level,
            "throughput_interval": pred.throughput_interval, "latency_interval": pred.latency_interval,
            "memory_interval": [x / MB for x in pred.memory_interval] if pred.memory_interval else None,
        }
    return {
        "format": PREDICTION_MATRIX_FORMAT,
        "timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "mode": mode,
        "models": out_models,
        "hardware_platforms": hardware,
        "batch_sizes": batch_sizes,
        "precision_options": precisions,
        "predictor_version": predictor.version(),
        "unpredictable": unpredictable,
    }


def matrix_entries(matrix: dict[str, Any]) -> list[dict[str, Any]]:
    """The matrix's nested predictions as flat rows (model, hardware, batch, precision, figures)."""
    return [{"model": model, "hardware": hw, "batch": int(batch), "precision": precision, **e}
            for model, entry in matrix["models"].items()
            for hw, by_batch in entry["predictions"].items()
            for batch, by_precision in by_batch.items()
            for precision, e in by_precision.items()]


def count_by_source(matrix: dict[str, Any]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for e in matrix_entries(matrix):
        counts[e["source"]] = counts.get(e["source"], 0) + 1
    return counts
