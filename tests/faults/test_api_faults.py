"""Faults of the REST API (issue 21, items 4, 5 and 7): a cold server under 50 concurrent
requests answers no 5xx and leaves torch untouched; model names never reach the file system;
oversized configs and sequences are 422 naming the limit; an unwritable data directory does not
stop answers. Every server here is real: uvicorn on 127.0.0.1, started and stopped by the test."""
from __future__ import annotations

import json
import logging
import re
import shutil
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.api.server import call, running


@pytest.fixture(scope="module")
def data_copy(measured, artifact, tmp_path_factory):
    """The session's published predictor and snapshot in a data directory of this module's own,
    so registering models and breaking the predictions path touch no other test's data."""
    root = tmp_path_factory.mktemp("api-faults-data")
    for name in ("predictors", "outputs"):
        if (measured.root / name).exists():
            shutil.copytree(measured.root / name, root / name)
    return root


def _cold(monkeypatch, tmp_path):
    """Forgets every trace and model point this process cached, and gives it an empty disk cache,
    as a fresh server on a fresh machine has neither."""
    from devicefit.predict import features
    from models import op_profile

    monkeypatch.setenv("DEVICEFIT_CACHE_DIR", str(tmp_path / "empty-cache"))

    op_profile._profiles.clear()
    op_profile._training_peaks.clear()
    op_profile._per_sample_peaks.clear()
    features._points.clear()


def _mix() -> list[tuple[str, dict]]:
    models = ("bert-tiny", "t5-small", "gpt2", "whisper-tiny", "mobilenet-v2")
    requests = []
    for i in range(50):
        model = models[i % len(models)]
        kind = i % 5
        if kind == 0:
            requests.append(("/analysis/model", {"model_name": model, "batch_sizes": [1, 1 + i % 4], "hardware_platforms": ["cpu", "cuda"]}))
        elif kind == 1:
            requests.append(("/performance/predict", {"model_name": "t5-small", "mode": "training", "batch_size": 1 + i % 8,
                                                      "sequence_length": (None, 64, 96)[i % 3], "hardware": ["cpu", "cuda"]}))
        elif kind == 2:
            requests.append(("/hardware/select", {"model_name": model, "batch_size": 1 + i % 16, "mode": ("inference", "training")[i % 2]}))
        elif kind == 3:
            requests.append(("/training/distributed", {"model_name": model, "gpu_count": 1 + i % 4, "batch_size": 8}))
        else:
            requests.append(("/hardware/batch", {"models": [{"name": m} for m in models], "batch_size": 1 + i % 4}))
    return requests


def test_a_cold_server_answers_50_concurrent_requests_without_a_5xx(measured, artifact, monkeypatch, tmp_path):
    import torch
    import torch.nn.functional as F

    from devicefit.api.app import Settings, create_app

    _cold(monkeypatch, tmp_path)
    with running(create_app(Settings(benchmark_dir=measured.root, warm_models=(), response_cache_size=0))) as base:
        with ThreadPoolExecutor(50) as pool:
            answers = list(pool.map(lambda r: (r[0], *call(base, *r)), _mix()))
        failed = [(path, status, body.get("message")) for path, status, body in answers if status != 200]
        assert not failed, failed
        # The issue: after such a burst every t5-small training prediction answered 500.
        status, body = call(base, "/performance/predict", {"model_name": "t5-small", "mode": "training", "hardware": "cpu"})
        assert status == 200, body
    assert F.scaled_dot_product_attention is torch._C._nn.scaled_dot_product_attention


def test_start_up_prepares_the_traces_so_no_request_pays_for_them(measured, artifact, monkeypatch, tmp_path):
    from devicefit.api.app import Settings, create_app
    from models.op_profile import is_traced
    from models.resolve import resolve_model

    _cold(monkeypatch, tmp_path)
    app = create_app(Settings(benchmark_dir=measured.root, warm_models=("bert-tiny", "t5-small")))
    with running(app) as base:
        for name in ("bert-tiny", "t5-small"):
            assert is_traced(resolve_model(name), None, training=True)
        assert call(base, "/performance/predict", {"model_name": "t5-small", "mode": "training"})[0] == 200


@pytest.mark.parametrize("endpoint, extra", [
    ("/hardware/select", {}), ("/performance/predict", {}), ("/training/distributed", {}), ("/analysis/model", {"batch_sizes": [1]}),
])
def test_server_paths_are_unknown_names_whether_or_not_they_exist(measured, artifact, tiny_models, tmp_path, endpoint, extra):
    from devicefit.api.app import Settings, create_app

    paths = [str(tiny_models["text"]), str(tiny_models["text"] / "config.json"), "/etc", "/root", str(tmp_path / "missing"),
             "../../../../etc/passwd", "~"]
    with running(create_app(Settings(benchmark_dir=measured.root, warm_models=()))) as base:
        answers = [call(base, endpoint, {"model_name": p, **extra}) for p in paths]
        batch = call(base, "/hardware/batch", {"models": [{"name": p} for p in paths]})
    assert {status for status, _ in answers} == {404}
    shapes = {body["message"].replace(p, "<name>") for p, (_, body) in zip(paths, answers)}
    # Nothing tells one path from another; close names (catalog names, aliases) come from the text alone.
    assert len({re.sub(r" Did you mean: [^?]*\?", "", s) for s in shapes}) == 1, shapes
    assert "never paths" in shapes.pop()
    assert batch[0] == 200 and all(entry["primary"] is None and "never paths" in entry["explanation"] for entry in batch[1].values())


