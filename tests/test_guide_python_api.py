"""The guides' Python API examples (specs 000, 001, 003), each called the way the guide calls it
(the guide's line quoted above the call), on the session's tiny measured store or, where the
guide uses no data directory, on the session's empty one (cold start)."""
from __future__ import annotations

import json
import math
import shutil
import statistics

import pytest

from tests.api.server import call, running


@pytest.fixture
def store_copy(measured, tmp_path):
    """The session's measured store, copied: training records its version in the store it reads."""
    path = tmp_path / "my_benchmark_data.duckdb"
    shutil.copyfile(measured.database, path)
    return path


# --- 001: custom prediction models, distributed training -------------------------------------

def test_train_prediction_models_trains_publishes_and_the_predictor_answers_from_it(store_copy, tmp_path):
    from devicefit import store
    from devicefit.predict.api import HardwareModelPredictor, train_prediction_models

    # custom_models = train_prediction_models(db_path="./my_benchmark_data.parquet", output_dir="./my_models")
    custom_models = train_prediction_models(db_path=str(store_copy), output_dir=str(tmp_path / "my_models"))
    published = json.loads((tmp_path / "my_models" / "predictors" / "current.json").read_text())
    assert published["version"] == custom_models["version"] and set(custom_models["boosters"]) == {"latency", "throughput", "memory"}
    assert {"bert-tiny", "all-MiniLM-L6-v2", "mobilenet-v2", "t5-small"} <= set(custom_models["models"])
    with store.opened(store_copy, read_only=True) as con:
        assert custom_models["version"] in [r["version"] for r in store.predictor_versions(con)]

    # predictor = HardwareModelPredictor(); predictor.prediction_models = custom_models
    predictor = HardwareModelPredictor(benchmark_dir=tmp_path / "empty", record=False)
    assert predictor.predictor.version() == "cold-start"
    predictor.prediction_models = custom_models
    # recommendation = predictor.predict_optimal_hardware(...)
    recommendation = predictor.predict_optimal_hardware("bert-tiny", available_hardware=["cpu"])
    assert recommendation["prediction_source"] == "trained_predictor"
    assert predictor.predict_performance("bert-tiny", hardware="cpu")["predictor_version"] == custom_models["version"]


def test_the_predictor_retrains_from_its_own_store_and_switches_to_the_new_artifact(store_copy):
    from devicefit.predict.api import HardwareModelPredictor
    from devicefit.predict.artifacts import load_current

    predictor = HardwareModelPredictor(database_path=store_copy, record=False)
    before = predictor.predictor.version()
    artifact = predictor.train_prediction_models()
    assert predictor.predictor.version() == artifact["version"] != before
    assert load_current(predictor.paths)["version"] == artifact["version"]  # published in the store's data directory


def test_training_refuses_too_few_models_a_missing_store_and_a_file_that_is_not_one(tmp_path):
    from devicefit import store
    from devicefit.errors import DevicefitError
    from devicefit.predict.api import PredictorSourceError, train_prediction_models
    from devicefit.predict.training import InsufficientData

    empty = tmp_path / "empty.duckdb"
    with store.opened(empty) as con:
        store.migrate(con)
    with pytest.raises(InsufficientData, match="at least 3 models"):
        train_prediction_models(db_path=empty, output_dir=tmp_path / "out")
    with pytest.raises(InsufficientData, match="no benchmark store"):
        train_prediction_models(db_path=tmp_path / "absent.duckdb")
    parquet = tmp_path / "my_benchmark_data.parquet"
    parquet.write_bytes(b"PAR1" + bytes(64))
    with pytest.raises(PredictorSourceError, match="not a DuckDB store") as exc:
        train_prediction_models(db_path=parquet)
    assert isinstance(exc.value, DevicefitError)
    assert not (tmp_path / "out" / "predictors").exists()


