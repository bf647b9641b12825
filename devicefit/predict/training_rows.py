"""From stored measurement rows to the predictors' features and targets: which rows are learned
from, which are counted and why (contended twins, uncalibrated BatchNorm rows, rows measured
with another allocator tuning than most of their device's, models that cannot be rebuilt here
or whose recorded path holds another model), and each row's targets at its device's typical
speed."""
from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from benchmark_runners.environment import allocator_tuning_parts
from devicefit.predict.features import ModelPoint, feature_row, memory_reference_bytes, model_point
from devicefit.predict.hardware_specs import DeviceSpec, row_device
from devicefit.predict.memory_model import device_memory_kind, memory_target
from devicefit.predict.speed import speed_factors
from models.catalog import UnknownModelError
from models.recorded import RecordedModelMismatch, resolve_recorded_model

TARGETS = ("latency", "throughput", "memory")


@dataclass
class TrainingData:
    features: list[dict]
    actual: dict[str, np.ndarray]  # measured mean ms per batch, samples/s, peak bytes
    memory_reference: np.ndarray  # uncalibrated: process baseline + weights (x4 in training) + activations
    points: list[ModelPoint]
    models: list[str]
    kinds: list[str]
    devices: list[str]  # hardware_specs.row_device of each row: kind@host (+ a GPU's fingerprint, + a profile)
    families: list[str]
    process_baseline: dict[str, float]
    specs: dict[str, DeviceSpec] = field(default_factory=dict)  # per device, as resolved for these rows
    skipped: dict[str, int] = field(default_factory=dict)
    contended_kept: int = 0  # rows timed under contention, used because their config has no clean one
    speed: dict[str, dict] = field(default_factory=dict)  # per device: typical reference rate, rows scaled (speed.py)
    allocator: dict[str, str] = field(default_factory=dict)  # per device: the allocator tuning its rows were measured with
    # Per row: the worker's resident memory before its model loaded (None where not recorded, or
    # where the row's memory is a card's): what the host's software stack holds (memory_model.machine_offset).
    pre_load_rss: list[float | None] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.features)

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1


CONTENDED_SKIP = "contended (a clean measurement of the config exists)"
MISMATCH_SKIP = "its recorded model path holds another model here (models.recorded)"
UNCALIBRATED_SKIP = "random BatchNorm statistics (measured before activations were calibrated)"


# Backends whose tensors the measuring Python process allocates itself (on a host CPU).
HOST_ALLOCATOR_BACKENDS = ("torch", "openvino")


def allocator_tuning(row: dict[str, Any]) -> str | None:
    """What the row's process was started with that tunes the allocator holding a host CPU's
    tensors: "defaults", or its LD_PRELOAD and settings ("MALLOC_MMAP_MAX_=0"). None where the
    row recorded none, or where that allocator is not the recorded process's: a GPU's tensors are
    in the card's memory, a browser kind's in Chromium's processes. The C library's version is
    left out: one CPU shape (one device) can be several machines or one machine's OS releases,
    and nobody tuned anything between them."""
    if row.get("backend") not in HOST_ALLOCATOR_BACKENDS or device_memory_kind(row.get("device_kind") or ""):
        return None
    environment = row.get("environment")
    parts = allocator_tuning_parts(environment.get("allocator")) if isinstance(environment, dict) else None
    return None if parts is None else ", ".join(parts) or "defaults"


def usual_allocators(rows: list[dict[str, Any]]) -> dict[str, str]:
    """Per device, the allocator tuning (allocator_tuning) most common among its forward-pass
    rows (a tie goes to the defaults, then to the first in sort order). A large batch's time
    moves with it by a fifth to a third on torch (benchmark_runners.environment.allocator), so
    one device's rows measured under two tunings would teach the predictors a mixture neither
    runs at. Generation rows do not vote: the forward-pass predictors never learn from them."""
    counts: dict[str, Counter] = {}
    for r in rows:
        tuning = allocator_tuning(r) if r.get("mode") != "generation" and r.get("status", "ok") == "ok" else None
        if tuning is not None:
            counts.setdefault(row_device(r), Counter())[tuning] += 1
    return {device: min(c, key=lambda t: (-c[t], t != "defaults", t)) for device, c in counts.items()}


def allocator_skip(row_tuning: str, usual: str) -> str:
    return f"measured with allocator {row_tuning}, where the device's most common is {usual}"


def _other_allocator(row: dict[str, Any], usual: dict[str, str]) -> str | None:
    """The skip reason of a row measured under another tuning than its device's usual one."""
    tuning = allocator_tuning(row)
    device_usual = usual.get(row_device(row))
    return allocator_skip(tuning, device_usual) if tuning is not None and device_usual is not None and tuning != device_usual else None


def _uncalibrated(row: dict[str, Any], spec) -> bool:
    """A random-weight row of a model with BatchNorm, recorded before builds recalibrated it
    (no weights recipe in the row): its activations decayed towards zero and through the
    denormal range, which costs some CPUs several times the real model's time (an Intel
    Xeon's EfficientNet-b0 rows: 2-5x). Its figure is kept in the store, never learned from."""
    from models.loading import has_batchnorm

    return row.get("weights") == "random" and not row.get("weights_recipe") and has_batchnorm(spec)


