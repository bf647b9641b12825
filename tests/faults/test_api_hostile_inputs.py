"""A hostile client and a damaged data directory against a real cold server (no predictor
published, so no measurement is needed): every answer is the spec's JSON error naming the
problem, never a 500, and /health says what is wrong."""
from __future__ import annotations

import json
import re

import pytest

from tests.api.server import call, running

# JSON nested past the decoder: json.loads raises RecursionError, which is no ValueError, so each
# reader of a published file that caught only ValueError let it through (500s, a failed start-up).
DEEP_JSON = b"[" * 100_000 + b"]" * 100_000


@pytest.fixture(scope="module")
def cold(tmp_path_factory):
    from devicefit.api.app import Settings, create_app

    root = tmp_path_factory.mktemp("cold-api-data")
    with running(create_app(Settings(benchmark_dir=root, warm_models=()))) as base:
        yield base, root


@pytest.mark.parametrize("content", [b"\xff\xfe\x00not utf-8", b'{"format": "%s"}', b'{"format": "%s", "boosters": []}',
                                     DEEP_JSON], ids=["not-utf8", "no-boosters", "boosters-a-list", "nested-past-the-decoder"])
def test_a_damaged_published_predictor_is_503_and_health_degraded_not_500(cold, content):
    from devicefit.predict.training import ARTIFACT_FORMAT

    base, root = cold
    current = root / "predictors" / "current.json"
    current.parent.mkdir(exist_ok=True)
    current.write_bytes(content.replace(b"%s", ARTIFACT_FORMAT.encode()))
    (root / "predictors" / "predictor-20990101T000000-deadbeef.json").write_bytes(content.replace(b"%s", ARTIFACT_FORMAT.encode()))
    try:
        code, health = call(base, "/health")
        assert code == 200 and health["status"] == "degraded", health
        assert "current.json" in health["artifacts"]["predictor"]
        code, r = call(base, "/hardware/select", {"model_name": "bert-tiny"})
        assert code == 503 and r["status"] == "error" and "current.json" in r["message"] and "retrain" in r["message"], r
        code, r = call(base, "/predictors")
        assert code == 200 and r == [], r
    finally:
        current.unlink()
        (root / "predictors" / "predictor-20990101T000000-deadbeef.json").unlink()
    assert call(base, "/hardware/select", {"model_name": "bert-tiny"})[0] == 200  # cold again once it is gone


@pytest.mark.parametrize("damaged", ["predictors/current.json", "outputs/compatibility_matrix.json"])
def test_a_server_starts_over_a_published_artifact_nested_past_the_decoder(tmp_path, damaged):
    from devicefit.api.state import ServiceState, Settings

    (tmp_path / damaged).parent.mkdir()
    (tmp_path / damaged).write_bytes(DEEP_JSON)
    ServiceState(Settings(benchmark_dir=tmp_path, warm_models=())).start()


@pytest.mark.parametrize("damaged", ["predictors/current.json", "outputs/compatibility_matrix.json"])
def test_a_server_starts_over_a_damaged_published_artifact(tmp_path, damaged):
    """Start-up warns and serves (503 until the pipeline publishes again), rather than failing to start."""
    from devicefit.api.state import ServiceState, Settings
    from devicefit.predict.training import ARTIFACT_FORMAT

    (tmp_path / damaged).parent.mkdir()
    (tmp_path / damaged).write_text(json.dumps({"format": ARTIFACT_FORMAT}) if "predictor" in damaged else '{"model_families": ')
    ServiceState(Settings(benchmark_dir=tmp_path, warm_models=())).start()


def _published(root, name: str, content: bytes):
    """A file of data/outputs/ as a damaged publish leaves it."""
    path = root / "outputs" / name
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(content)
    return path


@pytest.mark.parametrize("content", [b'{"model_families": ', b"\xff\xff", b"[]", b'{"model_families": {"embedding": 1}}', DEEP_JSON],
                         ids=["truncated", "not-utf8", "a-list", "breaks-contract", "nested-past-the-decoder"])
def test_a_damaged_compatibility_matrix_is_503_naming_it_not_500(cold, content):
    base, root = cold
    matrix = _published(root, "compatibility_matrix.json", content)
    try:
        code, health = call(base, "/health")
        assert code == 200 and health["status"] == "degraded" and "compatibility_matrix.json" in health["artifacts"]["predictor"]
        code, r = call(base, "/hardware/select", {"model_name": "bert-tiny"})
        assert code == 503 and "compatibility_matrix.json" in r["message"], r
    finally:
        matrix.unlink()
    assert call(base, "/hardware/select", {"model_name": "bert-tiny"})[0] == 200


