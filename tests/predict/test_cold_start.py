"""Cold start: on an empty data directory, before anything was measured or trained, the CLI and
the API answer from the roofline on this host's probe (or the published datasheet figure for
hardware it lacks), every answer labelled `static_rule` with its wide interval and the reason;
once a trained predictor is published, the same paths answer from it."""
import json

import pytest
from typer.testing import CliRunner

from devicefit.cli import app
from tests.api.server import call, running

runner = CliRunner()


def _static(prediction: dict) -> None:
    assert prediction["source"] == "static_rule", prediction
    assert "cold start, no trained predictor yet" in prediction["detail"]
    low, high = prediction["latency_interval"]
    assert low < prediction["latency"] < high and high / low == pytest.approx(16)  # x/4 either side: deliberately wide


def test_the_cli_answers_on_an_empty_data_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("DEVICEFIT_DATA_DIR", str(tmp_path / "empty"))
    out = runner.invoke(app, ["select", "--model", "bert-base-uncased", "--hardware", "cpu,cuda", "--json"])
    assert out.exit_code == 0, out.output
    answer = json.loads(out.stdout)
    assert answer["primary_recommendation"] in ("cpu", "cuda") and answer["prediction_source"] == "static_rule"
    assert answer["predictor_version"] == "cold-start"
    for kind in ("cpu", "cuda"):
        assert answer["all_scores"][kind]["predictions"]["source"] == "static_rule"
    out = runner.invoke(app, ["predict", "--model", "llama-2-7b", "--hardware", "cuda", "--json"])
    assert out.exit_code == 0, out.output
    cuda = json.loads(out.stdout)["predictions"]["cuda"]
    _static(cuda)
    assert "published_spec" in cuda["detail"]  # no GPU here: the datasheet figure, named
    # 6.74B fp32 parameters alone are 26.95 GB: the memory answer cannot be smaller
    assert cuda["memory_usage"] * 2**20 > 4 * 6_738_415_616


def test_a_cpu_not_probed_because_another_process_measures_on_it_is_named_in_the_answer(tmp_path, monkeypatch):
    """With the CPU's device lock held by another process and no earlier probe, the detection
    takes none (it would disturb that measurement), and the cold start answered "no measurement
    and no published spec for cpu: nothing to predict from", hiding why."""
    import subprocess
    import sys

    monkeypatch.setenv("DEVICEFIT_DATA_DIR", str(tmp_path / "empty"))
    monkeypatch.setenv("DEVICEFIT_LOCK_DIR", str(tmp_path / "locks"))
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom benchmark_runners.device_lock import hold_devices\n"
                               "with hold_devices({'cpu'}):\n    print('held', flush=True)\n    time.sleep(120)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        out = runner.invoke(app, ["predict", "--model", "bert-tiny", "--hardware", "cpu", "--json"])
    finally:
        holder.kill()
        holder.wait()
    assert out.exit_code == 0, out.output
    cpu = json.loads(out.stdout)["predictions"]["cpu"]
    assert cpu["source"] == "unavailable" and "another process is measuring on cpu" in cpu["detail"], cpu


def test_the_api_answers_on_an_empty_data_directory(tmp_path):
    from devicefit.api.app import Settings, create_app

    with running(create_app(Settings(benchmark_dir=tmp_path / "empty", warm_models=()))) as base:
        status, body = call(base, "/hardware/select", {"model_name": "bert-base-uncased", "batch_size": 1,
                                                       "available_hardware": ["cpu", "cuda"]})
        assert status == 200, body
        assert body["prediction_source"] == "static_rule" and body["primary_recommendation"] in ("cpu", "cuda")
        status, body = call(base, "/performance/predict", {"model_name": "llama-2-7b", "hardware": ["cpu", "cuda"],
                                                           "batch_size": 1})
        assert status == 200, body
        for kind in ("cpu", "cuda"):
            _static(body["predictions"][kind])


def test_a_memory_answer_is_never_below_the_models_resident_weights(measured, artifact):
    """The session's predictor is trained on models up to ~0.1B parameters; asked about 7B ones it
    must not answer less memory than their weights take (fp32: 4 bytes each; training: x the
    copies of weights, gradients and optimizer states)."""
    from devicefit.predict.api import HardwareModelPredictor
    from devicefit.predict.features import TRAINING_WEIGHT_COPIES
    from models.analysis import parameter_count
    from models.resolve import resolve_model

    api = HardwareModelPredictor(benchmark_dir=measured.root, record=False)
    for model in ("falcon-7b", "llama-2-7b"):
        weights = 4 * parameter_count(resolve_model(model))
        for mode, copies in (("inference", 1), ("training", TRAINING_WEIGHT_COPIES)):
            for kind, p in api.predict_performance(model, hardware=["cpu", "cuda"], mode=mode)["predictions"].items():
                assert p["memory_usage"] * 2**20 >= copies * weights * 0.999, (model, mode, kind, p)
                assert p["memory_interval"] is None or p["memory_interval"][0] * 2**20 >= copies * weights * 0.999


