"""The held-out validation of a trained predictor, typed: what `training.validate` computes, what
the artifact stores (as JSON of the same shape) and what the checks, the reports and the API read.
Readers go through `ValidationReport.from_json`, never through nested dict keys."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


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
    per_hardware: dict[str, ErrorMetrics]
    interval_log_half_width: float | None  # split-conformal half-width of log(predicted/measured)
    interval_coverage: float | None  # measured honestly: each model's interval calibrated on the others
    bar_mape: float  # the held-out MAPE this target must stay under
    leave_one_hardware_out: ErrorMetrics | None = None  # only when several kinds were measured

    @property
    def within_bar(self) -> bool:
        return self.leave_one_model_out.mape <= self.bar_mape

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "TargetValidation":
        groups = {k: {g: ErrorMetrics(**m) for g, m in data[k].items()} for k in ("per_family", "per_hardware")}
        loho = data.get("leave_one_hardware_out")
        return cls(ErrorMetrics(**data["leave_one_model_out"]), groups["per_family"], groups["per_hardware"],
                   data["interval_log_half_width"], data["interval_coverage"], data["bar_mape"],
                   ErrorMetrics(**loho) if loho else None)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        if self.leave_one_hardware_out is None:
            out.pop("leave_one_hardware_out")
        return out


@dataclass(frozen=True)
class ValidationReport:
    level: float  # the intervals' nominal coverage
    targets: dict[str, TargetValidation]
    # Each row's prediction from the fold that held its model out (predicted-vs-measured figures).
    held_out_rows: list[dict[str, Any]] = field(default_factory=list)

    def within_bars(self) -> dict[str, bool]:
        return {t: v.within_bar for t, v in self.targets.items()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ValidationReport":
        return cls(data["level"], {t: TargetValidation.from_json(v) for t, v in data["targets"].items()},
                   list(data.get("held_out_rows") or []))

    @classmethod
    def of(cls, artifact: dict[str, Any]) -> "ValidationReport":
        """The report of a predictor artifact."""
        return cls.from_json(artifact["validation"])

    def to_json(self) -> dict[str, Any]:
        return {"level": self.level, "targets": {t: v.to_json() for t, v in self.targets.items()}, "held_out_rows": self.held_out_rows}
