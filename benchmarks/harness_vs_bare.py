"""Does measuring through devicefit's isolated worker cost anything? Compares, across processes,
a bare `perf_counter` loop in a plain Python process with the production path: `run_sweep`,
which starts the worker (`python -m benchmark_runners.worker`), loads the model, runs the harness.

Each side runs in its own fresh process, alternating in ABBA order for --rounds rounds (so slow
drift of the machine cancels), at each batch size. The bare process does what a user's script
does: build the same model (the same seeded weights), torch's default threads, three warm-up
calls, then --iterations timed forward passes under `torch.inference_mode()`. Printed per
round: each side's p50 and per-iteration CV (sigma / mean, sigma from the sample standard
deviation unbiased by c4(n), so that sides of different counts compare); per batch size: the
medians over rounds of the p50 ratio (worker / bare) and of the CV ratio, against the bars: p50
within 2%, CV within 1.2x, and whether
the rounds decide the p50 bar (the 95% interval of the median of the per-round ratios, from six
rounds up: each fresh process's p50 is a draw of its own, a few percent wide). Each round
also prints both sides' minor page faults per call (the allocator handing activations back to
the OS and faulting them in again), which a process's history can move; `--fixed-allocator`
runs both sides with glibc's thresholds fixed, so that neither faults between calls (while
every activation is under 32 MiB: larger blocks are still mapped and unmapped each call).

    python benchmarks/harness_vs_bare.py --model bert-base-uncased --batch-sizes 1,4,16 --rounds 4
    python benchmarks/harness_vs_bare.py --pool run1.log run2.log   # the verdict over earlier runs' rounds

Run it on an idle machine: any other CPU work beside it moves both sides by more than the bars.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmark_runners.stats import MIN_SAMPLES_FOR_CI, median_ci  # noqa: E402

P50_BAR = 0.02
CV_BAR = 1.2
# glibc's dynamic thresholds fixed: blocks up to 32 MiB (the most M_MMAP_THRESHOLD allows) come
# from the heap, and the heap is not trimmed, so freed activations are reused, not faulted in again.
FIXED_ALLOCATOR = {"MALLOC_MMAP_THRESHOLD_": str(32 * 2**20), "MALLOC_TRIM_THRESHOLD_": str(4 * 2**30)}


def bare_loop(model_name: str, batch_size: int, iterations: int) -> dict:
    """The bare side, run in its own process (`--bare`): a user's plain timing loop."""
    import torch

    from benchmark_runners.harness import minor_faults
    from models.inputs import input_signature
    from models.loading import build_model
    from models.resolve import resolve_model
    from models.tensors import make_inputs

    spec = resolve_model(model_name)
    model = build_model(spec)
    inputs = make_inputs(input_signature(spec, batch_size, None, None, None), "cpu")
    samples = []
    with torch.inference_mode():
        for _ in range(3):
            model(**inputs)
        faults = minor_faults()
        for _ in range(iterations):
            t0 = time.perf_counter_ns()
            model(**inputs)
            samples.append((time.perf_counter_ns() - t0) / 1e6)
        faults = minor_faults() - faults if faults is not None else None
    return {"samples_ms": samples, "threads": torch.get_num_threads(),
            "faults": faults / iterations if faults is not None else None}


def run_bare(model: str, batch_size: int, iterations: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--bare", "--model", model, "--batch-sizes", str(batch_size),
                          "--iterations", str(iterations)], cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_worker(model: str, batch_size: int, max_time: float) -> dict:
    from benchmark_runners.harness import TimingPolicy
    from benchmark_runners.records import BenchmarkConfig
    from benchmark_runners.sweep import run_sweep

    (row,) = run_sweep([BenchmarkConfig(model, batch_size=batch_size, policy=TimingPolicy(max_time_s=max_time))])
    if row.status != "ok":
        raise SystemExit(f"the worker did not measure {model} batch {batch_size}: {row.error}")
    return {"samples_ms": row.samples_ms, "threads": row.environment.get("torch_threads"), "stop_reason": row.stop_reason,
            "other_cpu_share": row.other_cpu_share, "faults": row.minor_faults_per_iteration}


def _count(faults: float | None) -> str:
    return "-" if faults is None else f"{faults:,.0f}"


