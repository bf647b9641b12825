"""The OpenVINO backend on tiny real models: conversion per modality, the precision and
performance hints recorded as compiled, agreement with torch checked on every load, and a
model that cannot be converted failing its own row only."""
import pytest

pytest.importorskip("openvino")

from benchmark_runners.backends import openvino_backend  # noqa: E402
from benchmark_runners.measure import ConfigMeasurer  # noqa: E402
from benchmark_runners.records import BenchmarkConfig  # noqa: E402

DEVICES = {"openvino:CPU": {"name": "test cpu (OpenVINO)", "fingerprint": "openvino-test"}}


def config(model, **kw):
    from tests.conftest import FAST_POLICY

    return BenchmarkConfig(model=str(model), **{"device": "openvino:CPU", "backend": "openvino", "policy": FAST_POLICY, **kw})


@pytest.fixture(scope="module")
def measurer():
    return ConfigMeasurer("test-run", {"suite": "pytest"}, DEVICES)


@pytest.mark.parametrize("modality", ["text", "causal", "seq2seq", "image", "audio_features", "image_text"])
def test_every_modality_converts_and_measures(measurer, tiny_models, modality):
    r = measurer.run(config(tiny_models[modality], batch_size=1))
    assert r.status == "ok", r.error
    bc = r.backend_config
    assert bc["effective"]["INFERENCE_PRECISION_HINT"] == "f32" and bc["effective"]["PERFORMANCE_HINT"] == "LATENCY"
    assert bc["infer_requests"] == 1
    assert bc["output_check"]["relative"] <= openvino_backend.TOLERANCE["fp32"]
    assert bc["conversion"]["source"] in ("converted from torch", "disk cache", "in-process cache")
    assert r.load_time_s >= bc["compile_seconds"] > 0
    assert r.p50_ms > 0 and r.peak_rss_bytes > 0 and r.hardware_fingerprint == "openvino-test"
    assert "INFERENCE_PRECISION_HINT=f32" in r.precision_recipe


def test_the_precision_hint_is_set_explicitly_and_recorded(measurer, tiny_models):
    """OpenVINO's CPU default is bf16 where the CPU has it: "fp32" must say f32, "bf16" bf16."""
    fp32 = measurer.run(config(tiny_models["text"], precision="fp32", batch_size=1))
    assert fp32.backend_config["requested_hints"]["INFERENCE_PRECISION_HINT"] == "f32"
    assert fp32.backend_config["effective"]["INFERENCE_PRECISION_HINT"] == "f32"
    import openvino as ov

    if "BF16" not in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"):
        r = measurer.run(config(tiny_models["text"], precision="bf16"))
        assert r.status == "skipped" and "BF16" in r.error
        return
    bf16 = measurer.run(config(tiny_models["text"], precision="bf16", batch_size=1))
    assert bf16.status == "ok", bf16.error
    assert bf16.backend_config["effective"]["INFERENCE_PRECISION_HINT"] == "bf16"
    assert fp32.backend_config["output_check"]["relative"] < bf16.backend_config["output_check"]["relative"]
    # bf16 is allowed what torch's own bf16 forward deviates from fp32 (times the margin), no less
    # than the fixed tolerance; both figures are in the row.
    check = bf16.backend_config["output_check"]
    own = check["torch_same_precision_relative"]
    assert own is not None and own > 0
    assert check["tolerance"] == pytest.approx(max(openvino_backend.TOLERANCE["bf16"], openvino_backend.TORCH_REFERENCE_MARGIN * own))
    assert "torch's own bf16 deviation" in check["tolerance_basis"]


def test_throughput_mode_uses_asynchronous_requests(measurer, tiny_models):
    r = measurer.run(config(tiny_models["image"], batch_size=4))
    assert r.status == "ok", r.error
    bc = r.backend_config
    assert bc["effective"]["PERFORMANCE_HINT"] == "THROUGHPUT" and bc["infer_requests"] >= 1
    assert f"divided by {bc['infer_requests']}" in bc["sample"]
    assert r.throughput_samples_per_s == pytest.approx(4 * r.iterations / (sum(r.samples_ms) / 1e3))


def test_int8_is_weight_compression_or_a_skip_with_the_reason(measurer, tiny_models):
    r = measurer.run(config(tiny_models["text"], precision="int8", batch_size=1))
    try:
        import nncf  # noqa: F401
    except ImportError:
        assert r.status == "skipped" and "NNCF" in r.error
        return
    assert r.status == "ok", r.error
    assert "INT8_ASYM" in r.backend_config["weights"] and r.backend_config["output_check"]["relative"] <= 0.1


def test_training_and_missing_capabilities_are_skipped_with_reasons(measurer, tiny_models):
    r = measurer.run(config(tiny_models["text"], mode="training"))
    assert r.status == "skipped" and "inference runtime" in r.error
    r = measurer.run(config(tiny_models["text"], device="openvino:NPU"))
    assert r.status == "skipped" and "no NPU device" in r.error


