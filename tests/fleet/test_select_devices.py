"""`devicefit select --hardware <device ids>`: choosing among registered devices, each answered
with its measured figure (where the store has one) and its predicted one, each labelled."""
import json
import shutil

import pytest
from typer.testing import CliRunner

from devicefit import store
from devicefit.cli import app
from devicefit.select.devices import select_devices
from devicefit.select.selector import HardwareSelector, SelectionError
from tests.conftest import PREDICTION_MODELS


@pytest.fixture()
def fleet_dir(measured, artifact, tmp_path):
    """A copy of the measured data directory (the rows registered their device when they were
    loaded) plus a registered 1-thread profile of the same CPU that was never measured, probed
    at half the CPU's peaks."""
    data = tmp_path / "data"
    shutil.copytree(measured.root, data)
    with store.opened(data / "devicefit.duckdb") as con:
        [cpu] = store.devices(con, "cpu")
        probe = {**cpu["probe"], "matmul_gflops_best": cpu["probe"]["matmul_gflops_best"] / 2,
                 "memory_bandwidth_gbs_best": cpu["probe"]["memory_bandwidth_gbs_best"] / 2}
        store.register_device(con, {**cpu, "id": f"{cpu['id']}+t1", "profile": {"threads": 1, "isa": None}, "probe": probe,
                                    "registered_at": None})
    return data, cpu


def test_each_registered_device_gets_its_measured_and_predicted_figures_labelled(fleet_dir):
    data, cpu = fleet_dir
    model = PREDICTION_MODELS[0]
    selector = HardwareSelector(benchmark_dir=data, inventory={}, record=False)
    result = select_devices(selector, model, [cpu["id"], f"{cpu['id']}+t1"], batch_size=1)
    plain, one = result["devices"][cpu["id"]], result["devices"][f"{cpu['id']}+t1"]
    with store.opened(data / "devicefit.duckdb", read_only=True) as con:
        [stored] = [r for r in store.aggregates(con) if r["model"] == model and r["batch_size"] == 1 and r["device_kind"] == "cpu"
                    and r["precision"] == "fp32" and r["mode"] == "inference"]
    assert plain["measured"]["source"] == "measured" and plain["measured"]["latency"] == stored["p50_ms"]
    assert plain["predicted"]["source"] == "trained_predictor" and plain["latency_source"] == "measured"
    # Never measured: no measured figure, and a prediction from its own probe: the CPU's fit
    # carried to it by the two probes' peaks (the path leave-one-device-out validates).
    assert one["measured"] is None and one["latency_source"] == one["predicted"]["source"]
    assert one["predicted"]["source"] == "trained_predictor" and "carried to" in one["predicted"]["detail"]
    assert "+t1" in one["predicted"]["detail"] and one["predicted"]["latency"] > plain["predicted"]["latency"]
    assert one["profile"] == {"threads": 1}
    feasible = [e for e in result["devices"].values() if e["excluded"] is None]
    assert result["primary_recommendation"] == min(feasible, key=lambda e: e["latency"])["device"]


def test_an_unknown_device_id_names_the_registered_ones(fleet_dir):
    data, cpu = fleet_dir
    selector = HardwareSelector(benchmark_dir=data, inventory={}, record=False)
    with pytest.raises(SelectionError, match=f"unknown device cpu-nope; registered: .*{cpu['id']}"):
        select_devices(selector, PREDICTION_MODELS[0], ["cpu-nope"])


def test_the_cli_chooses_among_device_ids(fleet_dir):
    data, cpu = fleet_dir
    ids = f"{cpu['id']},{cpu['id']}+t1"
    out = CliRunner().invoke(app, ["select", "--model", PREDICTION_MODELS[0], "--hardware", ids, "--benchmark-dir", str(data), "--json"])
    assert out.exit_code == 0, out.output
    result = json.loads(out.output)
    assert set(result["devices"]) == set(ids.split(",")) and result["primary_recommendation"] in ids.split(",")
    bad = CliRunner().invoke(app, ["select", "--model", PREDICTION_MODELS[0], "--hardware", "cpu,cpu-nope", "--benchmark-dir", str(data)])
    assert bad.exit_code == 2 and "mixes kinds (cpu) with device ids (cpu-nope)" in bad.output
    bad = CliRunner().invoke(app, ["select", "--model", PREDICTION_MODELS[0], "--hardware", "cpu-nope", "--benchmark-dir", str(data)])
    assert bad.exit_code == 2 and "unknown device cpu-nope; registered:" in bad.output


