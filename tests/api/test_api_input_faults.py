"""Inputs the API answered differently from the CLI, the README or its other endpoints (a fault
hunt's findings): a task the model does not do, a generation-only field outside generation, a
repeated /benchmarks filter, an alias in /benchmarks, and torch device strings in map and
analysis requests."""
import pytest

from tests.api.server import call, running


@pytest.fixture(scope="module")
def server(measured, artifact):
    from devicefit.api.app import Settings, create_app

    with running(create_app(Settings(benchmark_dir=measured.root, warm_models=()))) as base:
        yield base


@pytest.mark.parametrize("model, task, message", [
    ("bert-tiny", "speech_recognition", "task 'speech_recognition' does not apply to a embedding model (it applies to audio)"),
    ("resnet-18", "embedding", "task 'embedding' does not apply to a vision model (it applies to embedding)"),
])
def test_select_refuses_a_task_the_model_does_not_do(server, model, task, message):
    """As the CLI's `select --task` does (HardwareSelector.select_hardware_for_task): the API
    answered speech recognition on an embedding model with the embedding answer."""
    code, r = call(server, "/hardware/select", {"model_name": model, "task_type": task})
    assert code == 422 and r["status"] == "error" and message in r["message"], r


def test_select_answers_a_task_the_model_does(server):
    code, r = call(server, "/hardware/select", {"model_name": "bert-tiny", "task_type": "embedding", "available_hardware": ["cpu"]})
    assert code == 200 and r["model_name"] == "bert-tiny", r
    # A family given beside the task is the one the task is checked against, as in the CLI.
    code, r = call(server, "/hardware/select", {"model_name": "bert-tiny", "model_family": "audio", "task_type": "speech_recognition",
                                                "available_hardware": ["cpu"]})
    assert code == 200, r


@pytest.mark.parametrize("path", ["/hardware/select", "/performance/predict"])
def test_new_tokens_outside_generation_is_a_malformed_request(server, path):
    """422 from both endpoints (it was 400 from /hardware/select), naming the field."""
    code, r = call(server, path, {"model_name": "bert-tiny", "new_tokens": 8})
    assert code == 422 and "new_tokens" in r["message"] and "mode generation" in r["message"], r


@pytest.mark.parametrize("query", ["model=bert-tiny&model=t5-small", "hardware=cpu&hardware=cuda:0", "precision=fp32&precision=bf16",
                                   "batch_size=1&batch_size=4", "mode=inference&mode=training", "backend=torch&backend=torch",
                                   "limit=1&limit=2"])
def test_benchmarks_refuse_a_repeated_filter(server, query):
    """Only the last value was used: `batch_size=1&batch_size=4` answered batch 4 alone."""
    name = query.split("=")[0]
    code, r = call(server, f"/benchmarks?model=bert-tiny&{query}" if name != "model" else f"/benchmarks?{query}")
    assert code == 422 and f"{name}: given 2 times; give it once" in r["message"], r


def test_benchmarks_resolve_an_alias_as_the_other_endpoints_do(server):
    code, by_name = call(server, "/benchmarks?model=bert-tiny")
    code_alias, by_alias = call(server, "/benchmarks?model=BERT-TINY-UNCASED")
    assert code == code_alias == 200 and by_name["total"] > 0, by_alias
    assert by_alias["results"] == by_name["results"] and by_alias["model"] == by_name["model"] == "bert-tiny"
    code, r = call(server, "/benchmarks?model=bert")  # bert-base-uncased: in the catalog, not measured here
    assert code == 200 and r["model"] == "bert-base-uncased" and r["total"] == 0, r
    assert call(server, "/benchmarks")[1]["model"] is None


def test_map_and_analysis_take_torch_device_strings(server):
    """As /hardware/select and /performance/predict do: `cuda:0` is answered for its kind."""
    body = {"model_families": ["embedding"], "batch_sizes": [1]}
    code, by_device = call(server, "/hardware/map", {**body, "hardware_platforms": ["cuda:0", "cpu", "cpu:0"]})
    code_kind, by_kind = call(server, "/hardware/map", {**body, "hardware_platforms": ["cuda", "cpu"]})
    assert code == code_kind == 200, by_device
    assert by_device["hardware_platforms"] == ["cuda", "cpu"]
    assert by_device["model_families"] == by_kind["model_families"]
    body = {"model_name": "bert-tiny", "batch_sizes": [1]}
    code, by_device = call(server, "/analysis/model", {**body, "hardware_platforms": ["cpu:0"]})
    code_kind, by_kind = call(server, "/analysis/model", {**body, "hardware_platforms": ["cpu"]})
    assert code == code_kind == 200, by_device
    assert by_device["hardware_platforms"] == ["cpu"] and by_device["inference"] == by_kind["inference"]
    code, r = call(server, "/analysis/model", {**body, "hardware_platforms": ["tpu:0"]})
    assert code == 422 and "hardware_platforms" in r["message"], r
