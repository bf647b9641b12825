"""The registry is the one list of device kinds and backends: a backend added as one plugin
module shows up everywhere kinds are enumerated, and is measured through the contract alone."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmark_runners import registry
from benchmark_runners.backends.base import Backend, TimedStep

ROOT = Path(__file__).resolve().parents[1]

PROBE = r"""
import json, sys, typing
from benchmark_runners import registry
from benchmark_runners.harness import TimingPolicy
from benchmark_runners.hardware import detect_hardware
from benchmark_runners.records import BenchmarkConfig
from benchmark_runners.sweep import run_sweep
from devicefit import store
from devicefit.compatibility import compatibility_matrix
from devicefit.profiles import Selection, partition_configs
from devicefit.api.app import create_app

out = {}
# The partitions' device dimension: this host's devices, one per measurable kind it has.
out["partition_kinds"] = sorted({d.split("-")[0] for d in Selection().device_ids(detect_hardware(probe=False).to_json())})
configs = partition_configs("bert-tiny", "fakeaccel", Selection())
out["partition_configs"] = sorted({(c.backend, c.device, c.precision, c.mode) for c in configs})
con = store.connect(sys.argv[1])
store.migrate(con)
matrix = compatibility_matrix(con, detect_hardware(probe=False).to_json())
out["matrix_kinds"] = matrix["hardware_types"]
out["matrix_entry"] = matrix["model_families"]["embedding"]["hardware_compatibility"]["fakeaccel"]
schema = create_app().openapi()["components"]["schemas"]
# The API takes a kind or a torch device string of one ("cuda:0"): its pattern names every kind.
out["api_kind_pattern"] = schema["SelectRequest"]["properties"]["available_hardware"]["anyOf"][0]["items"]["pattern"]
policy = TimingPolicy(ci_target=0.05, min_iterations=5, max_time_s=0.5, warmup_min_iterations=2, warmup_max_time_s=0.3)
rows = run_sweep([BenchmarkConfig(model="bert-tiny", device="fakeaccel:0", backend="fake", policy=policy),
                  BenchmarkConfig(model="bert-tiny", device="fakeaccel:0", backend="fake", mode="training", policy=policy)],
                 run_id="plugin-test")
