"""How good are the predictors? Prints leave-one-model-out error per target (and per family,
per device, and the worst model-device pairs with their bias), leave-one-device-out error per held-out device when the database holds several
(two CPUs: `devicefit ingest` another machine's landing files), the conformal interval's
measured coverage, and how fast a prediction matrix is produced: 10,000 rows, and the 100
models x 8 hardware x 5 batch sizes x 3 precisions matrix.

    python benchmarks/predictor_accuracy.py [--database data/devicefit.duckdb]

It trains on the database's measured rows (as the pipeline does), each scored against the
peaks that its own device's probe recorded (the machine that measured it, which need not be
this one), or this machine's when the database has none. The 100 models are the catalog
plus BERT-architecture variants built from configs (layers x width); their FLOPs are counted
once (timed separately), then the matrix is timed.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import sys
import time


def variant_specs(n: int):
    from models.catalog import load_catalog
    from models.resolve import resolve_model

    specs = list(load_catalog().values())
    base = resolve_model("bert-base-uncased")
    widths = (128, 192, 256, 320, 384, 448, 512, 576, 640, 768)
    for layers in range(1, 13):
        for width in widths:
            if len(specs) >= n:
                return specs
            config = {**base.config, "num_hidden_layers": layers, "hidden_size": width, "num_attention_heads": width // 64,
                      "intermediate_size": 4 * width}
            specs.append(dataclasses.replace(base, name=f"bert-L{layers}-H{width}", config=config, published_parameters=None))
    return specs


def model_facts_seconds(specs) -> tuple[float, float]:
    """Seconds to trace `specs` into an empty disk cache (models/derived_cache.py), and to read
    them back with this process's own memory of them forgotten, as a new process would."""
    import os
    import tempfile

    from devicefit.predict import features
    from models import op_profile

    def take() -> float:
        for memo in (op_profile._profiles, op_profile._per_sample_peaks, features._points):
            memo.clear()
        t0 = time.perf_counter()
        for spec in specs:  # the batch-2 trace (per-sample activation growth) is lazy: take it here, with the facts
            features.model_point(spec).inference_activation_bytes(2)
        return time.perf_counter() - t0

    before = os.environ.get("DEVICEFIT_CACHE_DIR")
    with tempfile.TemporaryDirectory() as empty:
        os.environ["DEVICEFIT_CACHE_DIR"] = empty
        try:
            return take(), take()
        finally:
            if before is None:
                del os.environ["DEVICEFIT_CACHE_DIR"]
            else:
                os.environ["DEVICEFIT_CACHE_DIR"] = before


def print_held_out(title: str, per_device: dict, bands: dict, where: str, alone: str, note: str) -> None:
    """One held-out-hardware section: the error per held-out device, then each kind's interval."""
    print(f"  {title}: " + ", ".join(f"{k} {m.mape:.1%} (median {m.median_ape:.1%}, n={m.n})" for k, m in per_device.items()))
    for kind, band in bands.items():
        coverage = f"not measurable ({alone})" if band["coverage"] is None else f"{band['coverage']:.1%}"
        print(f"    the interval of a device of kind {kind} {where}: x/÷{math.exp(band['log_half_width']):.2f}, coverage {coverage}{note}")


