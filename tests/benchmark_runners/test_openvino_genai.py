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


def _missing(tiny_models) -> str | None:
    """Why the real test cannot run here: the product's own reason (openvino-genai missing, or an
    export venv that is absent or lacks optimum-intel)."""
    return openvino_genai.unavailable_reason(resolve_model(str(tiny_models["causal"])), config(tiny_models["causal"]))


def test_what_cannot_run_is_skipped_with_the_reason(tiny_models, monkeypatch, tmp_path):
    from benchmark_runners import registry

    gpt, t5 = (resolve_model(str(tiny_models[k])) for k in ("causal", "seq2seq"))
    # declared: fp16 and int8 generation are never measured on OpenVINO, so never predicted
    assert "fp16 generation on OpenVINO is not measured" in registry.backend("openvino").declared_reason("fp16", "generation")
    assert registry.backend("openvino").declared_reason("fp32", "generation") is None
    try:
        import openvino_genai as _  # noqa: F401
    except ImportError:
        reason = openvino_genai.unavailable_reason(gpt, config(tiny_models["causal"]))
        assert "openvino-genai" in reason and "not installed" in reason
        return
    assert "encoder-decoder" in openvino_genai.unavailable_reason(t5, config(tiny_models["seq2seq"]))
    assert "int8" in openvino_genai.unavailable_reason(gpt, config(tiny_models["causal"], precision="int8"))
    # an export venv that is absent, or whose install stopped before optimum-intel: skipped, naming it
    monkeypatch.setenv(openvino_genai.EXPORT_PYTHON_ENV, str(tmp_path / "no-python"))
    reason = openvino_genai.unavailable_reason(gpt, config(tiny_models["causal"]))
    assert "make genai-export" in reason and "does not exist" in reason
    half = tmp_path / "half-venv-python"
    half.write_text("#!/bin/sh\necho 'ModuleNotFoundError: No module named optimum' >&2\nexit 1\n")
    half.chmod(0o755)
    monkeypatch.setenv(openvino_genai.EXPORT_PYTHON_ENV, str(half))
    assert "lacks the exporter" in openvino_genai.unavailable_reason(gpt, config(tiny_models["causal"]))


def test_a_decoder_generates_through_llmpipeline_with_both_tools_figures(tiny_models):
    """Batch 1 times tokens on the harness's clock (a streamer), batch 2 with openvino-genai's own
    step times (it streams batch 1 only); both record openvino-genai's TTFT/TPOT beside the
    harness's, the IR's agreement with torch, and the exporter that made the IR."""
    missing = _missing(tiny_models)
    if missing:
        pytest.skip(missing)
    measurer = ConfigMeasurer("test-run", {"suite": "pytest"}, {"openvino:CPU": {"name": "test cpu", "fingerprint": "cpu-test"}})
    rows = [measurer.run(config(tiny_models["causal"], batch_size=b, seq_length=16, new_tokens=8)) for b in (1, 2)]
    for row in rows:
        assert row.status == "ok", row.error
        cfg = row.backend_config
        hints = cfg["requested_hints"]
        assert cfg["pipeline"] == "openvino_genai.LLMPipeline" and hints["INFERENCE_PRECISION_HINT"] == hints["KV_CACHE_PRECISION"] == "f32"
        assert cfg["output_agreement"]["within_tolerance"] and "optimum-intel 2.2.0" in cfg["export"]
        own = cfg["runtime_figures"]
        assert own["ttft_ms"] > 0 and own["tpot_ms"] > 0 and own["generate_ms"] > 0
        assert 0 < row.ttft_ms < row.p50_ms and row.tpot_p50_ms > 0 and row.decode_tokens_per_s > 0
        assert row.new_tokens == 8 and row.kv_cache_bytes > 0 and row.output_check["problem"] is None
    assert "streamer" in rows[0].backend_config["token_times"] and "raw_metrics" in rows[1].backend_config["token_times"]
    # The harness's request time and openvino-genai's generate() time are one request's, seen twice.
    assert rows[0].backend_config["runtime_figures"]["generate_ms"] == pytest.approx(rows[0].p50_ms, rel=0.2)


def test_a_restricted_cpu_budget_sets_the_pipelines_threads(tiny_models, monkeypatch):
    """openvino-genai's CPU plugin counts the host's cores, not a cgroup's quota: where the
    budget restricts (hardware/cpu_budget.py) the pipeline is asked for the budget's threads,
    and where it does not, for none (the plugin's own default), as on OpenVINO's inference rows."""
    missing = _missing(tiny_models)
    if missing:
        pytest.skip(missing)
    import openvino_genai as genai

    devices = {"openvino:CPU": {"name": "test cpu", "fingerprint": "cpu-test"}}
    asked, passed, real = {}, [], genai.LLMPipeline

    def pipeline(*args, **hints):  # the real pipeline, its properties noted on the way
        passed.append(hints.get("INFERENCE_NUM_THREADS"))
        return real(*args, **hints)

    monkeypatch.setattr(genai, "LLMPipeline", pipeline)
    for budget in (1, None):
        monkeypatch.setattr(openvino_genai, "restricted_threads", lambda b=budget: b)
        row = ConfigMeasurer("test-run", {"suite": "pytest"}, devices).run(
            config(tiny_models["causal"], batch_size=1, seq_length=16, new_tokens=4))
        assert row.status == "ok", row.error
        asked[budget] = row.backend_config["requested_hints"].get("INFERENCE_NUM_THREADS")
    assert asked == {1: "1", None: None} and passed == [1, None]
