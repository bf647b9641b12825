"""How fast was this machine just before and just after a config was timed?

A VM's vCPUs can run much slower for minutes while nothing in the guest uses the CPU: another
tenant on the host's SMT siblings or shared cache, invisible to /proc/stat (contention.py sees
only this guest's processes). On the 2-vCPU AMD EPYC VM, with nothing else running, a ViT-base
forward pass ranged 234-369 ms over 150 s, and a 512x512 fp32 matmul timed just before and
after each call tracked it: correlation 0.83 with the inverse of the two references' mean,
log-log slope -1.04 (benchmarks/speed_reference_check.py reproduces it). One such make run
recorded the same OpenVINO configs 2x slower than the run before, with a 2% CV and nothing in
/proc/stat.

So the worker times this fixed kernel around every config it runs on the host CPU itself (torch
on the CPU, OpenVINO's CPU plugin): eight calls, their median, in GFLOP/s, with the threads torch
runs with in that worker (about 30 ms a config in all). Not around the browser kinds: their
model runs in the browser's processes, busy beside the kernel (a wasm config's reading before
timing was a fifth of the one after). The row keeps both figures (`speed_reference`); the
predictors read them to put each row at its device's typical speed (devicefit/predict/speed.py).
Nothing here changes the measured samples. A device that is not the host CPU (a GPU) gets None:
this kernel says nothing about it.
"""
from __future__ import annotations

import math
import statistics
import time
from typing import Any

from benchmark_runners import registry

SIZE = 512
# The most a reading is trusted to say the machine ran faster or slower than usual: beyond it,
# a reading is more likely disturbed itself than the machine that far off (training's factor and
# the regression report's adjustment are clamped to [1/MAX_FACTOR, MAX_FACTOR]).
MAX_FACTOR = 1.5
MIN_READINGS = 5  # fewer rows with a reading on a device: its typical rate is not known
CALLS = 8
KERNEL = f"fp32 {SIZE}x{SIZE} matmul, median of {CALLS} calls, torch's intra-op threads"


def reference_gflops(device: str) -> float | None:
    """The kernel's rate now, on `device`'s host CPU; None where the device is not the host CPU
    or torch is not importable in this process."""
    if not registry.runs_on_host_cpu(device):
        return None
    try:
        import torch
    except ImportError:
        return None
    a = torch.full((SIZE, SIZE), 0.5)
    b = torch.full((SIZE, SIZE), 0.25)
    torch.mm(a, b)  # the first call allocates and picks the kernel: not timed
    times = []
    for _ in range(CALLS):
        start = time.perf_counter()
        torch.mm(a, b)
        times.append(time.perf_counter() - start)
    return round(2 * SIZE ** 3 / statistics.median(times) / 1e9, 2)


def record(before: float | None, after: float | None) -> dict[str, Any] | None:
    """The row's `speed_reference`: both readings, and the kernel and threads they came from."""
    if before is None or after is None:
        return None
    try:
        import torch

        threads = torch.get_num_threads()
    except ImportError:  # pragma: no cover - a reading implies torch
        threads = None
    return {"before_gflops": before, "after_gflops": after, "kernel": KERNEL, "threads": threads}


def mean_gflops(reference: dict[str, Any] | None) -> float | None:
    """The config's reference rate: the geometric mean of the readings before and after (None
    where the row has none or a reading is not a positive finite number: a baseline document
    is read without the landing schema's check)."""
    if not isinstance(reference, dict):
        return None
    before, after = reference.get("before_gflops"), reference.get("after_gflops")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < math.inf for v in (before, after)):
        return None
    return math.sqrt(before) * math.sqrt(after)


def typical_rates(readings: dict[str, list[float]]) -> dict[str, float]:
    """Per key (a device, a probe's fingerprint), the median of its readings: its typical rate;
    absent with fewer than MIN_READINGS, where it is not known."""
    return {key: statistics.median(v) for key, v in readings.items() if len(v) >= MIN_READINGS}


def config_rates(results) -> list[float]:
    """The reference rate of each result that has one (a partition's metadata)."""
    return [round(g, 1) for g in (mean_gflops(getattr(r, "speed_reference", None)) for r in results) if g is not None]


def speed_summary(rates: list[float]) -> str | None:
    """One line on how steady the host CPU ran during a run: the kernel's rate around each
    config, and how many configs ran well below the median (a VM's neighbours show here and
    nowhere else); None where no config has a reading."""
    if not rates:
        return None
    median = statistics.median(rates)
    slow = sum(g < 0.8 * median for g in rates)
    return (f"host speed (fixed-kernel reference around each config): median {median:.0f} GFLOP/s, range "
            f"{min(rates):.0f}-{max(rates):.0f}; {slow} of {len(rates)} configs timed below 0.8x the median"
            + (" (training scales each to its device's typical rate)" if slow else ""))