def decisiveness(ratios: list[float]) -> str:
    """Whether the rounds decide the p50 bar: each fresh process's p50 is a draw of its own (on
    the 2-core Zen 4 EPYC a bare loop's p50 at batch 4 ranged 515-591 ms over 16 processes), so
    the median of the per-round ratios has an interval of its own (order statistics, 95%), and
    a verdict whose interval straddles the bar is the machine's, not the harness's."""
    lo, hi = median_ci(sorted(ratios))
    spread = f"rounds {100 * (min(ratios) - 1):+.1f}%..{100 * (max(ratios) - 1):+.1f}%"
    if lo == float("-inf"):
        return f"{spread}; fewer than {MIN_SAMPLES_FOR_CI} rounds give the median no 95% interval: not decisive"
    interval = f"95% interval of the median {100 * (lo - 1):+.1f}%..{100 * (hi - 1):+.1f}%"
    if 1 - P50_BAR <= lo and hi <= 1 + P50_BAR:
        return f"{spread}, {interval}: decisive, within the bar"
    if lo > 1 + P50_BAR or hi < 1 - P50_BAR:
        return f"{spread}, {interval}: decisive, outside the bar"
    return f"{spread}, {interval}: not decisive ({rounds_to_decide(ratios, lo, hi)})"


def rounds_to_decide(ratios: list[float], lo: float, hi: float) -> str:
    """How many rounds at this spread would put the median's interval inside the bar: the
    interval narrows as 1/sqrt(rounds) at best, around a median that must itself leave room.
    Each side on its own (order statistics need not sit symmetrically about the median): the
    side that reaches furthest past its end of the bar, relative to the room there, decides;
    never fewer than one round more than were run."""
    median = statistics.median(ratios)
    if abs(median - 1) >= P50_BAR:
        return "the median itself is outside the bar: more rounds would decide it outside"
    reach = max((median - lo) / (median - (1 - P50_BAR)), (hi - median) / ((1 + P50_BAR) - median))
    needed = max(len(ratios) + 1, math.ceil(len(ratios) * reach ** 2))
    return (f"were the median to hold at {100 * (median - 1):+.1f}%, about {needed} rounds at this spread would place the "
            f"interval within ±{100 * P50_BAR:g}%; a quieter machine needs fewer")


CV_NOTE = "CV: sample standard deviation / c4(n) / mean (unbiased for normal samples, whatever the count)"


def c4(n: int) -> float:
    """E[sample stdev] / sigma for n normal samples: 0.95 at 6, 0.98 at 13."""
    return math.sqrt(2 / (n - 1)) * math.exp(math.lgamma(n / 2) - math.lgamma((n - 1) / 2))