def test_predict_optimal_hardware_plans_distributed_training(tmp_path):
    from devicefit.predict.api import HardwareModelPredictor
    from devicefit.select.distributed import DistributedConfigError, plan_distributed_training
    from models.resolve import resolve_model

    predictor = HardwareModelPredictor(benchmark_dir=tmp_path, record=False)
    # recommendation = predictor.predict_optimal_hardware(model_name="llama-7b", model_family="text_generation",
    #     mode="training", batch_size=32, is_distributed=True, gpu_count=8)
    recommendation = predictor.predict_optimal_hardware(model_name="llama-7b", model_family="text_generation", mode="training",
                                                        batch_size=32, is_distributed=True, gpu_count=8)
    primary = recommendation["primary_recommendation"]
    assert primary in ("cuda", "rocm") and set(recommendation["not_distributed"]) >= {"cpu"}
    plan = recommendation["distributed_training"][primary]
    assert plan["gpu_count"] == 8 and plan["global_batch_size"] == 256 and plan["fits"]
    memory_gb = predictor.predictor.specs[primary].memory_gb
    direct = plan_distributed_training(resolve_model("llama-7b"), 8, 32, memory_gb).to_response()
    assert plan["estimated_memory"] == direct["estimated_memory"] and plan["distributed_strategy"] == direct["distributed_strategy"]
    # The selector's own spelling gives the same answer.
    assert predictor.predict_optimal_hardware("llama-7b", mode="training", batch_size=32, distributed=True, gpu_count=8)[
        "distributed_training"] == recommendation["distributed_training"]
    too_big = predictor.predict_optimal_hardware("llama-2-70b", mode="training", batch_size=8, is_distributed=True, gpu_count=3,
                                                 available_hardware=["cuda", "rocm"])
    assert "cuda" in too_big["does_not_fit"] and too_big["primary_recommendation"] == "rocm"  # 94 GB a GPU: over 80 GB A100s, within 128 GB MI250X
    with pytest.raises(DistributedConfigError, match="training"):
        predictor.predict_optimal_hardware("gpt2", is_distributed=True, gpu_count=2)
    with pytest.raises(ValueError, match="contradict"):
        predictor.predict_optimal_hardware("gpt2", mode="training", distributed=True, is_distributed=False)


# --- 003: hardware-aware classification ------------------------------------------------------

def test_get_hardware_aware_model_classification_is_the_classifiers_answer(measured, artifact):
    from devicefit.select.resources import HardwareAwareModelClassifier, get_hardware_aware_model_classification

    # result = get_hardware_aware_model_classification(model_name="bert-base-uncased", model_class="BertModel",
    #     tasks=["fill-mask", "feature-extraction"])
    result = get_hardware_aware_model_classification(model_name="bert-base-uncased", model_class="BertModel",
                                                     tasks=["fill-mask", "feature-extraction"])
    assert result["family"] == "embedding" and result["recommended_template"] == "hf_embedding_template.py"
    assert {"min_memory_mb", "recommended_memory_mb", "cpu_cores", "disk_space_mb", "batch_size"} <= set(result["resource_requirements"])
    # classification = get_hardware_aware_model_classification("bert-base-uncased")
    one_call = get_hardware_aware_model_classification("bert-base-uncased", benchmark_dir=measured.root)
    assert one_call == HardwareAwareModelClassifier(benchmark_dir=measured.root).classify_model("bert-base-uncased")
    # torch_device=classification.get("torch_device", ...)
    assert one_call["torch_device"] in ("cpu", "cuda:0", "mps")


