"""The nightly loop with the real `dagster-daemon`: after a measurements partition lands, the
automation sensor starts the derived chain and it materializes, with no further command.
Slow (a daemon, a measurement and a run in a subprocess): `make test-slow`."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest

from assets.inventory import hardware_inventory, model_catalog
from assets.measurements import measurements
from assets.resources import devicefit_resources
from tests.conftest import local_partition

ROOT = Path(__file__).resolve().parents[2]
SEED = ROOT / "benchmarks" / "datasets" / "xeon-spr-2c-calibrated"  # real rows of another machine: enough models to train
TINY = {"ops": {"measurements": {"config": {"batch_sizes": [1], "precisions": ["fp32"], "training_mode": False}}}}
SENSOR = "rebuild_after_measurements"
CHAIN = ("benchmark_results", "aggregated_results", "compatibility_matrix", "training_frame", "latency_predictor", "prediction_matrix",
         "selection_map", "benchmark_reports", "regression_report")


def chain_rebuilt_since(instance: dg.DagsterInstance, since: float) -> bool:
    """Every asset of CHAIN materialized at or after `since` (a time.time())."""
    for key in CHAIN:
        event = instance.get_latest_materialization_event(dg.AssetKey(key))
        if event is None or event.timestamp < since:
            return False
    return True


def _sensor_ticks(instance: dg.DagsterInstance) -> int:
    states = [s for s in instance.all_instigator_state() if s.name == SENSOR]
    return sum(len(instance.get_ticks(s.instigator_origin_id, s.selector_id)) for s in states)


def _wait(predicate, timeout_s: float, what: str, daemon: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        assert daemon.poll() is None, f"dagster-daemon exited: {log.read_text()[-3000:]}"
        time.sleep(2)
    pytest.fail(f"{what} within {timeout_s:.0f} s; daemon log: {log.read_text()[-3000:]}")


@pytest.mark.slow
def test_the_daemon_rebuilds_the_chain_after_a_partition_lands(tmp_path):
    home, data = tmp_path / "dagster_home", tmp_path / "data"
    home.mkdir()
    shutil.copy(ROOT / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    (data / "raw").mkdir(parents=True)
    for f in SEED.glob("partition__*.json"):
        if "bert-tiny" not in f.name:
            shutil.copy(f, data / "raw" / f.name)
    env = {**os.environ, "DAGSTER_HOME": str(home), "DEVICEFIT_DATA_DIR": str(data)}
    log = tmp_path / "daemon.log"
    with open(log, "w") as out:
        daemon = subprocess.Popen([sys.executable, "-m", "dagster._daemon", "run", "-w", str(ROOT / "workspace.yaml")],
                                  cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    old_home = os.environ.get("DAGSTER_HOME")
    os.environ["DAGSTER_HOME"] = str(home)
    try:
        instance = dg.DagsterInstance.get()
        # The sensor's first evaluation starts its clock; a partition landing after it is new.
        _wait(lambda: _sensor_ticks(instance) > 0, 180, "the automation sensor never ticked", daemon, log)
        result = dg.materialize([hardware_inventory, model_catalog, measurements], selection="key:measurements",
                                partition_key=local_partition("bert-tiny", instance=instance), run_config=TINY, instance=instance,
                                resources=devicefit_resources(str(data)))
        assert result.success
        landed = time.time()

        _wait(lambda: chain_rebuilt_since(instance, landed), 420, "the chain did not materialize", daemon, log)
        runs = instance.get_runs()
        automated = [r for r in runs if r.tags.get("dagster/sensor_name") == SENSOR or "dagster/from_automation_condition" in str(r.tags)]
        assert automated, [r.tags for r in runs]
        outputs = data / "outputs"
        assert json.loads((outputs / "selection_map.json").read_text())
        assert (outputs / "prediction_matrix.json").is_file()
    finally:
        if old_home is None:
            os.environ.pop("DAGSTER_HOME", None)
        else:
            os.environ["DAGSTER_HOME"] = old_home
        os.killpg(daemon.pid, signal.SIGTERM)
        try:
            daemon.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(daemon.pid, signal.SIGKILL)