def print_worst_models(target: str, held_out_rows: list[dict], shown: int = 5) -> None:
    """The `shown` (model, device) pairs whose held-out error is largest, with the median ratio of
    predicted to measured: which way a model is off (a bias) and by how much, where the MAPE
    alone cannot say whether a model is missed systematically or only noisily."""
    groups: dict[tuple[str, str], list[float]] = {}
    for r in held_out_rows:
        if r.get(f"{target}_predicted") and r.get(f"{target}_measured"):
            groups.setdefault((r["model"], r["device"]), []).append(r[f"{target}_predicted"] / r[f"{target}_measured"])
    errors = {pair: statistics.mean(abs(x - 1) for x in ratios) for pair, ratios in groups.items()}
    ranked = sorted(groups, key=errors.get, reverse=True)[:shown]
    print(f"  {target} held-out model, worst model-device pairs (MAPE, median predicted/measured): " + ", ".join(
        f"{model} on {device} {errors[model, device]:.0%} ({statistics.median(groups[model, device]):.2f}x, n={len(groups[model, device])})"
        for model, device in ranked))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--database", default=None)
    args = ap.parse_args()

    from benchmark_runners import registry
    from benchmark_runners.hardware import detect_hardware
    from devicefit import store
    from devicefit.paths import DataPaths
    from devicefit.predict.features import model_point
    from devicefit.predict.hardware_specs import training_specs
    from devicefit.predict.predictor import PerformancePredictor, Request
    from devicefit.predict.training import ERROR_BARS, TARGETS, train
    from devicefit.predict.validation_report import ValidationReport

    paths = DataPaths.of_database(args.database) if args.database else DataPaths.default()
    rows = store.read_ok_measurements(paths.database)
    hardware = store.read_hardware_rows(paths.database)
    # The store's devices carry their own probes; this machine's probe only names the local host.
    specs, local_host = training_specs(rows, hardware, detect_hardware(probe=not hardware).to_json())
    measured = sorted({(r["device_kind"], r.get("host_fingerprint") or r.get("hostname")) for r in rows})
    # A device without a probed bf16 rate has its bf16 carried to and from other devices by the fp32
    # peaks (operator_roofline.transfer_roofline): the Xeon's 3.43x bf16-over-fp32 on OpenVINO
    # against the EPYC's 1.85x is the leave-one-device-out error that follows (README).
    print("devices: " + "; ".join(f"{k}: {s.name}, {s.peak_gflops:.0f} GFLOP/s, {s.bandwidth_gbs:.1f} GB/s, "
                                  + (f"bf16 {s.bf16_gflops:.0f} GFLOP/s" if s.bf16_gflops else "no probed bf16 rate") + f" ({s.source})"
                                  for k, s in specs.items() if "@" in k or (k, None) in measured))
    started = time.perf_counter()
    artifact = train(rows, specs, local_host)
    print(f"trained on {artifact['rows']} rows of {len(artifact['models'])} models on {len(artifact['domain']['device'])} device(s) "
          f"in {time.perf_counter() - started:.1f} s (skipped: {artifact['skipped'] or 'none'})")
    print("allocator per device (what the predictions are for): "
          + ("; ".join(f"{d}: {t}" for d, t in sorted(artifact["allocator"].items())) or "none recorded") + "\n")
    validation = ValidationReport.of(artifact)
    print(f"{'target':<11}{'LOMO MAPE':>10}{'median APE':>12}{'within 10%':>12}{'bar':>6}{'coverage':>10} (nominal {validation.level:.0%})")
    for t in TARGETS:
        v = validation.targets[t]
        m = v.leave_one_model_out
        print(f"{t:<11}{m.mape:>10.1%}{m.median_ape:>12.1%}{m.within_10pct:>12.0%}{ERROR_BARS[t]:>6.0%}{v.interval_coverage:>10.1%}")
    for t in TARGETS:
        print(f"  {t} per family: " + ", ".join(f"{k} {m.mape:.0%}" for k, m in validation.targets[t].per_family.items()))
    for t in TARGETS:
        v = validation.targets[t]
        print(f"  {t} held-out model, per device: " + ", ".join(f"{k} {m.mape:.1%} (n={m.n})" for k, m in v.per_hardware.items()))
    for t in TARGETS:
        print_worst_models(t, validation.held_out_rows)
    for t in TARGETS:
        v = validation.targets[t]
        if v.leave_one_hardware_out:
            print_held_out(f"{t} leave-one-device-out (trained on the other devices only)", v.leave_one_hardware_out_per_device,
                           v.leave_one_hardware_out_band_per_kind, "that no row measured", "one device",
                           f" (nominal {validation.level:.0%}; each device's calibrated on the others')")
        if v.leave_one_machine_out_per_device:
            print_held_out(f"{t} leave-one-machine-out (every device of the machine held out together)", v.leave_one_machine_out_per_device,
                           v.leave_one_machine_out_band_per_kind, "on a machine nothing was measured on", "one machine", "")
    ttft = artifact["validation"].get("ttft")
    if ttft:
        decoder = "" if ttft["decoder_only_mape"] is None else \
            f"; decoder-only {ttft['decoder_only_mape']:.1%} (n={ttft['decoder_only_rows']})"
        print(f"generation TTFT, the forward-pass predictor at the prompt's length, {ttft['method']}: MAPE {ttft['mape']:.1%} "
              f"over {ttft['rows']} rows{decoder}")
        for model, v in ttft["per_model"].items():
            print(f"  {model}: MAPE {v['mape']:.1%} (n={v['rows']})")
    generation = artifact.get("generation") or {}
    gv = generation.get("validation") or {}
    if gv.get("rows"):
        print(f"generation TPOT, device roofline x fitted ratio against the host's kernel dispatch, {gv['method']}: MAPE "
              f"{gv['tpot_mape']:.1%} over {gv['rows']} rows of {', '.join(gv['models'])}")
        for group, v in (gv.get("per_group") or {}).items():
            print(f"  {group}: MAPE {v['tpot_mape']:.1%} (n={v['rows']})")
    residual = generation.get("tpot_residual") or {}
    if residual.get("line_mape") is not None:
        print(f"generation TPOT, LightGBM on the line's held-out error, {residual['method']}: MAPE {residual['with_trees_mape']:.1%} "
              f"against the line's {residual['line_mape']:.1%} over {residual['validated_rows']} rows of {len(residual['models'])} "
              f"models: {'served' if residual['used'] else 'not served (the line alone is better held out)'}")
    elif residual.get("reason"):
        print(f"generation TPOT, LightGBM on the line's held-out error: not trained ({residual['reason']})")
    for group, line in (generation.get("dispatch") or {}).items():
        print(f"  host line {group}: {line['step_ms']:.2f} ms per step + {line['us_per_kernel']:.1f} us per kernel, "
              f"{'the longer of host and device' if line['asynchronous'] else 'added to the device'} (n={line['n']})")
    for key, cal in (generation.get("decode_efficiency") or {}).items():
        print(f"  device ratio {key}: {math.exp(cal['log_ratio']):.2f} x roofline (n={cal['n']}, device-bound "
              f"{cal.get('device_bound_rows', '?')}: {', '.join(cal['models'])})")
    predictor = PerformancePredictor(artifact)

    specs = variant_specs(100)
    facts_s, read_s = model_facts_seconds(specs)
    points = [model_point(s) for s in specs]
    requests = [Request(p, b, pr, "inference", hw) for p in points for hw in registry.kind_names()
                for b in (1, 2, 4, 8, 16) for pr in ("fp32", "fp16", "int8")]
    t0 = time.perf_counter()
    predictor.predict(requests[:10_000])
    t10k = time.perf_counter() - t0
    t0 = time.perf_counter()
    preds = predictor.predict(requests)
    t_full = time.perf_counter() - t0
    sources: dict[str, int] = {}
    for p in preds:
        sources[p.source] = sources.get(p.source, 0) + 1
    print(f"\nmodel facts (operators traced on the meta device) for {len(points)} models: {facts_s:.1f} s traced into an "
          f"empty cache; {read_s:.2f} s read back from it by a process that had not traced them")
    print(f"10,000 predictions: {t10k * 1e3:.0f} ms ({10_000 / t10k:,.0f}/s)")
    print(f"{len(points)} models x {len(registry.kind_names())} hardware x 5 batch sizes x 3 precisions = {len(requests):,} predictions: "
          f"{t_full * 1e3:.0f} ms; by source: {sources}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
