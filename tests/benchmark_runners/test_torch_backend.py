"""The torch backend and in-process measurement on tiny real models of every modality."""
import pytest
import torch

from benchmark_runners.backends.torch_backend import TorchBackend, linear_equivalents
from benchmark_runners.measure import ConfigMeasurer
from benchmark_runners.records import BenchmarkConfig
from models.loading import build_model
from models.resolve import resolve_model

backend = TorchBackend()


def config(model, **kw):
    from tests.conftest import FAST_POLICY

    return BenchmarkConfig(model=str(model), policy=FAST_POLICY, **kw)


@pytest.fixture(scope="module")
def measurer():
    return ConfigMeasurer("test-run", {"suite": "pytest"}, {"cpu": {"name": "test cpu", "fingerprint": "cpu-test"}})


@pytest.mark.parametrize("modality", ["text", "causal", "seq2seq", "image", "audio_features", "audio_waveform", "image_text"])
def test_inference_measures_every_modality(measurer, tiny_models, modality):
    r = measurer.run(config(tiny_models[modality], batch_size=2))
    assert r.status == "ok", r.error
    assert r.iterations >= 2 and len(r.samples_ms) == r.iterations
    assert r.p50_ms > 0
    if r.iterations >= 6:  # an order-statistic CI needs 6 samples
        assert r.ci_low_ms <= r.p50_ms <= r.ci_high_ms
    else:
        assert r.ci_low_ms is None and r.stop_reason == "time_cap"
    assert r.throughput_samples_per_s == pytest.approx(2 * r.iterations / (sum(r.samples_ms) / 1e3))
    assert r.peak_rss_bytes >= r.rss_after_load_bytes > 0
    assert r.load_time_s > 0 and r.first_inference_ms > 0
    assert r.forward_flops_per_sample > 0
    assert r.hardware_fingerprint == "cpu-test"
    assert r.environment["torch_threads"] >= 1
    assert r.minor_faults_per_iteration is not None and r.minor_faults_per_iteration >= 0


def test_the_output_check_reads_the_last_timed_output_without_another_forward(measurer, tiny_models, monkeypatch):
    """Inference keeps its last output for the check: a further forward pass (what `output`
    runs) would cost one more iteration per config."""
    def no_extra_forward(self, prepared, inputs):
        raise AssertionError("the output check ran the model again")

    monkeypatch.setattr(TorchBackend, "output", no_extra_forward)
    r = measurer.run(config(tiny_models["image"], batch_size=3))
    assert r.status == "ok", r.error
    check = r.output_check
    assert check["problem"] is None and check["finite"] and check["max_abs"] > 0
    spec = resolve_model(str(tiny_models["image"]))
    assert check["elements"] == 3 * spec.build_config().num_labels  # the whole batch's logits


@pytest.mark.parametrize("modality,loss_kind", [("causal", "model"), ("image", "model"), ("image_text", "model"),
                                                ("audio_waveform", "mean_square_of_output")])
def test_training_times_forward_backward_and_optimizer(measurer, tiny_models, modality, loss_kind):
    r = measurer.run(config(tiny_models[modality], batch_size=2, mode="training"))
    assert r.status == "ok", r.error
    assert r.loss_kind == loss_kind
    for phase in ("forward", "backward", "optimizer"):
        assert len(r.phase_samples_ms[phase]) == r.iterations
    assert r.forward_ms > 0 and r.backward_ms > 0 and r.optimizer_ms > 0
    assert r.forward_ms + r.backward_ms + r.optimizer_ms <= r.p50_ms * 1.5
    assert "AdamW" in r.precision_recipe


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_half_precisions_run_and_say_how(measurer, tiny_models, precision):
    r = measurer.run(config(tiny_models["text"], precision=precision))
    assert r.status == "ok", r.error
    assert precision in r.precision_recipe
    t = measurer.run(config(tiny_models["text"], precision=precision, mode="training"))
    assert t.status == "ok", t.error
    assert "autocast" in t.precision_recipe


def test_int8_quantizes_and_records_the_recipe(measurer, tiny_models):
    r = measurer.run(config(tiny_models["causal"], precision="int8"))
    assert r.status == "ok", r.error
    assert "Conv1D layers converted" in r.precision_recipe
    assert r.weight_bytes < measurer.run(config(tiny_models["causal"])).weight_bytes


def test_unsupported_precisions_are_skipped_with_reasons(measurer, tiny_models):
    r = measurer.run(config(tiny_models["text"], precision="int8", mode="training"))
    assert r.status == "skipped" and "no gradients" in r.error
    assert r.samples_ms == [] and r.p50_ms is None  # no number stands in for a measurement
    conv = measurer.run(config("resnet-50", precision="int8"))
    assert conv.status == "skipped" and "linear layers only" in conv.error
    gpu = backend.unsupported_reason(resolve_model("bert-tiny"), config("bert-tiny", device="cuda", precision="int8"))
    assert "CPU only" in gpu


def test_an_impossible_input_is_a_failed_row_naming_the_problem(measurer, tiny_models):
    r = measurer.run(config(tiny_models["text"], seq_length=4096))
    assert r.status == "failed"
    assert "at most 64 tokens" in r.error


def test_conv1d_to_linear_is_numerically_identical(tiny_models):
    spec = resolve_model(str(tiny_models["causal"]))
    model = build_model(spec)
    ids = torch.randint(0, 1000, (2, 16))
    with torch.inference_mode():
        before = model(input_ids=ids).logits
        assert linear_equivalents(model) == 2 * 4  # c_attn, c_proj, c_fc, mlp.c_proj per layer
        after = model(input_ids=ids).logits
    assert torch.allclose(before, after, atol=1e-5)


def test_invalid_configs_are_rejected_before_running():
    with pytest.raises(ValueError, match="batch size must be a positive integer, got 0"):
        BenchmarkConfig(model="bert-tiny", batch_size=0)
    with pytest.raises(ValueError, match="unknown precision 'fp4'"):
        BenchmarkConfig(model="bert-tiny", precision="fp4")
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        BenchmarkConfig(model="bert-tiny", device="tpu")
