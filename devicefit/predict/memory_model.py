"""The physical baseline of peak memory: what is alive at the worst moment, fitted per device.

peak = process + a * weights as built (fp32) + b * the converted copy (int8 / fp16 / bf16)
       + c * peak live activations of inference
       + d * weights (training: gradients and two AdamW moments) + e * peak live activations of
         training (the tensors autograd saves for the backward pass)

Every term is counted, not guessed: weight bytes from the parameter shapes, activations from
the meta-device trace in `models.op_profile`, which follows tensor lifetimes as the eager run
has them. The coefficients are non-negative least squares on relative error per hardware kind
(a: the model is built in fp32 before any conversion, so int8 rows peak with both copies; c and
e absorb allocator slack). The trees learn what is left, in log ratio to it.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from devicefit.predict.features import ModelPoint

def device_memory_kind(kind: str) -> bool:
    """Whether the kind's models live in memory of their own (registry DeviceKind.own_memory)."""
    from benchmark_runners import registry

    known = registry.kinds().get(kind)
    return known is not None and known.own_memory


def memory_target(row: dict[str, Any]) -> float | None:
    """What must fit on the row's device, the memory target: on a card with its own memory, the
    caching allocator's reserved peak (what the process held on the card; the host's RSS says
    nothing about it: 1.9 GB against 62 MB for mobilenet-v2 at batch 1 on the H200); elsewhere
    the process's peak RSS."""
    if device_memory_kind(row.get("device_kind") or "") and row.get("device_reserved_peak_bytes"):
        return float(row["device_reserved_peak_bytes"])
    return float(row["peak_rss_bytes"]) if row.get("peak_rss_bytes") else None


TERMS = ("process", "weights_built", "weights_converted", "inference_activations", "training_state", "training_activations")


def memory_terms(point: "ModelPoint", batch: int, precision: str, mode: str) -> np.ndarray:
    training = mode == "training"
    scale = 0.5 if precision in ("fp16", "bf16") else 1.0
    return np.array([
        1.0,
        point.weight_bytes["fp32"],
        point.weight_bytes[precision] if precision != "fp32" else 0.0,
        0.0 if training else point.inference_activation_bytes(batch) * scale,
        point.weight_bytes["fp32"] if training else 0.0,
        point.training_activation_bytes(batch) * scale if training else 0.0,
    ])


@dataclass(frozen=True)
class MemoryModel:
    kind: str
    coefficients: dict[str, float]
    precisions: list[str]
    modes: list[str]
    rows: int

    def covers(self, precision: str, mode: str) -> bool:
        return precision in self.precisions and mode in self.modes

    def bytes(self, point: "ModelPoint", batch: int, precision: str, mode: str) -> float:
        c = np.array([self.coefficients[t] for t in TERMS])
        return max(float(memory_terms(point, batch, precision, mode) @ c), 1.0)

    def shifted(self, offset: float) -> "MemoryModel":
        """This model with its process term moved by `offset` bytes (machine_offset), never below 0: a
        fit whose process term is near 0 (the NNLS put the memory elsewhere) takes little of a
        negative offset."""
        return replace(self, coefficients={**self.coefficients, "process": max(0.0, self.coefficients["process"] + offset)})

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "coefficients": self.coefficients, "precisions": self.precisions, "modes": self.modes,
                "rows": self.rows}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "MemoryModel":
        return cls(d["kind"], d["coefficients"], d["precisions"], d["modes"], d["rows"])


def fit_memory_model(kind: str, samples: list[tuple["ModelPoint", int, str, str, float]]) -> MemoryModel:
    """Non-negative least squares on relative error over (point, batch, precision, mode, bytes)."""
    from scipy.optimize import nnls

    A = np.array([memory_terms(p, b, pr, m) for p, b, pr, m, _ in samples])
    y = np.array([s[4] for s in samples], dtype=float)
    coef, _ = nnls(A / y[:, None], np.ones(len(y)))
    return MemoryModel(kind, dict(zip(TERMS, (float(c) for c in coef))), sorted({s[2] for s in samples}),
                       sorted({s[3] for s in samples}), len(samples))


def machine_offset(device: str, source: str, pre_load: dict[str, float]) -> float | None:
    """How many more bytes `device`'s machine holds before a model loads than `source`'s, read on
    the kinds both machines measured other than the two devices' own (`pre_load`: a device's
    median resident memory before its model loaded). The process term of a memory model is the
    software stack's (interpreter, torch, OpenVINO; their versions), not the CPU's: the AMD EPYC's
    workers started at 300 MB on torch where the Xeon's files, from an older release, started at
    420-450, and a Xeon OpenVINO fit carried to the EPYC as it was over-predicted every row there
    by 25%. None where the machines share no other measured kind (a machine nothing was measured
    on)."""
    from devicefit.predict.hardware_specs import kind_of, machine_of

    def by_kind(machine: str, leave_out: str) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {}
        for d, v in pre_load.items():
            if machine_of(d) == machine and d != leave_out and kind_of(d) != kind_of(device):
                out.setdefault(kind_of(d), []).append(v)
        return out

    mine, theirs = by_kind(machine_of(device), device), by_kind(machine_of(source), source)
    shared = sorted(set(mine) & set(theirs))
    if not shared or machine_of(device) == machine_of(source):
        return None
    return statistics.median(statistics.median(mine[k]) - statistics.median(theirs[k]) for k in shared)