def test_the_api_on_a_fresh_data_directory_probes_this_host_and_answers(tmp_path, monkeypatch):
    """With no hardware cache at all (a fresh install, before any `devicefit detect` or run) the
    server read the detection without a probe and answered "no measurement and no published spec
    for cpu: nothing to predict from" for the CPU it runs on, until restarted; the CLI, which
    probes, answered (found by a fault hunt, 2026-11-30). The server now runs `devicefit detect
    --json` once at start-up, in a process of its own."""
    from devicefit.api.app import Settings, create_app

    data = tmp_path / "fresh"
    monkeypatch.setenv("DEVICEFIT_DATA_DIR", str(data))
    monkeypatch.setenv("DEVICEFIT_LOCK_DIR", str(tmp_path / "locks"))  # no other process's measurement holds this CPU
    with running(create_app(Settings(benchmark_dir=data, warm_models=()))) as base:
        # (a probe another process disturbed is not cached, but serves these answers all the same)
        status, body = call(base, "/performance/predict", {"model_name": "bert-tiny", "hardware": ["cpu"], "batch_size": 1})
        assert status == 200, body
        _static(body["predictions"]["cpu"])
        status, body = call(base, "/hardware/select", {"model_name": "bert-tiny", "available_hardware": ["cpu"]})
        assert status == 200 and body["primary_recommendation"] == "cpu", body


def test_the_api_rebuilds_its_selector_when_the_hardware_cache_changes(tmp_path, monkeypatch):
    """A new detection (`devicefit detect --refresh`, or the start-up probe) is what cold answers
    scale by: the server takes it at the next request, as it takes a newly published predictor."""
    from devicefit.api.state import ServiceState, Settings

    data = tmp_path / "data"
    data.mkdir()
    monkeypatch.setenv("DEVICEFIT_DATA_DIR", str(data))
    state = ServiceState(Settings(benchmark_dir=data, warm_models=()))
    first = state.selector()
    assert state.selector() is first
    (data / "hardware.json").write_text("{}")  # a detection written since (its content is the detection's to read)
    assert state.selector() is not first


_START_UP = """
import json, os, sys, time
from pathlib import Path
from devicefit.api.state import ServiceState, Settings

shared, me = Path(sys.argv[1]), sys.argv[2]

def probe(self):
    busy = shared / "in-probe"
    try:
        os.close(os.open(busy, os.O_CREAT | os.O_EXCL))  # another probe running now: an overlap
    except FileExistsError:
        (shared / f"overlap-{me}").touch()
        return
    time.sleep(1.0)
    busy.unlink()
    (shared / f"probed-{me}").touch()

ServiceState._run_probe = probe
(shared / f"ready-{me}").touch()
deadline = time.time() + 60
while len(list(shared.glob("ready-*"))) < 2 and time.time() < deadline:  # both start-ups reach the probe together
    time.sleep(0.01)
ServiceState(Settings(benchmark_dir=shared / f"data{me}", warm_models=()))._probe_when_cold()
"""


def test_two_servers_starting_at_once_probe_one_after_the_other(tmp_path):
    """The workers of `serve --workers 2` on a fresh data directory each ran the start-up probe at
    once, and each disturbed the other's (noticed at stop 72): one probes at a time now. Both
    start-ups wait for each other before probing, so without the lock their probes overlap."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "DEVICEFIT_LOCK_DIR": str(tmp_path / "locks")}
    servers = [subprocess.Popen([sys.executable, "-c", _START_UP, str(tmp_path), str(i)],
                                env={**env, "DEVICEFIT_DATA_DIR": str(tmp_path / f"data{i}")}) for i in range(2)]
    assert [s.wait(timeout=120) for s in servers] == [0, 0]
    assert not list(tmp_path.glob("overlap-*")), "a server's probe began while the other one's ran"
    assert sorted(p.name for p in tmp_path.glob("probed-*")) == ["probed-0", "probed-1"]