def test_models_served_by_name_from_the_registry_and_the_allow_list(data_copy, tiny_models):
    from devicefit.api.app import Settings, create_app
    from models.registry import register_model

    register_model(data_copy, tiny_models["causal"], "org/tiny-gpt2")
    settings = Settings(benchmark_dir=data_copy, model_dirs=(tiny_models["seq2seq"],), warm_models=())
    with running(create_app(settings)) as base:
        for name in ("org/tiny-gpt2", "tiny-t5"):
            status, body = call(base, "/performance/predict", {"model_name": name, "hardware": "cpu"})
            assert status == 200 and body["model_name"] == name, body
            status, body = call(base, "/analysis/model", {"model_name": name.upper(), "batch_sizes": [1], "hardware_platforms": ["cpu"]})
            assert status == 200 and body["model_name"] == name, body
        listed = {m["name"]: m["source"] for m in call(base, "/models")[1]}
        assert listed["org/tiny-gpt2"] == listed["tiny-t5"] == "registered" and listed["gpt2"] == "catalog"
        status, body = call(base, "/hardware/select", {"model_name": str(tiny_models["seq2seq"])})
        assert status == 404, body  # served by its name, still never by its path


def test_a_crafted_huge_config_is_422_naming_the_limit_not_9_s_of_cpu(data_copy, tmp_path):
    from devicefit.api.app import Settings, create_app
    from models.registry import registry_file

    huge = tmp_path / "huge"
    huge.mkdir()
    (huge / "config.json").write_text(json.dumps({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": 400,
                                                  "n_embd": 8192, "vocab_size": 1_000_000}))
    data = tmp_path / "data"
    shutil.copytree(data_copy, data)
    # Written by hand (or its config.json changed after `models add`): `models add` itself refuses it.
    registry_file(data).write_text(json.dumps({"version": 1, "models": {"crafted": {"path": str(huge)}}}))
    with running(create_app(Settings(benchmark_dir=data, warm_models=()))) as base:
        for endpoint in ("/hardware/select", "/performance/predict", "/training/distributed", "/analysis/model"):
            status, body = call(base, endpoint, {"model_name": "crafted"})
            assert status == 422 and "limit of 160 layers" in body["message"] and str(huge) not in body["message"], body
        status, body = call(base, "/hardware/batch", {"models": [{"name": "crafted"}, {"name": "bert-tiny"}]})
        assert status == 200 and body["bert-tiny"]["primary"], body
        assert "limit of 160 layers" in body["crafted"]["explanation"] and str(huge) not in body["crafted"]["explanation"], body


@pytest.mark.parametrize("endpoint", ["/hardware/select", "/performance/predict", "/training/distributed"])
def test_a_sequence_over_the_models_limit_is_422_naming_it(measured, artifact, endpoint):
    from devicefit.api.app import Settings, create_app

    with running(create_app(Settings(benchmark_dir=measured.root, warm_models=()))) as base:
        status, body = call(base, endpoint, {"model_name": "bert-tiny", "sequence_length": 4096})
        assert status == 422 and "sequence_length" in body["message"] and "512" in body["message"], body
        assert call(base, endpoint, {"model_name": "bert-tiny", "sequence_length": 512})[0] == 200


def test_an_unwritable_predictions_directory_does_not_stop_answers(data_copy, tmp_path, caplog):
    from devicefit.api.app import Settings, create_app

    data = tmp_path / "data"
    shutil.copytree(data_copy, data, ignore=shutil.ignore_patterns("predictions"))
    # Root ignores permissions, so the predictions path is made unwritable as a regular file.
    (data / "predictions").write_text("not a directory")
    caplog.set_level(logging.WARNING, logger="devicefit.predict.served")
    with running(create_app(Settings(benchmark_dir=data, warm_models=(), response_cache_size=0))) as base:
        for batch in (1, 2, 3):
            assert call(base, "/performance/predict", {"model_name": "bert-tiny", "batch_size": batch})[0] == 200
            assert call(base, "/hardware/select", {"model_name": "bert-tiny", "batch_size": batch})[0] == 200
    warnings = [r for r in caplog.records if r.name == "devicefit.predict.served"]
    assert len(warnings) == 1 and "not being kept" in warnings[0].getMessage()
    assert (data / "predictions").read_text() == "not a directory"


def test_the_cli_answers_with_an_unwritable_predictions_directory(data_copy, tmp_path):
    from typer.testing import CliRunner

    from devicefit.cli import app

    data = tmp_path / "data"
    shutil.copytree(data_copy, data, ignore=shutil.ignore_patterns("predictions"))
    (data / "predictions").write_text("not a directory")
    for args in (["predict", "--model", "bert-tiny", "--hardware", "cpu", "--benchmark-dir", str(data), "--json"],
                 ["select", "--model", "bert-tiny", "--hardware", "cpu", "--benchmark-dir", str(data), "--json"]):
        out = CliRunner().invoke(app, args)
        assert out.exit_code == 0, out.output
