"""A short device probe: achieved matmul GFLOP/s and memory-copy bandwidth, measured, so the
predictors and roofline views use what this device really does, not its datasheet; and two
figures of the small work most of a small model's kernels are: the throughput of copying a
cache-resident buffer, and the time of one tiny kernel (the framework's dispatch included).

Why the last two: carried from the AMD EPYC to the Xeon (and back) by the first two alone, the
predictors' latency was off by a per-device factor (leave-one-device-out 44% and 24%; 12-15%
once that factor is taken out), and scaling the per-kernel costs explained only part of it. A
large-array copy reaches DRAM; what a 2-thread model's elementwise kernels see is the cache
and the dispatch, which these measure, so a transfer can scale by them once both devices have
them. On a GPU both are bound by the kernel launch path from the host (the H200: a 256 KiB copy
at 88 GB/s, i.e. one launch per 6 us, and 5.8 us per tiny kernel): there they measure the host's
dispatch, not the card's cache."""
from __future__ import annotations

import contextlib
import logging
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

from benchmark_runners.timers import repeat_calls

log = logging.getLogger("devicefit.probe")

# Sizes big enough to leave caches and reach steady throughput, small enough for < 1 s each.
PROBE_SIZES = {
    "cpu": {"matmul_n": 1024, "copy_bytes": 256 * 2**20, "half_matmul_n": 1024, "half_matmul_small_n": 256},
    "cuda": {"matmul_n": 8192, "copy_bytes": 2 * 2**30, "half_matmul_n": 8192},
    "mps": {"matmul_n": 4096, "copy_bytes": 512 * 2**20, "half_matmul_n": 4096},
}
# Half precisions, measured rather than assumed: the operator roofline's prior for a bf16 or fp16
# GEMM was 2x the fp32 probe, a CPU rule; an H200's tensor cores do about 15x its fp32 rate, and
# a CPU without native bf16 does far less than its fp32 (an AVX2 AMD EPYC: 16-22 GFLOP/s in bf16
# against 165 in fp32). Measured at the fp32 matmul's size, as a model's GEMMs are: at n=256 the
# Zen 4 EPYC's bf16 (AVX512_BF16) read 1.7-1.9x its fp32 (fixed costs weigh on a 33 MFLOP call), at 1024 2.1-2.3x,
# as its models' bf16 GEMMs run. A CPU's half GEMM can be slow enough that the fp32 size would take
# seconds (a CPU without a bf16 kernel), so the size falls back to half_matmul_small_n when a call
# there, projected from the small size, would not fit HALF_CALLS_PER_BUDGET calls in the budget;
# the probe records which size it measured (half_matmul_n).
HALF_PRECISIONS = {"bf16": "bfloat16", "fp16": "float16"}
HALF_CALLS_PER_BUDGET = 4
# A 256 KiB buffer copied into another: 512 KiB, inside a core's L2 on current x86 CPUs (the
# EPYC's 512 KiB, a Sapphire Rapids' 2 MiB) and any GPU's L2.
CACHE_COPY_BYTES = 256 * 2**10
TINY_KERNEL_ELEMENTS = 16
CALLS_PER_SAMPLE = 200  # a tiny call takes microseconds: time a run of them, not one
# Each shape of the host CPU's GEMM suite is timed for this share of the budget, for each backend
# (0.08 s at the default 0.5: about 1.3 s for the suite on the 2-core Zen 4 EPYC, outside the
# probe's own duration_s).
GEMM_SHAPE_SHARE = 0.16


@dataclass
class ProbeResult:
    device: str
    matmul_dtype: str
    matmul_n: int
    matmul_gflops_best: float
    matmul_gflops_median: float
    copy_bytes: int
    memory_bandwidth_gbs_best: float  # bytes read + bytes written per second
    memory_bandwidth_gbs_median: float
    repetitions: int
    threads: int
    duration_s: float
    # Copy throughput of a cache-resident buffer (bytes read + written per second, the dispatch of
    # each copy included) and the time of one tiny elementwise kernel; None in probes taken
    # before these were measured.
    cache_copy_bytes: int | None = None
    cache_copy_gbs_best: float | None = None
    tiny_kernel_us_median: float | None = None
    # Share of the host's CPU other processes used during the probe (benchmark_runners.contention):
    # a probe beside a busy neighbour understates the peak (2.7x on the 2-core Xeon: a cached
    # 140 GFLOP/s against 380 idle), and every prediction scaled by it would inherit the error.
    other_cpu_share: float | None = None
    contended: bool | None = None
    # A linear layer's matmul GFLOP/s in bf16 and fp16 (best of the repetitions, at half_matmul_n:
    # the fp32 matmul's size where the device affords it; 256 on a CPU that does not, and in probes
    # taken before the size was chosen so);
    # None where the device or torch has no such matmul, and in probes taken before these were measured.
    half_matmul_n: int | None = None
    matmul_gflops_bf16_best: float | None = None
    matmul_gflops_fp16_best: float | None = None
    # The speed-reference kernel's readings after the fp32 matmul and at the end of the probe
    # (benchmark_runners.speed_reference.record; None on a device that is not the host CPU). A
    # VM's vCPUs drift for minutes: one probe on the AMD EPYC VM read 105 GFLOP/s where the
    # kernel around that run's configs had a median of 184, and every transfer between devices
    # scaled by that moment. With the reading, training puts the probe at the device's typical
    # speed, as it does each row (devicefit.predict.hardware_specs.measured_device_specs).
    speed_reference: dict[str, Any] | None = None
    # The host CPU's probe only: each backend's own fp32 GEMM rate at the models' shapes
    # (benchmark_runners.hardware.gemm_suite.host_gemm_suite); None on other devices and in
    # probes taken before it was measured.
    backend_gemm: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _synchronizer(device: str) -> Callable[[], None]:
    import torch

    if device.startswith("cuda"):
        return torch.cuda.synchronize
    if device == "mps":
        return torch.mps.synchronize
    return lambda: None


