"""Measure the quick profile's CPU configs on this machine under constraint profiles (issue 17's
cross-device validation): each profile is another device (`cpu-<fingerprint>+t1`, `+avx2`, ...),
probed under its profile in a fresh process and registered in the store, and its rows land as
landing files that the store loads like any partition's.

    python benchmarks/measure_device_profiles.py --profiles t1,avx2 --data-dir data
    python benchmarks/predictor_accuracy.py --database data/devicefit.duckdb

The configs are exactly what the quick profile measures for torch on the CPU (batch sizes,
precisions this CPU runs natively under the cap, the long-sequence and training configs),
so leave-one-device-out compares like with like. The unconstrained device's rows come from
`make run` (or `devicefit run --hardware cpu`) into the same data directory. Run it on an idle
machine: it takes minutes per profile (the 1-thread one about twice the unconstrained run).
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
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
    from benchmark_runners.sweep import new_run_id, run_sweep
    from devicefit import store
    from devicefit.fleet.constraints import ConstraintProfile
    from devicefit.fleet.devices import local_device, probe_under
    from devicefit.landing import load_landing_files, write_landing
    from devicefit.paths import DataPaths
    from devicefit.profiles import Selection, partition_configs
    from devicefit.results_io import results_document

    paths = DataPaths(args.data_dir)
    inventory = detect_hardware()
    hardware = inventory.to_json()
    cpu = hardware["platforms"]["cpu"]["devices"][0]
    selection = Selection(models=tuple(args.models.split(",")) if args.models else ())
    for slug in filter(None, args.profiles.split(",")):
        profile = ConstraintProfile.parse_slug(slug)
        device = local_device("cpu", hardware, profile)  # refuses a profile this CPU cannot honour
        device.probe = probe_under(device)
        with store.opened(paths.database) as con:
            store.migrate(con)
            store.register_device(con, device.to_json())
        print(f"{device.id}: {device.probe['matmul_gflops_best']:.0f} GFLOP/s, {device.probe['memory_bandwidth_gbs_best']:.1f} GB/s "
              f"under {slug} (ATen {device.probe['aten_cpu_capability']})", flush=True)
        # The precisions this CPU runs natively under the cap (bf16 without AMX is dropped by quick).
        isa = cpu.get("isa_flags") or []
        if profile.isa:
            isa = [f for f in isa if not f.startswith(("amx", "avx512"))] if profile.isa == "avx2" else [f for f in isa if not f.startswith("amx")]
        # The document carries the profile's probe under the device id, so loading it anywhere
        # registers the device with its own peaks (devicefit.store.devices.measured_devices).
        document_hardware = {**hardware, "probes": {**(hardware.get("probes") or {}), device.id: {**device.probe, "fingerprint": device.id}}}
        for model in selection.model_names():
            configs = [replace(c, threads=profile.threads, isa=profile.isa) for c in partition_configs(model, "cpu", selection, isa)]
            started = time.monotonic()
            run_id = new_run_id()
            results = run_sweep(configs, run_id=run_id, inventory=inventory)
            write_landing(paths.raw, f"device:{device.id}|{model}", results_document(run_id, results, document_hardware))
            ok = sum(r.status == "ok" for r in results)
            print(f"  {model}: {ok}/{len(results)} ok in {time.monotonic() - started:.0f} s", flush=True)
    report = load_landing_files(paths.database, paths.raw)
    print(f"loaded {report.rows_loaded} rows from {len(report.loaded)} files; quarantined {report.quarantined}")
    with store.opened(paths.database) as con:
        store.refresh_aggregates(con)
    return 0


if __name__ == "__main__":
    sys.exit(main())