@pytest.mark.parametrize("content", [b"\xff\xff", b'{"format": "devicefit.benchmark_snapshot/1", "generated_at": "x", '
                                                  b'"database": "d", "rows": [1]}', DEEP_JSON],
                         ids=["not-utf8", "row-not-an-object", "nested-past-the-decoder"])
def test_a_damaged_benchmark_snapshot_is_503_naming_it_not_500(cold, content):
    base, root = cold
    snapshot = _published(root, "benchmarks.json", content)
    try:
        for path in ("/benchmarks", "/benchmarks?model=bert-tiny"):
            code, r = call(base, path)
            assert code == 503 and "benchmarks.json" in r["message"], r
    finally:
        snapshot.unlink()


@pytest.mark.parametrize("damage, named", [
    ({"input_dims": [1]}, r"results\[0\]\.input_dims: Input should be a valid dictionary"),
    ({"peak_rss_bytes": 1e300}, r"results\[0\]\.peak_rss_bytes"),
    ({"hostname": None, "rows": None}, r"results\[0\]\.rows"),
], ids=["input-dims-a-list", "bytes-past-an-integer", "rows-null"])
def test_a_snapshot_row_its_contract_admits_but_the_answer_cannot_hold_is_503(cold, damage, named):
    """The snapshot's contract checks what the pipeline's readers need; /benchmarks also declares
    input_dims an object, peak_rss_bytes an integer and rows a count. A row breaking only those
    passed the snapshot's check and made every /benchmarks answer a 500 (ResponseValidationError)."""
    from devicefit.benchmark_snapshot import build_snapshot
    from devicefit.contracts import validate

    row = {"model": "bert-tiny", "family": "embedding", "backend": "torch", "device_kind": "cpu", "precision": "fp32",
           "mode": "inference", "batch_size": 1, "input_dims": {"seq_length": 128}, "seq_length": 128, "runs": 1, "rows": 1,
           "p50_ms": 1.5, "p95_ms": 1.7, "throughput_samples_per_s": 660.0, "peak_rss_bytes": 3 * 10**8, "is_best_precision": True}
    document = build_snapshot([{**row, **damage}], "d")
    validate("benchmarks.json", document)  # its own contract admits it
    base, root = cold
    snapshot = _published(root, "benchmarks.json", json.dumps(build_snapshot([row], "d")).encode())
    try:
        code, r = call(base, "/benchmarks")
        assert code == 200 and r["total"] == 1, r
        snapshot.write_text(json.dumps(document))
        for path in ("/benchmarks", "/benchmarks?model=bert-tiny"):
            code, r = call(base, path)
            assert code == 503 and "benchmarks.json is damaged" in r["message"], r
            assert re.search(named, r["message"]), r
    finally:
        snapshot.unlink()


@pytest.mark.parametrize("raw, reason", [
    (b"[" * 30000 + b"]" * 30000, "nested too deeply"),
    (b'{"model_name": "gpt2", "batch_size": 1' + b"0" * 5000 + b"}", "digits"),
    (b'{"model_name": "\xff"}', "not UTF-8"),
    (b"{not json", "not valid JSON at character 1: Expecting property name"),
    (b'{"model_name": "gpt2",}', "not valid JSON at character 22"),
], ids=["deep", "huge-int", "not-utf8", "not-json", "trailing-comma"])
def test_a_body_the_decoder_cannot_take_is_422_saying_why(cold, raw, reason):
    code, r = call(cold[0], "/hardware/select", raw=raw)
    assert code == 422 and r["status"] == "error" and r["message"].startswith("invalid request") and reason in r["message"], r


def test_a_body_not_sent_as_json_says_so(cold):
    """curl -d sends application/x-www-form-urlencoded: the answer names the Content-Type."""
    import urllib.error
    import urllib.request

    req = urllib.request.Request(cold[0] + "/hardware/select", data=b'{"model_name": "gpt2"}', method="POST",
                                 headers={"Content-Type": "application/x-www-form-urlencoded"})
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(req, timeout=60)
    assert caught.value.code == 422 and "Content-Type: application/json" in json.loads(caught.value.read())["message"]


def test_the_client_asks_the_generation_scenario_as_the_api_takes_it(cold):
    from devicefit.client import HardwareSelectionClient

    client = HardwareSelectionClient(cold[0])
    r = client.predict_performance("gpt2", hardware="cpu", mode="generation", new_tokens=8, sequence_length=16)
    assert r["predictions"]["cpu"]["new_tokens"] == 8 and r["predictions"]["cpu"]["prompt_tokens"] == 16
    r = client.select_hardware("gpt2", mode="generation", new_tokens=8, available_hardware=["cpu"], max_tpot_ms=1e9, max_ttft_ms=1e9)
    assert r["new_tokens"] == 8 and r["primary_recommendation"] == "cpu"
    with pytest.raises(ValueError, match="422: .*new_tokens"):
        client.predict_performance("gpt2", new_tokens=1, mode="generation")