def test_classifier_options_hardware_cache_model_database_and_methods(tmp_path, monkeypatch, measured, artifact):
    from benchmark_runners.hardware import detect_hardware
    from devicefit.select.resources import HardwareAwareModelClassifier

    cache = tmp_path / "hardware_cache.json"
    inventory = detect_hardware().to_json()
    cache.write_text(json.dumps({**inventory, "detected_at": "2000-01-01T00:00:00+00:00"}))
    options = dict(hardware_cache_path=str(cache), model_db_path=str(tmp_path / "model_database.json"), benchmark_dir=measured.root)
    # classifier = HardwareAwareModelClassifier(hardware_cache_path="./hardware_cache.json",
    #     model_db_path="./model_database.json", force_refresh=False)
    classifier = HardwareAwareModelClassifier(**options, force_refresh=False)
    assert classifier.selector.inventory["detected_at"] == "2000-01-01T00:00:00+00:00"  # read from the cache given
    # classification = classifier.classify_model(model_name="gpt2", model_class="GPT2LMHeadModel",
    #     tasks=["text-generation"], methods=["generate", "forward"])
    classification = classifier.classify_model(model_name="gpt2", model_class="GPT2LMHeadModel", tasks=["text-generation"],
                                               methods=["generate", "forward"])
    assert classification["family"] == "text_generation" and classification.get("subfamily") and classification["confidence"] > 0
    assert classification["methods"] == {"model_class": "GPT2LMHeadModel", "available": {"generate": True, "forward": True}}
    assert classifier.classify_model("bert-base-uncased", methods=["generate"])["methods"]["available"] == {"generate": False}
    assert set(classification["hardware_profile"]) >= {"cpu", "cuda", "mps", "openvino", "webnn", "webgpu"}

    # The model database answers a repeated request without selecting again...
    again = HardwareAwareModelClassifier(**options)
    monkeypatch.setattr(again.selector, "select_hardware", lambda *a, **k: pytest.fail("selected again"))
    assert again.classify_model(model_name="gpt2", model_class="GPT2LMHeadModel", tasks=["text-generation"],
                                methods=["generate", "forward"]) == classification
    # ... and force_refresh recomputes it (and detects the hardware again).
    fresh = HardwareAwareModelClassifier(**options, force_refresh=True)
    assert fresh.selector.inventory["detected_at"] != "2000-01-01T00:00:00+00:00"
    monkeypatch.setattr(fresh.selector, "select_hardware", lambda *a, **k: pytest.fail("recomputed"))
    with pytest.raises(pytest.fail.Exception, match="recomputed"):
        fresh.classify_model(model_name="gpt2", model_class="GPT2LMHeadModel", tasks=["text-generation"], methods=["generate", "forward"])


def test_hw_compat_override_replaces_the_compatibility_verdicts_for_the_call(tiny_models, measured, artifact, tmp_path,
                                                                            monkeypatch):
    from devicefit.select.resources import ClassifierInputError, HardwareAwareModelClassifier
    from devicefit.select.selector import SelectionError
    from models.registry import register_model

    # A custom model is one registered by name (`devicefit models add DIR --name my-custom-model`).
    monkeypatch.setenv("DEVICEFIT_DATA_DIR", str(tmp_path))
    register_model(tmp_path, tiny_models["text"], name="my-custom-model")
    classifier = HardwareAwareModelClassifier(benchmark_dir=measured.root)
    custom_hw_profile = {"cuda": {"compatible": True, "memory_usage": {"peak": 2000}}, "mps": {"compatible": False},
                         "openvino": {"compatible": True}, "webnn": {"compatible": False}}
    # classification = classifier.classify_model(model_name="my-custom-model", hw_compat_override=custom_hw_profile)
    classification = classifier.classify_model(model_name="my-custom-model", hw_compat_override=custom_hw_profile)
    profile = classification["hardware_profile"]
    assert not profile["mps"]["compatible"] and profile["cuda"]["compatible"] and not profile["webnn"]["compatible"]
    assert "hw_compat_override" in profile["mps"]["evidence"] and "hw_compat_override" not in profile["cpu"]["evidence"]

    # A verdict changes the selection, and a peak the requirements on that kind.
    plain = classifier.classify_model("bert-tiny")
    hw = plain["recommended_hardware"]
    try:
        without = classifier.classify_model("bert-tiny", hw_compat_override={hw: {"compatible": False}})
        assert without["recommended_hardware"] != hw and "hw_compat_override" in without["selection_explanation"]
    except SelectionError as exc:  # here, on a CPU-only host: nothing else is predicted and present
        assert f"{hw}: incompatible: the caller's verdict (hw_compat_override)" in str(exc)
    peaked = classifier.classify_model("bert-tiny", hw_compat_override={hw: {"compatible": True, "memory_usage": {"peak": 2000}}})
    assert peaked["resource_requirements"]["min_memory_mb"] == peaked["resource_requirements"]["recommended_memory_mb"] == 2000
    assert "hw_compat_override" in peaked["resource_requirements"]["basis"]["min_memory_mb"]
    assert classifier.classify_model("bert-tiny") == plain  # for that call only
    for bad in ({"tpu": {"compatible": True}}, {"cuda": {"compatible": "yes"}}, {"cuda": {"compatible": True, "speed": 2}},
                {"cuda": {"compatible": True, "memory_usage": {"peak": -1}}}):
        with pytest.raises(ClassifierInputError):
            classifier.classify_model("bert-tiny", hw_compat_override=bad)


