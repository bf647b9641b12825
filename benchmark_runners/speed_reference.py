"""How fast was this machine just before and just after a config was timed?

A VM's vCPUs can run much slower for minutes while nothing in the guest uses the CPU: another
tenant on the host's SMT siblings or shared cache, invisible to /proc/stat (contention.py sees
only this guest's processes). On the 2-vCPU AMD EPYC VM, with nothing else running, a ViT-base
forward pass ranged 234-369 ms over 150 s, and a 512x512 fp32 matmul timed just before and
after each call tracked it: correlation 0.83 with the inverse of the two references' mean,
log-log slope -1.04 in that window (benchmarks/speed_reference_check.py measures it; other
windows read -0.56 to -0.58, see TRACKING). One such make run
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

Memory bandwidth drifts on its own: on the Zen 4 EPYC VM a 256 MiB copy read either about 34 or
about 53 GB/s, in spells of tens of seconds, with the compute kernel unmoved (over 126 calm probes
of another VM the two did not correlate). The probe's bandwidth, one moment, read 32 GB/s in one
make run and 55 in the next, and the predictors' leave-one-device-out error followed it. So each
worker also reads a copy kernel once, on its first host-CPU config (`reference_copy_gbs`: 64 MiB,
twice the VM's L3, about 75 ms with its pages' first touch), and the rows carry it (`copy_gbs`);
training puts the probe's bandwidth at the device's typical copy rate as it does the compute peak
(devicefit/predict/hardware_specs.py). Once a worker, not around every config: the 32,768 page
faults of a fresh 128 MiB cost more than a small config's timing, and a run's two dozen workers
already give its typical rate.
"""
from __future__ import annotations

import math
import mmap
import statistics
import time
from typing import Any, Sequence

from benchmark_runners import registry

SIZE = 512
# The most a reading is trusted to say the machine ran faster or slower than usual: beyond it,
# a reading is more likely disturbed itself than the machine that far off (the reading's ratio to
# the typical rate, in training and in the regression report's adjustment, is clamped to
# [1/MAX_FACTOR, MAX_FACTOR]).
MAX_FACTOR = 1.5
# How much of the reading's change a model's time follows: a row is scaled by (reading / typical)
# ** TRACKING. The log-log slope of a model's time on the reading, and the slope on a noisy
# reading is what best predicts a time from it (the reading's own noise flattens it). On the AVX2
# EPYC VM on 2026-11-30, two 300 s windows of `benchmarks/speed_reference_check.py --openvino`
# (ViT-base batch 1, about 150 points each, readings 84-174 GFLOP/s) gave -0.56 and -0.58 for torch
# and -0.58 twice for OpenVINO's CPU plugin: the reading tells both backends' speed alike, and
# about 0.6 of its swing. A torch-only window right after (readings half as far apart) read -0.70
# (correlation 0.80; the calls' CV 10.4% raw, 6.8% scaled fully, 6.2% at 0.6), and an earlier
# one -1.04. The further apart the readings, the flatter the slope; a worker's two readings
# bracket a whole config, seconds apart, farther than either window's. On make run 29's rows, full
# scaling over-corrected: held-out latency 15.3% at 1.0, 13.9% at 0.6, 14.3% at 0.4 and 0.8, 15.6%
# at 0; one run, and a flat optimum. Leave-one-device-out between the EPYC and the Xeon moved both
# ways (the Xeon's torch 29.9% -> 34.4%, the EPYC's OpenVINO 22.5% -> 19.7%).
TRACKING = 0.6
# ...except where the rows say otherwise. OpenVINO's rows of three make runs on the AVX2 EPYC
# (29, 31 and 32, 2026-11-30) were predicted better unscaled than at 0.6: held-out roofline
# latency over the OpenVINO rows 13.5 / 13.7 / 13.9% unscaled against 13.6 / 17.5 / 16.7% at 0.6
# (the served predictor's, over all rows: 14.0 / 16.9 / 14.7% against 13.9 / 17.7 / 15.8%),
# while torch's were best at 0.6-0.8 in two of the three. The short windows above saw OpenVINO
# follow the reading within a process; across a run's configs the torch kernel's reading
# around an OpenVINO config (two streams of the plugin's own threads) does not tell its
# time. Its rows keep the reading; training leaves them as measured
# (devicefit/predict/speed.py), the regression report's adjustment still applies TRACKING.
TRACKING_BY_BACKEND = {"openvino": 0.0}


def training_power(backend: str | None) -> float:
    """The power a row's reading ratio is raised to in training (TRACKING unless the backend's
    rows showed otherwise; 0: the row is learned as measured)."""
    return TRACKING_BY_BACKEND.get(backend or "", TRACKING)


MIN_READINGS = 5  # fewer rows with a reading on a device: its typical rate is not known
CALLS = 8
KERNEL = f"fp32 {SIZE}x{SIZE} matmul, median of {CALLS} calls, torch's intra-op threads"
COPY_BYTES = 64 * 2**20  # per buffer: twice the Zen 4 VM's 32 MiB L3, so the copy streams from DRAM
COPY_CALLS = 4
COPY_KERNEL = (f"fp32 copy of {COPY_BYTES >> 20} MiB into {COPY_BYTES >> 20} MiB (bytes read + written), "
               f"median of {COPY_CALLS} calls, torch's intra-op threads, once per worker")


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


