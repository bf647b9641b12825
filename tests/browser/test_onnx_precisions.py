"""The browser backend's reduced-precision ONNX files, checked in Python's onnxruntime (no browser
needed): the fp16 file a WebGPU adapter with shader-f16 runs cannot be run by any provider on a
machine without a GPU (wasm has no fp16 kernels, SwiftShader lacks shader-f16), so what can be
checked here is the file itself and its agreement with torch on the CPU execution provider."""
from __future__ import annotations

import pytest

pytest.importorskip("onnxruntime.transformers.float16", reason="the Python package onnxruntime (its float16 converter) is not installed")


def _config(model: str, device: str, precision: str):
    from benchmark_runners.records import BenchmarkConfig

    return BenchmarkConfig(model=model, device=device, backend="browser", precision=precision)


@pytest.mark.parametrize("model", ["bert-tiny", "mobilenet-v2"])
def test_the_fp16_export_computes_in_float16_keeps_fp32_edges_and_agrees_with_torch(tmp_path, monkeypatch, model):
    import numpy as np
    import onnx
    import onnxruntime as ort

    from benchmark_runners.backends.browser_backend import TOLERANCE, _agreement
    from benchmark_runners.browser.export import export
    from models.resolve import resolve_model

    monkeypatch.setenv("DEVICEFIT_DATA_DIR", str(tmp_path))
    exported = export(resolve_model(model), _config(model, "webgpu", "fp16"))
    assert exported.onnx.name.endswith("-fp16.onnx") and "convert_float_to_float16" in exported.recipe
    graph = onnx.load(str(exported.onnx)).graph
    float_edges = [v.type.tensor_type.elem_type for v in [*graph.input, *graph.output]
                   if v.type.tensor_type.elem_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16)]
    assert float_edges and set(float_edges) == {onnx.TensorProto.FLOAT}  # the page feeds and reads fp32
    weights = {dtype: sum(int(np.prod(t.dims)) for t in graph.initializer if t.data_type == dtype)
               for dtype in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16)}
    assert weights[onnx.TensorProto.FLOAT16] > 0.99 * sum(weights.values()), weights

    session = ort.InferenceSession(str(exported.onnx), providers=["CPUExecutionProvider"])
    output = session.run(None, exported.example)[0]
    # torch's own fp16 deviation on the same inputs is measured and widens the tolerance only above the fixed one
    assert exported.torch_own_deviation is not None and 0 < exported.torch_own_deviation < 0.1
    agreement = _agreement(output, np.load(exported.reference), "fp16", exported.torch_own_deviation)
    assert agreement["tolerance"] == max(TOLERANCE["fp16"], 1.5 * exported.torch_own_deviation)
    assert "torch's own fp16 deviation" in agreement["tolerance_basis"]
    # within it, and not vacuously: float16 arithmetic does move the output
    assert agreement["within_tolerance"] and 0 < agreement["relative_max_abs_diff"] <= agreement["tolerance"], agreement

    again = export(resolve_model(model), _config(model, "webgpu", "fp16"))
    assert again.source == "disk cache" and again.onnx == exported.onnx and again.torch_own_deviation == exported.torch_own_deviation


def test_fp16_runs_where_the_provider_has_fp16_kernels_and_is_skipped_with_the_reason_where_not(monkeypatch):
    from benchmark_runners import hardware
    from benchmark_runners.backends.browser_backend import BrowserBackend
    from benchmark_runners.hardware.inventory import HardwareInventory
    from benchmark_runners.hardware.platforms import PlatformInfo
    from models.resolve import resolve_model

    def inventory(features):
        adapter = {"vendor": "test", "architecture": "a-gpu"}
        return HardwareInventory(platforms={
            "wasm": PlatformInfo("wasm", True, backend="browser", devices=[{"name": "wasm"}]),
            "webgpu": PlatformInfo("webgpu", True, backend="browser", devices=[{"name": "a GPU", "adapter": adapter, "features": features}]),
        })

    spec, backend = resolve_model("bert-tiny"), BrowserBackend()
    monkeypatch.setattr(hardware, "detect_hardware", lambda **_: inventory(["shader-f16", "timestamp-query"]))
    assert backend.device_reason(spec, _config("bert-tiny", "webgpu", "fp16")) is None
    assert "no fp16 kernels" in backend.device_reason(spec, _config("bert-tiny", "wasm", "fp16"))
    monkeypatch.setattr(hardware, "detect_hardware", lambda **_: inventory(["timestamp-query"]))
    assert "lacks the shader-f16 feature" in backend.device_reason(spec, _config("bert-tiny", "webgpu", "fp16"))