out["rows"] = [(r.status, r.backend, r.device, r.error, r.p50_ms is not None, r.device_name) for r in rows]
print(json.dumps(out))
"""


def _plugin_env(tmp_path: Path) -> dict[str, str]:
    return dict(os.environ, DEVICEFIT_PLUGINS="tests.plugins.fake_backend", DEVICEFIT_DATA_DIR=str(tmp_path / "data"),
                PYTHONPATH=str(ROOT))


def test_a_plugin_backend_appears_everywhere_kinds_are_enumerated_and_measures(tmp_path):
    proc = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path / "store.duckdb")], cwd=ROOT, env=_plugin_env(tmp_path),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "fakeaccel" in out["partition_kinds"] and "cpu" in out["partition_kinds"]
    assert out["partition_configs"] == [["fake", "fakeaccel:0", "fp32", "inference"]]  # inference-only: no training configs
    assert "fakeaccel" in out["matrix_kinds"]
    assert out["matrix_entry"]["source"] == "declared_unmeasured" and "fake" in out["matrix_entry"]["declared_by"]
    pattern = re.compile(out["api_kind_pattern"])
    assert all(pattern.fullmatch(k) for k in ("fakeaccel", "fakeaccel:0", "cpu", "cuda:1")) and not pattern.fullmatch("tpu")
    (ok, skipped) = out["rows"]
    assert ok[:3] == ["ok", "fake", "fakeaccel:0"] and ok[4] is True and ok[5] == "fake accelerator (this host's CPU)"
    assert skipped[0] == "skipped" and "does not run training" in skipped[3]


def test_devicefit_detect_lists_the_plugin_kind(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "devicefit.cli", "detect", "--json"], cwd=ROOT, env=_plugin_env(tmp_path),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    platforms = json.loads(proc.stdout)["platforms"]
    assert platforms["fakeaccel"]["available"] is True and platforms["fakeaccel"]["backend"] == "fake"
    assert set(platforms) == set(registry.kind_names()) | {"fakeaccel"}


def test_a_plugin_that_cannot_be_imported_is_named(tmp_path):
    env = dict(_plugin_env(tmp_path), DEVICEFIT_PLUGINS="no_such_devicefit_plugin")
    proc = subprocess.run([sys.executable, "-c", "from benchmark_runners import registry; registry.kinds()"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "no_such_devicefit_plugin" in proc.stderr and "DEVICEFIT_PLUGINS" in proc.stderr


def test_the_cli_names_a_plugin_that_cannot_be_imported_in_one_line_not_a_traceback(tmp_path):
    """The commands' help texts read the registry when devicefit.cli is imported, outside the
    group's error handler: a bad DEVICEFIT_PLUGINS was a traceback on every command, even
    `benchmark --help` (found by a fault hunt, 2026-11-29)."""
    env = dict(_plugin_env(tmp_path), DEVICEFIT_PLUGINS="no_such_devicefit_plugin")
    for args in (["detect", "--json"], ["benchmark", "--model", "bert-tiny", "--device", "cpu"]):
        proc = subprocess.run([sys.executable, "-m", "devicefit.cli", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
        assert "plugin module 'no_such_devicefit_plugin' named in DEVICEFIT_PLUGINS cannot be imported" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "devicefit.cli", "benchmark", "--help"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]


def test_registrations_that_would_make_the_registry_inconsistent_are_refused():
    class Clash(Backend):
        name = "torch"
        kinds = {"cpu": "cpu"}
        device_pattern = "cpu"
        device_help = "cpu"

        def device_reason(self, spec, config):
            return None

        def prepare(self, spec, config):
            raise AssertionError

        def make_step(self, prepared, inputs):
            raise AssertionError

        def output(self, prepared, inputs):
            raise AssertionError

    with pytest.raises(registry.DeviceRegistryError, match="registered already"):
        registry.register_backend(Clash())
    Clash.name, Clash.kinds = "clash", {"nosuchkind": "x"}
    with pytest.raises(registry.DeviceRegistryError, match="unregistered kind"):
        registry.register_backend(Clash())
    Clash.kinds = {"cpu": "cpu"}
    with pytest.raises(registry.DeviceRegistryError, match="measured by torch already"):
        registry.register_backend(Clash())
    with pytest.raises(registry.DeviceRegistryError, match="does not implement"):
        registry.register_backend(object())
    with pytest.raises(registry.DeviceRegistryError, match="registered already"):
        registry.register_kind(registry.kind("cpu"))
    with pytest.raises(registry.DeviceRegistryError, match="lowercase"):
        registry.register_kind(registry.DeviceKind("Bad Name", "x:y", "bad"))
    assert "clash" not in registry.backend_names()


def test_derived_views_agree_with_the_builtin_backends():
    assert registry.measurable_kinds() == ("cpu", "cuda", "rocm", "mps", "openvino", "wasm", "webnn", "webgpu")
    assert registry.inference_only_kinds() == ("openvino", "wasm", "webnn", "webgpu")
    assert registry.backend_for_device("wasm").name == registry.declared_backend("webgpu") == "browser"
    assert registry.partition_device("openvino") == "openvino:CPU" and registry.partition_device("cuda") == "cuda:0"
    assert registry.backend_for_device("openvino:GPU.1").name == "openvino" and registry.backend_for_device("cuda:3").name == "torch"
    assert registry.declared_backend("rocm") == "torch" and registry.declared_backend("qnn") is None
    assert registry.partition_device("rocm") == "rocm:0" and registry.backend_for_device("rocm:1").name == "torch"
    assert registry.physical_kind("openvino") == "cpu" and registry.torch_kinds() == ("cpu", "cuda", "rocm", "mps")
    assert registry.physical_kind("wasm") == "cpu" and registry.physical_kind("webgpu", software=True) == "cpu" != registry.physical_kind("webgpu")
    with pytest.raises(registry.DeviceRegistryError, match="unknown device 'tpu:0'"):
        registry.backend_for_device("tpu:0")


def test_rocm_is_its_own_kind_that_torch_addresses_through_hip():
    """Rows, partitions and predictor specs say `rocm`; torch's ROCm build reaches the same GPU
    as "cuda:N", so only the string handed to torch changes. Without a ROCm build and an AMD GPU
    a ROCm config is skipped with the detection's reason, stored under rocm."""
    from benchmark_runners.records import BenchmarkConfig
    from benchmark_runners.sweep import run_sweep
    from devicefit.predict.hardware_specs import PUBLISHED_SPECS

    assert registry.torch_device_string("rocm:1") == "cuda:1" and registry.torch_device_string("rocm") == "cuda:0"
    assert registry.torch_device_string("cuda:1") == "cuda:1" and registry.torch_device_string("cpu") == "cpu"
    assert registry.kind_of_device("rocm:0") == "rocm" and registry.kind("rocm").device_id({"index": 2}) == "rocm:2"
    assert PUBLISHED_SPECS["rocm"].kind == "rocm"  # predicted from its own datasheet until a ROCm host measures
    [row] = run_sweep([BenchmarkConfig("bert-tiny", device="rocm:0", backend="torch")])
    detected = registry.kind("rocm").detect()
    if detected.available:
        pytest.skip("an AMD GPU is here: the ROCm path measures for real")
    assert row.status == "skipped" and row.reason_code == "device_unavailable" and detected.reason in row.error


def test_rows_record_each_backends_package_versions():
    from benchmark_runners.environment import versions

    recorded = versions()
    assert {"torch", "transformers", "openvino", "nncf"} <= set(recorded) and recorded["torch"]


def test_a_timed_step_amortizes_by_a_positive_integer():
    with pytest.raises(ValueError, match="positive integer"):
        TimedStep(lambda clock: None, amortize=0)
