"""Each backend's own fp32 GEMM rate on the host CPU, at the shapes of the models' linear layers.

Why: a prediction for a machine nothing was measured on carries a fitted roofline from another
machine, scaled by the two machines' probed matmul peaks, and the probe's matmul is torch's.
Between the Zen 4 EPYC and the Intel Xeon that ratio is 0.68, near what torch's rows fit there
(GEMM rates of 137 against 236 GFLOP/s, 0.58). OpenVINO's fitted rates were about the same on
both CPUs (193 against 208), so OpenVINO's rows carried from the Xeon came out 1.4x too slow
(leave-one-device-out latency 65%; docs/measurement-log.md, 2026-12-02). Each backend has its own
kernels (torch's matmul goes to its BLAS; OpenVINO's CPU plugin to its own JIT kernels), and a
square 1024 matmul did not rank them as their rows do: on the Zen 4 it put OpenVINO at 0.8-0.9x
torch, while their fitted rates are 1.4x. At the models' shapes (128 to 512 rows of a BERT-base
layer, and a ViT's 50 tokens) the same two read OpenVINO 1.0-1.8x torch. So the probe times each
backend that runs on the host CPU at those shapes, with the threads its worker would use, and
records it. Predictions do not read it yet: a transfer that used it needs both machines' suites,
and the stored datasets have none.
"""
from __future__ import annotations

import logging
import math
import os
import statistics
import time
from typing import Any, Callable

log = logging.getLogger("devicefit.probe")

# (rows, inputs, outputs) of a linear layer: a BERT-base layer's projections and feed-forward at
# 128 tokens, its feed-forward at 512, and a ViT-B/32's at 50 tokens.
GEMM_SHAPES: tuple[tuple[int, int, int], ...] = ((128, 768, 768), (128, 768, 3072), (128, 3072, 768), (512, 768, 3072), (50, 768, 3072))
SHAPE_BUDGET_S = 0.08  # timed seconds per shape and backend: about 1.3 s for the suite on a 2-core CPU
MAX_CALLS = 200  # a small shape's calls take a millisecond: the budget, not this, ends them
# A rate outside this is no measurement (a hook whose clock failed): said as an error, not
# recorded, since ingest refuses a probe with one (devicefit/landing_bounds.py's matmul bounds).
RATE_BOUNDS_GFLOPS = (1e-3, 1e8)
ERROR_CHARS = 200  # an error is kept to its first line, this long: OpenVINO's run to pages


def time_gemm(call: Callable[[], Any], budget_s: float) -> list[float]:
    """A host GEMM's call timed as the probe times its kernels (timers.repeat_calls: one untimed
    call, then at least three), up to MAX_CALLS: what Backend.host_gemm_seconds returns."""
    from benchmark_runners.timers import repeat_calls

    return repeat_calls(call, lambda: None, budget_s, MAX_CALLS)


def shape_key(m: int, k: int, n: int) -> str:
    return f"{m}x{k}x{n}"


def host_gemm_suite(budget_s: float = SHAPE_BUDGET_S, shapes: tuple[tuple[int, int, int], ...] = GEMM_SHAPES) -> dict[str, Any]:
    """Per backend that runs a GEMM on the host CPU (Backend.host_gemm_seconds) at every shape,
    the median GFLOP/s of its calls at each, and the median over the shapes; a backend whose
    GEMM raised or read an impossible rate is named with the reason instead (a probe figure
    missing, not a failed probe). The CPU affinity of this process is put back after each
    backend: a runtime's thread pinning must not narrow what later workers inherit."""
    from benchmark_runners import registry

    started = time.perf_counter()
    rates: dict[str, dict[str, float]] = {}
    errors: dict[str, str] = {}
    for name, backend in registry.backends().items():
        hook = getattr(backend, "host_gemm_seconds", None)  # a plugin registered by shape may lack it
        if hook is None:
            continue
        affinity = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
        try:
            per_shape = _rates(hook, shapes, budget_s)
        except Exception as exc:  # noqa: BLE001 - one backend's missing figure, said; the probe goes on
            first = (str(exc).strip().splitlines() or [""])[0][:ERROR_CHARS]
            log.info("no host GEMM rates for %s: %s: %s", name, type(exc).__name__, first)
            errors[name] = f"{type(exc).__name__}: {first}"
            continue
        finally:
            if affinity is not None and os.sched_getaffinity(0) != affinity:
                os.sched_setaffinity(0, affinity)
        if per_shape:
            rates[name] = per_shape
    return {"dtype": "fp32", "shapes": [shape_key(*s) for s in shapes], "gflops_median": rates,
            "median_over_shapes": {name: round(statistics.median(r.values()), 2) for name, r in rates.items()},
            "errors": errors, "seconds": round(time.perf_counter() - started, 3)}


def _rates(hook: Callable[..., list[float] | None], shapes: tuple[tuple[int, int, int], ...], budget_s: float) -> dict[str, float] | None:
    """GFLOP/s of the median call at each shape; None where the hook has no GEMM (at any shape:
    a backend is recorded at every shape or not at all). ValueError for an impossible rate."""
    per_shape = {}
    for m, k, n in shapes:
        times = hook(m, k, n, budget_s)
        if times is None:
            return None
        rate = 2.0 * m * k * n / statistics.median(times) / 1e9
        low, high = RATE_BOUNDS_GFLOPS
        if not (math.isfinite(rate) and low <= rate <= high):
            raise ValueError(f"{rate!r} GFLOP/s at {shape_key(m, k, n)} is no measurement (bounds {low:g}-{high:g})")
        per_shape[shape_key(m, k, n)] = round(rate, 2)
    return per_shape
