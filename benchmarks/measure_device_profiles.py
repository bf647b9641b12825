"""Measure the quick profile's CPU configs on this machine under constraint profiles (issue 17's
cross-device validation): each profile is another device (`cpu-<fingerprint>+t1`, `+avx2`, ...),
probed under its profile in a fresh process and registered in the store, and its rows land as
landing files that the store loads like any partition's.

    python benchmarks/measure_device_profiles.py --profiles t1,avx2 --data-dir data
    python benchmarks/predictor_accuracy.py --database data/devicefit.duckdb

The configs are exactly what the quick profile measures for torch on the CPU (batch sizes,
precisions this CPU runs natively under the cap, the long-sequence and training configs),
so leave-one-device-out compares like with like. The unconstrained device's rows come from
`make run` (or `devicefit run --hardware cpu`) into the same data directory. Each profile is a
(device, model) partition like any other: `devicefit run --hardware cpu-<fingerprint>+t1`
measures the same through Dagster; this script measures without an instance. Run it on an idle
machine: it takes minutes per profile (the 1-thread one about twice the unconstrained run).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profiles", default="t1,avx2", help="comma-separated profile slugs: t1, avx2, t1-avx2, ...")
    ap.add_argument("--data-dir", type=Path, default=ROOT / "data", help="the data directory whose store and raw/ receive the rows")
    ap.add_argument("--models", default=None, help="comma-separated models (default: the quick profile's)")
    args = ap.parse_args()

    from benchmark_runners.hardware import detect_hardware
    from devicefit import store
    from devicefit.fleet.partitions import partition_key, resolve_local
    from devicefit.landing import load_landing_files
    from devicefit.paths import DataPaths
    from devicefit.pipeline import measure_partition
    from devicefit.profiles import Selection

    paths = DataPaths(args.data_dir)
    inventory = detect_hardware()
    cpu = inventory.to_json()["platforms"]["cpu"]["devices"][0]["fingerprint"]
    selection = Selection(models=tuple(args.models.split(",")) if args.models else ())
    for slug in filter(None, args.profiles.split(",")):
        # The device partition applies the profile to every config (threads, ISA cap, and the
        # precisions the capped CPU runs natively), probes the device under it once (cached beside
        # the data), and lands the probe in each document, so loading registers the device.
        device = resolve_local(f"{cpu}+{slug}", inventory.to_json()).device_id  # refuses a profile this CPU cannot honour
        for model in selection.model_names():
            outcome = measure_partition(partition_key(device, model), selection, inventory, paths)
            ok = sum(r.status == "ok" for r in outcome.results)
            print(f"  {device} {model}: {ok}/{len(outcome.results)} ok in {outcome.seconds:.0f} s", flush=True)
    report = load_landing_files(paths.database, paths.raw)
    print(f"loaded {report.rows_loaded} rows from {len(report.loaded)} files; quarantined {report.quarantined}")
    with store.opened(paths.database) as con:
        store.refresh_aggregates(con)
    return 0


if __name__ == "__main__":
    sys.exit(main())
