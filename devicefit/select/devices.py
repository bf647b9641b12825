"""Choosing among registered devices (`devicefit select --hardware <device ids>`): the fleet's
devices, not kinds. Each candidate is a device the store registered (a host's CPU, that CPU under
a 1-thread or AVX2 profile, its OpenVINO plugin, an ingested GPU host's GPU), answered with:
- `measured`: the store's aggregate for that device and config, where it was measured (p50,
  throughput, peak memory, runs, CI), labelled `measured`;
- `predicted`: the predictor's answer for that device (its own fits when the artifact has them,
  else the roofline on the device's registered probe), labelled with the link of the chain
  that answered (`trained_predictor`, `roofline_calibrated`, `static_rule`, `unavailable`).
The ranking uses the measured latency where there is one, else the predicted one, and says
which; a device whose family x kind measurements all failed, or whose memory the prediction
exceeds, is excluded with the reason."""
from __future__ import annotations

import json
from typing import Any

from benchmark_runners import registry
from benchmark_runners.records import MAX_ASKED_BATCH_SIZE
from devicefit import store
from devicefit.predict import served
from devicefit.predict.api import MB
from devicefit.predict.features import model_point
from devicefit.predict.hardware_specs import DeviceSpec, accelerator_of, on_cpu, openvino_on_cpu, row_device, runs_on_cpu, spec_from_probe
from devicefit.predict.memory_model import memory_target
from devicefit.predict.predictor import Request
from devicefit.select.selector import HardwareSelector, SelectionError
from models.classifier import classify_spec
from models.resolve import resolve_model


def registered_fleet(selector: HardwareSelector) -> dict[str, dict[str, Any]]:
    """Every registered device by id; no store is an error saying how devices get registered."""
    database = selector.predictor.paths.database
    if not database.exists():
        raise SelectionError(f"no store at {database}: no device is registered (devicefit devices register, or make run)")
    with store.opened(database, read_only=True) as con:
        return {d["id"]: d for d in store.devices(con)} if store.schema_version(con) >= 12 else {}


