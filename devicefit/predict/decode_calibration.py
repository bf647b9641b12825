"""The decode line's calibration: from the measured generation rows, a host line (ms per step,
us per kernel) per device and backend and a device ratio per device, backend, precision and
batch, fitted together by least squares on log TPOT, and their leave-one-model-out validation
(each model's TPOT predicted from a fit to the other models' rows), on which the TPOT
residual's trees are then trained (`devicefit.predict.tpot_residual`).
`devicefit.predict.generation` serves what this fits; the model of a step (the roofline, the
host line, how they combine) is that module's, and this one fits it as it is served."""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from devicefit.predict import tpot_residual
from devicefit.predict.generation import (
    decode_device_ms,
    decode_efficiency_prior,
    decode_roofline,
    is_asynchronous,
    nearest_batch,
    nearest_calibration,
    residual_request,
    step_ms,
)
from devicefit.predict.hardware_specs import DeviceSpec, kind_of, row_device
from models.catalog import ModelSpec

PRIOR_WEIGHT = 0.2  # pull of a device ratio towards 1 / decode_efficiency_prior, against 1 per measured row


def _key(device: str, backend: str, precision: str, batch: int) -> str:
    return "|".join((device, backend, precision, f"b{batch}"))


def _group(key: str) -> str:
    return "|".join(key.split("|")[:2])  # device|backend: what shares one host line


@dataclass(frozen=True)
class _Point:
    key: str
    model: str
    roofline_ms: float
    kernels: int
    measured_ms: float
    features: tuple[float, ...] = ()  # the TPOT residual's (tpot_residual.features)
    expert_ms: float = 0.0  # DecodeRoofline.expert_ms: costed at the ratio of expert_rows
    expert_rows: float = 1.0

    def expert_key(self, keys) -> str:
        """The key whose ratio costs the experts' part: same device, backend and precision, at the
        batch nearest the rows each expert's product multiplies."""
        prefix = self.key.rsplit("|", 1)[0]
        batches = [int(k.rsplit("|b", 1)[1]) for k in keys if k.rsplit("|", 1)[0] == prefix]
        return f"{prefix}|b{nearest_batch(batches, self.expert_rows)}"


def model_key(row: dict[str, Any]) -> tuple[str, str | None]:
    """A measured model as its rows name it: a local model's name with its path (two local models
    of one name are two models), a catalog model's name alone."""
    return row.get("model"), row.get("model_path") or None


def _points(rows: list[dict[str, Any]], specs: dict[str, DeviceSpec], models: dict[tuple[str, str | None], ModelSpec]) -> list[_Point]:
    out = []
    for r in rows:
        spec = models.get(model_key(r))
        device = specs.get(row_device(r)) or specs.get(r.get("device_kind"))
        if (r.get("mode") != "generation" or r.get("status") != "ok" or not r.get("tpot_p50_ms") or spec is None
                or device is None):
            continue
        roof = decode_roofline(spec, r["batch_size"], r["precision"], r.get("prompt_tokens"), r.get("new_tokens"), device)
        if roof.kernels is None:
            continue  # no host term to fit it with
        key = _key(row_device(r), r["backend"], r["precision"], r["batch_size"])
        request = residual_request(spec, roof, r["batch_size"], r["precision"], is_asynchronous(kind_of(row_device(r))))
        out.append(_Point(key, r["model"], roof.ms, roof.kernels, r["tpot_p50_ms"], tpot_residual.features(request),
                          roof.expert_ms, roof.expert_rows))
    return out


def _fit(points: list[_Point], asynchronous: bool) -> tuple[dict[str, float], dict[str, float]]:
    """One device|backend's host line and device ratios: least squares on log TPOT, from a
    device-bound and a host-bound start (the max of an asynchronous kind is not convex), the
    better kept. Returns ({key: log ratio}, {"step_ms", "us_per_kernel"})."""
    import numpy as np
    from scipy.optimize import least_squares

    keys = sorted({p.key for p in points})
    index = {k: i for i, k in enumerate(keys)}
    dense = np.array([p.roofline_ms - p.expert_ms for p in points])
    experts = np.array([p.expert_ms for p in points])
    kernels = np.array([p.kernels for p in points], dtype=float)
    measured = np.log([p.measured_ms for p in points])
    which = np.array([index[p.key] for p in points])
    which_experts = np.array([index[p.expert_key(keys)] for p in points])
    prior = math.log(1 / decode_efficiency_prior(asynchronous))

    def residuals(x):
        device = dense * np.exp(x[which]) + experts * np.exp(x[which_experts])
        host = x[-2] + kernels * x[-1] / 1e3
        total = np.maximum(device, host) if asynchronous else device + host
        return np.concatenate([np.log(total) - measured, PRIOR_WEIGHT * (x[:-2] - prior)])

    ratios = [statistics.median(float(np.log(p.measured_ms / p.roofline_ms)) for p in points if p.key == k) for k in keys]
    per_kernel = float(np.median([p.measured_ms / max(p.kernels, 1) for p in points])) * 1e3
    low = [math.log(0.25)] * len(keys) + [0.0, 0.0]
    high = [math.log(1e4)] * len(keys) + [1e4, 1e4]
    starts = [ratios + [0.0, 0.0], [prior] * len(keys) + [0.0, per_kernel]]
    best = min((least_squares(residuals, np.clip(x0, low, high), bounds=(low, high)) for x0 in starts), key=lambda f: f.cost)
    x = best.x
    return {k: float(x[index[k]]) for k in keys}, {"step_ms": float(x[-2]), "us_per_kernel": float(x[-1])}


