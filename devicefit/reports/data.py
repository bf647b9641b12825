"""What the reports are drawn from, read once from the store (read-only) and the published
predictor: aggregated configs, the measured peaks of each device, and the predictor's held-out
predictions. Plain data, so every figure builder is a pure function a test can call."""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from devicefit import store
from devicefit.paths import DataPaths


@dataclass
class ReportData:
    aggregates: list[dict[str, Any]]
    #: hardware fingerprint -> {"name", "kind", "matmul_gflops_best", "memory_bandwidth_gbs_best"}
    devices: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: (model, input_dims json) -> {"flops_per_sample", "model_path"}
    model_inputs: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    held_out: list[dict[str, Any]] = field(default_factory=list)
    interval_half_width: dict[str, float] = field(default_factory=dict)
    predictor_version: str | None = None
    #: where the figures' aggregates are not the store's aggregates table (store.aggregates_as_measured), why
    note: str | None = None
    #: figure -> why it cannot be drawn whatever was measured (the published predictor is missing or damaged)
    unavailable: dict[str, str] = field(default_factory=dict)

    def default_inputs(self) -> dict[str, str]:
        """Per model, the input shape it was measured at most often: figures compare like with
        like, and the extra shapes (512-token rows) stay in the CSV."""
        counts: dict[str, Counter] = {}
        for r in self.aggregates:
            counts.setdefault(r["model"], Counter())[r["input_dims"]] += 1
        return {m: c.most_common(1)[0][0] for m, c in counts.items()}

    def at_default_input(self) -> list[dict[str, Any]]:
        default = self.default_inputs()
        return [r for r in self.aggregates if r["input_dims"] == default[r["model"]]]


def hardware_label(row: dict[str, Any]) -> str:
    """The kind for its own backend ("cpu" for torch on the CPU, "openvino" for OpenVINO's
    plugin); "kind · backend" for any other pairing; with the device's name where the report
    holds several devices of that label (label_devices)."""
    if row.get("hardware_label"):
        return row["hardware_label"]
    backend = row.get("backend", "torch")
    return row["device_kind"] if backend in ("torch", row["device_kind"]) else f"{row['device_kind']} · {backend}"


def labelled(aggregates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Copies of the aggregated rows with their device labels (label_devices; labelling twice
    changes nothing)."""
    rows = [dict(r) for r in aggregates]
    label_devices(rows)
    return rows


def label_devices(aggregates: list[dict[str, Any]]) -> None:
    """Give each aggregated row a hardware label that names one device: the kind alone where
    one device of it was measured, else the kind with the device's name ("cuda (NVIDIA H100
    80GB HBM3)", "cuda (NVIDIA H200)"), and its machine (host, GPU fingerprint) where two
    devices share a name. Figures key
    their series by the label, so two GPUs (or two CPUs) are never one series, and a precision's
    ratio is taken against the same device's fp32."""
    def identity(r: dict[str, Any]) -> tuple:  # the hardware: a constraint profile ("+t1") is the same machine
        return str(r.get("host") or "").split("+", 1)[0], r.get("accelerator")

    by_label: dict[str, set] = {}
    for r in aggregates:
        by_label.setdefault(hardware_label(r), set()).add(identity(r))
    names: dict[tuple, set] = {}
    for r in aggregates:
        names.setdefault((hardware_label(r), r.get("device_name")), set()).add(identity(r))
    for r in aggregates:
        base = hardware_label(r)
        if len(by_label[base]) > 1:
            shared = len(names[(base, r.get("device_name"))]) > 1
            # the machine: its host, and a GPU's own fingerprint (two same-named cards behind one host CPU)
            where = "+".join(str(p) for p in identity(r) if p) if shared else None
            r["hardware_label"] = f"{base} ({r.get('device_name') or 'unnamed'}" + (f", {where})" if where else ")")


def load_report_data(paths: DataPaths, con: store.Source | None = None,
                     aggregates: list[dict[str, Any]] | None = None) -> ReportData:
    """`aggregates`: the aggregated rows when the caller has them (the pipeline's stored frame);
    else read from the store with the rest."""
    if con is None and not paths.database.exists():
        raise FileNotFoundError(f"no database at {paths.database}: run `make run` or `devicefit run` first")
    with store.opened(paths.database if con is None else con, read_only=True) as con:
        note = None
        if aggregates is None:
            aggregates, note = store.aggregates_as_measured(con)
        devices = {}
        for fp, kind, name, probe in store.hardware_rows(con):
            probe = (json.loads(probe) if isinstance(probe, str) else probe) or {}
            devices[fp] = {"kind": kind, "name": name, "matmul_gflops_best": probe.get("matmul_gflops_best"),
                           "memory_bandwidth_gbs_best": probe.get("memory_bandwidth_gbs_best")}
        inputs = {(m, dims or "{}"): {"flops_per_sample": flops, "model_path": path}
                  for m, dims, flops, path in store.measured_inputs(con)}
    data = ReportData(labelled(aggregates), devices, inputs, note=note)
    from devicefit.predict import artifacts
    from devicefit.predict.validation_report import ValidationReport

    # The predicted-vs-measured figure needs the published predictor's held-out predictions: one
    # missing or damaged is said on the index, not a traceback ending the report (a validation
    # section missing a key), nor "the measurements hold nothing" (an unreadable file).
    try:
        artifact = artifacts.load_current(paths)
        if artifact is None:
            data.unavailable["predicted_vs_measured"] = "no trained predictor is published yet (`devicefit run` trains one)"
            return data
        validation = ValidationReport.of(artifact)
        held_out, half_width = validation.held_out_rows, {t: v.interval_log_half_width for t, v in validation.targets.items()}
    except artifacts.PredictorUnavailable as exc:
        data.unavailable["predicted_vs_measured"] = str(exc)
        return data
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        data.unavailable["predicted_vs_measured"] = (f"the published predictor's validation is damaged ({type(exc).__name__}: "
                                                     f"{str(exc)[:120]}): retrain with `make run`")
        return data
    data.held_out, data.interval_half_width = held_out, half_width
    data.predictor_version = artifact.get("version")
    return data
