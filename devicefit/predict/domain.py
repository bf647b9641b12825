"""What the trained link of the predictor covers, beyond its categories: the model sizes it
was fitted on, and which devices had too few models to be trained on at all."""
from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from devicefit.predict.training_rows import TrainingData


def parameter_range(data: TrainingData) -> list[int]:
    """The smallest and largest parameter count trained on: the size range the boosters and
    their validated intervals describe (the predictor answers further out from the roofline)."""
    params = [round(math.exp(f["log_params"])) for f in data.features]
    return [min(params), max(params)]


def thinly_measured(data: TrainingData) -> dict[str, str]:
    """Devices measured on at most half as many models as the best-covered one (the browser kinds
    in the quick profile: 6 and 2 models against the CPU's 12), with the reason. Leave-one-model-
    out on so few models does not validate a residual fit (wasm held out at 50% latency MAPE,
    software WebGPU at 91%, while the CPU's rows stay at 12%), so their rows calibrate the
    roofline link of their kind instead, and the trained link does not answer for them."""
    per_device: dict[str, set[str]] = {}
    for device, model in zip(data.devices, data.models):
        per_device.setdefault(device, set()).add(model)
    most = max((len(m) for m in per_device.values()), default=0)
    return {d: f"{len(m)} models measured on {d}, at most half of the {most} of the best-covered device: answered by the calibrated "
               "roofline, not trained on" for d, m in per_device.items() if len(m) <= most / 2}


def without_devices(data: TrainingData, devices: dict[str, str]) -> TrainingData:
    """`data` without the rows of `devices`, each counted under its reason in `skipped`."""
    keep = np.asarray([d not in devices for d in data.devices], dtype=bool)
    pick = lambda values: [v for v, k in zip(values, keep) if k]  # noqa: E731
    skipped = dict(data.skipped)
    for device, reason in devices.items():
        skipped[reason] = int(sum(1 for d in data.devices if d == device))
    return replace(data, features=pick(data.features), actual={t: v[keep] for t, v in data.actual.items()},
                   memory_reference=data.memory_reference[keep], points=pick(data.points), models=pick(data.models),
                   kinds=pick(data.kinds), devices=pick(data.devices), families=pick(data.families), skipped=skipped,
                   pre_load_rss=pick(data.pre_load_rss))
