"""CUDA and MPS paths, run for real where the device exists; skipped with the reason here."""
import pytest
import torch

from benchmark_runners.hardware.platforms import detect_platforms
from benchmark_runners.records import BenchmarkConfig
from benchmark_runners.sweep import run_sweep
from tests.conftest import FAST_POLICY

PLATFORMS = detect_platforms()


def _device_or_skip(kind: str) -> str:
    info = PLATFORMS[kind]
    if not info.available:
        pytest.skip(f"{kind} absent: {info.reason}")
    return "cuda:0" if kind == "cuda" else kind


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["cuda", "mps"])
def test_gpu_inference_and_training_with_device_memory(kind, tiny_models):
    device = _device_or_skip(kind)
    configs = [BenchmarkConfig(str(tiny_models["text"]), device=device, precision=p, mode=m, batch_size=4, policy=FAST_POLICY)
               for p in ("fp32", "fp16") for m in ("inference", "training")]
    configs.append(BenchmarkConfig(str(tiny_models["text"]), device=device, precision="int8", policy=FAST_POLICY))
    rows = run_sweep(configs)
    for row in rows[:4]:
        assert row.status == "ok", row.error
        assert row.device_allocated_peak_bytes and row.device_allocated_peak_bytes > 0
        assert row.p50_ms > 0
    assert rows[4].status == "skipped" and "CPU only" in rows[4].error


@pytest.mark.gpu
def test_cuda_event_clock_times_device_work():
    _device_or_skip("cuda")
    from benchmark_runners.timers import CudaEventClock

    a = torch.randn(2048, 2048, device="cuda")
    clock = CudaEventClock("cuda:0")
    clock.begin()
    a @ a
    clock.mark("matmul")
    total, phases = clock.end()
    assert total > 0 and 0 < phases["matmul"] <= total