def probe_device(device: str = "cpu", budget_s: float = 0.5, gemm_suite: bool = True) -> ProbeResult:
    """Measure `device` ("cpu", "cuda:0", "mps") for about 2-4 * budget_s seconds (the half-precision
    matmuls at the large size take up to budget_s each where a call fits a quarter of it), and on
    the host CPU, with `gemm_suite`, each backend's GEMM at the models' shapes after that (about
    2.6 * budget_s more, its own `seconds`); a probe that others' CPU use disturbed is taken again
    once, and the result says whether it was."""
    from benchmark_runners import contention

    result = None
    for _attempt in range(2):
        before = contention.snapshot()
        with _threads_within_budget(device):
            result = _probe_once(device, budget_s, gemm_suite)
        result.other_cpu_share = contention.share_since(before)
        result.contended = contention.is_contended(result.other_cpu_share)
        if not result.contended:
            break
    return result


@contextlib.contextmanager
def _threads_within_budget(device: str):
    """torch's intra-op threads held to the CPU budget while the CPU is probed: torch's default
    sees every CPU of a host whose cgroup quota allows this process two (hardware/cpu_budget.py),
    and the probe must read the speed the workers will have."""
    import torch

    from benchmark_runners.hardware.cpu_budget import restricted_threads

    before = torch.get_num_threads()
    threads = restricted_threads() if device.split(":")[0] == "cpu" else None
    if threads and threads < before:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def _probe_once(device: str, budget_s: float, gemm_suite: bool = True) -> ProbeResult:
    import torch

    from benchmark_runners import speed_reference
    from benchmark_runners.registry import torch_device_string

    kind = device.split(":")[0]
    sizes = PROBE_SIZES["cuda" if kind == "rocm" else kind]  # an AMD GPU is sized as an NVIDIA one
    device = torch_device_string(device)
    sync = _synchronizer(device)
    started = time.perf_counter()
    n = sizes["matmul_n"]
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    c = torch.empty(n, n, device=device)
    mm_times = repeat_calls(lambda a=a, b=b, c=c: torch.mm(a, b, out=c), sync, budget_s)
    flops = 2.0 * n**3
    del a, b, c
    # Read after the matmul's warm-up and timing, not before: the first reading in a fresh process
    # read 40 GFLOP/s where the matmul right after ran at 206 and the reading after the probe 202.
    reading = speed_reference.reference_gflops(device)
    half_n, half = _half_matmuls(sizes, device, sync, budget_s)
    elems = sizes["copy_bytes"] // 4
    src = torch.ones(elems, device=device)
    dst = torch.empty_like(src)
    cp_times = repeat_calls(lambda dst=dst, src=src: dst.copy_(src), sync, budget_s)
    moved = 2.0 * elems * 4
    del src, dst
    small_src = torch.ones(CACHE_COPY_BYTES // 4, device=device)
    small_dst = torch.empty_like(small_src)

    def copies(dst=small_dst, src=small_src) -> None:
        for _ in range(CALLS_PER_SAMPLE):
            dst.copy_(src)

    cache_times = repeat_calls(copies, sync, budget_s / 4)
    x = torch.ones(TINY_KERNEL_ELEMENTS, device=device)
    y = torch.empty_like(x)

    def tiny(x=x, y=y) -> None:
        for _ in range(CALLS_PER_SAMPLE):
            torch.add(x, x, out=y)

    tiny_times = repeat_calls(tiny, sync, budget_s / 4)
    reference = speed_reference.record(reading, speed_reference.reference_gflops(device), speed_reference.reference_copy_gbs(device))
    duration_s = time.perf_counter() - started
    backend_gemm = None
    if kind == "cpu" and gemm_suite:  # after the references: they are read right after the probe's own kernels
        from benchmark_runners.hardware.gemm_suite import host_gemm_suite

        backend_gemm = host_gemm_suite(budget_s * GEMM_SHAPE_SHARE)
    return ProbeResult(
        device=device,
        matmul_dtype="fp32",
        matmul_n=n,
        matmul_gflops_best=round(flops / min(mm_times) / 1e9, 2),
        matmul_gflops_median=round(flops / statistics.median(mm_times) / 1e9, 2),
        copy_bytes=int(elems * 4),
        memory_bandwidth_gbs_best=round(moved / min(cp_times) / 1e9, 2),
        memory_bandwidth_gbs_median=round(moved / statistics.median(cp_times) / 1e9, 2),
        repetitions=len(mm_times) + len(cp_times),
        threads=torch.get_num_threads(),
        duration_s=round(duration_s, 3),
        cache_copy_bytes=CACHE_COPY_BYTES,
        cache_copy_gbs_best=round(2.0 * CACHE_COPY_BYTES * CALLS_PER_SAMPLE / min(cache_times) / 1e9, 2),
        tiny_kernel_us_median=round(statistics.median(tiny_times) / CALLS_PER_SAMPLE * 1e6, 3),
        half_matmul_n=half_n,
        matmul_gflops_bf16_best=half["bf16"],
        matmul_gflops_fp16_best=half["fp16"],
        speed_reference=reference,
        backend_gemm=backend_gemm,
    )


def half_matmul_size(small_n: int, large_n: int, slowest_small_call_s: float | None, budget_s: float) -> int:
    """The size to measure the half-precision matmuls at: large_n (the fp32 matmul's) when the
    slowest half dtype's call there, projected from its call at small_n by the n^3 work, lets
    HALF_CALLS_PER_BUDGET calls fit in budget_s; else small_n. A projection from the small size
    usually overstates the large call (fixed costs weigh more at the small one); where a kernel
    slows per FLOP at the large size instead, `repeat_calls`'s four calls bound what it costs."""
    if large_n <= small_n or slowest_small_call_s is None:
        return small_n
    projected = slowest_small_call_s * (large_n / small_n) ** 3
    return large_n if projected * HALF_CALLS_PER_BUDGET <= budget_s else small_n


def _half_matmuls(sizes: dict[str, int], device: str, sync: Callable[[], None], budget_s: float) -> tuple[int, dict[str, float | None]]:
    """Each half precision's matmul GFLOP/s, all at one size (see half_matmul_size: a call there
    at most budget_s / HALF_CALLS_PER_BUDGET), each timed for about budget_s / 4: a device's bf16
    and fp16 figures are compared with each other and with other devices' at that size."""
    import torch

    small_n, large_n = sizes.get("half_matmul_small_n", sizes["half_matmul_n"]), sizes["half_matmul_n"]
    each_s = budget_s / 4
    half = {p: _half_matmul_gflops(getattr(torch, dtype), small_n, device, sync, each_s) for p, dtype in HALF_PRECISIONS.items()}
    if large_n == small_n or not any(half.values()):
        return small_n, half
    slowest = min(v for v in half.values() if v)
    n = half_matmul_size(small_n, large_n, 2.0 * small_n**3 / (slowest * 1e9), budget_s)
    if n == small_n:
        return small_n, half
    large = {p: _half_matmul_gflops(getattr(torch, dtype), n, device, sync, each_s) if half[p] else None
             for p, dtype in HALF_PRECISIONS.items()}
    # a kernel that ran at the small size and failed at the large one: keep both at the small one
    return (n, large) if all(large[p] for p in half if half[p]) else (small_n, half)


def _half_matmul_gflops(dtype, n: int, device: str, sync: Callable[[], None], budget_s: float) -> float | None:
    """Best GFLOP/s of an n x n linear layer's matmul (x W^T through F.linear, the kernel a
    model's Linear layers run) in `dtype`, or None where the device cannot run one (the error
    is the answer: no such kernel, so no rate to predict with). Not torch.mm: on the AMD EPYC
    (AVX2, no native bf16) torch.mm in bf16 ran at 1.4 GFLOP/s where F.linear, through oneDNN,
    ran at 16-22; in fp32 the two agree."""
    import torch

    try:
        a = torch.randn(n, n, device=device).to(dtype)
        w = torch.randn(n, n, device=device).to(dtype)
        times = repeat_calls(lambda a=a, w=w: torch.nn.functional.linear(a, w), sync, budget_s, max_reps=10)
    except (RuntimeError, TypeError, NotImplementedError) as exc:
        log.info("no %s matmul on %s: %s", dtype, device, exc)
        return None
    return round(2.0 * n**3 / min(times) / 1e9, 2)
