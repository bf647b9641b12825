"""Spec 000's request examples posted to a real server on 127.0.0.1, every documented response
field and type checked; errors are JSON with the right status."""
import json
import time
import urllib.request

import pytest

from tests.api.server import call, running

SPEC_EXAMPLES = {
    "/hardware/select": {"model_name": "bert-base-uncased", "model_family": "embedding", "batch_size": 16, "sequence_length": 128,
                         "mode": "inference", "precision": "fp32", "available_hardware": ["cpu", "cuda"], "task_type": None,
                         "distributed": False, "gpu_count": 1},
    "/hardware/batch": {"models": [{"name": "bert-base-uncased", "family": "embedding"}, {"name": "gpt2", "family": "text_generation"},
                                   {"name": "t5-small", "family": "text_generation"}], "batch_size": 1, "mode": "inference"},
    "/hardware/map": {"model_families": ["embedding", "text_generation", "vision"], "batch_sizes": [1, 8, 32],
                      "hardware_platforms": ["cpu", "cuda", "mps"]},
    "/performance/predict": {"model_name": "bert-base-uncased", "model_family": "embedding", "hardware": ["cuda", "cpu"],
                             "batch_size": 16, "sequence_length": 128, "mode": "inference", "precision": "fp32"},
    "/training/distributed": {"model_name": "gpt2", "model_family": "text_generation", "gpu_count": 8, "batch_size": 16,
                              "max_memory_gb": 16},
    "/analysis/model": {"model_name": "bert-base-uncased", "model_family": "embedding", "batch_sizes": [1, 8, 32]},
}


@pytest.fixture(scope="module")
def server(measured, artifact):
    from devicefit.api.app import Settings, create_app

    # Start-up preparation of every model's traces is covered by tests/faults; here, none.
    with running(create_app(Settings(benchmark_dir=measured.root, warm_models=()))) as base:
        yield base


def typed(obj: dict, fields: dict) -> None:
    for name, kind in fields.items():
        assert name in obj, f"missing {name}"
        assert isinstance(obj[name], kind), f"{name}: {type(obj[name]).__name__} is not {kind}"


def test_system_endpoints(server):
    status, health = call(server, "/health")
    assert status == 200
    typed(health, {"status": str, "version": str, "available_components": dict, "database_connected": bool})
    assert health["status"] == "healthy" and health["database_connected"]
    assert {"hardware_selection", "hardware_prediction", "duckdb", "fastapi"} <= set(health["available_components"])
    status, detect = call(server, "/hardware/detect")
    assert status == 200 and detect["hardware"]["cpu"] is True and detect["hardware"]["qnn"] is False
    assert {"cpu", "cuda", "rocm", "mps", "openvino", "wasm", "webnn", "webgpu"} <= set(detect["hardware"])


def test_hardware_select_example(server):
    status, r = call(server, "/hardware/select", SPEC_EXAMPLES["/hardware/select"])
    assert status == 200, r
    typed(r, {"model_family": str, "model_name": str, "model_size": int, "model_size_category": str, "batch_size": int,
              "sequence_length": int, "precision": str, "mode": str, "primary_recommendation": str, "fallback_options": list,
              "compatible_hardware": list, "explanation": str, "prediction_source": str, "all_scores": dict})
    assert r["model_size"] == 109_482_240 and r["primary_recommendation"] in ("cpu", "cuda")


def test_hardware_batch_example(server):
    status, r = call(server, "/hardware/batch", SPEC_EXAMPLES["/hardware/batch"])
    assert status == 200, r
    assert set(r) == {"bert-base-uncased", "gpt2", "t5-small"}
    for entry in r.values():
        typed(entry, {"primary": str, "fallbacks": list, "explanation": str})


def test_hardware_map_example(server):
    status, r = call(server, "/hardware/map", SPEC_EXAMPLES["/hardware/map"])
    assert status == 200, r
    typed(r, {"timestamp": str, "model_families": dict})
    assert set(r["model_families"]) == {"embedding", "text_generation", "vision"}
    small = r["model_families"]["embedding"]["model_sizes"]["small"]
    for mode in ("inference", "training"):
        typed(small[mode], {"primary": str, "fallbacks": list})
    assert set(r["model_families"]["embedding"]["inference"]["batch_sizes"]) == {"1", "8", "32"}