def _predict_point(p: _Point, ratios: dict[str, float], dispatch: dict[str, float], asynchronous: bool) -> float:
    """A held-out row as `predict_generation` answers it: the ratio at its batch (its experts'
    part at their rows'), else at the nearest batch fitted, else the prior."""
    device, backend, precision, batch = p.key.split("|")
    calibration = {"decode_efficiency": {k: {"log_ratio": v} for k, v in ratios.items()}}

    def ratio_at(rows: float) -> float:
        found = nearest_calibration(calibration, device, backend, precision, rows)
        return math.exp(found[1]["log_ratio"] if found else math.log(1 / decode_efficiency_prior(asynchronous)))

    return step_ms(decode_device_ms(p.roofline_ms, p.expert_ms, ratio_at(int(batch[1:])), ratio_at(p.expert_rows)), p.kernels,
                   dispatch, asynchronous)[0]


def calibrate_generation(rows: list[dict[str, Any]], specs: dict[str, DeviceSpec]) -> dict[str, Any]:
    """Host line per device|backend and device ratio per device|backend|precision|batch from
    the measured generation rows (a device is a kind on one host, a GPU with its own
    fingerprint too: two CPUs, or two hosts driving GPUs, dispatch at their own pace), and their leave-one-model-out validation per
    device: each model's TPOT predicted from a fit to the other models' rows."""
    from models.recorded import resolve_recorded_model

    # Each (name, path) its rows name, resolved once: a local model (a directory or a config
    # file) by its path, as training resolves each row; two local models of one name stay apart.
    models: dict[tuple[str, str | None], ModelSpec] = {}
    for key, row in {model_key(r): r for r in rows if r.get("mode") == "generation" and r.get("status") == "ok"}.items():
        try:
            models[key] = resolve_recorded_model(row)
        except Exception:  # a local model gone or changed since: its rows cannot be recomputed
            continue
    points = _points(rows, specs, models)
    efficiency: dict[str, Any] = {}
    dispatch: dict[str, Any] = {}
    for group in sorted({_group(p.key) for p in points}):
        mine = [p for p in points if _group(p.key) == group]
        asynchronous = is_asynchronous(kind_of(group.split("|")[0]))
        ratios, line = _fit(mine, asynchronous)
        dispatch[group] = {**line, "asynchronous": asynchronous, "n": len(mine), "models": sorted({p.model for p in mine})}
        for key, log_ratio in ratios.items():
            at = [p for p in mine if p.key == key]
            device_bound = [p for p in at if decode_device_ms(p.roofline_ms, p.expert_ms, math.exp(log_ratio),
                                                               math.exp(ratios[p.expert_key(ratios)])) >= step_ms(0.0, p.kernels, line, True)[1]]
            efficiency[key] = {"log_ratio": log_ratio, "n": len(at), "models": sorted({p.model for p in at}),
                               # rows where the device, not the host, set the step: 0 means the
                               # ratio is the prior's, not a measurement's
                               "device_bound_rows": len(device_bound)}
    fits: dict[tuple[str, frozenset[str]], tuple[dict[str, float], dict[str, float]] | None] = {}

    def line_without(i: int, excluded: frozenset[str]) -> float | None:
        """Row i's TPOT from its device|backend's line fitted without the `excluded` models."""
        p = points[i]
        group = _group(p.key)
        if (group, excluded) not in fits:
            mine = [q for q in points if _group(q.key) == group and q.model not in excluded]
            fits[(group, excluded)] = _fit(mine, is_asynchronous(kind_of(group.split("|")[0]))) if mine else None
        fit = fits[(group, excluded)]
        return None if fit is None else _predict_point(p, *fit, is_asynchronous(kind_of(group.split("|")[0])))

    out_of_fold = [line_without(i, frozenset({p.model})) for i, p in enumerate(points)]
    errors: dict[str, list[float]] = {}
    for p, predicted in zip(points, out_of_fold):
        if predicted is not None:
            errors.setdefault(_group(p.key), []).append(abs(predicted / p.measured_ms - 1))
    held_out_step: dict[str, dict[str, float]] = {}  # model -> group -> step_ms fitted without it (the TTFT check's)
    for (group, excluded), fit in fits.items():
        if len(excluded) == 1 and fit is not None:
            held_out_step.setdefault(next(iter(excluded)), {})[group] = fit[1]["step_ms"]
    every = [e for group in errors.values() for e in group]
    validation = {"tpot_mape": statistics.mean(every) if every else None, "rows": len(every),
                  "per_group": {g: {"tpot_mape": statistics.mean(e), "rows": len(e)} for g, e in errors.items()},
                  "models": sorted({p.model for p in points}), "method": "leave one model out",
                  "held_out_step_ms": held_out_step}
    residual = tpot_residual.train_and_validate([p.model for p in points], [p.measured_ms for p in points],
                                                [p.features for p in points], out_of_fold, line_without)
    return {"decode_efficiency": efficiency, "dispatch": dispatch, "validation": validation, "tpot_residual": residual}
