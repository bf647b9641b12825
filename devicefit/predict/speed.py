"""Each row's time at its device's typical speed, from the speed reference the worker took
around it (benchmark_runners/speed_reference.py).

A VM's host can slow its vCPUs by half for minutes with nothing in the guest to show it. A row
timed then is a true figure of that moment, but as a training target it is noise: the
predictors answer "how fast will this config run on this device", not "how fast did it run
while a neighbour held the core". So a row with a reading is scaled by its reference rate over
the device's typical one (the median over that device's rows with a reading), raised to
TRACKING (0.6): a config timed while the kernel ran 30% slower than usual counts as 0.7 ** 0.6 =
0.81x its measured time. A model's time followed the reading with a log-log slope of about -0.6
in two windows on the AMD EPYC VM, for torch and OpenVINO alike (one earlier window read -1.04);
on make run 29's rows scaling fully over-corrected (held-out latency 15.3% against 13.9%; see
benchmark_runners/speed_reference.py for the figures and their limits).

Rows without a reading (older rows, other machines' landing files, GPUs, the browser kinds) keep
their measured figure, and so do OpenVINO's: over three make runs its rows were predicted better
unscaled (speed_reference.TRACKING_BY_BACKEND). The reading's ratio is clamped to [1/MAX_FACTOR, MAX_FACTOR] first: beyond
it, a reading is more likely disturbed itself than the machine that far off. The stored rows never change;
only the training targets do, and the artifact records each device's typical rate and range.
"""
from __future__ import annotations

from typing import Any

from benchmark_runners.speed_reference import MAX_FACTOR, mean_gflops, training_power, typical_rates
from devicefit.predict.hardware_specs import row_device


def speed_factors(rows: list[dict[str, Any]]) -> tuple[list[float], dict[str, dict[str, Any]]]:
    """Per row, the factor its measured time is multiplied by (1.0 where it has no reading);
    and per device, its typical rate, the rows scaled and the range of their factors."""
    readings: dict[str, list[float]] = {}
    rates: list[float | None] = []
    for r in rows:
        rate = mean_gflops(r.get("speed_reference"))
        rates.append(rate)
        if rate is not None:
            readings.setdefault(row_device(r), []).append(rate)
    typical = typical_rates(readings)
    factors, scaled, powers = [], {}, {}
    for r, rate in zip(rows, rates):
        device, power = row_device(r), training_power(r.get("backend"))
        if rate is None or device not in typical or power == 0:
            factors.append(1.0)
            continue
        factor = min(max(rate / typical[device], 1 / MAX_FACTOR), MAX_FACTOR) ** power
        factors.append(factor)
        scaled.setdefault(device, []).append(factor)
        powers[device] = power
    summary = {d: {"typical_gflops": round(typical[d], 2), "rows": len(f), "factor_min": round(min(f), 3),
                   "factor_max": round(max(f), 3), "power": powers[d]} for d, f in scaled.items()}
    return factors, summary
