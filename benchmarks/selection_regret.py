"""How much does choosing from predictions cost? For every measured decision - the same model,
batch size, mode and input measured under several (hardware kind, precision) options - pick the
option with the lowest predicted latency, where every prediction comes from a predictor that
never saw that model (leave-one-model-out, exactly as validation scores it). Regret is the
measured latency of the pick over the measured best, minus one.

    python benchmarks/selection_regret.py [--database data/devicefit.duckdb]
"""
from __future__ import annotations

import argparse
import json
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--database", default=None)
    args = ap.parse_args()
    import numpy as np

    from devicefit import store
    from devicefit.paths import DataPaths
    from devicefit.predict import training
    from devicefit.predict.hardware_specs import device_specs

    paths = DataPaths.of_database(args.database) if args.database else DataPaths.default()
    inventory_path = paths.root / "hardware.json"
    if not inventory_path.exists():
        print(f"no {inventory_path}: run `make run` first", file=sys.stderr)
        return 1
    rows = store.read_ok_measurements(paths.database)
    specs = device_specs(json.loads(inventory_path.read_text()))
    data = training.training_data(rows, specs)
    oof = training.held_out_predictions(data, data.models, training.categories_of(data.features), specs)
    decisions: dict[tuple, list[int]] = {}
    for i, f in enumerate(data.features):
        key = (data.models[i], round(float(np.exp(f["log_batch"]))), f["mode"], f["seq_length"])
        decisions.setdefault(key, []).append(i)
    regrets, exact = [], 0
    print(f"{'model':<24}{'batch':>6}{'mode':>10}{'seq':>5}  {'picked':<12}{'best':<12}{'regret':>8}")
    for (model, batch, mode, seq), idx in sorted(decisions.items()):
        idx = [i for i in idx if not np.isnan(oof["latency"][i])]
        if len(idx) < 2:
            continue
        label = lambda i: f"{data.kinds[i]}/{data.features[i]['precision']}"  # noqa: E731
        picked = min(idx, key=lambda i: oof["latency"][i])
        best = min(idx, key=lambda i: data.actual["latency"][i])
        regret = data.actual["latency"][picked] / data.actual["latency"][best] - 1
        regrets.append(regret)
        exact += picked == best
        print(f"{model:<24}{batch:>6}{mode:>10}{seq:>5}  {label(picked):<12}{label(best):<12}{regret:>8.1%}")
    if not regrets:
        print("no decision with two or more measured options", file=sys.stderr)
        return 1
    print(f"\n{len(regrets)} decisions: mean regret {np.mean(regrets):.2%}, max {np.max(regrets):.1%}, exact picks {exact / len(regrets):.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
