"""Spec 004's memory-constrained search: the batch size x precision with the highest throughput
whose peak memory stays under a cap. Measured rows answer where they exist; the predictor fills
the rest, and every candidate says which it is (`basis`)."""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from benchmark_runners import registry
from devicefit import store
from devicefit.errors import DevicefitError
from devicefit.predict.api import MB, HardwareModelPredictor
from devicefit.predict.memory_model import memory_target
from devicefit.select.config import finite, shown
from models.resolve import resolve_model

SEARCH_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128)


class MemorySearchError(DevicefitError, ValueError):
    """The cap is not positive, the hardware has no backend, or nothing fits."""


def on_device(rows: list[dict[str, Any]], kind: str, device: str) -> list[dict[str, Any]]:
    """The rows of `kind` measured on `device`: the device key a predictor answers `kind` for
    ("cpu@<host>", PerformancePredictor.device_of), so that measured and predicted candidates are
    one machine's. A store can hold two machines' rows of a kind (the AMD EPYC's and the Xeon's):
    keyed by batch and precision alone, the newest row of either answered, a bf16 candidate
    measured on the Xeon beside fp32 ones measured on the EPYC. A bare kind (a cold start: no
    trained predictor) keeps this host's rows of the kind as it is."""
    from devicefit.predict.hardware_specs import row_device

    if "@" in device:
        return [r for r in rows if r["device_kind"] == kind and row_device(r) == device]
    host = _this_host()
    return [r for r in rows if r["device_kind"] == kind and host is not None and r.get("host_fingerprint") == host
            and not r.get("device_profile")]


@functools.lru_cache(maxsize=1)
def _this_host() -> str | None:
    """This machine's CPU fingerprint (detected once a process: without a cache, detection is
    seconds of work, and a classifier asks per model, kind and mode)."""
    from benchmark_runners.hardware import detect_hardware
    from devicefit.fleet.partitions import host_of_inventory

    return host_of_inventory(detect_hardware(probe=False).to_json())


def measured_configs(database: Path, model: str, kind: str, mode: str, device: str) -> dict[tuple[int, str], dict[str, Any]]:
    """Measured rows on `device` (on_device) at the model's default input, by (batch,
    precision); the newest wins."""
    from models.inputs import input_signature

    if not database.exists():
        return {}
    default_seq = input_signature(resolve_model(model), 1, None).dims.get("seq_length") or 0
    rows = on_device(store.read_ok_measurements(database), kind, device)
    out: dict[tuple[int, str], dict[str, Any]] = {}
    for r in sorted(rows, key=lambda r: str(r.get("timestamp"))):
        if r["model"] == model and r["mode"] == mode and (r.get("seq_length") or 0) == default_seq:
            out[(r["batch_size"], r["precision"])] = r
    return out


def memory_constrained_search(model: str, kind: str, cap_mb: float, mode: str = "inference",
                              predictor: HardwareModelPredictor | None = None,
                              batch_sizes: tuple[int, ...] = SEARCH_BATCH_SIZES) -> dict[str, Any]:
    if (finite(cap_mb) or 0) <= 0:  # NaN fits nothing, and said so as if memory were the problem
        raise MemorySearchError(f"the memory cap must be a positive finite number of MB, got {shown(cap_mb)}")
    searchable = [k.name for k in registry.kinds().values() if k.native_precisions]
    if kind not in searchable:
        raise MemorySearchError(f"no devicefit backend measures {kind}; searchable: {', '.join(searchable)}")
    spec = resolve_model(model)
    predictor = predictor or HardwareModelPredictor(record=False)
    device = predictor.predictor.device_of(kind)
    measured = measured_configs(predictor.paths.database, spec.name, kind, mode, device)
    precisions = ("fp32",) if mode == "training" else registry.kind(kind).native_precisions
    candidates, unavailable = [], []
    for precision in precisions:
        for b in batch_sizes:
            row = measured.get((b, precision))
            if row is not None and memory_target(row) is not None:  # a row without a memory figure cannot say it fits
                candidates.append({"batch_size": b, "precision": precision, "basis": "measured",
                                   "memory_mb": memory_target(row) / MB,
                                   "throughput": row["throughput_samples_per_s"], "latency_ms": row["mean_ms"]})
                continue
            p = predictor.predict_performance(spec.name, None, kind, b, None, mode, precision)["predictions"][kind]
            if p["latency"] is None:
                unavailable.append(p.get("detail") or p["source"])
                continue
            candidates.append({"batch_size": b, "precision": precision, "basis": f"predicted ({p['source']})",
                               "memory_mb": p["memory_usage"], "memory_interval_mb": p["memory_interval"],
                               "throughput": p["throughput"], "latency_ms": p["latency"]})
    if not candidates:  # not a memory question: no config runs there at all
        raise MemorySearchError(f"{spec.name} has no {mode} config on {kind} to search: {unavailable[0] if unavailable else 'none'}")
    fitting = [c for c in candidates if c["memory_mb"] <= cap_mb]
    if not fitting:
        smallest = min(candidates, key=lambda c: c["memory_mb"])
        raise MemorySearchError(f"nothing fits {cap_mb:g} MB for {spec.name} on {kind} ({mode}): the smallest is batch "
                                f"{smallest['batch_size']} {smallest['precision']} at {smallest['memory_mb']:.0f} MB "
                                f"({smallest['basis']})")
    best = max(fitting, key=lambda c: (c["throughput"], -c["latency_ms"]))
    return {"model_name": spec.name, "hardware": kind, "device": device, "mode": mode, "memory_cap_mb": cap_mb, "best": best,
            "candidates": sorted(candidates, key=lambda c: (c["precision"], c["batch_size"])),
            "excluded": [f"batch {c['batch_size']} {c['precision']}: {c['memory_mb']:.0f} MB > {cap_mb:g} MB ({c['basis']})"
                         for c in candidates if c["memory_mb"] > cap_mb]}
