"""What the quick profile's call budget costs the predictors, replayed over stored rows.

`benchmark_runners/call_budget.py` skips a config whose one call it predicts, from the same
worker's smaller batches of the same config, over the policy's `call_budget_s`. This replays that
rule over a database's measured rows (each group of rows that differ by batch alone, in batch
order; the rows' latency as the predictors read it stands for the p50 the worker uses) and
leaves the rows it would have skipped out of every fold's training. It prints which rows those
are, then leave-one-model-out error on the kept rows and on the left-out ones (predicted as if
never measured), trained on every row against trained without them, per target and per device;
and leave-one-device-out per device where the database holds several.

    .venv/bin/python benchmarks/call_budget_replay.py --database D/devicefit.duckdb [--budget 2.25]
"""
from __future__ import annotations

import argparse
import math

import numpy as np


def left_out(data, budget_ms: float) -> np.ndarray:
    """The rows the call budget would have skipped: per (device, model, mode, precision, length,
    backend) in batch order, each predicted from the smaller batches kept before it."""
    from benchmark_runners.call_budget import extrapolated_ms

    batch = [round(math.exp(f["log_batch"])) for f in data.features]
    groups: dict[tuple, list[int]] = {}
    for i, f in enumerate(data.features):
        groups.setdefault((data.devices[i], data.models[i], f["mode"], f["precision"], f["seq_length"], f["backend"]), []).append(i)
    skip = np.zeros(len(data), dtype=bool)
    for rows in groups.values():
        kept: dict[int, float] = {}
        for i in sorted(rows, key=lambda i: batch[i]):
            smaller = {b: ms for b, ms in kept.items() if b < batch[i]}
            if smaller and extrapolated_ms(batch[i], smaller)[0] > budget_ms:
                skip[i] = True
            else:
                kept[batch[i]] = float(data.actual["latency"][i])
    return skip


def mape(data, predicted: dict, target: str, mask: np.ndarray) -> str:
    ok = mask & ~np.isnan(predicted[target])
    if not ok.any():
        return "-"
    return f"{np.mean(np.abs(predicted[target][ok] / data.actual[target][ok] - 1)):.1%}"


def main() -> int:
    from benchmark_runners.hardware import detect_hardware
    from devicefit import store
    from devicefit.paths import DataPaths
    from devicefit.predict.domain import thinly_measured, without_devices
    from devicefit.predict.hardware_specs import training_specs
    from devicefit.predict.training import TARGETS, categories_of, held_out_predictions, specs_per_device, training_data
    from devicefit.profiles import QUICK

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--database", required=True)
    ap.add_argument("--budget", type=float, default=QUICK.policy.call_budget_s, help="seconds a call (default: the quick profile's)")
    args = ap.parse_args()

    paths = DataPaths.of_database(args.database)
    rows = store.read_ok_measurements(paths.database)
    specs, _ = training_specs(rows, store.read_hardware_rows(paths.database), detect_hardware(probe=False).to_json())
    specs = specs_per_device(rows, specs)
    every = training_data(rows, specs)
    thin = thinly_measured(every)
    data = without_devices(every, thin) if thin else every
    skip = left_out(data, args.budget * 1e3)
    print(f"{int(skip.sum())} of {len(data)} rows over a {args.budget:g} s call budget:")
    for i in np.flatnonzero(skip):
        f = data.features[i]
        print(f"  {data.devices[i]} {data.models[i]} {f['mode']} {f['precision']} batch {round(math.exp(f['log_batch']))}"
              f"{' seq ' + str(f['seq_length']) if f['seq_length'] else ''}: {data.actual['latency'][i]:.0f} ms")
    categories = categories_of(data.features)
    kinds = [k for k in set(data.kinds) if len({d for d, kind in zip(data.devices, data.kinds) if kind == k}) > 1]
    # A held-out device is predicted from another device of its kind: only where one kind has two.
    folds = [("leave one model out", data.models)] + ([("leave one device out", data.devices)] if kinds else [])
    everything = np.ones(len(data), dtype=bool)
    for title, groups in folds:
        full = held_out_predictions(data, groups, categories, specs)
        cut = held_out_predictions(data, groups, categories, specs, untrained=skip)
        print(f"\n{title}: trained on every row -> without the left-out rows")
        for t in TARGETS:
            print(f"  {t:<10} kept rows {mape(data, full, t, ~skip)} -> {mape(data, cut, t, ~skip)}; "
                  f"left-out rows {mape(data, full, t, skip)} -> {mape(data, cut, t, skip)}; "
                  f"all rows {mape(data, full, t, everything)} -> {mape(data, cut, t, everything)}")
        for device in sorted(set(data.devices)):
            mine = np.array([d == device for d in data.devices])
            print(f"  latency on {device}: kept rows {mape(data, full, 'latency', mine & ~skip)} -> "
                  f"{mape(data, cut, 'latency', mine & ~skip)}; left-out rows {mape(data, full, 'latency', mine & skip)} -> "
                  f"{mape(data, cut, 'latency', mine & skip)} (n={int((mine & skip).sum())})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
