"""The held-out validation of a trained predictor, typed: what `training.validate` computes, what
the artifact stores (as JSON of the same shape) and what the checks, the reports and the API read.
Readers go through `ValidationReport.from_json`, never through nested dict keys."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

INTERVAL_LEVEL = 0.9  # the prediction intervals' nominal coverage


@dataclass(frozen=True)
class ErrorMetrics:
    """Absolute percentage error of held-out predictions against measurements."""

    mape: float
    median_ape: float
    within_10pct: float  # share of predictions within 10% of the measurement
    n: int


@dataclass(frozen=True)
class TargetValidation:
    """One target (latency, throughput or memory)."""

    leave_one_model_out: ErrorMetrics
    per_family: dict[str, ErrorMetrics]
    per_hardware: dict[str, ErrorMetrics]  # per device (hardware_specs.row_device), of the held-out-model predictions
    interval_log_half_width: float | None  # split-conformal half-width of log(predicted/measured)
    interval_coverage: float | None  # measured honestly: each model's interval calibrated on the others
    bar_mape: float  # the held-out MAPE this target must stay under
    leave_one_hardware_out: ErrorMetrics | None = None  # only when several devices were measured
    # The same, per held-out device: trained on the other devices only.
    leave_one_hardware_out_per_device: dict[str, ErrorMetrics] = field(default_factory=dict)
    # The held-out-model error on each machine's rows (all its devices: a CPU and OpenVINO's
    # plugin on it), present when the rows came from several machines.
    per_host: dict[str, ErrorMetrics] = field(default_factory=dict)
    # Per device kind, {"log_half_width", "coverage"} of the leave-one-device-out residuals
    # (device_bands below): the interval of a device no row measured, answered through a
    # same-kind device's transferred fit (the held-out-model one is 2-4x too narrow there).
    leave_one_hardware_out_band_per_kind: dict[str, dict[str, float | None]] = field(default_factory=dict)
    # The same two with every device of a machine held out together (its CPU, OpenVINO on it, its
    # profiles), when the rows came from several machines: what a device on a machine nothing was
    # measured on gets. Leave-one-device-out keeps the held-out device's siblings, and their rows
    # inform it (host_half_rates: a host's bf16 speed-up from its torch rows).
    leave_one_machine_out_per_device: dict[str, ErrorMetrics] = field(default_factory=dict)
    leave_one_machine_out_band_per_kind: dict[str, dict[str, float | None]] = field(default_factory=dict)

    @property
    def within_bar(self) -> bool:
        """Held-out-model error within the bar overall and on each machine's rows: a predictor
        good on one machine and poor on another is not within it."""
        return self.leave_one_model_out.mape <= self.bar_mape and all(m.mape <= self.bar_mape for m in self.per_host.values())

    def failures(self) -> list[str]:
        """What is over the bar, in words: overall and each machine over it."""
        out = [f"overall {self.leave_one_model_out.mape:.1%}"] if self.leave_one_model_out.mape > self.bar_mape else []
        return out + [f"{host} {m.mape:.1%}" for host, m in sorted(self.per_host.items()) if m.mape > self.bar_mape]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "TargetValidation":
        groups = {k: {g: ErrorMetrics(**m) for g, m in data[k].items()} for k in ("per_family", "per_hardware")}
        loho = data.get("leave_one_hardware_out")
        per_device, per_host, per_machine_device = ({g: ErrorMetrics(**m) for g, m in (data.get(k) or {}).items()}
                                                    for k in ("leave_one_hardware_out_per_device", "per_host",
                                                              "leave_one_machine_out_per_device"))
        return cls(ErrorMetrics(**data["leave_one_model_out"]), groups["per_family"], groups["per_hardware"],
                   data["interval_log_half_width"], data["interval_coverage"], data["bar_mape"],
                   ErrorMetrics(**loho) if loho else None, per_device, per_host,
                   dict(data.get("leave_one_hardware_out_band_per_kind") or {}), per_machine_device,
                   dict(data.get("leave_one_machine_out_band_per_kind") or {}))

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        if self.leave_one_hardware_out is None:
            out.pop("leave_one_hardware_out")
            out.pop("leave_one_hardware_out_per_device")
            out.pop("leave_one_hardware_out_band_per_kind")
        if not self.leave_one_machine_out_per_device:
            out.pop("leave_one_machine_out_per_device")
            out.pop("leave_one_machine_out_band_per_kind")
        return out


@dataclass(frozen=True)
class ValidationReport:
    level: float  # the intervals' nominal coverage
    targets: dict[str, TargetValidation]
    # Each row's prediction from the fold that held its model out (predicted-vs-measured figures).
    held_out_rows: list[dict[str, Any]] = field(default_factory=list)
    # The generation rows' TTFT against the forward pass at the prompt's length, as served,
    # each model's rows from the fold that held it out (training.ttft_validation); no bar.
    ttft: dict[str, Any] | None = None

    def within_bars(self) -> dict[str, bool]:
        return {t: v.within_bar for t, v in self.targets.items()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ValidationReport":
        return cls(data["level"], {t: TargetValidation.from_json(v) for t, v in data["targets"].items()},
                   list(data.get("held_out_rows") or []), data.get("ttft"))

    @classmethod
    def of(cls, artifact: dict[str, Any]) -> "ValidationReport":
        """The report of a predictor artifact."""
        return cls.from_json(artifact["validation"])

    def to_json(self) -> dict[str, Any]:
        out = {"level": self.level, "targets": {t: v.to_json() for t, v in self.targets.items()}, "held_out_rows": self.held_out_rows}
        return out if self.ttft is None else {**out, "ttft": self.ttft}


# Leave-one-device-out latency bar for a held-out CPU device (issue 17): a profile of a CPU (one
# thread, an ISA cap) or another host's CPU, predicted from its probe through a same-kind
# device's fit. Wider than the held-out-model bar: the device's only input is two probe figures.
HELD_OUT_DEVICE_BAR = 0.20


def held_out_cpu_devices(target: "TargetValidation") -> dict[str, "ErrorMetrics"]:
    """The target's leave-one-device-out metrics for CPU devices ("cpu@<host>[+profile]")."""
    return {d: m for d, m in sorted(target.leave_one_hardware_out_per_device.items()) if d.split("@", 1)[0] == "cpu"}


