"""Features from physics: parameters, FLOPs and bytes moved at the requested shape and
precision, the device's peak compute and bandwidth, the roofline time; plus categorical
family / backend / precision / mode / hardware kind. Nothing is derived from a model's name."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from devicefit.predict.hardware_specs import DeviceSpec
from models.analysis import TRAINING_FLOPS_FACTOR, parameter_breakdown, weight_bytes
from models.bounded_cache import BoundedCache
from models.catalog import ModelSpec
from models.classifier import classify_spec
from models.memory_floor import TRAINING_WEIGHT_COPIES
from models.op_profile import (
    CONV,
    GROUPED_CONV,
    LINEAR,
    TRACE_CACHE_SIZE,
    VIEW,
    OpProfile,
    op_profile,
    prefill_profile,
    trace_key,
    training_peak_activation_bytes,
)

CATEGORICAL = ("family", "backend", "precision", "mode", "device_kind")
NUMERIC = ("log_params", "log_flops_per_sample", "log_batch", "log_flops", "log_bytes_moved", "log_intensity",
           "log_peak_gflops", "log_bandwidth_gbs", "log_roofline_ms", "linear_flops_fraction", "seq_length",
           "log_ops", "log_flops_per_op", "dense_conv_flops_fraction", "grouped_conv_flops_fraction",
           "log_activation_bytes")


@dataclass(frozen=True, eq=False)
class ModelPoint:
    """What a prediction needs to know about the model at one input shape."""

    name: str
    family: str
    params: int
    flops_per_sample: int
    linear_flops_fraction: float
    seq_length: int
    weight_bytes: dict[str, int]
    ops: int  # kernels launched per forward pass: each costs dispatch overhead whatever its size
    dense_conv_flops_fraction: float
    grouped_conv_flops_fraction: float
    profile: OpProfile = field(repr=False)
    spec: ModelSpec = field(repr=False)
    requested_seq_length: int | None = None
    # Elements of its parameter tensors of at least models.analysis.LARGE_TENSOR_ELEMENTS, largest first
    large_parameter_tensors: tuple[int, ...] = ()

    def inference_activation_bytes(self, batch: int) -> float:
        return self.profile.peak_activations(batch)

    def training_activation_bytes(self, batch: int) -> float:
        first, per_sample = training_peak_activation_bytes(self.spec, self.requested_seq_length)
        return first + per_sample * (batch - 1)


_points: BoundedCache[ModelPoint] = BoundedCache(TRACE_CACHE_SIZE)  # one per traced (model, sequence length)


def _point_of(spec: ModelSpec, profile: OpProfile, seq_length: int | None) -> ModelPoint:
    from models.inputs import input_signature

    seq = input_signature(spec, 1, seq_length).dims.get("seq_length") or 0
    total = float(profile.flops.sum())

    def share(category: int) -> float:
        return float(profile.flops[profile.category == category].sum()) / total if total else 0.0

    counts = parameter_breakdown(spec)
    return ModelPoint(
        spec.name, classify_spec(spec).family or "unknown", counts.total, int(total), share(LINEAR),
        int(seq), {p: weight_bytes(spec, p) for p in ("fp32", "fp16", "bf16", "int8")},
        int((profile.category != VIEW).sum()), share(CONV), share(GROUPED_CONV), profile, spec, seq_length,
        counts.large_tensors)


def model_point(spec: ModelSpec, seq_length: int | None = None) -> ModelPoint:
    return _points.get(trace_key(spec, seq_length), lambda: _point_of(spec, op_profile(spec, seq_length), seq_length))


def prefill_point(spec: ModelSpec, prompt_tokens: int | None = None) -> ModelPoint:
    """A generation request's prefill (models.op_profile.prefill_profile) as a point the
    per-operator roofline can time: what the forward pass at the prompt's length is scaled by
    to answer TTFT."""
    return _points.get(("prefill",) + trace_key(spec, prompt_tokens),
                       lambda: _point_of(spec, prefill_profile(spec, prompt_tokens), prompt_tokens))


def roofline_ms(flops: float, bytes_moved: float, spec: DeviceSpec) -> float:
    """The roofline lower bound on time: compute-bound or bandwidth-bound, whichever is slower."""
    return max(flops / (spec.peak_gflops * 1e9), bytes_moved / (spec.bandwidth_gbs * 1e9)) * 1e3


def memory_reference_bytes(point: ModelPoint, precision: str, mode: str, process_baseline: float, batch: int = 1) -> float:
    """Uncalibrated peak memory: process + weights (x4 in training) + peak live activations."""
    if mode == "training":
        return process_baseline + TRAINING_WEIGHT_COPIES * point.weight_bytes[precision] + point.training_activation_bytes(batch)
    return process_baseline + point.weight_bytes[precision] + point.inference_activation_bytes(batch)


def feature_row(point: ModelPoint, batch: int, precision: str, mode: str, backend: str, spec: DeviceSpec) -> dict:
    flops = point.flops_per_sample * batch * (TRAINING_FLOPS_FACTOR if mode == "training" else 1)
    bytes_moved = point.weight_bytes[precision] * (TRAINING_WEIGHT_COPIES if mode == "training" else 1)
    roof = roofline_ms(flops, bytes_moved, spec)
    return {
        "family": point.family, "backend": backend, "precision": precision, "mode": mode, "device_kind": spec.kind,
        "log_params": math.log(point.params), "log_flops_per_sample": math.log(point.flops_per_sample),
        "log_batch": math.log(batch), "log_flops": math.log(flops), "log_bytes_moved": math.log(bytes_moved),
        "log_intensity": math.log(flops / bytes_moved), "log_peak_gflops": math.log(spec.peak_gflops),
        "log_bandwidth_gbs": math.log(spec.bandwidth_gbs), "log_roofline_ms": math.log(roof),
        "linear_flops_fraction": point.linear_flops_fraction, "seq_length": point.seq_length,
        "log_ops": math.log(point.ops), "log_flops_per_op": math.log(flops / point.ops),
        "dense_conv_flops_fraction": point.dense_conv_flops_fraction,
        "grouped_conv_flops_fraction": point.grouped_conv_flops_fraction,
        "log_activation_bytes": math.log(max(point.inference_activation_bytes(batch), 1.0)),
    }


def to_matrix(rows: list[dict], categories: dict[str, list[str]]) -> np.ndarray:
    """Numeric columns as they are; categoricals as integer codes of the training vocabulary
    (-1 for a value never seen, which the out-of-domain check refuses before this point)."""
    out = np.empty((len(rows), len(NUMERIC) + len(CATEGORICAL)), dtype=np.float64)
    for i, r in enumerate(rows):
        out[i, : len(NUMERIC)] = [r[c] for c in NUMERIC]
        out[i, len(NUMERIC):] = [categories[c].index(r[c]) if r[c] in categories[c] else -1 for c in CATEGORICAL]
    return out