def test_performance_predict_example(server):
    status, r = call(server, "/performance/predict", SPEC_EXAMPLES["/performance/predict"])
    assert status == 200, r
    typed(r, {"model_name": str, "model_family": str, "batch_size": int, "sequence_length": int, "mode": str, "precision": str,
              "predictions": dict})
    for hw in ("cuda", "cpu"):
        typed(r["predictions"][hw], {"throughput": float, "latency": float, "memory_usage": float, "source": str})
    assert r["predictions"]["cpu"]["source"] == "trained_predictor" and r["predictions"]["cuda"]["source"] == "static_rule"


def test_training_distributed_example(server):
    status, r = call(server, "/training/distributed", SPEC_EXAMPLES["/training/distributed"])
    assert status == 200, r
    typed(r, {"model_family": str, "model_name": str, "distributed_strategy": str, "gpu_count": int, "per_gpu_batch_size": int,
              "global_batch_size": int, "mixed_precision": bool, "gradient_accumulation_steps": int, "estimated_memory": dict})
    typed(r["estimated_memory"], {"parameters_gb": float, "activations_gb": float, "optimizer_gb": float, "total_gb": float,
                                  "per_gpu_gb": float})
    assert r["global_batch_size"] == 128 and r["estimated_memory"]["total_gb"] == pytest.approx(8 * r["estimated_memory"]["per_gpu_gb"])


def test_analysis_model_example(server):
    status, r = call(server, "/analysis/model", SPEC_EXAMPLES["/analysis/model"])
    assert status == 200, r
    typed(r, {"model_name": str, "model_family": str, "hardware_platforms": list, "batch_sizes": list, "timestamp": str,
              "inference": dict, "training": dict})
    cpu = r["inference"]["performance"]["8"]["cpu"]
    typed(cpu, {"throughput": float, "latency": float, "memory_usage": float, "source": str})
    typed(r["inference"]["recommendations"]["1"], {"primary": str, "fallbacks": list})


@pytest.mark.parametrize("path, body, raw, status, message", [
    ("/hardware/select", {"model_name": "bert-base-uncasd"}, None, 404, "bert-base-uncased"),
    ("/hardware/select", {"model_name": "gpt2", "batch_size": 0}, None, 422, "batch_size"),
    ("/hardware/select", {"model_name": "gpt2", "precision": "fp8"}, None, 422, "precision"),
    ("/hardware/select", {"model_name": "gpt2", "available_hardware": ["tpu"]}, None, 422, "available_hardware"),
    ("/hardware/select", {"model_name": "gpt2", "colour": "red"}, None, 422, "colour"),
    ("/hardware/select", None, b"{not json", 422, "invalid request"),
    ("/hardware/select", {"model_name": "gpt2", "available_hardware": ["cpu"], "max_latency_ms": 0.0001}, None, 400,
     "misses the latency bound"),
    ("/hardware/batch", {"models": [{"name": "gpt2"}] * 51}, None, 422, "models"),
    ("/training/distributed", {"model_name": "gpt2", "gpu_count": 0}, None, 422, "gpu_count"),
    ("/performance/predict", None, b'{"model_name": "' + b"x" * 70000 + b'"}', 413, "exceeds"),
    ("/benchmarks?model=bert-tinyy", None, None, 404, "bert-tiny"),
    ("/no/such/route", None, None, 404, "Not Found"),
    ("/hardware/select", {"model_name": "x" * 300}, None, 404, "Unknown model"),
    ("/benchmarks?batch_size=0", None, None, 422, "batch_size"),
    ("/benchmarks?hardware=tpu", None, None, 422, "hardware"),
    # another JSON type is refused, never coerced into a value that was not asked (true was a batch of 1)
    ("/hardware/select", {"model_name": "gpt2", "batch_size": "4"}, None, 422, "batch_size"),
    ("/hardware/select", {"model_name": "gpt2", "batch_size": True}, None, 422, "batch_size"),
    ("/hardware/select", {"model_name": "gpt2", "batch_size": 4.0}, None, 422, "batch_size"),
    ("/training/distributed", {"model_name": "gpt2", "gpu_count": True}, None, 422, "gpu_count"),
    ("/performance/predict", {"model_name": "gpt2", "hardware": []}, None, 422, "hardware"),
    ("/hardware/select", None, b'{"model_name": "gpt2", "max_latency_ms": Infinity}', 422, "max_latency_ms"),
])
def test_errors_are_json_with_the_right_status(server, path, body, raw, status, message):
    code, r = call(server, path, body, raw)
    assert code == status and r["status"] == "error" and message in r["message"], r


