"""A configuration devicefit's own backend never runs (torch's dynamic int8 on a GPU, int8
training anywhere) is answered `unavailable` with the backend's reason by every link of the
chain, never a number (found by a fault hunt: `devicefit select --precision int8 --mode training`
recommended cuda at 0.1 ms, and the trained link said 31.8 ms for int8 training on the CPU)."""
import pytest

from benchmark_runners import registry
from benchmark_runners.hardware import detect_hardware
from devicefit.predict.cold_start import cold_artifact
from devicefit.predict.features import model_point
from devicefit.predict.hardware_specs import DeviceSpec
from devicefit.predict.predictor import PerformancePredictor, Prediction, Request
from models.resolve import resolve_model


@pytest.fixture(scope="module")
def cold():
    predictor = PerformancePredictor(cold_artifact(detect_hardware(probe=False).to_json()))
    # the devices' figures, which a test host's detection without a probe does not carry
    predictor.specs.update({kind: DeviceSpec(kind, f"a {kind}", 100.0, 20.0, "measured_probe") for kind in ("cpu", "cuda", "mps")})
    return predictor


@pytest.fixture(scope="module")
def point():
    return model_point(resolve_model("bert-tiny"))


def _request(point, precision, mode, kind):
    return Request(point, 1, precision, mode, kind)


@pytest.mark.parametrize("kind, mode, reason", [("cuda", "inference", "runs on CPU only"), ("mps", "inference", "runs on CPU only"),
                                                ("cpu", "training", "int8 training cannot run"),
                                                ("cuda", "training", "runs on CPU only")])
def test_torch_int8_where_it_never_runs_is_unavailable(cold, point, kind, mode, reason):
    [answer] = cold.predict([_request(point, "int8", mode, kind)])
    assert answer.source == "unavailable" and answer.latency_ms is None and reason in answer.detail


def test_int8_inference_on_the_cpu_is_still_predicted(cold, point):
    [answer] = cold.predict([_request(point, "int8", "inference", "cpu")])
    assert answer.source == "static_rule" and answer.latency_ms > 0, answer.detail


def test_the_trained_link_never_answers_a_run_the_backend_refuses(cold, point, monkeypatch):
    """Where the trained link's categories cover int8 and training one by one, it was asked the
    combination too; now a refused request never reaches it."""
    asked = []

    def trained(requests, index, out):
        for r, i in zip(requests, index):
            asked.append((r.kind, r.precision, r.mode))
            out[i] = Prediction(1.0, 1000.0, 1.0, None, None, None, "trained_predictor", "", None)

    monkeypatch.setattr(cold, "boosters", {"latency": object()})
    monkeypatch.setattr(cold, "_outside_domain", lambda r: None)
    monkeypatch.setattr(cold, "_predict_trained", trained)
    answers = cold.predict([_request(point, "int8", "training", "cpu"), _request(point, "fp32", "training", "cpu")])
    assert asked == [("cpu", "fp32", "training")]
    assert [a.source for a in answers] == ["unavailable", "trained_predictor"]


def test_the_benchmark_refuses_what_the_predictor_calls_unavailable():
    torch_backend = registry.backends()["torch"]
    assert torch_backend.kind_reason("cpu", "int8", "training") and torch_backend.kind_reason("cuda", "int8", "inference")
    assert torch_backend.kind_reason("cpu", "int8", "inference") is None and torch_backend.kind_reason("cuda", "fp16", "training") is None


def test_torch_int8_of_a_model_that_is_mostly_convolutions_is_unavailable_as_the_benchmark_skips_it(cold):
    """The benchmark skips dynamic int8 for mobilenet-v2 (its linear layers do ~0% of the FLOPs:
    the row would time fp32 convolutions); the predictors answered it with a number anyway."""
    from benchmark_runners.backends.torch_backend import MIN_INT8_LINEAR_FRACTION
    from benchmark_runners.records import BenchmarkConfig

    mobilenet = model_point(resolve_model("mobilenet-v2"))
    assert mobilenet.linear_flops_fraction < MIN_INT8_LINEAR_FRACTION
    [answer] = cold.predict([_request(mobilenet, "int8", "inference", "cpu")])
    assert answer.source == "unavailable" and answer.latency_ms is None and "linear layers only" in answer.detail
    benchmark = registry.backends()["torch"].device_reason(resolve_model("mobilenet-v2"), BenchmarkConfig("mobilenet-v2", precision="int8"))
    assert benchmark and benchmark in answer.detail  # the same words the skipped row carries
    [fp32] = cold.predict([_request(mobilenet, "fp32", "inference", "cpu")])
    assert fp32.latency_ms > 0
