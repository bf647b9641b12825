"""What the quick profile's call budget costs the predictors, replayed over stored rows.

`benchmark_runners/call_budget.py` skips a config whose one call it predicts, from the same
worker's smaller batches of the same config, over the policy's `call_budget_s`. This replays that
rule over a database's measured rows (each group of rows that differ by batch alone, in batch
order, judged on the calls of the rows kept before it, as the worker judges its own) and
leaves the rows it would have skipped out of every fold's training. It prints which rows those
are, then leave-one-model-out error on the kept rows and on the left-out ones (predicted as if
never measured), trained on every row against trained without them, per target and per device;
leave-one-device-out per device where the database holds several devices of one kind; and the
left-out rows as served, predicted by a fit on every other row (their own model's smaller batches
included).

    .venv/bin/python benchmarks/call_budget_replay.py --database D/devicefit.duckdb [--budget 2.25]
"""
from __future__ import annotations

import argparse
import json
import math

import numpy as np


def _result(row: dict):
    """A stored row as the worker had it (BenchmarkResult): the call budget's evidence."""
    from benchmark_runners.records import BenchmarkResult

    config = row.get("backend_config")
    return BenchmarkResult.from_json({**row, "backend_config": json.loads(config) if isinstance(config, str) else config})


def skipped_rows(rows: list[dict], budget_s: float) -> set[tuple]:
    """The stored rows the call budget would have skipped, run in a worker's order: per config
    (the same device, model, backend, mode, precision and input), batches upwards, each judged on
    the rows kept before it by benchmark_runners.call_budget's own prediction. Each as (device,
    model, mode, precision, batch, sequence length), the training rows' terms."""
    from benchmark_runners.call_budget import call_ms, extrapolated_ms
    from devicefit.predict.hardware_specs import row_device

    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if r.get("mode") == "generation":
            continue  # generation requests keep their own policy, without a budget
        groups.setdefault((row_device(r), r["model"], r["backend"], r["mode"], r["precision"], str(r.get("input_dims"))), []).append(r)
    out = set()
    for members in groups.values():
        kept: dict[int, float] = {}
        for r in sorted(members, key=lambda r: r["batch_size"]):
            result = _result(r)
            smaller = {b: ms for b, ms in kept.items() if b < r["batch_size"]}
            predicted = extrapolated_ms(r["batch_size"], smaller)
            if predicted is not None and predicted[0] > budget_s * 1e3:
                out.add((row_device(r), r["model"], r["mode"], r["precision"], r["batch_size"], r.get("seq_length") or 0))
            elif result.p50_ms and not result.contended:
                kept[r["batch_size"]] = call_ms(result)
    return out


def left_out(data, skipped: set[tuple]) -> np.ndarray:
    """The training rows of the `skipped` configs."""
    return np.array([(data.devices[i], data.models[i], f["mode"], f["precision"], round(math.exp(f["log_batch"])),
                      f["seq_length"] or 0) in skipped for i, f in enumerate(data.features)], dtype=bool)


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
    if not args.budget > 0:  # NaN included
        ap.error(f"--budget must be a positive number of seconds, got {args.budget}")

    paths = DataPaths.of_database(args.database)
    rows = store.read_ok_measurements(paths.database)
    specs, _ = training_specs(rows, store.read_hardware_rows(paths.database), detect_hardware(probe=False).to_json())
    specs = specs_per_device(rows, specs)
    every = training_data(rows, specs)
    thin = thinly_measured(every)
    data = without_devices(every, thin) if thin else every
    skip = left_out(data, skipped_rows(rows, args.budget))
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
    # As served: the left-out rows predicted by a fit on every other row, their own model's smaller
    # batches included (one fold, whose held-out "group" is the left-out rows).
    served = held_out_predictions(data, ["left out" if x else "kept" for x in skip], categories, specs)
    print("\nthe left-out rows, predicted by a fit on every other row (their models' smaller batches in it): "
          + "; ".join(f"{t} {mape(data, served, t, skip)}" for t in TARGETS))
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
