"""`devicefit run`: the pipeline through Dagster from the command line, as `make run` does."""
import os
import subprocess
import sys

from devicefit import store
from devicefit.paths import DataPaths


def devicefit_run(args, env):
    return subprocess.run([sys.executable, "-m", "pipelines.cli", "run", *args], capture_output=True, text=True,
                          timeout=600, env=env)


def test_run_materializes_a_tiny_selection_and_records_dagster_runs(tmp_path):
    home = tmp_path / "dagster_home"
    home.mkdir()
    env = {**os.environ, "DAGSTER_HOME": str(home), "DEVICEFIT_DATA_DIR": str(tmp_path / "data")}
    out = devicefit_run(["--model", "bert-tiny", "--batch-sizes", "1", "--precision", "fp32", "--no-training-mode"], env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Best precision per config" in out.stdout and "compatibility matrix:" in out.stdout
    con = store.connect(DataPaths(tmp_path / "data").database, read_only=True)
    # torch on the CPU and OpenVINO's CPU plugin, one row each
    assert sorted(con.execute("SELECT backend FROM measurements WHERE status = 'ok'").fetchall()) == [("openvino",), ("torch",)]
    con.close()
    assert any(home.rglob("*.db"))  # the runs are in the instance's SQLite storage, for the UI
    from dagster import DagsterInstance, DagsterRunStatus

    instance = DagsterInstance.from_config(str(home))
    runs = instance.get_runs()
    assert runs and all(r.status == DagsterRunStatus.SUCCESS for r in runs)
    # each run names the process that executed it, so a later run can tell when it died
    assert all(r.tags.get("devicefit/pid") and r.tags.get("devicefit/host") and r.tags.get("devicefit/process_started")
               for r in runs)


def test_run_refuses_bad_selections_and_a_missing_dagster_home(tmp_path):
    env = {**os.environ, "DEVICEFIT_DATA_DIR": str(tmp_path / "data")}
    out = devicefit_run(["--hardware", "tpu"], env)
    assert out.returncode == 2 and "unknown hardware tpu" in out.stderr
    out = devicefit_run(["--category", "robots"], env)
    assert out.returncode == 2 and "unknown category robots" in out.stderr
    env.pop("DAGSTER_HOME", None)
    out = devicefit_run(["--model", "bert-tiny", "--batch-sizes", "1", "--precision", "fp32", "--no-training-mode"], env)
    assert out.returncode == 2 and "DAGSTER_HOME is not set" in " ".join(out.stderr.split())
