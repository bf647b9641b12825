"""OpenVINO's own fp32 GEMM on the host CPU, for the probe's per-backend GEMM suite
(benchmark_runners/hardware/gemm_suite.py; OpenVINOBackend.host_gemm_seconds)."""
from __future__ import annotations


def host_gemm_seconds(m: int, k: int, n: int, budget_s: float, hints: dict[str, object]) -> list[float] | None:
    """A MatMul against constant weights (a linear layer, as the conversion emits one) on the
    CPU plugin, compiled with `hints` (the backend's for an fp32 batch-1 row) and the CPU
    budget's threads where one restricts this process; None where openvino is not installed."""
    try:
        import numpy as np
        import openvino as ov
        import openvino.opset13 as ops
    except ImportError:
        return None
    from benchmark_runners.hardware.cpu_budget import restricted_threads
    from benchmark_runners.hardware.gemm_suite import time_gemm

    rng = np.random.default_rng(0)
    x = ops.parameter([m, k], np.float32, name="x")
    w = ops.constant(rng.standard_normal((n, k)).astype(np.float32))
    model = ov.Model([ops.matmul(x, w, False, True)], [x], "linear")
    hints = dict(hints)
    if threads := restricted_threads():
        hints["INFERENCE_NUM_THREADS"] = threads
    request = ov.Core().compile_model(model, "CPU", hints).create_infer_request()
    feed = {"x": rng.standard_normal((m, k)).astype(np.float32)}
    # the kernel's rate: the input shared and the output left in place, not copied each call
    return time_gemm(lambda: request.infer(feed, share_inputs=True, share_outputs=True), budget_s)