def test_resource_pool_config_recommends_a_timeout_from_measured_load_times(measured, artifact):
    from devicefit import store
    from devicefit.select.resources import RELOAD_SHARE, HardwareAwareModelClassifier

    classifier = HardwareAwareModelClassifier(benchmark_dir=measured.root)
    # config = classifier.get_optimal_resource_pool_config(models)
    config = classifier.get_optimal_resource_pool_config(["bert-base-uncased", "t5-small", "clip-vit-base-patch32"])
    # print(f"Recommended timeout: {config['resource_pool_config']['recommended_timeout_mins']} minutes")
    pool = config["resource_pool_config"]
    placements = {m: c["recommended_hardware"] for m, c in config["models"].items()}
    assert (pool["recommended_timeout_mins"], pool["timeout_basis"]) == classifier.recommended_timeout(placements)

    # The figure, recomputed from the store: median fp32 load time of the slowest-loading model.
    rows = store.read_ok_measurements(measured.database)
    loads = {m: statistics.median(r["load_time_s"] for r in rows if r["model"] == m and r["device_kind"] == "cpu"
                                  and r["precision"] == "fp32" and r["mode"] == "inference") for m in ("bert-tiny", "t5-small")}
    minutes, basis = classifier.recommended_timeout({m: "cpu" for m in loads})
    slowest = max(loads, key=loads.get)
    assert minutes == max(1, math.ceil(loads[slowest] / RELOAD_SHARE / 60)) and slowest in basis
    # An unmeasured model on a measured kind: its weights at the kind's measured load rate.
    assert "load rate" in classifier.recommended_timeout({"bert-base-uncased": "cpu"})[1]
    # Nothing measured on the kind: no figure, and why.
    assert classifier.recommended_timeout({"bert-tiny": "webnn"}) == (None, "no timeout: no load time of bert-tiny or of any model "
                                                                           "measured on webnn")


def test_compatible_models_leave_an_unknown_model_out_and_say_so():
    from devicefit.select.resources import HardwareAwareModelClassifier

    classifier = HardwareAwareModelClassifier()
    models = ["bert-base-uncased", "gpt2", "t5-small", "facebook/wav2vec2-base", "llava-hf/llava-1.5-7b-hf"]
    # cuda_compatible = classifier.get_compatible_models_for_hardware(models, "cuda")
    cuda_compatible = classifier.get_compatible_models_for_hardware(models, "cuda")
    assert cuda_compatible == ["bert-base-uncased", "gpt2", "t5-small", "facebook/wav2vec2-base"]
    assert list(cuda_compatible.excluded) == ["llava-hf/llava-1.5-7b-hf"] and "Unknown model" in cuda_compatible.excluded[
        "llava-hf/llava-1.5-7b-hf"]
    assert str(cuda_compatible) == str(list(cuda_compatible))  # prints as the guide's list


# --- 003: hardware detection -----------------------------------------------------------------

def test_hardware_detection_as_the_guide_uses_it():
    from benchmark_runners.hardware import detect_hardware
    from devicefit.hardware_detection import HardwareDetector, detect_available_hardware
    from models.classifier import classify_model

    inventory = detect_hardware(probe=False)
    # hw_info = detect_available_hardware(); best_device = hw_info["torch_device"]
    hw_info = detect_available_hardware()
    best_device = hw_info["torch_device"]
    assert best_device == inventory.torch_device() and hw_info["hardware"]["cpu"] is True
    assert hw_info["hardware"]["cuda"] is inventory.platforms["cuda"].available
    # detector = HardwareDetector(); cuda_details = detector.get_cuda_details()
    detector = HardwareDetector()
    cuda_details = detector.get_cuda_details()
    assert cuda_details["available"] is inventory.platforms["cuda"].available
    assert cuda_details["device_count"] == len(inventory.platforms["cuda"].devices)
    # custom_device = detector.get_torch_device_with_priority(priority_list=["cuda", "mps", "cpu"], preferred_index=1)
    custom_device = detector.get_torch_device_with_priority(priority_list=["cuda", "mps", "cpu"], preferred_index=1)
    if not inventory.platforms["cuda"].available and not inventory.platforms["mps"].available:
        assert custom_device == "cpu"
    # model_info = classify_model("bert-base-uncased")
    assert classify_model("bert-base-uncased").family == "embedding"


