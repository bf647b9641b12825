"""From stored measurement rows to the predictors' features and targets: which rows are learned
from, which are counted and why (contended twins, uncalibrated BatchNorm rows, rows measured
with another allocator setting than their device's others, models that cannot be rebuilt here
or whose recorded path holds another model), and each row's targets at its device's typical
speed."""
from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from benchmark_runners.environment import allocator_text
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
    allocator: dict[str, str] = field(default_factory=dict)  # per device: the allocator setting its rows were measured with

    def __len__(self) -> int:
        return len(self.features)

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1


CONTENDED_SKIP = "contended (a clean measurement of the config exists)"
MISMATCH_SKIP = "its recorded model path holds another model here (models.recorded)"
UNCALIBRATED_SKIP = "random BatchNorm statistics (measured before activations were calibrated)"


def row_allocator(row: dict[str, Any]) -> str | None:
    """The allocator setting the row's process started with (environment.allocator_text); None
    for a row that did not record one."""
    environment = row.get("environment")
    return allocator_text(environment.get("allocator")) if isinstance(environment, dict) else None


def usual_allocators(rows: list[dict[str, Any]]) -> dict[str, str]:
    """Per device, the allocator setting most of its rows recorded (on a tie glibc's or the C
    library's defaults, then the first in order). A large batch's time moves with it by a fifth
    to a third on torch (benchmark_runners.environment.allocator), so one device's rows measured
    under two settings would teach the predictors a mixture neither setting runs at."""
    counts: dict[str, Counter] = {}
    for r in rows:
        text = row_allocator(r)
        if text is not None:
            counts.setdefault(row_device(r), Counter())[text] += 1
    return {device: min(c, key=lambda t: (-c[t], not t.endswith("(defaults)"), t)) for device, c in counts.items()}


def allocator_skip(row_setting: str, usual: str) -> str:
    return f"measured with allocator {row_setting}, where the device's other rows ran with {usual}"


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
    cannot be rebuilt offline, whose device has no spec, that ran with another allocator setting
    than most of their device's rows (usual_allocators; a row that recorded none is kept), or
    that were timed under contention while a clean measurement of the same config exists are
    counted, not used; a contended row
    that is its config's only measurement is used and counted (`contended_kept`). `specs` is
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
    measured_clean = {_config_of(r) for r in rows if r.get("status") == "ok" and not r.get("contended")}
    data.allocator = usual_allocators(rows)
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
        if r.get("contended"):
            if _config_of(r) in measured_clean:
                # Timed while other processes used the CPU (benchmark_runners.contention), and
                # the same config has a clean measurement: a busy neighbour's figure is not learned.
                data.skip(CONTENDED_SKIP)
                continue
            data.contended_kept += 1
        device = row_device(r)
        setting = row_allocator(r)
        if setting is not None and setting != data.allocator.get(device, setting):
            data.skip(allocator_skip(setting, data.allocator[device]))  # kept in the store; not learned with the others
            continue
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
        data.features.append(feats)
        for t in TARGETS:
            data.actual[t].append(float(actual[t]))
        data.points.append(point)
        data.models.append(point.name)
        data.kinds.append(r["device_kind"])
        data.devices.append(device)
        data.families.append(point.family)
    data.actual = {t: np.asarray(v) for t, v in data.actual.items()}
    data.memory_reference = np.asarray(data.memory_reference)
    return data