def test_benchmarks_take_a_torch_device_string_for_its_kind(server):
    """As every other endpoint does: `cuda:0` (what the client's get_optimal_device returns) asks
    for the kind's rows."""
    code, by_kind = call(server, "/benchmarks?hardware=cpu")
    code_device, by_device = call(server, "/benchmarks?hardware=cpu:0")
    assert code == code_device == 200 and by_kind["total"] > 0
    assert by_device["results"] == by_kind["results"]


def test_a_chunked_body_without_length_is_cut_off_at_the_limit(server):
    import http.client
    from urllib.parse import urlparse

    from devicefit.api.app import MAX_BODY_BYTES

    url = urlparse(server)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    chunks = (b'{"model_name": "' + b"x" * 4096 for _ in range(MAX_BODY_BYTES // 4096 + 2))
    conn.request("POST", "/performance/predict", body=chunks, headers={"Content-Type": "application/json"}, encode_chunked=True)
    resp = conn.getresponse()
    body = json.loads(resp.read())
    conn.close()
    assert resp.status == 413 and body == {"status": "error", "message": f"request body exceeds the {MAX_BODY_BYTES} byte limit"}


def test_repeated_requests_get_the_same_answer_from_the_cache(server):
    body = {"model_name": "bert-tiny", "hardware": ["cpu"], "batch_size": 3}
    first, second = call(server, "/performance/predict", body), call(server, "/performance/predict", body)
    assert first == second and first[0] == 200
    assert call(server, "/performance/predict", {**body, "batch_size": 5})[1]["batch_size"] == 5


def test_openapi_docs_are_served(server):
    with urllib.request.urlopen(server + "/openapi.json", timeout=30) as resp:
        schema = json.loads(resp.read())
    assert {"/health", "/hardware/detect", "/hardware/select", "/hardware/batch", "/hardware/map", "/performance/predict",
            "/training/distributed", "/analysis/model"} <= set(schema["paths"])
    with urllib.request.urlopen(server + "/docs", timeout=30) as resp:
        assert resp.status == 200


def test_client_library_round_trips(server):
    from devicefit.client import HardwareSelectionClient

    client = HardwareSelectionClient(base_url=server)
    assert client.health()["status"] == "healthy"
    assert client.detect_hardware()["cpu"] is True
    assert client.select_hardware("bert-tiny", batch_size=2, available_hardware=["cpu", "cuda"])["primary_recommendation"]
    assert set(client.select_hardware_for_models([{"name": "bert-tiny"}, {"name": "gpt2"}])) == {"bert-tiny", "gpt2"}
    assert client.predict_performance("bert-tiny", hardware=["cpu"], batch_size=2)["predictions"]["cpu"]["latency"] > 0
    assert client.get_distributed_training_config("gpt2", gpu_count=8, batch_size=16, max_memory_gb=16)["global_batch_size"] == 128
    assert client.analyze_model_performance("bert-tiny", batch_sizes=[1])["inference"]["recommendations"]["1"]["primary"]
    assert "embedding" in client.create_hardware_map(["embedding"], [1], ["cpu"])["model_families"]
    assert client.get_optimal_device("bert-tiny") == "cpu"  # nothing but the CPU is present here
    with pytest.raises(ValueError, match="404: .*bert-tiny"):
        client.select_hardware("bert-tinyy")
    with pytest.raises(ValueError, match="422"):
        client.select_hardware("bert-tiny", batch_size=0)
    with pytest.raises(RuntimeError, match="cannot reach"):
        HardwareSelectionClient("http://127.0.0.1:9", timeout=2).health()


def test_catalog_and_predictor_versions(server, artifact):
    status, models = call(server, "/models")
    assert status == 200
    bert = next(m for m in models if m["name"] == "bert-base-uncased")
    assert bert["family"] == "embedding" and bert["parameters"] == 109_482_240
    status, versions = call(server, "/predictors")
    assert status == 200 and versions[0]["current"] and versions[0]["version"] == artifact["version"]
    assert set(versions[0]["held_out"]) == {"latency", "throughput", "memory"}


def test_a_newer_published_predictor_is_picked_up(server, measured, artifact):
    import os

    from devicefit.predict.artifacts import CURRENT, predictors_dir

    current = predictors_dir(measured) / CURRENT
    original = current.read_text()
    newer = json.loads(original)
    newer["version"] = "29991231T000000-reloaded"
    try:
        tmp = current.with_suffix(".tmp")
        tmp.write_text(json.dumps(newer))
        os.replace(tmp, current)  # published atomically, as artifacts.save does
        os.utime(current, (time.time() + 5, time.time() + 5))
        assert call(server, "/health")[1]["artifacts"]["predictor"] == "29991231T000000-reloaded"
        assert call(server, "/performance/predict", {"model_name": "bert-tiny"})[1]["predictor_version"] == "29991231T000000-reloaded"
    finally:
        current.write_text(original)
        os.utime(current, (time.time() + 10, time.time() + 10))


def test_the_api_answers_while_another_process_holds_the_duckdb_write_lock(server, measured):
    import subprocess
    import sys

    holder = subprocess.Popen([sys.executable, "-c", (
        "import duckdb, sys, time\n"
        f"con = duckdb.connect({str(measured.database)!r})\n"
        "con.execute('BEGIN TRANSACTION')\n"
        "con.execute(\"UPDATE measurements SET error = error WHERE false\")\n"
        "print('locked', flush=True)\n"
        "time.sleep(60)\n")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        import duckdb

        with pytest.raises(duckdb.IOException):  # the lock is real: nobody else can open the file
            duckdb.connect(str(measured.database), read_only=True)
        for path, body in (("/health", None), ("/predictors", None), ("/benchmarks?model=bert-tiny", None),
                       ("/analysis/model", {"model_name": "bert-tiny", "batch_sizes": [1]}), ("/hardware/select", {"model_name": "bert-tiny"}),
                           ("/performance/predict", {"model_name": "bert-tiny", "hardware": ["cpu"]})):
            status, r = call(server, path, body)
            assert status == 200, (path, r)
    finally:
        holder.kill()
        holder.wait(10)


def test_benchmarks_serve_the_published_snapshot(server, measured):
    """Every measured config of the session store is served with medians and provenance, filters
    narrow it, and the numbers are the store's own."""
    from devicefit import store

    status, r = call(server, "/benchmarks?limit=1000")
    assert status == 200, r
    con = store.connect(measured.database, read_only=True)
    try:
        expected = {(a["model"], a["batch_size"]): a["p50_ms"] for a in store.aggregates(con)}
    finally:
        con.close()
    assert r["total"] == len(expected) == len(r["results"]) and r["generated_at"]
    assert {(row["model"], row["batch_size"]): row["p50_ms"] for row in r["results"]} == expected
    status, r = call(server, "/benchmarks?model=BERT-TINY&hardware=cpu&precision=fp32&batch_size=2&mode=inference&backend=torch")
    assert status == 200 and r["total"] == 1, r
    row = r["results"][0]
    typed(row, {"model": str, "device_kind": str, "hardware_fingerprint": str, "hostname": str, "runs": int, "p50_ms": float,
                "throughput_samples_per_s": float, "peak_rss_bytes": int, "input_dims": dict, "last_measured": str})
    assert row["model"] == "bert-tiny" and row["batch_size"] == 2 and row["speedup_vs_cpu_fp32"] == 1.0
    assert call(server, "/benchmarks?model=bert-tiny&limit=1")[1]["total"] == 2
    assert call(server, "/benchmarks?model=gpt2")[1]["total"] == 0  # in the catalog, not measured here


def test_analysis_reports_measured_numbers_where_they_exist(server, measured):
    status, r = call(server, "/analysis/model", {"model_name": "bert-tiny", "batch_sizes": [2, 8], "hardware_platforms": ["cpu"]})
    assert status == 200, r
    measured_entry = r["inference"]["performance"]["2"]["cpu"]
    row = call(server, "/benchmarks?model=bert-tiny&batch_size=2")[1]["results"][0]
    assert measured_entry["source"] == "measured" and measured_entry["latency"] == row["p50_ms"]
    assert measured_entry["prediction"]["source"] != "measured" and measured_entry["prediction"]["latency"] > 0
    assert r["inference"]["performance"]["8"]["cpu"]["source"] != "measured"  # batch 8 was never measured
    assert r["training"]["performance"]["2"]["cpu"]["source"] != "measured"  # nor training
    assert r["benchmark_snapshot"]


def test_analyze_cli(measured, artifact):
    from typer.testing import CliRunner

    from devicefit.cli import app

    out = CliRunner().invoke(app, ["analyze", "--model", "bert-tiny", "--batch-sizes", "1,4", "--hardware", "cpu,cuda",
                                   "--benchmark-dir", str(measured.root), "--json"])
    assert out.exit_code == 0, out.output
    r = json.loads(out.output)
    assert set(r["inference"]["performance"]) == {"1", "4"} and r["inference"]["performance"]["1"]["cpu"]["source"]
    out = CliRunner().invoke(app, ["analyze", "--model", "bert-tiny", "--batch-sizes", "0", "--benchmark-dir", str(measured.root)])
    assert out.exit_code == 2 and "batch size" in out.output
