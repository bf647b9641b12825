"""Are the generation figures served for large models right? Trains the predictors on the rows of
the models below a parameter count only (as a user's store of small-model measurements would),
then asks the served API (`HardwareModelPredictor.predict_generation_performance`, what `devicefit
predict --scenario generation` prints) for every measured generation row of a larger model, and
prints predicted against measured TTFT, TPOT and memory, with each answer's source.

    python benchmarks/generation_extrapolation.py --database <dir>/devicefit.duckdb [--below 1e9]

Nothing of a larger model informs its answer: not its forward-pass rows, not its generation rows
(the TPOT calibration and host line are the small models'). Memory is compared with the row's
memory target (on a GPU the caching allocator's reserved peak). See
benchmarks/datasets/h200-cuda/README.md for the figures on the H200.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--database", required=True)
    ap.add_argument("--below", type=float, default=1e9, help="train on models with fewer parameters than this (default 1e9)")
    args = ap.parse_args()

    from pathlib import Path

    from benchmark_runners.hardware import detect_hardware
    from devicefit import store
    from devicefit.paths import DataPaths
    from devicefit.predict import artifacts
    from devicefit.predict.api import HardwareModelPredictor
    from devicefit.predict.decode_calibration import model_key
    from devicefit.predict.hardware_specs import training_specs
    from devicefit.predict.memory_model import memory_target
    from devicefit.predict.training import train
    from models.analysis import parameter_breakdown
    from models.resolve import resolve_model

    paths = DataPaths.of_database(args.database)
    rows = store.read_ok_measurements(paths.database)
    hardware = store.read_hardware_rows(paths.database)
    spec_of = {}  # model_key -> spec: a local model by the path its rows name, each resolved once
    for key in {model_key(r) for r in rows}:
        try:
            spec_of[key] = resolve_model(key[1] or key[0])
        except Exception as exc:  # noqa: BLE001 - a local model gone since: its rows are left out, saying so
            print(f"left out {key[0]} ({key[1]}): {exc}", file=sys.stderr)
    rows = [r for r in rows if model_key(r) in spec_of]
    size = {key: parameter_breakdown(spec).total for key, spec in spec_of.items()}
    small = [r for r in rows if size[model_key(r)] < args.below]
    large = [r for r in rows if size[model_key(r)] >= args.below and r.get("mode") == "generation"]
    if not large:
        print(f"no generation rows of a model with {args.below:.3g} parameters or more in {paths.database}", file=sys.stderr)
        return 1
    specs, local_host = training_specs(small, hardware, detect_hardware(probe=not hardware).to_json())
    artifact = train(small, specs, local_host)
    print(f"trained on {artifact['rows']} forward-pass rows of {len(artifact['models'])} models below {args.below:.3g} parameters; "
          f"generation calibrated on {', '.join(artifact['generation']['validation']['models'])}\n")
    with tempfile.TemporaryDirectory() as tmp:
        artifacts.save(DataPaths(Path(tmp)), artifact)
        api = HardwareModelPredictor(benchmark_dir=tmp, record=False)
        errors: dict[str, list[float]] = {"ttft": [], "tpot": [], "memory": []}
        print(f"{'model':<13}{'params':>7}{'prec':>6}{'bs':>4}  {'TTFT ms meas/pred':>19}  {'TPOT ms meas/pred':>19}  "
              f"{'memory GiB meas/pred':>21}  sources (TTFT / TPOT)")
        for r in sorted(large, key=lambda r: (size[model_key(r)], r["model"], r["precision"], r["batch_size"])):
            kind = r["device_kind"]
            answer = api.predict_generation_performance(spec_of[model_key(r)], None, [kind], [kind], r["batch_size"],
                                                        r.get("prompt_tokens"), r["precision"], r.get("new_tokens"))
            p = answer["predictions"][kind]
            memory = memory_target(r)
            pairs = {"ttft": (r.get("ttft_ms"), p.get("ttft_ms")), "tpot": (r.get("tpot_p50_ms"), p.get("tpot_ms")),
                     "memory": (memory / 2**30 if memory else None, p["memory_usage"] / 1024 if p.get("memory_usage") else None)}
            for t, (m, q) in pairs.items():
                if m and q:
                    errors[t].append(abs(q / m - 1))

            def pair(t: str, digits: int) -> str:
                m, q = pairs[t]
                return f"{m:.{digits}f} / {q:.{digits}f}" if m and q else "-"

            print(f"{r['model']:<13}{size[model_key(r)] / 1e9:>6.2f}B{r['precision']:>6}{r['batch_size']:>4}  {pair('ttft', 1):>19}  "
                  f"{pair('tpot', 2):>19}  {pair('memory', 2):>21}  {p.get('ttft_source')} / {p.get('tpot_source')}")
    print()
    for t, e in errors.items():
        if e:
            print(f"{t}: MAPE {statistics.mean(e):.1%}, median APE {statistics.median(e):.1%}, worst {max(e):.1%} (n={len(e)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