def cv(samples: list[float]) -> float:
    """The spread as an unbiased (for normal samples) estimate of sigma over the mean: in odd
    rounds the bare loop runs first, with the previous round's count, so the two sides of a
    round can hold 6 and 13 samples, and a plain standard deviation reads low by an amount
    that depends on the count (the ratio of two such CVs of one distribution: 0.91 there)."""
    return statistics.stdev(samples) / c4(len(samples)) / statistics.mean(samples)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="bert-base-uncased")
    ap.add_argument("--batch-sizes", default="1,4,16")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--iterations", type=int, default=None, help="bare loop iterations (default: as many as the worker took)")
    ap.add_argument("--max-time", type=float, default=10.0, help="the worker's timing cap per config, seconds")
    ap.add_argument("--bare", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--pool", nargs="+", type=Path, metavar="LOG",
                    help="measure nothing: the verdict over the rounds of these earlier runs' printed logs, per batch size")
    ap.add_argument("--fixed-allocator", action="store_true",
                    help=f"run both sides with glibc's thresholds fixed ({' '.join(f'{k}={v}' for k, v in FIXED_ALLOCATOR.items())}): "
                         "no page faults between calls, so what is left is the harness's own difference")
    args = ap.parse_args()
    if args.fixed_allocator:  # read by malloc at start: the bare process, the fork server and its workers inherit it
        os.environ.update(FIXED_ALLOCATOR)
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    if args.pool:
        try:
            by_batch = pooled(args.pool)
        except ValueError as exc:
            raise SystemExit(str(exc)) from None
        for batch, rounds in sorted(by_batch.items()):
            print(verdict(args.model, batch, rounds)[1])
        return 0
    if args.bare:
        print(json.dumps(bare_loop(args.model, batch_sizes[0], args.iterations or 30)))
        return 0

    print(CV_NOTE, flush=True)
    failures = 0
    for batch in batch_sizes:
        rounds = []
        worker_n = None  # the bare loop times as many iterations as the worker did (in the round before, when it goes first)
        for i in range(args.rounds):
            if i % 2 == 0:  # ABBA: the worker first in even rounds, the bare loop first in odd ones
                w = run_worker(args.model, batch, args.max_time)
                b = run_bare(args.model, batch, args.iterations or len(w["samples_ms"]))
            else:
                b = run_bare(args.model, batch, args.iterations or worker_n or 30)
                w = run_worker(args.model, batch, args.max_time)
            worker_n = len(w["samples_ms"])
            r = {"worker_p50": statistics.median(w["samples_ms"]), "bare_p50": statistics.median(b["samples_ms"]),
                 "worker_cv": cv(w["samples_ms"]), "bare_cv": cv(b["samples_ms"]), "worker_n": len(w["samples_ms"]),
                 "bare_n": len(b["samples_ms"]), "threads": (w["threads"], b["threads"]), "other_cpu_share": w["other_cpu_share"],
                 "faults": (w["faults"], b["faults"])}
            rounds.append(r)
            print(f"batch {batch} round {i + 1}: worker p50 {r['worker_p50']:.2f} ms (cv {r['worker_cv']:.1%}, n {r['worker_n']}, "
                  f"{w['stop_reason']}), bare p50 {r['bare_p50']:.2f} ms (cv {r['bare_cv']:.1%}, n {r['bare_n']}), "
                  f"threads worker/bare {r['threads'][0]}/{r['threads'][1]}, others used "
                  f"{'-' if r['other_cpu_share'] is None else format(r['other_cpu_share'], '.1%')} of the CPU, "
                  f"minor page faults per call worker/bare {_count(r['faults'][0])}/{_count(r['faults'][1])}", flush=True)
        ok, text = verdict(args.model, batch, rounds)
        failures += not ok
        print(text + "\n", flush=True)
    return 0 if not failures else 2


def verdict(model: str, batch: int, rounds: list[dict]) -> tuple[bool, str]:
    """The bars over rounds: the median per-round p50 ratio and CV ratio, and whether the
    rounds decide the p50 bar."""
    ratios = sorted(r["worker_p50"] / r["bare_p50"] for r in rounds)
    p50_ratio = statistics.median(ratios)
    cv_ratio = statistics.median(r["worker_cv"] / r["bare_cv"] for r in rounds)
    ok = abs(p50_ratio - 1) <= P50_BAR and cv_ratio <= CV_BAR
    return ok, (f"==> {model} batch {batch}, {len(rounds)} rounds: p50 worker/bare {p50_ratio:.4f} ({100 * (p50_ratio - 1):+.2f}%, "
                f"bar ±{P50_BAR:.0%}), CV worker/bare {cv_ratio:.2f}x (bar {CV_BAR}x): {'PASS' if ok else 'FAIL'}; {decisiveness(ratios)}")


ROUND_LINE = re.compile(r"batch (\d+) round \d+: worker p50 ([\d.]+) ms \(cv ([\d.]+)%, n (\d+).*?bare p50 ([\d.]+) ms "
                        r"\(cv ([\d.]+)%, n (\d+)")


def pooled(logs: list[Path]) -> dict[int, list[dict]]:
    """The rounds of earlier runs' logs, per batch size. A log written before the CVs were
    unbiased (no CV_NOTE line in it: population standard deviations) has each CV rescaled to
    stdev / c4(n), from the count its line gives."""
    rounds: dict[int, list[dict]] = {}
    for log in logs:
        try:
            text = log.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"--pool: cannot read {log}: {exc}") from exc
        biased = CV_NOTE not in text

        def unbiased(cv: str, n: str) -> float:
            return float(cv) * (math.sqrt(int(n) / (int(n) - 1)) / c4(int(n)) if biased else 1.0)

        found = list(ROUND_LINE.finditer(text))
        if not found:
            raise ValueError(f"--pool: {log} holds no round lines of this script")
        for m in found:
            rounds.setdefault(int(m[1]), []).append({"worker_p50": float(m[2]), "bare_p50": float(m[5]),
                                                     "worker_cv": unbiased(m[3], m[4]), "bare_cv": unbiased(m[6], m[7])})
    return rounds


if __name__ == "__main__":
    sys.exit(main())
