"""Does the worker's speed reference track how fast this machine runs a model right now?

Alternates, for --seconds, three forward passes of a model (ViT-base from its config, random
weights, batch 1) with the speed reference the worker takes around every config
(benchmark_runners/speed_reference.py) before and after them; prints the correlation of the
calls' median time with the inverse of the references' mean, the log-log slope (-1: time follows
the reference exactly), and the spread of the times before and after scaling each by its
reference over the median reference (what devicefit/predict/speed.py does to training targets).
Keep the machine otherwise idle: the point is what drifts without any process of ours.

    python benchmarks/speed_reference_check.py [--seconds 150]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=150.0)
    args = ap.parse_args()
    import numpy as np
    import torch
    from transformers import ViTConfig, ViTModel

    from benchmark_runners.speed_reference import KERNEL, reference_gflops

    model = ViTModel(ViTConfig()).eval()
    x = torch.randn(1, 3, 224, 224)
    points = []
    with torch.inference_mode():
        for _ in range(3):
            model(pixel_values=x)
        end = time.time() + args.seconds
        while time.time() < end:
            before = reference_gflops("cpu")
            times = []
            for _ in range(3):
                start = time.perf_counter()
                model(pixel_values=x)
                times.append(time.perf_counter() - start)
            after = reference_gflops("cpu")
            points.append((before, statistics.median(times) * 1e3, after))
    o = np.array(points)
    ref = np.sqrt(o[:, 0] * o[:, 2])
    ms = o[:, 1]
    slope = np.polyfit(np.log(ref), np.log(ms), 1)[0]
    scaled = ms * ref / np.median(ref)
    cv = lambda v: v.std() / v.mean()  # noqa: E731
    print(f"{len(o)} points over {args.seconds:.0f} s, threads {torch.get_num_threads()}; reference: {KERNEL}")
    print(f"ViT-base batch 1: {ms.min():.1f}-{ms.max():.1f} ms (CV {cv(ms):.1%}); reference {ref.min():.0f}-{ref.max():.0f} GFLOP/s "
          f"(median {np.median(ref):.0f})")
    print(f"correlation of time with 1/reference: {np.corrcoef(ms, 1 / ref)[0, 1]:.2f}; log-log slope {slope:.2f}")
    print(f"scaled to the median reference: {scaled.min():.1f}-{scaled.max():.1f} ms (CV {cv(scaled):.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