def test_an_output_beyond_tolerance_fails_the_row_with_the_figure(measurer, tiny_models, monkeypatch):
    monkeypatch.setitem(openvino_backend.TOLERANCE, "fp32", 0.0)  # any reassociation difference is now too much
    r = measurer.run(config(tiny_models["causal"], batch_size=2))
    assert r.status == "failed" and "OutputMismatch" in r.error and "max |diff|" in r.error and "tolerance 0" in r.error


def test_a_model_that_fails_to_convert_fails_its_row_and_the_sweep_goes_on(measurer, tiny_models, monkeypatch):
    import openvino

    def refuse(*args, **kwargs):
        raise RuntimeError("No conversion rule found for operations: aten::made_up")

    monkeypatch.setattr(openvino, "convert_model", refuse)
    monkeypatch.setattr(openvino_backend, "_converted", {})
    monkeypatch.setattr(openvino_backend, "cache_dir", lambda: tiny_models["text"].parent / "empty-ov-cache")
    failed = measurer.run(config(tiny_models["audio_features"], batch_size=3))
    assert failed.status == "failed" and "aten::made_up" in failed.error
    monkeypatch.undo()
    after = measurer.run(config(tiny_models["text"], batch_size=3))
    assert after.status == "ok", after.error


def test_configs_pair_backend_and_device():
    with pytest.raises(ValueError, match="cannot run on device"):
        BenchmarkConfig(model="bert-tiny", device="openvino:CPU")
    with pytest.raises(ValueError, match="cannot run on device"):
        BenchmarkConfig(model="bert-tiny", device="cpu", backend="openvino")


def test_openvino_is_a_measurable_kind_with_inference_only_partitions():
    from benchmark_runners import registry
    from devicefit.profiles import Selection, partition_configs

    assert "openvino" in registry.measurable_kinds()
    configs = partition_configs("bert-tiny", "openvino", Selection())
    assert configs and {c.backend for c in configs} == {"openvino"} and {c.device for c in configs} == {"openvino:CPU"}
    assert {c.mode for c in configs} == {"inference"} and {c.precision for c in configs} == {"fp32", "bf16"}


@pytest.mark.parametrize("batch_size", [1, 3])
def test_the_output_check_reads_the_infer_requests_own_output(measurer, tiny_models, monkeypatch, batch_size):
    """Latency (one request) and throughput (a queue of them) both hand the checked output over
    from the timed inferences instead of running the compiled model again."""
    def no_extra_inference(self, prepared, inputs):
        raise AssertionError("the output check ran the model again")

    monkeypatch.setattr(openvino_backend.OpenVINOBackend, "output", no_extra_inference)
    r = measurer.run(config(tiny_models["image"], batch_size=batch_size))
    assert r.status == "ok", r.error
    assert r.output_check["problem"] is None and r.output_check["max_abs"] > 0
    assert r.output_check["elements"] % batch_size == 0 and r.output_check["elements"] >= batch_size


def test_a_config_of_the_traced_shape_is_checked_on_its_own_compiled_model(tiny_models, monkeypatch):
    """The agreement check compiles the model a second time only where the config's shape is
    not the traced batch-1 shape; a batch-1 config is checked on the very model it times."""
    import openvino

    compiles = []

    class CountingCore(openvino.Core):
        def compile_model(self, *args, **kwargs):
            compiles.append(args[2] if len(args) > 2 else kwargs.get("config"))
            return super().compile_model(*args, **kwargs)

    monkeypatch.setattr(openvino, "Core", CountingCore)
    rows, counts = {}, {}
    for batch_size in (3, 1):
        monkeypatch.setattr(openvino_backend, "_checks", {})
        compiles.clear()
        rows[batch_size] = ConfigMeasurer("test-run", {"suite": "pytest"}, DEVICES).run(config(tiny_models["image"], batch_size=batch_size))
        counts[batch_size] = len(compiles)
    assert rows[3].status == rows[1].status == "ok", (rows[3].error, rows[1].error)
    assert counts == {3: 2, 1: 1}
    separate, own = rows[3].backend_config["output_check"], rows[1].backend_config["output_check"]
    assert separate["compiled"].startswith("a compile for the check") and own["compiled"].startswith("the measured compile")
    assert own["relative"] <= openvino_backend.TOLERANCE["fp32"] and own["openvino_shape"] == own["shape"]