# The held-out statistics the validation is made of (training.validate computes them).


def error_metrics(actual: np.ndarray, predicted: np.ndarray) -> ErrorMetrics:
    ape = np.abs(predicted - actual) / actual
    return ErrorMetrics(float(np.mean(ape)), float(np.median(ape)), float(np.mean(ape <= 0.10)), int(len(ape)))


def grouped_metrics(actual, predicted, labels: list[str]) -> dict[str, ErrorMetrics]:
    labels_arr = np.asarray(labels)
    return {k: error_metrics(actual[labels_arr == k], predicted[labels_arr == k]) for k in sorted(set(labels))}


def conformal_half_width(abs_log_residuals: np.ndarray, level: float = INTERVAL_LEVEL) -> float:
    """Split-conformal quantile with the finite-sample correction ceil((n+1)*level)/n. Below
    level/(1-level) residuals (9 at 90%) that rank passes n and the guaranteed interval is
    unbounded; the largest residual stands in, which guarantees less (75% from 3 residuals),
    and the coverage measured on held-out models (nested_coverage) says what it gave."""
    n = len(abs_log_residuals)
    rank = min(n, math.ceil((n + 1) * level))
    return float(np.sort(abs_log_residuals)[rank - 1])


def nested_coverage(abs_log_residuals: np.ndarray, groups: list[str], level: float = INTERVAL_LEVEL) -> float:
    """Coverage measured honestly: each held-out model's interval is calibrated on the other
    models' residuals only."""
    groups_arr = np.asarray(groups)
    hits = []
    for g in sorted(set(groups)):
        mine = groups_arr == g
        if mine.all():
            continue
        q = conformal_half_width(abs_log_residuals[~mine], level)
        hits.extend((abs_log_residuals[mine] <= q).tolist())
    return float(np.mean(hits)) if hits else float("nan")


def device_bands(abs_log_residuals: np.ndarray, devices: list[str], kinds: list[str], held: np.ndarray) -> dict[str, dict[str, float | None]]:
    """Per device kind, the interval of a device no row measured: the split-conformal half-width
    of the leave-one-device-out residuals of that kind's devices (`held`: rows a fold predicted),
    and its coverage with each device's interval calibrated on the others' residuals only (None
    where one device of the kind was held out). A kind no fold could predict (one device of it)
    has no band: its transfers are not validated. Per kind, not pooled: on the EPYC and the Xeon
    the CPUs transfer within 14-20% and OpenVINO within 33-40%."""
    bands: dict[str, dict[str, float | None]] = {}
    for kind in sorted({k for k, keep in zip(kinds, held) if keep}):
        mine = np.array([keep and k == kind for k, keep in zip(kinds, held)])
        covered = nested_coverage(abs_log_residuals[mine], [d for d, m in zip(devices, mine) if m])
        bands[kind] = {"log_half_width": conformal_half_width(abs_log_residuals[mine]),
                       "coverage": None if math.isnan(covered) else covered}
    return bands


def held_out_figures(actual: np.ndarray, predicted: np.ndarray, devices: list[str]
                     ) -> tuple[ErrorMetrics | None, dict[str, ErrorMetrics], dict[str, dict[str, float | None]]]:
    """Out-of-fold predictions of held-out hardware (NaN where no fold could predict a row) as
    the report keeps them: the error overall, per held-out device, and each device kind's band
    (`device_bands`)."""
    held = ~np.isnan(predicted)
    if not held.any():
        return None, {}, {}
    return (error_metrics(actual[held], predicted[held]),
            grouped_metrics(actual[held], predicted[held], [d for d, keep in zip(devices, held) if keep]),
            device_bands(np.abs(np.log(predicted / actual)), devices, [d.split("@", 1)[0] for d in devices], held))