def test_torch_device_priority_picks_the_preferred_gpu_index():
    from benchmark_runners.hardware import HardwareInventory, detect_hardware
    from devicefit.hardware_detection import HardwareDetectionError, HardwareDetector

    def with_gpus(count: int) -> HardwareDetector:
        data = detect_hardware(probe=False).to_json()
        data["platforms"]["cuda"] = {"kind": "cuda", "available": True, "reason": None, "backend": "torch",
                                     "devices": [{"index": i, "name": "NVIDIA H100 80GB HBM3", "memory_total_bytes": 80 * 2**30}
                                                 for i in range(count)],
                                     "details": {"torch_cuda_runtime": "12.8", "driver_version": "570.1"}}
        data["platforms"]["mps"] = {"kind": "mps", "available": False, "reason": "not a Mac", "backend": "torch"}
        return HardwareDetector(inventory=HardwareInventory.from_json(data))

    assert with_gpus(2).get_torch_device_with_priority(["cuda", "mps", "cpu"], preferred_index=1) == "cuda:1"
    assert with_gpus(1).get_torch_device_with_priority(["cuda", "mps", "cpu"], preferred_index=1) == "cuda:0"  # "if available"
    assert with_gpus(2).get_cuda_details()["device_count"] == 2 and with_gpus(2).get_cuda_details()["driver_version"] == "570.1"
    assert with_gpus(0).get_torch_device_with_priority(["mps", "cpu"]) == "cpu"
    with pytest.raises(HardwareDetectionError, match="mps: not a Mac"):
        with_gpus(1).get_torch_device_with_priority(["mps"])
    with pytest.raises(HardwareDetectionError, match="openvino"):
        with_gpus(1).get_torch_device_with_priority(["openvino", "cpu"])
    with pytest.raises(HardwareDetectionError, match="preferred_index"):
        with_gpus(1).get_torch_device_with_priority(["cuda"], preferred_index=-1)


# --- 000: the client and the REST API --------------------------------------------------------

@pytest.fixture(scope="module")
def server(measured, artifact):
    from devicefit.api.app import Settings, create_app

    with running(create_app(Settings(benchmark_dir=measured.root, warm_models=()))) as base:
        yield base


def test_a_torch_device_string_is_accepted_where_a_hardware_kind_is(server):
    from devicefit.client import HardwareSelectionClient

    client = HardwareSelectionClient(base_url=server)
    model_name = "bert-tiny"
    # device = client.get_optimal_device(model_name)
    device = client.get_optimal_device(model_name)
    # perf = client.predict_performance(model_name=model_name, hardware=device)
    perf = client.predict_performance(model_name=model_name, hardware=device)
    # print(f"Expected latency: {perf['predictions'][device]['latency']:.2f} ms")
    assert perf["predictions"][device]["latency"] > 0
    # The device string a CUDA server's get_optimal_device returns:
    perf = client.predict_performance(model_name=model_name, hardware="cuda:0")
    direct = client.predict_performance(model_name=model_name, hardware="cuda")
    assert perf["predictions"]["cuda:0"] == direct["predictions"]["cuda"]
    chosen = client.select_hardware(model_name, available_hardware=["cuda:0", "cpu"])
    assert set(chosen["all_scores"]) == {"cuda", "cpu"}
    status, r = call(server, "/performance/predict", {"model_name": model_name, "hardware": ["tpu:0"]})
    assert status == 422 and "hardware" in r["message"]