def reference_copy_gbs(device: str) -> float | None:
    """The copy kernel's memory bandwidth now, in GB/s, on `device`'s host CPU; None where the
    device is not the host CPU, torch is not importable, the buffers cannot be mapped (a reading
    is a diagnostic: it never fails the config it is taken beside), or other processes used the
    CPU meanwhile (a reading beside them is theirs, not the machine's). Its buffers are mapped
    for it and unmapped after, so nothing of them stays in the process's memory (nor in its
    allocator's)."""
    if not registry.runs_on_host_cpu(device):
        return None
    try:
        import torch
    except ImportError:
        return None
    from benchmark_runners import contention

    before = contention.snapshot()
    try:
        maps = [mmap.mmap(-1, COPY_BYTES), mmap.mmap(-1, COPY_BYTES)]
    except (OSError, MemoryError, ValueError):
        return None
    try:
        src, dst = (torch.frombuffer(m, dtype=torch.float32) for m in maps)
        src.fill_(1.0)
        dst.copy_(src)  # touches every page of both: not timed
        times = []
        for _ in range(COPY_CALLS):
            start = time.perf_counter()
            dst.copy_(src)
            times.append(time.perf_counter() - start)
        del src, dst
    except (RuntimeError, MemoryError):
        return None
    finally:
        for m in maps:
            m.close()
    if contention.is_contended(contention.share_since(before)):
        return None
    return round(2 * COPY_BYTES / statistics.median(times) / 1e9, 2)


def record(before: float | None, after: float | None, copy_gbs: float | None = None) -> dict[str, Any] | None:
    """The row's `speed_reference`: both readings, and the kernel and threads they came from;
    with `copy_gbs`, the worker's copy reading and its kernel too."""
    if before is None or after is None:
        return None
    try:
        import torch

        threads = torch.get_num_threads()
    except ImportError:  # pragma: no cover - a reading implies torch
        threads = None
    out = {"before_gflops": before, "after_gflops": after, "kernel": KERNEL, "threads": threads}
    if copy_gbs is not None:
        out.update(copy_gbs=copy_gbs, copy_kernel=COPY_KERNEL)
    return out


def _is_rate(value: Any) -> bool:
    """A reading fit to divide by: a positive finite number, not a bool (a baseline document is
    read without the landing schema's check)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < math.inf


def copy_rate(reference: dict[str, Any] | None) -> float | None:
    """The copy reading a row or probe carries, where it is a rate; else None."""
    value = reference.get("copy_gbs") if isinstance(reference, dict) else None
    return float(value) if _is_rate(value) else None


def mean_gflops(reference: dict[str, Any] | None) -> float | None:
    """The config's reference rate: the geometric mean of the readings before and after (None
    where the row has none or a reading is not a positive finite number: a baseline document
    is read without the landing schema's check)."""
    if not isinstance(reference, dict):
        return None
    before, after = reference.get("before_gflops"), reference.get("after_gflops")
    if not (_is_rate(before) and _is_rate(after)):
        return None
    return math.sqrt(before) * math.sqrt(after)


def typical_rates(readings: dict[str, list[float]]) -> dict[str, float]:
    """Per key (a device, a probe's fingerprint), the median of its readings: its typical rate;
    absent with fewer than MIN_READINGS, where it is not known."""
    return {key: statistics.median(v) for key, v in readings.items() if len(v) >= MIN_READINGS}


def config_rates(results) -> list[float]:
    """The reference rate of each result that has one (a partition's metadata)."""
    return [round(g, 1) for g in (mean_gflops(getattr(r, "speed_reference", None)) for r in results) if g is not None]


def per_worker(readings: Sequence[tuple[Any, float | None]]) -> list[float]:
    """One copy reading per worker from (run, reading) pairs of rows: a worker's configs all
    carry its one reading, so a typical rate counts each worker once (and MIN_READINGS counts
    workers, not the configs of one), whatever order the rows come in."""
    seen: dict[tuple[Any, float], None] = {}
    for run, rate in readings:
        if rate is not None:
            seen.setdefault((run, rate), None)
    return [rate for _run, rate in seen]


def worker_copy_rates(results) -> list[float]:
    """The copy readings of a partition's results, one per worker."""
    return per_worker([(getattr(r, "run_id", None), copy_rate(getattr(r, "speed_reference", None))) for r in results])


def speed_summary(rates: Sequence[float], copies: Sequence[float] = ()) -> str | None:
    """One line on how steady the host CPU ran during a run: the kernel's rate around each
    config, and how many configs ran well below the median (a VM's neighbours show here and
    nowhere else); with `copies`, the copy kernel's bandwidth over the workers too. None where
    no config has a reading."""
    if not rates:
        return None
    median = statistics.median(rates)
    slow = sum(g < 0.8 * median for g in rates)
    line = (f"host speed (fixed-kernel reference around each config): median {median:.0f} GFLOP/s, range "
            f"{min(rates):.0f}-{max(rates):.0f}; {slow} of {len(rates)} configs timed below 0.8x the median"
            + (" (training scales each to its device's typical rate)" if slow else ""))
    if copies:
        line += (f"; copy bandwidth (once a worker): median {statistics.median(copies):.1f} GB/s, range "
                 f"{min(copies):.1f}-{max(copies):.1f} over {len(copies)} workers")
    return line