def registered_devices(selector: HardwareSelector, ids: list[str], fleet: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The registered devices named by `ids`, in that order; an unknown id is an error naming
    the registered ones."""
    fleet = registered_fleet(selector) if fleet is None else fleet
    unknown = [i for i in ids if i not in fleet]
    if unknown:
        raise SelectionError(f"unknown device {', '.join(unknown)}; registered: {', '.join(sorted(fleet)) or 'none'} "
                             f"(devicefit devices list)")
    return [fleet[i] for i in ids]


def _host_cpu_spec(device: dict[str, Any], fleet: dict[str, dict[str, Any]]) -> DeviceSpec | None:
    """The registered probe of the CPU a device's host is, for a device other than that CPU."""
    host = fleet.get(device.get("host_fingerprint") or "") or {}
    if device["kind"] == "cpu" or host.get("kind") != "cpu" or not host.get("probe") or _as_row(device)["device_profile"]:
        return None  # a profiled device is not the unconstrained CPU (training leaves one without its own probe unscored)
    return spec_from_probe("cpu", host.get("name"), host["probe"])


def device_spec(device: dict[str, Any], fleet: dict[str, dict[str, Any]]) -> DeviceSpec | None:
    """The figures a registered device is predicted from: its own probe; for a device that
    computes on its host's CPU and is registered without one (OpenVINO's CPU plugin, wasm,
    WebGPU on a software adapter), that CPU's registered probe, without its half-precision
    matmuls (torch's kernels), as training scores such a device's rows
    (hardware_specs.measured_device_specs); else none."""
    if device.get("probe"):
        return spec_from_probe(device["kind"], f"{device['name']} ({device['id']})", device["probe"])
    cpu, details = _host_cpu_spec(device, fleet), device.get("details") or {}
    if cpu is None:
        return None
    if device["kind"] == "openvino" and "CPU" in (details.get("name"), device.get("name")):  # a device registered before details were kept has its name
        return openvino_on_cpu(cpu, device["host_fingerprint"])
    return on_cpu(device["kind"], cpu) if runs_on_cpu(device["kind"], bool(details.get("software"))) else None


def _host_key(device: dict[str, Any]) -> str:
    """The aggregates' host column for this device (store.queries.aggregate_select): its host's
    CPU fingerprint (else hostname), plus "+profile" for a profiled device."""
    row = _as_row(device)
    host = row["host_fingerprint"] or row["hostname"] or ""
    return f"{host}+{row['device_profile']}" if row["device_profile"] else host


def _as_row(device: dict[str, Any]) -> dict[str, Any]:
    """A registered device as the fields of a row measured on it, which hardware_specs keys it by."""
    profile = device["id"].split("+", 1)[1] if "+" in device["id"] else None
    return {"device_kind": device["kind"], "host_fingerprint": device.get("host_fingerprint"), "hostname": device.get("hostname"),
            "hardware_fingerprint": device.get("hardware_fingerprint"), "device_profile": profile,
            "backend_config": {"software_adapter": bool((device.get("details") or {}).get("software"))}}


def _device_key(device: dict[str, Any]) -> str:
    """The predictor's key for this device: the key its rows get (hardware_specs.row_device)."""
    return row_device(_as_row(device))


def _measured(con, relation: str, model: str, device: dict[str, Any], batch_size: int, precision: str, mode: str,
              seq_length: int | None) -> dict[str, Any] | None:
    """The aggregate of this config on this device, from `relation` (store.aggregates_relation)."""
    backend = registry.backend_of_kind(device["kind"])
    rows = store.query(con, f"SELECT * FROM {relation} WHERE model = ? AND device_kind = ? AND host = ? "
                            "AND accelerator IS NOT DISTINCT FROM ? AND precision = ? AND mode = ? AND batch_size = ? AND backend = ?",
                       [model, device["kind"], _host_key(device), accelerator_of(_as_row(device)),
                        precision, mode, batch_size, backend.name if backend else "torch"])
    if seq_length is not None:
        rows = [r for r in rows if r.get("seq_length") == seq_length]
    if not rows:
        return None
    r = min(rows, key=lambda r: (r.get("seq_length") or 0) != 128)  # the default input first
    return {"latency": r["p50_ms"], "throughput": r["throughput_samples_per_s"],
            "memory_mb": None if memory_target(r) is None else memory_target(r) / MB,
            "runs": r["runs"], "worst_ci_rel_half_width": r.get("worst_ci_rel_half_width"),
            "last_measured": str(r.get("last_measured")), "seq_length": r.get("seq_length"), "source": "measured"}


def select_devices(selector: HardwareSelector, model_name: str, device_ids: list[str], batch_size: int = 1,
                   sequence_length: int | None = None, mode: str = "inference", precision: str = "fp32",
                   max_latency_ms: float | None = None) -> dict[str, Any]:
    """The /hardware/select answer over registered devices: every device with its measured and
    predicted figures, each labelled, the fastest feasible one chosen."""
    if not 1 <= batch_size <= MAX_ASKED_BATCH_SIZE:
        raise SelectionError(f"batch_size must be a positive integer up to {MAX_ASKED_BATCH_SIZE}, got {batch_size}")
    spec = resolve_model(model_name)
    family = classify_spec(spec).family or "unknown"
    fleet = registered_fleet(selector)
    devices = registered_devices(selector, device_ids, fleet)
    point = model_point(spec, sequence_length)
    predictor = selector.predictor.predictor
    requests = [Request(point, batch_size, precision, mode, d["kind"], device=_device_key(d), spec=device_spec(d, fleet),
                        host_spec=_host_cpu_spec(d, fleet)) for d in devices]
    predictions = predictor.predict(requests)
    if selector.predictor.record:  # kept, to be scored against each device's own later measurement
        served.record(selector.predictor.paths, predictor, "select_devices", requests, predictions)
    candidates: dict[str, dict[str, Any]] = {}
    with store.opened(selector.predictor.paths.database, read_only=True) as con:
        relation = store.aggregates_relation(con)
        for d, p in zip(devices, predictions):
            measured = _measured(con, relation, spec.name, d, batch_size, precision, mode, sequence_length) if relation else None
            entry: dict[str, Any] = {
                "device": d["id"], "kind": d["kind"], "name": d["name"], "hostname": d.get("hostname"),
                "profile": {k: v for k, v in (d.get("profile") or {}).items() if v is not None},
                "measured": measured,
                "predicted": {"latency": p.latency_ms, "throughput": p.throughput,
                              "memory_mb": None if p.memory_bytes is None else p.memory_bytes / MB,
                              "latency_interval": p.latency_interval, "source": p.source, "detail": p.detail},
                "excluded": None,
            }
            latency = measured["latency"] if measured else p.latency_ms
            entry["latency"], entry["latency_source"] = latency, ("measured" if measured else p.source)
            compatible, evidence = selector.family_compatibility(family, d["kind"])
            memory_total = (d.get("details") or {}).get("memory_total_bytes")
            need_mb = (measured or {}).get("memory_mb") or entry["predicted"]["memory_mb"]
            if not compatible:
                entry["excluded"] = f"incompatible: {evidence}"
            elif latency is None:
                entry["excluded"] = f"no figure: {p.detail}"
            elif memory_total and need_mb and need_mb * MB > memory_total:
                entry["excluded"] = f"does not fit: needs {need_mb * MB / 1e9:.1f} GB of {memory_total / 1e9:.1f} GB"
            elif max_latency_ms is not None and latency > max_latency_ms:
                entry["excluded"] = f"too slow: {latency:.1f} ms > {max_latency_ms:g} ms"
            candidates[d["id"]] = entry
    feasible = sorted((e for e in candidates.values() if e["excluded"] is None), key=lambda e: e["latency"])
    if not feasible:
        raise SelectionError(f"no registered device satisfies the constraints for {spec.name} (batch {batch_size}, {precision}, "
                             f"{mode}): " + "; ".join(f"{k}: {e['excluded']}" for k, e in candidates.items()))
    best = feasible[0]
    return {
        "model_name": spec.name, "model_family": family, "batch_size": batch_size, "precision": precision, "mode": mode,
        "primary_recommendation": best["device"],
        "fallback_options": [e["device"] for e in feasible[1:]],
        "explanation": (f"{best['device']} ({best['name']}) has the lowest latency, {best['latency']:.2f} ms "
                        f"({best['latency_source']}), among {len(feasible)} feasible of {len(candidates)} registered devices"),
        "devices": candidates,
        "predictor_version": predictor.version(),
    }


def to_json(result: dict[str, Any]) -> str:
    return json.dumps(result, indent=2, default=str)
