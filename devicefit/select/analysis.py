"""Spec 000's model analysis: per mode, batch size and hardware, the measured figures where the
published benchmark snapshot has this exact config (source "measured", the prediction kept beside
it for comparison) and the prediction otherwise (labelled with its source); and the selector's
recommendation per batch size."""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from benchmark_runners import registry
from devicefit.benchmark_snapshot import MeasuredLookup
from devicefit.predict.api import MB
from devicefit.predict.memory_model import device_memory_kind, memory_target
from devicefit.select.selector import HardwareSelector, SelectionError
from models.inputs import input_signature
from models.resolve import resolve_model


def measured_entry(row: dict[str, Any], prediction: dict[str, Any]) -> dict[str, Any]:
    memory = memory_target(row)
    where = row.get("device_name") or row["device_kind"]
    ci = row.get("worst_ci_rel_half_width")
    return {"throughput": row.get("throughput_samples_per_s"), "latency": row.get("p50_ms"),
            "memory_usage": None if memory is None else memory / MB, "source": "measured",
            "detail": f"median p50 over {row['runs']} run(s) on {where} ({row.get('hostname')}), {row['backend']}, "
                      f"last measured {row.get('last_measured')}" + ("" if ci is None else f", 95% CI ±{100 * ci:.1f}%")
                      + ("; memory is the GPU allocator's reserved peak"
                         if device_memory_kind(row["device_kind"]) and row.get("device_reserved_peak_bytes") is not None
                         else "; memory is peak process RSS"),
            "interval_level": None, "throughput_interval": None, "latency_interval": None, "memory_interval": None,
            "prediction": prediction}


def analyze_model(selector: HardwareSelector, model_name: str, model_family: str | None = None,
                  batch_sizes: list[int] | None = None, hardware: list[str] | None = None,
                  measured: MeasuredLookup | None = None) -> dict[str, Any]:
    batch_sizes = list(dict.fromkeys(batch_sizes or [1, 8, 32]))  # each once: the answer is keyed by them
    if any(b < 1 for b in batch_sizes):
        raise SelectionError(f"batch sizes must be positive integers, got {batch_sizes}")
    # The recommendations choose among what the caller declared, else among what this host and
    # the fleet have (the selector's availability rule, as /hardware/select applies it): passing
    # every kind as declared skipped that rule and recommended rocm on a CPU-only host.
    declared = list(dict.fromkeys(hardware)) if hardware else None
    hardware = declared or list(registry.kind_names())
    family = model_family
    spec = resolve_model(model_name)
    default_dims = input_signature(spec, 1, None).dims
    out: dict[str, Any] = {}
    for mode in ("inference", "training"):
        performance, recommendations = {}, {}
        for b in batch_sizes:
            perf = selector.predictor.predict_performance(model_name, family, hardware, b, None, mode, "fp32")
            family = family or perf["model_family"]
            entries = {}
            for hw, prediction in perf["predictions"].items():
                row = measured.measured(spec.name, hw, "fp32", mode, b, default_dims) if measured else None
                entries[hw] = measured_entry(row, prediction) if row else prediction
            performance[str(b)] = entries
            try:
                r = selector.select_hardware(family, model_name, b, mode=mode, available_hardware=declared)
                recommendations[str(b)] = {"primary": r["primary_recommendation"], "fallbacks": r["fallback_options"]}
            except SelectionError as exc:
                recommendations[str(b)] = {"primary": None, "fallbacks": [], "reason": str(exc)}
        out[mode] = {"performance": performance, "recommendations": recommendations}
    return {"model_name": model_name, "model_family": family, "hardware_platforms": hardware, "batch_sizes": batch_sizes,
            "timestamp": datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "predictor_version": selector.predictor.predictor.version(),
            "benchmark_snapshot": measured.document.get("generated_at") if measured else None, **out}