def test_each_batch_entry_is_answered_with_its_own_family(cold):
    """Two spellings of one model with different families: the answers were keyed by the resolved
    name, so 'bert-tiny' (vision) was given BERT-TINY's (embedding) answer, silently."""
    base, _ = cold
    vision, embedding = {"name": "bert-tiny", "family": "vision"}, {"name": "BERT-TINY", "family": "embedding"}
    code, alone_vision = call(base, "/hardware/batch", {"models": [vision]})
    assert code == 200, alone_vision
    code, alone_embedding = call(base, "/hardware/batch", {"models": [embedding]})
    assert code == 200 and alone_vision["bert-tiny"] != alone_embedding["BERT-TINY"], (alone_vision, alone_embedding)
    for models in ([vision, embedding], [embedding, vision]):
        code, both = call(base, "/hardware/batch", {"models": models})
        assert code == 200 and both == {**alone_vision, **alone_embedding}, both


def test_a_batch_naming_one_model_with_two_families_is_422(cold):
    base, _ = cold
    code, r = call(base, "/hardware/batch", {"models": [{"name": "bert-tiny", "family": "vision"},
                                                        {"name": "bert-tiny", "family": "embedding"}]})
    assert code == 422 and "'bert-tiny' is asked with two families (vision, embedding)" in r["message"], r
    code, r = call(base, "/hardware/batch", {"models": [{"name": "bert-tiny"}, {"name": "bert-tiny"}]})  # the same ask twice
    assert code == 200 and list(r) == ["bert-tiny"], r


@pytest.mark.parametrize("body, named", [
    ({"task_type": "training", "mode": "generation"}, "task_type training selects on training figures, not mode generation"),
    ({"task_type": "fine_tuning", "mode": "inference"}, "task_type fine_tuning selects on training figures, not mode inference"),
    ({"task_type": "generation", "mode": "training"}, "task_type generation selects on generation figures, not mode training"),
    ({"distributed": True, "gpu_count": 8}, "distributed plans training over several GPUs; this request is answered in mode inference"),
    ({"distributed": True, "task_type": "classification"}, "answered in mode inference"),
], ids=["training-vs-generation", "fine-tuning-vs-inference", "generation-vs-training", "distributed-inference", "distributed-task"])
def test_a_select_whose_mode_contradicts_its_task_or_distributed_is_422(cold, body, named):
    """task_type training with mode generation was answered on training figures, and distributed
    in inference was ignored, both with 200 (the CLI's select refuses both)."""
    code, r = call(cold[0], "/hardware/select", {"model_name": "bert-tiny", "available_hardware": ["cpu"], **body})
    assert code == 422 and named in r["message"], r


def test_a_task_type_without_a_mode_is_answered_in_its_mode_by_the_api_and_the_client(cold):
    from devicefit.client import HardwareSelectionClient

    for body, mode in (({"task_type": "training"}, "training"), ({"task_type": "classification", "mode": "inference"}, "inference"),
                       ({"mode": "training", "distributed": True, "gpu_count": 2}, "training"),
                       ({"task_type": "fine_tuning", "distributed": True, "gpu_count": 2}, "training")):
        code, r = call(cold[0], "/hardware/select", {"model_name": "bert-tiny", "available_hardware": ["cpu"], **body})
        assert code == 200 and r["mode"] == mode, (body, r)
    client = HardwareSelectionClient(cold[0])  # its mode defaults to the task's, not to inference
    assert client.select_hardware("bert-tiny", task_type="training", available_hardware=["cpu"])["mode"] == "training"
    assert client.select_hardware("bert-tiny", available_hardware=["cpu"])["mode"] == "inference"


def test_a_sequence_length_a_model_ignores_is_not_echoed_as_if_used(cold):
    """resnet-50 asked at sequence_length 512 answered 'sequence_length': 512, as if it had been
    predicted at that length; a text model's answer names the length it was predicted at."""
    for path, extra in (("/hardware/select", {"available_hardware": ["cpu"]}), ("/performance/predict", {"hardware": ["cpu"]})):
        code, r = call(cold[0], path, {"model_name": "resnet-50", "sequence_length": 512, **extra})
        assert code == 200 and r["sequence_length"] is None, r
        code, r = call(cold[0], path, {"model_name": "bert-tiny", "sequence_length": 64, **extra})
        assert code == 200 and r["sequence_length"] == 64, r
        code, r = call(cold[0], path, {"model_name": "bert-tiny", **extra})
        assert code == 200 and r["sequence_length"] == 128, r