def _config_of(row: dict[str, Any]) -> tuple:
    return (row.get("model"), row.get("backend"), row_device(row), row.get("precision"),
            row.get("mode"), row.get("batch_size"), row.get("input_dims") or row.get("seq_length"))


def specs_per_device(rows: list[dict[str, Any]], specs: dict[str, DeviceSpec]) -> dict[str, DeviceSpec]:
    """`specs` plus, for a kind the rows measured on one device only, that device under the
    kind's spec (a caller that knows one machine passes specs per kind). A kind measured on
    several devices is never scored against one spec: each device needs its own."""
    out = dict(specs)
    devices_of: dict[str, set[str]] = {}
    for r in rows:
        devices_of.setdefault(r["device_kind"], set()).add(row_device(r))
    for kind, devices in devices_of.items():
        if len(devices) == 1 and kind in specs:
            out.setdefault(next(iter(devices)), specs[kind])
    return out


def training_data(rows: list[dict[str, Any]], specs: dict[str, DeviceSpec]) -> TrainingData:
    """From stored measurement rows (status ok) to features and targets. Rows whose model
    cannot be rebuilt offline, whose device has no spec, that ran with another allocator tuning
    than the most common among their device's rows (usual_allocators; a row that recorded none,
    a browser kind's and a GPU's are kept), or that were timed under contention while a clean
    measurement of the same config exists are counted, not used; a contended row that is its
    config's only measurement is used and counted (`contended_kept`). `specs` is
    keyed by device (hardware_specs.device_key), or by kind for a kind measured on one device."""
    specs = specs_per_device(rows, specs)
    baselines: dict[str, list[float]] = {}
    for r in rows:
        if device_memory_kind(r.get("device_kind") or ""):
            baselines.setdefault(r["device_kind"], []).append(0.0)  # the card's allocator holds tensors only
        elif r.get("rss_before_load_bytes"):
            baselines.setdefault(r["device_kind"], []).append(float(r["rss_before_load_bytes"]))
    process_baseline = {k: statistics.median(v) for k, v in baselines.items()}
    data = TrainingData([], {t: [] for t in TARGETS}, [], [], [], [], [], [], process_baseline, specs)
    data.allocator = usual_allocators(rows)
    # A clean twin measured under another allocator tuning is not learned either: it does not
    # make its contended twin redundant.
    measured_clean = {_config_of(r) for r in rows
                      if r.get("status") == "ok" and not r.get("contended") and _other_allocator(r, data.allocator) is None}
    factors, data.speed = speed_factors(rows)  # each row's time at its device's typical speed
    for r, speed in zip(rows, factors):
        if r.get("mode") == "generation":
            # A sample is a whole request of prompt + new tokens: its targets are TTFT and TPOT,
            # not a forward pass's latency; the forward-pass targets never learn from it.
            data.skip("generation_scenario")
            continue
        if r.get("status") != "ok" or not r.get("mean_ms") or not r.get("throughput_samples_per_s") or not memory_target(r):
            data.skip("incomplete")
            continue
        if (reason := _other_allocator(r, data.allocator)) is not None:
            data.skip(reason)  # kept in the store; not learned with the device's other rows
            continue
        if r.get("contended") and _config_of(r) in measured_clean:
            # Timed while other processes used the CPU (benchmark_runners.contention), and
            # the same config has a clean measurement: a busy neighbour's figure is not learned.
            data.skip(CONTENDED_SKIP)
            continue
        device = row_device(r)
        spec = specs.get(device)
        if spec is None:
            data.skip(f"no spec for {device}")
            continue
        try:
            model = resolve_recorded_model(r)
            point = model_point(model, r.get("seq_length"))
        except RecordedModelMismatch:
            data.skip(MISMATCH_SKIP)
            continue
        except (UnknownModelError, ValueError, FileNotFoundError):
            data.skip("model not buildable offline")
            continue
        if _uncalibrated(r, model):
            data.skip(UNCALIBRATED_SKIP)
            continue
        feats = feature_row(point, r["batch_size"], r["precision"], r["mode"], r["backend"], spec)
        baseline = process_baseline.get(r["device_kind"], 0.0)
        data.memory_reference.append(memory_reference_bytes(point, r["precision"], r["mode"], baseline, r["batch_size"]))
        # Mean latency per batch: throughput is batch / mean, so the two targets agree physically;
        # both at the device's typical speed where the row has a speed reference (speed.py).
        actual = {"latency": r["mean_ms"] * speed, "throughput": r["throughput_samples_per_s"] / speed, "memory": memory_target(r)}
        data.contended_kept += bool(r.get("contended"))  # its config's only measurement, learned
        data.features.append(feats)
        for t in TARGETS:
            data.actual[t].append(float(actual[t]))
        data.points.append(point)
        data.models.append(point.name)
        data.kinds.append(r["device_kind"])
        data.devices.append(device)
        data.families.append(point.family)
        data.pre_load_rss.append(None if device_memory_kind(r["device_kind"]) or not r.get("rss_before_load_bytes")
                                 else float(r["rss_before_load_bytes"]))
    data.actual = {t: np.asarray(v) for t, v in data.actual.items()}
    data.memory_reference = np.asarray(data.memory_reference)
    return data
