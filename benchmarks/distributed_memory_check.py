"""How close is the distributed planner's memory arithmetic to a measured training step?

For every fp32 training row measured on CPU (status ok), the planner's single-device estimate
(fp32 Adam 16 bytes/parameter + Korthikanti activations, or traced activations for
non-transformers; no CUDA context on a CPU) is compared with the measured peak RSS growth
over the process before the model was loaded.

    python benchmarks/distributed_memory_check.py [--database data/devicefit.duckdb]
"""
from __future__ import annotations

import argparse
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--database", default=None)
    args = ap.parse_args()
    from devicefit import store
    from devicefit.paths import DataPaths
    from devicefit.select.distributed import GB, estimate, transformer_shape
    from models.analysis import parameter_count
    from models.resolve import resolve_model

    paths = DataPaths.of_database(args.database) if args.database else DataPaths.default()
    rows = [r for r in store.read_ok_measurements(paths.database)
            if r["mode"] == "training" and r["precision"] == "fp32" and r["device_kind"] == "cpu"]
    if not rows:
        print("no fp32 CPU training rows measured: run `make run` first", file=sys.stderr)
        return 1
    print(f"{'model':<22}{'batch':>6}{'estimate MB':>13}{'measured MB':>13}{'error':>8}  activations")
    errors = []
    for r in sorted(rows, key=lambda r: (r["model"], r["batch_size"])):
        spec = resolve_model(r.get("model_path") or r["model"])
        params = parameter_count(spec)
        est, method = estimate(spec, params, transformer_shape(spec, params), 1, r["batch_size"], r["seq_length"] or 0,
                               False, 0, False, False, False)
        predicted = est.per_gpu - est.cuda_context
        measured = r["peak_rss_bytes"] - r["rss_before_load_bytes"]
        errors.append(abs(predicted - measured) / measured)
        print(f"{r['model']:<22}{r['batch_size']:>6}{predicted / 1e6:>13.0f}{measured / 1e6:>13.0f}{predicted / measured - 1:>+8.0%}  "
              f"{method.split(':')[0]}")
    print(f"\nmean absolute error {sum(errors) / len(errors):.0%} over {len(errors)} rows (GB = {GB:.0e} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
