"""Does the worker's speed reference track how fast this machine runs a model right now?

Alternates, for --seconds, three forward passes of a model (ViT-base from its config, random
weights, batch 1) with the speed reference the worker takes around every config
(benchmark_runners/speed_reference.py) before and after them; prints the correlation of the
calls' median time with the inverse of the references' mean, the log-log slope (-1: time follows
the reference's swing in full; speed_reference.TRACKING is the power training uses), and the
spread of the times before and after scaling each by its reference over the median reference,
fully and to that power (what devicefit/predict/speed.py does to training targets).
Keep the machine otherwise idle: the point is what drifts without any process of ours.

With --openvino, the same model compiled by OpenVINO's CPU plugin (f32 precision hint, the
latency hint, torch's thread count; the worker also fixes the input shape and sets the denormal
hint, which this does not) runs beside torch's in every point: three torch calls and three
OpenVINO calls between the references, so both backends' slopes come from the same drift. The
reference is torch's kernel; whether it also tells OpenVINO's speed is the question. The gap
between the two readings is then twice as long, which can flatten both slopes: compare with a
torch-only window taken in the same state.

    python benchmarks/speed_reference_check.py [--seconds 150] [--openvino]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=150.0)
    ap.add_argument("--openvino", action="store_true", help="also time the model compiled by OpenVINO's CPU plugin, interleaved")
    args = ap.parse_args()
    import numpy as np
    import torch
    from transformers import ViTConfig, ViTModel

    from benchmark_runners.speed_reference import KERNEL, TRACKING, reference_gflops

    model = ViTModel(ViTConfig()).eval()
    x = torch.randn(1, 3, 224, 224)
    runs = {"torch": lambda: model(pixel_values=x)}
    if args.openvino:
        runs["OpenVINO"] = _openvino_call(model, x)
    points = []
    with torch.inference_mode():
        for run in runs.values():
            for _ in range(3):
                run()
        end = time.time() + args.seconds
        while time.time() < end:
            before = reference_gflops("cpu")
            medians = []
            for run in runs.values():
                times = []
                for _ in range(3):
                    start = time.perf_counter()
                    run()
                    times.append(time.perf_counter() - start)
                medians.append(statistics.median(times) * 1e3)
            after = reference_gflops("cpu")
            points.append((before, after, *medians))
    o = np.array(points)
    ref = np.sqrt(o[:, 0] * o[:, 1])
    cv = lambda v: v.std() / v.mean()  # noqa: E731
    print(f"{len(o)} points over {args.seconds:.0f} s, threads {torch.get_num_threads()}; reference: {KERNEL}, "
          f"{ref.min():.0f}-{ref.max():.0f} GFLOP/s (median {np.median(ref):.0f})")
    for i, name in enumerate(runs):
        ms = o[:, 2 + i]
        slope = np.polyfit(np.log(ref), np.log(ms), 1)[0]
        scaled = ms * ref / np.median(ref)
        powered = ms * (ref / np.median(ref)) ** TRACKING
        print(f"ViT-base batch 1, {name}: {ms.min():.1f}-{ms.max():.1f} ms (CV {cv(ms):.1%}); correlation of time with "
              f"1/reference {np.corrcoef(ms, 1 / ref)[0, 1]:.2f}, log-log slope {slope:.2f}; scaled to the median reference: "
              f"fully {scaled.min():.1f}-{scaled.max():.1f} ms (CV {cv(scaled):.1%}), to the power {TRACKING} "
              f"{powered.min():.1f}-{powered.max():.1f} ms (CV {cv(powered):.1%})")
    return 0


def _openvino_call(model, x):
    """The model compiled by OpenVINO's CPU plugin with an fp32 latency config's hints
    (benchmark_runners/backends/openvino_backend.py), with as many threads as torch uses."""
    import openvino as ov
    import torch

    compiled = ov.Core().compile_model(ov.convert_model(model, example_input={"pixel_values": x}), "CPU", {
        "INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": torch.get_num_threads()})
    request = compiled.create_infer_request()
    array = x.numpy()
    return lambda: request.infer([array])


if __name__ == "__main__":
    sys.exit(main())
