"""Does the harness add overhead? Compares its p50 with a bare `torch.inference_mode()`
perf_counter loop over the same loaded model, inputs and threads, and prints the ratio.

Both run in this one process on one loaded model: the spread between processes (memory
layout, neighbours on a shared host) is several times larger than the overhead in question.
The harness side is the production path (TorchBackend.prepare/make_step, harness.measure);
the two alternate in ABBA order for --rounds rounds, so slow drift of the machine cancels.

    python benchmarks/harness_vs_bare.py --model bert-base-uncased --batch-size 1
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time


def bare_loop_p50(model, inputs, iterations: int) -> float:
    import torch

    samples = []
    with torch.inference_mode():
        for _ in range(3):
            model(**inputs)
        for _ in range(iterations):
            t0 = time.perf_counter_ns()
            model(**inputs)
            samples.append((time.perf_counter_ns() - t0) / 1e6)
    return statistics.median(samples)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="bert-base-uncased")
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--seq-length", type=int, default=None)
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--threads", type=int, default=None, help="default: physical cores")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--max-time", type=float, default=10.0)
    args = ap.parse_args()

    import psutil
    import torch

    from benchmark_runners.backends.torch_backend import TorchBackend
    from benchmark_runners.harness import TimingPolicy, measure
    from benchmark_runners.records import BenchmarkConfig
    from benchmark_runners.timers import clock_for
    from models.inputs import input_signature
    from models.resolve import resolve_model
    from models.tensors import make_inputs

    threads = args.threads or psutil.cpu_count(logical=False) or 1
    torch.set_num_threads(threads)
    policy = TimingPolicy(max_time_s=args.max_time)
    config = BenchmarkConfig(args.model, batch_size=args.batch_size, seq_length=args.seq_length,
                             precision=args.precision, threads=threads, policy=policy)
    spec = resolve_model(args.model)
    backend = TorchBackend()
    prepared = backend.prepare(spec, config)
    inputs = make_inputs(input_signature(spec, args.batch_size, args.seq_length), "cpu", prepared.input_float_dtype)
    step = backend.make_step(prepared, inputs)

    def harness_p50() -> tuple[float, int, str]:
        with backend.measurement_context(prepared):
            m = measure(step, clock_for("cpu"), policy)
        return statistics.median(m.samples_ns) / 1e6, len(m.samples_ns), m.stop_reason

    ratios = []
    for i in range(args.rounds):
        if i % 2 == 0:  # ABBA: harness first in even rounds, bare loop first in odd ones
            h, n, why = harness_p50()
            b = bare_loop_p50(prepared.model, inputs, n)
        else:
            b = bare_loop_p50(prepared.model, inputs, 30)
            h, n, why = harness_p50()
        ratios.append(h / b)
        print(f"round {i + 1}: harness p50 {h:.3f} ms ({n} iterations, {why}), bare p50 {b:.3f} ms, ratio {h / b:.4f}", flush=True)
    ratio = statistics.median(ratios)
    verdict = "PASS" if abs(ratio - 1) <= 0.03 else "FAIL"
    print(f"\n{args.model} {args.precision} batch {args.batch_size}, {threads} threads: median ratio harness/bare = "
          f"{ratio:.4f} ({100 * (ratio - 1):+.2f}%) over {args.rounds} rounds; target within ±3%: {verdict}")
    return 0 if verdict == "PASS" else 2


if __name__ == "__main__":
    sys.exit(main())
