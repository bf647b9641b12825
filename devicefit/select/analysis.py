"""Spec 000's model analysis: per mode, predictions per batch size and hardware (each labelled
with its source) and the selector's recommendation per batch size."""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from benchmark_runners.hardware.platforms import HARDWARE_KINDS
from devicefit.select.selector import HardwareSelector, SelectionError


def analyze_model(selector: HardwareSelector, model_name: str, model_family: str | None = None,
                  batch_sizes: list[int] | None = None, hardware: list[str] | None = None) -> dict[str, Any]:
    batch_sizes = list(batch_sizes or [1, 8, 32])
    if any(b < 1 for b in batch_sizes):
        raise SelectionError(f"batch sizes must be positive integers, got {batch_sizes}")
    hardware = list(hardware or HARDWARE_KINDS)
    family = model_family
    out: dict[str, Any] = {}
    for mode in ("inference", "training"):
        performance, recommendations = {}, {}
        for b in batch_sizes:
            perf = selector.predictor.predict_performance(model_name, family, hardware, b, None, mode, "fp32")
            family = family or perf["model_family"]
            performance[str(b)] = perf["predictions"]
            try:
                r = selector.select_hardware(family, model_name, b, mode=mode, available_hardware=hardware)
                recommendations[str(b)] = {"primary": r["primary_recommendation"], "fallbacks": r["fallback_options"]}
            except SelectionError as exc:
                recommendations[str(b)] = {"primary": None, "fallbacks": [], "reason": str(exc)}
        out[mode] = {"performance": performance, "recommendations": recommendations}
    return {"model_name": model_name, "model_family": family, "hardware_platforms": hardware, "batch_sizes": batch_sizes,
            "timestamp": datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "predictor_version": selector.predictor.predictor.version(), **out}
