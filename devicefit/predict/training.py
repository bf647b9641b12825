"""Training the three regressors and validating them honestly.

Targets are log ratios to physics: latency / the per-operator roofline time
(`operator_roofline`), throughput / the throughput that time implies, peak memory / the
counted memory model (`memory_model`); both baselines are fitted per device (a hardware kind
on one host: an AMD and an Intel CPU are two devices of kind cpu) from the measurements, and a
device none of the training rows measured gets a same-kind device's fit scaled by the two
devices' probed peaks (`transfer_roofline`). Trees cannot extrapolate, so learning the residual
rather than the raw figure lets an unseen, larger model still scale with its operators, FLOPs
and bytes. Validation holds out whole models (and whole devices when there are several), so
the reported error is the error on a model (a device) the predictor never saw. Intervals are
conformal: the held-out residuals' quantile, with coverage measured the same way.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np

from devicefit.errors import DevicefitError
from devicefit.predict.booster_settings import LGB_PARAMS, NUM_ROUNDS
from devicefit.predict.domain import parameter_range, thinly_measured, without_devices
from devicefit.predict.features import CATEGORICAL, NUMERIC, ModelPoint, feature_row, to_matrix
from devicefit.predict.hardware_specs import DeviceSpec, default_devices, kind_of, machine_of
from devicefit.predict.host_half_rates import host_speedups, transfer_factors
from devicefit.predict.memory_model import MemoryModel, fit_memory_model, machine_offset
from devicefit.predict.operator_roofline import OperatorRoofline, fit_operator_roofline, transfer_roofline
from devicefit.predict.training_rows import (  # noqa: F401 - the rows' skip reasons, for callers
    CONTENDED_SKIP,
    MISMATCH_SKIP,
    TARGETS,
    UNCALIBRATED_SKIP,
    TrainingData,
    specs_per_device,
    training_data,
)
from devicefit.predict.ttft_check import ExtraRequest, ttft_requests, ttft_validation
from devicefit.predict.validation_report import (
    INTERVAL_LEVEL,
    TargetValidation,
    ValidationReport,
    conformal_half_width,
    error_metrics,
    grouped_metrics,
    held_out_figures,
    nested_coverage,
)

MIN_MODELS = 3  # fewer cannot be trained and validated on held-out models


class InsufficientData(DevicefitError, ValueError):
    """Too few measured models to train and validate honestly."""
#: Bumped whenever a reader of an older artifact would misread it (2: per-operator roofline baselines).
# 3: baselines and specs per device, not per kind. 4: the decode roofline reads a row of an untied
# embedding table, not the table, and costs a mixture's experts at their rows' ratio: a ratio
# fitted against the old roofline would misread the new one. 5: a GPU's device key names its own
# fingerprint ("cuda@<host>+cuda-..."): an older artifact keyed two GPUs behind one host CPU as one.
# 6: a fused attention's K is its key length, saturating at its own matmul_k_half: a fit of the
# head-size K would misread the new traces. (Baselines' pre_load_rss came after, optional: a
# format-6 artifact without it carries memory models unmoved, as its own validation did.)
# 7: a probed device's compute peaks are its matmul's median, not its best (hardware_specs.
# typical_matmul_share): a fit carried from an older artifact's best-peak specs to a device
# specified now would be off by the probe's best/median (1.13x on the Xeon's run 40).
# 8: a grouped convolution's K stops at a 3x3 window's (operator_roofline.GROUPED_CONV_MAX_K):
# a fit that saw 7x7 depthwise layers at a K of 49 would misread the capped traces.
# 9: a CPU training step adds the pages its optimizer faults in afresh (operator_roofline.
# refaulted_bytes, refault_gbs): an older fit's optimizer and backward terms absorbed them.
ARTIFACT_FORMAT = "devicefit.predictor/9"
# Error bars a predictor must meet on held-out models (MAPE); the asset check enforces them.
ERROR_BARS = {"latency": 0.15, "throughput": 0.15, "memory": 0.10}




# --- The physical baselines, fitted per device (and backend) on the rows given.


@dataclass(frozen=True)
class Baselines:
    roofline: dict[str, OperatorRoofline]  # "<device>|<backend>"
    memory: dict[str, MemoryModel]  # "<device>"
    # "<device>": the median resident memory of its workers before a model loaded, over the rows
    # fitted (memory_model.machine_offset)
    pre_load_rss: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"roofline": {k: v.to_json() for k, v in self.roofline.items()},
                "memory": {k: v.to_json() for k, v in self.memory.items()}, "pre_load_rss": self.pre_load_rss}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Baselines":
        return cls({k: OperatorRoofline.from_json(v) for k, v in d["roofline"].items()},
                   {k: MemoryModel.from_json(v) for k, v in d["memory"].items()}, dict(d.get("pre_load_rss") or {}))

    def latency_ms(self, point: ModelPoint, batch: int, precision: str, mode: str, device: str, backend: str) -> float | None:
        fit = self.roofline.get(f"{device}|{backend}")
        return fit.time_ms(point, batch, precision, mode) if fit and fit.covers(precision, mode) else None

    def memory_bytes(self, point: ModelPoint, batch: int, precision: str, mode: str, device: str) -> float | None:
        fit = self.memory.get(device)
        return fit.bytes(point, batch, precision, mode) if fit and fit.covers(precision, mode) else None

    def with_devices(self, specs: dict[str, DeviceSpec], devices: set[str]) -> "Baselines":
        """These baselines plus, for each of `devices` without a fit of its own, the fit of the
        same-kind device with the most rows: the roofline's rates scaled by the two devices'
        probed peaks (`transfer_roofline`; a bf16 rate also by the two hosts' measured bf16
        speed-ups, `host_half_rates`), the memory model with its process term moved by what the
        two machines hold before a model loads, read on another kind both measured
        (`memory_model.machine_offset`; as it is where none: a process's memory does not depend
        on the CPU's speed). A device no same-kind device informs stays uncovered."""
        roofline, memory = dict(self.roofline), dict(self.memory)
        speedups = host_speedups(self.roofline, specs)
        for device in sorted(d for d in devices if d in specs):
            for key, fit in sorted(self.roofline.items(), key=lambda kv: -kv[1].rows):
                source, backend = key.rsplit("|", 1)
                if source != device and kind_of(source) == kind_of(device) and f"{device}|{backend}" not in roofline:
                    factors = transfer_factors(source, device, speedups)
                    roofline[f"{device}|{backend}"] = transfer_roofline(fit, specs[device], source, factors)
            same_kind = [(d, m) for d, m in self.memory.items() if d != device and kind_of(d) == kind_of(device)]
            if device not in memory and same_kind:
                source, fit = max(same_kind, key=lambda dm: dm[1].rows)
                offset = machine_offset(device, source, self.pre_load_rss)
                memory[device] = fit.shifted(offset) if offset else fit
        return Baselines(roofline, memory, self.pre_load_rss)


def group_key(f: dict) -> str:
    return "|".join((f["device_kind"], f["backend"], f["precision"], f["mode"]))


def _request(data: "TrainingData", i: int) -> tuple[ModelPoint, int, str, str]:
    f = data.features[i]
    return data.points[i], int(round(math.exp(f["log_batch"]))), f["precision"], f["mode"]


def fit_baselines(data: "TrainingData", rows: np.ndarray, specs: dict[str, DeviceSpec]) -> Baselines:
    """Fitted on `rows` only: one roofline per (device, backend), one memory model per device;
    devices with no row among them get a same-kind device's fit transferred."""
    specs = {**specs, **data.specs}
    by_device: dict[str, list[int]] = {}
    by_group: dict[str, list[int]] = {}
    for i in np.flatnonzero(rows):
        f = data.features[i]
        by_device.setdefault(data.devices[i], []).append(i)
        by_group.setdefault(f"{data.devices[i]}|{f['backend']}", []).append(i)
    roofline = {}
    for key, idx in by_group.items():
        device, backend = key.rsplit("|", 1)
        roofline[key] = fit_operator_roofline(kind_of(device), backend,
                                              [(*_request(data, i), float(data.actual["latency"][i])) for i in idx], specs[device])
    memory = {device: fit_memory_model(kind_of(device), [(*_request(data, i), float(data.actual["memory"][i])) for i in idx])
              for device, idx in by_device.items()}
    pre_load: dict[str, list[float]] = {}
    for device, idx in by_device.items():
        readings = [data.pre_load_rss[i] for i in idx if data.pre_load_rss and data.pre_load_rss[i] is not None]
        if readings:
            pre_load[device] = readings
    return Baselines(roofline, memory, {d: float(statistics.median(v)) for d, v in pre_load.items()}).with_devices(specs, set(data.devices))


def references(data: "TrainingData", baselines: Baselines) -> dict[str, np.ndarray]:
    """Baseline figures per row (NaN where the baselines do not cover the row's device, precision or mode)."""
    lat, mem = np.full(len(data), np.nan), np.full(len(data), np.nan)
    for i, f in enumerate(data.features):
        point, batch, precision, mode = _request(data, i)
        lat[i] = baselines.latency_ms(point, batch, precision, mode, data.devices[i], f["backend"]) or np.nan
        mem[i] = baselines.memory_bytes(point, batch, precision, mode, data.devices[i]) or np.nan
    batch = np.exp([f["log_batch"] for f in data.features])
    return {"latency": lat, "throughput": batch * 1e3 / lat, "memory": mem}


def categories_of(features: list[dict]) -> dict[str, list[str]]:
    return {c: sorted({f[c] for f in features}) for c in CATEGORICAL}


def _fit(X: np.ndarray, y: np.ndarray):
    from devicefit.predict.booster_settings import lightgbm

    lgb = lightgbm()

    cat_idx = list(range(len(NUMERIC), len(NUMERIC) + len(CATEGORICAL)))
    dataset = lgb.Dataset(X, y, categorical_feature=cat_idx, free_raw_data=False, params={"verbose": -1})
    return lgb.train(LGB_PARAMS, dataset, num_boost_round=NUM_ROUNDS)


def held_out_predictions(data: TrainingData, groups: list[str], categories: dict[str, list[str]],
                         specs: dict[str, DeviceSpec], extra: list[ExtraRequest] | None = None,
                         untrained: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Out-of-fold predictions (absolute units), leaving one group (a model, or a device) out
    at a time: no row of the held-out group informs its fold's baseline or trees. `extra`
    requests get the served forward-pass latency of their group's fold (key "extra_latency";
    NaN where the fold cannot answer them). `untrained` (a boolean mask): rows no fold trains on,
    yet predicted in their own group's fold, as if they had never been measured
    (benchmarks/call_budget_replay.py)."""
    X = to_matrix(data.features, categories)
    groups_arr = np.asarray(groups)
    out = {t: np.full(len(data), np.nan) for t in TARGETS}
    extra = extra or []
    extra_out = {t: np.full(len(extra), np.nan) for t in ("latency", "throughput")}
    extra_factor = np.ones(len(extra))
    every_spec = {**specs, **data.specs}
    # An extra request whose group has no training row is answered by a fit on every row (which
    # never saw it either): the fold holding out the empty group.
    unseen = sorted({e.group for e in extra} - set(groups))
    for g in [*sorted(set(groups)), *unseen]:
        test = groups_arr == g
        if test.all():
            continue  # one group only: nothing to learn from
        trained = ~test if untrained is None else ~test & ~untrained
        baselines = fit_baselines(data, trained, specs)
        refs = references(data, baselines)
        mine = [(j, e) for j, e in enumerate(extra) if e.group == g and e.device in every_spec]
        extra_refs = [baselines.latency_ms(e.point, e.batch, e.precision, "inference", e.device, e.backend) for _, e in mine]
        mine = [(j, e, ref) for (j, e), ref in zip(mine, extra_refs) if ref]
        for j, e, ref in mine:
            if e.scaled_to is not None:  # as served: the fold's fitted roofline times the two points
                scaled = baselines.latency_ms(e.scaled_to, e.batch, e.precision, "inference", e.device, e.backend)
                extra_factor[j] = scaled / ref if scaled else np.nan
        extra_X = to_matrix([feature_row(e.point, e.batch, e.precision, "inference", e.backend, every_spec[e.device])
                             for _, e, _ in mine], categories) if mine else None
        for t in TARGETS:
            usable = test & ~np.isnan(refs[t])
            train_rows = trained & ~np.isnan(refs[t])
            if not usable.any() and not (mine and t in extra_out):
                continue
            y = np.log(data.actual[t] / refs[t])
            booster = _fit(X[train_rows], y[train_rows])
            if usable.any():
                out[t][usable] = np.exp(booster.predict(X[usable])) * refs[t][usable]
            if mine and t in extra_out:
                ref = np.array([r if t == "latency" else e.batch * 1e3 / r for _, e, r in mine])
                extra_out[t][[j for j, _, _ in mine]] = np.exp(booster.predict(extra_X)) * ref
    # Score what is served: latency and throughput reconciled as the predictor does.
    batch = np.exp([f["log_batch"] for f in data.features])
    out["latency"], out["throughput"] = reconcile(out["latency"], out["throughput"], batch)
    if extra:
        latency, _ = reconcile(extra_out["latency"], extra_out["throughput"], np.array([e.batch for e in extra]))
        out["extra_latency"] = latency * extra_factor
    return out


def reconcile(latency_ms, throughput, batch):
    """Geometric mean of the two estimates of the batch time; throughput = batch / latency."""
    lat = np.exp((np.log(latency_ms) + np.log(batch * 1e3 / throughput)) / 2)
    return lat, batch * 1e3 / lat


def validate(data: TrainingData, categories: dict[str, list[str]], specs: dict[str, DeviceSpec],
             rows: list[dict[str, Any]] | None = None, generation: dict[str, Any] | None = None) -> ValidationReport:
    """Leave-one-model-out, with its error per device; and leave-one-device-out when there are
    several devices (a held-out device is predicted through a same-kind device's transferred
    baseline; a device whose kind no other device measured stays uncovered). With the stored
    `rows`, the generation rows' TTFT is checked in the same folds (`ttft_validation`), with the
    host line `generation` (calibrate_generation's) fitted without each model."""
    targets: dict[str, TargetValidation] = {}
    extra, measured = ttft_requests(rows, data, categories) if rows else ([], [])
    oof = held_out_predictions(data, data.models, categories, specs, extra)
    oof_kind = held_out_predictions(data, data.devices, categories, specs) if len(set(data.devices)) > 1 else None
    machines = [machine_of(d) for d in data.devices]  # one device a machine: the same folds as the devices'
    oof_machine = None if len(set(machines)) < 2 else oof_kind if len(set(machines)) == len(set(data.devices)) \
        else held_out_predictions(data, machines, categories, specs)
    for t in TARGETS:
        ok = ~np.isnan(oof[t])
        actual, predicted = data.actual[t][ok], oof[t][ok]
        families = [f for f, keep in zip(data.families, ok) if keep]
        devices = [d for d, keep in zip(data.devices, ok) if keep]
        models = [m for m, keep in zip(data.models, ok) if keep]
        hosts = [machine_of(d) for d in devices]
        residuals = np.abs(np.log(predicted / actual))
        loho, loho_per_device, loho_bands = held_out_figures(data.actual[t], oof_kind[t], data.devices) if oof_kind is not None else (None, {}, {})
        _, machine_per_device, machine_bands = held_out_figures(data.actual[t], oof_machine[t], data.devices) if oof_machine is not None else (None, {}, {})
        targets[t] = TargetValidation(
            leave_one_model_out=error_metrics(actual, predicted),
            per_family=grouped_metrics(actual, predicted, families),
            per_hardware=grouped_metrics(actual, predicted, devices),
            interval_log_half_width=conformal_half_width(residuals) if len(residuals) else None,
            interval_coverage=nested_coverage(residuals, models) if len(residuals) else None,
            bar_mape=ERROR_BARS[t],
            leave_one_hardware_out=loho,
            leave_one_hardware_out_per_device=loho_per_device,
            per_host=grouped_metrics(actual, predicted, hosts) if len(set(hosts)) > 1 else {},
            leave_one_hardware_out_band_per_kind=loho_bands,
            leave_one_machine_out_per_device=machine_per_device,
            leave_one_machine_out_band_per_kind=machine_bands,
        )
    # Each row's prediction from the fold that held its model out, for predicted-vs-measured
    # figures: the numbers behind the reported error, not an in-sample fit.
    held_out_rows = [
        {"model": data.models[i], "family": data.families[i], "device_kind": data.kinds[i], "device": data.devices[i],
         "backend": f["backend"],
         "precision": f["precision"], "mode": f["mode"], "batch_size": round(math.exp(f["log_batch"])),
         "seq_length": f["seq_length"] or None,
         **{f"{t}_measured": float(data.actual[t][i]) for t in TARGETS},
         **{f"{t}_predicted": None if np.isnan(oof[t][i]) else float(oof[t][i]) for t in TARGETS}}
        for i, f in enumerate(data.features)]
    held_out_step = ((generation or {}).get("validation") or {}).get("held_out_step_ms")
    ttft = ttft_validation(measured, oof["extra_latency"], held_out_step) if extra else None
    return ValidationReport(INTERVAL_LEVEL, targets, held_out_rows, ttft)


def calibrate_efficiency(data: TrainingData) -> dict[str, dict[str, float]]:
    """Median measured/roofline ratio (log) per (kind, backend, precision, mode): the roofline
    fallback's efficiency, calibrated from measurements."""
    buckets: dict[str, dict[str, list[float]]] = {}
    for i, f in enumerate(data.features):
        roof = math.exp(f["log_roofline_ms"])
        refs = {"latency": roof, "throughput": math.exp(f["log_batch"]) * 1e3 / roof, "memory": data.memory_reference[i]}
        b = buckets.setdefault(group_key(f), {t: [] for t in TARGETS})
        for t in TARGETS:
            b[t].append(math.log(data.actual[t][i] / refs[t]))
    out = {}
    for k, v in buckets.items():
        entry: dict[str, float] = {"n": len(v["latency"])}
        for t in TARGETS:
            med = statistics.median(v[t])
            entry[t] = med
            entry[f"{t}_spread"] = max(abs(x - med) for x in v[t])  # the interval of a calibrated roofline
        out[k] = entry
    return out


def train(rows: list[dict[str, Any]], specs: dict[str, DeviceSpec], local_host: str | None = None,
          local_hardware: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Fit on every usable row, validate by held-out groups, return the artifact (JSON-able).
    `specs` per device (or per kind, for kinds measured on one device); `local_host` is this
    machine's host fingerprint, whose devices answer predictions asked by kind (of two GPUs
    behind that fingerprint, the one in `local_hardware`, this machine's device fingerprints)."""
    specs = specs_per_device(rows, specs)
    every = training_data(rows, specs)
    thin = thinly_measured(every)
    data = without_devices(every, thin) if thin else every
    if len(set(data.models)) < MIN_MODELS:
        raise InsufficientData(f"need measurements of at least {MIN_MODELS} models to train and validate; have {len(set(data.models))} "
                         f"({len(data)} usable rows; skipped: {data.skipped or 'none'})")
    categories = categories_of(data.features)
    X = to_matrix(data.features, categories)
    baselines = fit_baselines(data, np.ones(len(data), dtype=bool), specs)
    refs = references(data, baselines)
    boosters = {t: _fit(X, np.log(data.actual[t] / refs[t])) for t in TARGETS}
    from devicefit.predict.decode_calibration import calibrate_generation  # the TPOT fit and its held-out check

    generation = calibrate_generation(rows, specs)
    validation = validate(data, categories, specs, rows, generation)
    return {
        "format": ARTIFACT_FORMAT,
        "trained_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "rows": len(data), "models": sorted(set(data.models)), "skipped": data.skipped, "contended_rows_used": data.contended_kept,
        "speed_reference": data.speed,
        "allocator": data.allocator,  # per device: the allocator setting its predictions are for
        "domain": {"device_kind": sorted(set(data.kinds)), "device": sorted(set(data.devices)), "family": sorted(set(data.families)),
                   "params": parameter_range(data)},
        "devices": default_devices(every.devices, local_host, local_hardware),
        "calibrated_only": thin,
        "categories": categories, "numeric": list(NUMERIC),
        "process_baseline": data.process_baseline,
        "efficiency": calibrate_efficiency(every),
        "generation": generation,
        "baseline": baselines.to_json(),
        "validation": validation.to_json(),
        "specs": {k: vars(s) for k, s in specs.items()},
        "boosters": {t: b.model_to_string() for t, b in boosters.items()},
    }