def test_zero_gpus_is_refused_with_the_reason(server):
    from devicefit.client import HardwareSelectionClient

    client = HardwareSelectionClient(base_url=server)
    # config = client.get_distributed_training_config(model_name=model_name, gpu_count=torch.cuda.device_count(), batch_size=8)
    with pytest.raises(ValueError, match=r"422: .*gpu_count.*torch\.cuda\.device_count\(\) is 0"):
        client.get_distributed_training_config(model_name="gpt2", gpu_count=0, batch_size=8)
    assert client.get_distributed_training_config(model_name="gpt2", gpu_count=1, batch_size=8)["distributed_strategy"] == "single GPU"


def test_the_api_prefix_serves_the_same_routes(server):
    import urllib.request

    # const response = await fetch('/api/hardware/select', {method: 'POST', body: JSON.stringify({model_name, batch_size,
    #     mode: 'inference'})});
    status, result = call(server, "/api/hardware/select", {"model_name": "bert-tiny", "batch_size": 4, "mode": "inference"})
    assert status == 200 and isinstance(result["primary_recommendation"], str) and isinstance(result["fallback_options"], list)
    assert result == call(server, "/hardware/select", {"model_name": "bert-tiny", "batch_size": 4, "mode": "inference"})[1]
    assert call(server, "/api/health")[0] == 200 and call(server, "/api/hardware/selects")[0] == 404
    status, error = call(server, "/api/hardware/select", {"model_name": "bert-tiny", "colour": "red"})
    assert status == 422 and error["status"] == "error"  # the app's error handlers answer under /api too
    # The OpenAPI document lists each route once.
    with urllib.request.urlopen(server + "/openapi.json", timeout=30) as resp:
        assert not any(p.startswith("/api/") for p in json.loads(resp.read())["paths"])


def test_the_benchmark_runner_measures_on_the_hardware_the_selector_chooses_here(tmp_path, monkeypatch):
    """002 L310-319: runner = EnhancedHardwareBenchmarkRunner(); result = runner.run_benchmark(
    model_name="bert-base-uncased", model_family="embedding"). Here with bert-tiny and a short
    timing cap: the suite measures real models, briefly."""
    from devicefit import store
    from devicefit.benchmark_runner import BenchmarkRunnerError, EnhancedHardwareBenchmarkRunner

    monkeypatch.setenv("DEVICEFIT_DATA_DIR", str(tmp_path / "data"))  # nothing trained there: the selector answers cold
    runner = EnhancedHardwareBenchmarkRunner(database=tmp_path / "bench.duckdb")
    result = runner.run_benchmark(model_name="bert-tiny", model_family="embedding", batch_sizes=(1, 2), max_time_s=1.0)
    assert result["hardware"] == result["selection"]["primary_recommendation"]  # measured where the selector chose
    assert result["hardware"] in ("cpu", "openvino") and [r["batch_size"] for r in result["results"]] == [1, 2]
    assert all(r["status"] == "ok" and r["p50_ms"] > 0 for r in result["results"]), result["results"]
    with store.opened(tmp_path / "bench.duckdb", read_only=True) as con:
        assert con.execute("SELECT count(*) FROM measurements WHERE run_id = ?", [result["run_id"]]).fetchone()[0] == 2
    with pytest.raises(BenchmarkRunnerError, match="classifies as embedding, not vision"):
        runner.run_benchmark(model_name="bert-tiny", model_family="vision")


def test_the_selectors_compatibility_matrix_is_what_it_reads(measured, artifact):
    """002 L494: print(json.dumps(selector.compatibility_matrix, indent=2))"""
    from devicefit.select.selector import HardwareSelector

    selector = HardwareSelector(benchmark_dir=measured.root, record=False)
    assert selector.compatibility_matrix is selector.compatibility
    json.dumps(selector.compatibility_matrix, indent=2)


def test_a_predictor_file_nested_past_the_json_decoder_is_refused_naming_it(tmp_path):
    """`predictor.prediction_models = path` caught only ValueError: such a file raised RecursionError."""
    from devicefit.predict.api import HardwareModelPredictor, PredictorSourceError

    path = tmp_path / "predictor.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    predictor = HardwareModelPredictor(benchmark_dir=tmp_path / "empty", record=False)
    with pytest.raises(PredictorSourceError, match="cannot read the predictor .*predictor.json"):
        predictor.prediction_models = path