def test_a_worker_converting_a_model_sends_no_vendor_telemetry(tiny_models, tmp_path):
    """OpenVINO's converter reports usage to Google Analytics unless a consent file says no, and
    on Linux forks the worker for each event (benchmark_runners/vendor_telemetry.py). A real
    worker converts a model into an empty IR cache with an empty home directory: the row is
    measured and openvino_telemetry's files (its client id, its usage count) never appear."""
    import json
    import os
    import subprocess
    import sys

    home, data = tmp_path / "home", tmp_path / "data"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "DEVICEFIT_DATA_DIR": str(data), "DEVICEFIT_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("CI", None)  # the converter's own CI switch must not be what keeps it quiet here
    job = {"run_id": "test-run", "devices": DEVICES, "configs": [config(tiny_models["text"], batch_size=1).to_json()]}
    proc = subprocess.run([sys.executable, "-m", "benchmark_runners.worker"], input=json.dumps(job), capture_output=True,
                          text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = [json.loads(line) for line in proc.stdout.splitlines() if '"result"' in line][-1]["result"]
    assert result["status"] == "ok", result["error"]
    assert result["backend_config"]["conversion"]["source"] == "converted from torch"
    assert not (home / "intel").exists(), sorted(str(p.relative_to(home)) for p in home.rglob("*"))


def test_devicefit_detect_writes_nothing_into_the_home_directory(tmp_path):
    """A bare `import openvino` writes ~/intel/ (telemetry's client id and usage count); the CLI
    imports openvino to detect its devices. Importing benchmark_runners turns that off first."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "DEVICEFIT_DATA_DIR": str(tmp_path / "data"), "DEVICEFIT_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("CI", None)
    proc = subprocess.run([str(Path(sys.executable).parent / "devicefit"), "detect", "--json"], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert '"openvino"' in proc.stdout
    assert not (home / "intel").exists(), sorted(str(p.relative_to(home)) for p in home.rglob("*"))


def test_a_cache_filled_before_measuring_is_what_the_row_reads(measurer, tiny_models, monkeypatch, tmp_path):
    """`devicefit run` converts ahead, on both cores (Backend.fill_cache): the IR and torch's
    bf16 reference are on disk, so the rows convert nothing and say they read the disk cache."""
    from benchmark_runners.registry import backend
    from models.resolve import resolve_model

    monkeypatch.setattr(openvino_backend, "cache_dir", lambda: tmp_path / "ov-cache")
    monkeypatch.setattr(openvino_backend, "_converted", {})
    ov = backend("openvino")
    configs = [config(tiny_models["text"], batch_size=b, precision=p) for p in ("fp32", "bf16") for b in (1, 4)]
    assert len({ov.cache_key(c) for c in configs}) == 1  # one IR for both precisions and every batch
    ov.fill_cache(resolve_model(str(tiny_models["text"])), configs)
    written = {p.name.split(".", 1)[1] for p in (tmp_path / "ov-cache").iterdir()}
    assert {"xml", "bin", "json", "reference.npy"} <= written  # the IR, its record and torch's fp32 output
    bf16_here = ov.unsupported_reason(resolve_model(str(tiny_models["text"])), configs[-1]) is None
    assert ("reference-bf16.npy" in written) == bf16_here  # torch's bf16 output where OpenVINO runs bf16
    monkeypatch.setattr(openvino_backend, "_converted", {})  # a worker's own process: nothing in memory

    def no_conversion(*args, **kwargs):
        raise AssertionError("converted again after fill_cache")

    import openvino
    monkeypatch.setattr(openvino, "convert_model", no_conversion)
    for c in configs:
        r = measurer.run(c)  # bf16: skipped, with the reason, where OpenVINO has no bf16 capability
        assert r.status in ("ok", "skipped"), r.error
        if r.status == "ok":
            assert r.backend_config["conversion"]["source"] in ("disk cache", "in-process cache")


def test_a_conversion_says_nothing_of_transformers_deprecated_aliases(tiny_models, monkeypatch, tmp_path):
    """torch.jit.trace reads every attribute of every submodule, transformers' deprecated
    `is_gradient_checkpointing` alias included: `make run` printed its FutureWarning once per
    converted model. The conversion keeps it out of the user's output; other warnings still show."""
    import warnings

    from benchmark_runners.registry import backend
    from models.resolve import resolve_model

    monkeypatch.setattr(openvino_backend, "cache_dir", lambda: tmp_path / "ov-cache")
    monkeypatch.setattr(openvino_backend, "_converted", {})
    c = config(tiny_models["text"], batch_size=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        backend("openvino").fill_cache(resolve_model(str(tiny_models["text"])), [c])
    assert (tmp_path / "ov-cache").exists()
    assert not [w for w in caught if "is_gradient_checkpointing" in str(w.message)]


def test_a_restricted_cpu_budget_sets_openvinos_threads(tiny_models, monkeypatch):
    """OpenVINO's CPU plugin counts the host's cores, not a cgroup's quota: where the budget
    restricts (hardware/cpu_budget.py), its threads are the budget's, asked for and as compiled;
    where it does not, no thread count is asked for (the plugin's own default)."""
    measurer = ConfigMeasurer("test-run", {"suite": "pytest"}, DEVICES)
    monkeypatch.setattr(openvino_backend, "restricted_threads", lambda: 1)
    r = measurer.run(config(tiny_models["text"], batch_size=1))
    assert r.status == "ok", r.error
    assert r.backend_config["requested_hints"]["INFERENCE_NUM_THREADS"] == "1"
    assert r.backend_config["effective"]["INFERENCE_NUM_THREADS"] == "1"
    monkeypatch.setattr(openvino_backend, "restricted_threads", lambda: None)
    r = ConfigMeasurer("test-run", {"suite": "pytest"}, DEVICES).run(config(tiny_models["text"], batch_size=1))
    assert r.status == "ok", r.error
    assert "INFERENCE_NUM_THREADS" not in r.backend_config["requested_hints"]