def test_a_registered_device_selection_is_kept_and_scored_against_that_device_alone(fleet_dir):
    """Served with each device's own key, so the plain CPU's prediction is scored against its own
    measurement and the 1-thread profile's (never measured) is not scored against the plain CPU's."""
    from devicefit.paths import DataPaths
    from devicefit.predict import served
    from devicefit.select.devices import _device_key

    data, cpu = fleet_dir
    model = PREDICTION_MODELS[0]
    selector = HardwareSelector(benchmark_dir=data, inventory={}, record=True)
    one = f"{cpu['id']}+t1"
    # the same config answered through the API too, in the same served file: a prediction of its own
    selector.predictor.predict_performance(model, hardware="cpu", batch_size=1)
    select_devices(selector, model, [cpu["id"], one], batch_size=1)
    files = list(served.served_dir(DataPaths(data)).glob("served-*.jsonl"))
    kept = [r for f in files for r in served.read_served(f) if r["origin"] == "select_devices"]
    with store.opened(data / "devicefit.duckdb", read_only=True) as con:
        devices = {d["id"]: d for d in store.devices(con)}
    plain_key, one_key = _device_key(devices[cpu["id"]]), _device_key(devices[one])
    assert plain_key != one_key and one_key.endswith("+t1")
    assert sorted(r["device"] for r in kept) == sorted([plain_key, one_key])
    with store.opened(data / "devicefit.duckdb") as con:
        for f in files:  # served (in one instant) before the fixture's measurements, as a later measurement would be
            store.replace_served_predictions(con, f.name, [{**r, "recorded_at": "2000-01-01T00:00:00"} for r in served.read_served(f)])
        store.refresh_prediction_errors(con)
        scored = store.query(con, "SELECT * FROM prediction_errors WHERE origin = 'select_devices'")
        api = store.query(con, "SELECT * FROM prediction_errors WHERE origin = 'api' AND model = ? AND batch_size = 1", [model])
    assert scored and {r["device"] for r in scored} == {plain_key}
    assert all(r["measured_device"] == plain_key and r["batch_size"] == 1 for r in scored)
    # two origins' predictions of one config served in one instant are two predictions, each scored
    assert api and api[0]["measured_device"] == plain_key


def test_a_registered_device_on_its_hosts_cpu_is_predicted_from_that_cpus_probe(fleet_dir):
    """OpenVINO's CPU plugin registers without a probe of its own: it is predicted from its host
    CPU's registered probe (less its torch half-precision matmuls), as training scores its rows,
    not answered "unavailable"; on a host whose CPU is not registered there is nothing to use."""
    from devicefit.select.devices import device_spec

    data, cpu = fleet_dir
    plugin = {**cpu, "id": f"openvino-0123456789ab-{cpu['id'].removeprefix('cpu-')}", "kind": "openvino", "name": cpu["name"],
              "hardware_fingerprint": "openvino-0123456789ab", "probe": None, "details": {"name": "CPU"}, "registered_at": None}
    stray = {**plugin, "id": "openvino-0123456789ab-elsewhere", "host_fingerprint": "cpu-0000elsewhere", "hostname": "elsewhere"}
    gpu_plugin = {**plugin, "id": "openvino-0123456789ab-gpu", "details": {"name": "GPU.0"}}
    with store.opened(data / "devicefit.duckdb") as con:
        for d in (plugin, stray, gpu_plugin):
            store.register_device(con, d)
        fleet = {d["id"]: d for d in store.devices(con)}
    spec = device_spec(fleet[plugin["id"]], fleet)
    assert spec.kind == "openvino" and spec.peak_gflops == device_spec(fleet[cpu["id"]], fleet).peak_gflops
    assert spec.bf16_gflops is None and cpu["id"] in spec.source
    assert device_spec(fleet[stray["id"]], fleet) is None and device_spec(fleet[gpu_plugin["id"]], fleet) is None
    profiled = {**plugin, "id": plugin["id"] + "+t1"}  # a profile is not the unconstrained CPU: nothing to use
    assert device_spec(profiled, fleet) is None
    selector = HardwareSelector(benchmark_dir=data, inventory={}, record=False)
    asked = []
    predict = selector.predictor.predictor.predict
    selector.predictor.predictor.predict = lambda requests: asked.extend(requests) or predict(requests)
    result = select_devices(selector, PREDICTION_MODELS[0], [cpu["id"], plugin["id"], stray["id"]], batch_size=1)
    answer = result["devices"][plugin["id"]]["predicted"]
    # no OpenVINO row in this store: the static rule, on the host CPU's peaks, says so
    assert answer["source"] == "static_rule" and answer["latency"] > 0 and "the CPU OpenVINO runs on" in answer["detail"]
    assert result["devices"][stray["id"]]["predicted"]["source"] == "unavailable"
    # the plugin's request carries its host CPU's figures (for its bf16 speed-up); the CPU's own does not
    host_specs = {r.device: r.host_spec for r in asked}
    mine = host_specs[f"openvino@{cpu['host_fingerprint']}"]
    assert mine.kind == "cpu" and mine.peak_gflops == spec.peak_gflops and host_specs[f"cpu@{cpu['host_fingerprint']}"] is None
    assert host_specs["openvino@cpu-0000elsewhere"] is None
