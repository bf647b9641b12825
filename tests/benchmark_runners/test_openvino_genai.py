"""The generation scenario on OpenVINO: openvino-genai's LLMPipeline over the stateful IR that
optimum-intel exports in its own venv (make genai-export), on a tiny real decoder-only model."""
import pytest

from benchmark_runners.backends import openvino_genai
from benchmark_runners.measure import ConfigMeasurer
from benchmark_runners.records import BenchmarkConfig
from models.resolve import resolve_model


def config(model, **kw):
    from tests.conftest import FAST_POLICY

    return BenchmarkConfig(model=str(model), device="openvino:CPU", backend="openvino", mode="generation", policy=FAST_POLICY, **kw)


def _missing() -> str | None:
    try:
        import openvino_genai as _  # noqa: F401
    except ImportError as exc:
        return f"openvino-genai is not installed ({exc}; make install)"
    if not openvino_genai.export_python().exists():
        return f"the optimum-intel export venv is missing ({openvino_genai.export_python()}; make genai-export)"
    return None


def test_what_cannot_run_is_skipped_with_the_reason(tiny_models, monkeypatch, tmp_path):
    t5 = resolve_model(str(tiny_models["seq2seq"]))
    assert "encoder-decoder" in openvino_genai.unavailable_reason(t5, config(tiny_models["seq2seq"]))
    gpt = resolve_model(str(tiny_models["causal"]))
    assert "int8" in openvino_genai.unavailable_reason(gpt, config(tiny_models["causal"], precision="int8"))
    monkeypatch.setenv(openvino_genai.EXPORT_PYTHON_ENV, str(tmp_path / "no-python"))
    reason = openvino_genai.unavailable_reason(gpt, config(tiny_models["causal"]))
    try:
        import openvino_genai as _  # noqa: F401
        assert "make genai-export" in reason and str(tmp_path / "no-python") in reason
    except ImportError:
        assert "openvino-genai" in reason and "not installed" in reason


def test_a_decoder_generates_through_llmpipeline_with_both_tools_figures(tiny_models):
    """Batch 1 times tokens on the harness's clock (a streamer), batch 2 with openvino-genai's own
    step times (it streams batch 1 only); both record openvino-genai's TTFT/TPOT beside the
    harness's, the IR's agreement with torch, and the exporter that made the IR."""
    missing = _missing()
    if missing:
        pytest.skip(missing)
    measurer = ConfigMeasurer("test-run", {"suite": "pytest"}, {"openvino:CPU": {"name": "test cpu", "fingerprint": "cpu-test"}})
    rows = [measurer.run(config(tiny_models["causal"], batch_size=b, seq_length=16, new_tokens=8)) for b in (1, 2)]
    for row in rows:
        assert row.status == "ok", row.error
        cfg = row.backend_config
        assert cfg["pipeline"] == "openvino_genai.LLMPipeline" and cfg["requested_hints"]["INFERENCE_PRECISION_HINT"] == "f32"
        assert cfg["output_agreement"]["within_tolerance"] and "optimum-intel 2.2.0" in cfg["export"]
        own = cfg["runtime_figures"]
        assert own["ttft_ms"] > 0 and own["tpot_ms"] > 0 and own["generate_ms"] > 0
        assert 0 < row.ttft_ms < row.p50_ms and row.tpot_p50_ms > 0 and row.decode_tokens_per_s > 0
        assert row.new_tokens == 8 and row.kv_cache_bytes > 0 and row.output_check["problem"] is None
    assert "streamer" in rows[0].backend_config["token_times"] and "raw_metrics" in rows[1].backend_config["token_times"]
    # The harness's request time and openvino-genai's generate() time are one request's, seen twice.
    assert rows[0].backend_config["runtime_figures"]["generate_ms"] == pytest.approx(rows[0].p50_ms, rel=0.2)
