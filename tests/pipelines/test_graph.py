"""The asset graph on real tiny models: in process, on the Dagster CLI, killed midway, and with
a corrupt landing file."""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dagster as dg
import psutil
import pytest

from assets.checks import ALL_CHECKS
from assets.inventory import hardware_inventory, model_catalog
from assets.measurements import measurements
from assets.resources import devicefit_resources
from assets.results import aggregated_results, benchmark_results, compatibility_matrix
from benchmark_runners.hardware import detect_hardware
from benchmark_runners.paths import WORKER_SCRATCH_PREFIX
from devicefit import store
from devicefit.landing import load_landing_files
from devicefit.paths import DataPaths
from devicefit.pipeline import measure_partition
from devicefit.profiles import Selection
from tests.conftest import local_partition
from tests.seeded_data import seeded_data_dir

ASSETS = [hardware_inventory, model_catalog, measurements, benchmark_results, aggregated_results, compatibility_matrix]
TINY = {"ops": {"measurements": {"config": {"batch_sizes": [1], "precisions": ["fp32", "int8"], "training_mode": False}}}}
TINY_SELECTION = Selection(batch_sizes=(1,), precisions=("fp32",), training_mode=False)


def count(paths: DataPaths, where: str = "TRUE") -> int:
    con = store.connect(paths.database, read_only=True)
    try:
        return con.execute(f"SELECT count(*) FROM measurements WHERE {where}").fetchone()[0]
    finally:
        con.close()


def test_graph_materializes_in_process_on_two_tiny_models(tmp_path):
    storage = tmp_path / "dagster_storage"
    # Dagster's own file IO manager, as in DAGSTER_HOME/storage: it must stay empty (every asset
    # returns a MaterializeResult; the files and DuckDB are the product, not pickled copies).
    resources = {**devicefit_resources(str(tmp_path)), "io_manager": dg.FilesystemIOManager(base_dir=str(storage))}
    instance = dg.DagsterInstance.ephemeral()
    for model in ("bert-tiny", "mobilenet-v2"):
        result = dg.materialize(ASSETS, selection="key:measurements", partition_key=local_partition(model, instance=instance), run_config=TINY,
                                resources=resources, instance=instance)
        assert result.success
        (event,) = result.get_asset_materialization_events()
        # what the run's summary reads (pipelines/dispatch.METADATA_KEYS): the readings the worker took
        from pipelines.dispatch import METADATA_KEYS

        assert {"speed_references", "copy_references"} <= set(event.materialization.metadata) and \
            {"speed_references", "copy_references"} <= set(METADATA_KEYS)
        assert all(g > 0 for g in event.materialization.metadata["speed_references"].value)
        assert all(c > 0 for c in event.materialization.metadata["copy_references"].value)  # none where taken beside others
    result = dg.materialize([*ASSETS, *ALL_CHECKS], selection="key:benchmark_results+", resources=resources, instance=instance)
    assert result.success
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert checks["timings_valid"] and checks["throughput_consistent"] and checks["sources_have_rows"]
    assert checks["aggregates_valid"] and checks["compatibility_complete"]
    paths = DataPaths(tmp_path)
    assert count(paths, "status = 'ok'") == 3  # bert-tiny fp32 + int8, mobilenet fp32
    assert count(paths, "status = 'skipped' AND model = 'mobilenet-v2' AND precision = 'int8'") == 1
    matrix = json.loads((paths.outputs / "compatibility_matrix.json").read_text())
    cpu_vision = matrix["model_families"]["vision"]["hardware_compatibility"]["cpu"]
    assert cpu_vision["source"] == "measured" and cpu_vision["compatible"]
    assert cpu_vision["performance_rating"] in ("high", "medium", "low") and "GFLOP/s" in cpu_vision["performance_basis"]
    assert set(matrix) >= {"timestamp", "hardware_types", "model_families"}
    assert matrix["model_families"]["audio"]["hardware_compatibility"]["cpu"]["performance_rating"] is None
    assert matrix["model_families"]["audio"]["hardware_compatibility"]["cpu"]["source"] == "declared_unmeasured"
    assert not [p for p in storage.rglob("*") if p.is_file()]
    # What the UI's asset page shows: the table's row count and column schema, from the instance.
    event = instance.get_latest_materialization_event(dg.AssetKey("aggregated_results"))
    metadata = event.asset_materialization.metadata
    assert metadata["dagster/row_count"].value == len(json.loads((paths.outputs / "benchmarks.json").read_text())["rows"]) > 0
    columns = {c.name: c.type for c in metadata["dagster/column_schema"].value.columns}
    assert {"model", "device_kind", "precision", "batch_size", "p50_ms", "is_best_precision"} <= set(columns)
    assert columns["p50_ms"] == "DOUBLE" and columns["batch_size"] == "INTEGER"
    rows = event.asset_materialization.metadata["headline"].value.records
    assert rows and {"model", "p50_ms"} <= set(rows[0].data)
    assert metadata["dagster/table_name"].value == "main.aggregated_results"
    # The table assets' frames are the store's tables (one aggregates table, whichever path wrote it).
    with store.opened(paths.database, read_only=True) as con:
        tables = store.table_counts(con)
    assert "aggregates" not in tables and tables["aggregated_results"] == metadata["dagster/row_count"].value
    assert tables["compatibility_matrix"] == sum(len(f["hardware_compatibility"]) for f in matrix["model_families"].values())
    # Published documents match their contracts, as a consumer with only the schema would check.
    import jsonschema

    for name in ("compatibility_matrix", "benchmarks"):
        schema = json.loads((paths.outputs / "schemas" / f"{name}.schema.json").read_text())
        jsonschema.validate(json.loads((paths.outputs / f"{name}.json").read_text()), schema)
    assert matrix["model_families"]["audio"]["hardware_compatibility"]["qnn"]["source"] == "no_backend"
    materializations = {e.asset_key.to_user_string(): e.materialization.metadata for e in result.get_asset_materialization_events()}
    assert materializations["benchmark_results"]["rows_loaded"].value == 4


def test_rematerializing_a_partition_three_times_keeps_the_row_count(tmp_path):
    paths = DataPaths(tmp_path)
    inventory = detect_hardware()
    counts = []
    for _ in range(3):
        measure_partition("cpu|bert-tiny", TINY_SELECTION, inventory, paths)
        load_landing_files(paths.database, paths.raw)
        counts.append(count(paths))
    assert counts == [1, 1, 1]


def test_a_corrupt_landing_file_is_quarantined_and_nothing_else_is_lost(tmp_path):
    paths = DataPaths(tmp_path)
    measure_partition("cpu|bert-tiny", TINY_SELECTION, detect_hardware(), paths)
    load_landing_files(paths.database, paths.raw)
    before = count(paths)
    (paths.raw / "partition__cpu__gpt2.json").write_text('{"format": "devicefit.benchmark_results/1", "results": [')
    good = json.loads((paths.raw / "partition__cpu__bert-tiny.json").read_text())
    good["results"][0]["samples_ms"][0] = -1.0
    (paths.raw / "partition__cpu__t5-small.json").write_text(json.dumps({**good, "source_key": "partition:cpu|t5-small"}))
    report = load_landing_files(paths.database, paths.raw)
    reasons = dict(report.quarantined)
    assert "not valid JSON" in reasons["partition__cpu__gpt2.json"]
    assert "negative timing sample" in reasons["partition__cpu__t5-small.json"]
    assert not (paths.raw / "partition__cpu__gpt2.json").exists()
    assert (paths.raw / "quarantine" / "partition__cpu__gpt2.json.reason.txt").is_file()
    assert count(paths) == before
    assert report.unchanged == ["partition:cpu|bert-tiny"]


def _dagster(args, env, timeout=600, **kw):
    return subprocess.run([sys.executable, "-m", "dagster", *args], env=env, capture_output=True, text=True, timeout=timeout, **kw)


@pytest.fixture
def dagster_env(tmp_path):
    home = tmp_path / "dagster_home"
    home.mkdir()
    return {**os.environ, "DAGSTER_HOME": str(home), "DEVICEFIT_DATA_DIR": str(seeded_data_dir(tmp_path / "data"))}


def _cli_partition(model: str, env: dict) -> str:
    """This host's partition of `model`, added to the instance under the env's DAGSTER_HOME (what
    the partition sensor or `devicefit run` does before a run names it)."""
    old = os.environ.get("DAGSTER_HOME")
    os.environ["DAGSTER_HOME"] = env["DAGSTER_HOME"]
    try:
        with dg.DagsterInstance.get() as instance:
            return local_partition(model, instance=instance)
    finally:
        os.environ.pop("DAGSTER_HOME") if old is None else os.environ.__setitem__("DAGSTER_HOME", old)


def test_cli_materializes_one_tiny_partition_then_the_results(dagster_env, tmp_path):
    out = _dagster(["asset", "materialize", "-m", "pipelines.definitions", "--select", "key:measurements",
                    "--partition", _cli_partition("bert-tiny", dagster_env), "--config-json", json.dumps(TINY)], dagster_env)
    assert out.returncode == 0, out.stderr[-3000:]
    out = _dagster(["asset", "materialize", "-m", "pipelines.definitions", "--select", "key:benchmark_results+"], dagster_env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert count(DataPaths(tmp_path / "data"), "model = 'bert-tiny'") == 2


def _is_worker(process: psutil.Process) -> bool:
    """A measurement worker: started as `-m benchmark_runners.worker`, or forked by the fork
    server (`-m benchmark_runners.zygote`, whose command line its children keep)."""
    try:
        parent = process.parent()
        return ("benchmark_runners.worker" in " ".join(process.cmdline())
                or (parent is not None and "benchmark_runners.zygote" in " ".join(parent.cmdline())))
    except psutil.Error:
        return False


def test_a_process_killed_mid_partition_leaves_no_partial_rows(dagster_env, tmp_path):
    """...nor a measuring worker, nor its scratch directory: the worker, in a session of its own,
    is not in the killed group; its lifeline ends it, and it removes its scratch directory first."""
    scratch_before = set(Path(tempfile.gettempdir()).glob(WORKER_SCRATCH_PREFIX + "*"))
    proc = subprocess.Popen([sys.executable, "-m", "dagster", "asset", "materialize", "-m", "pipelines.definitions",
                             "--select", "key:measurements", "--partition", _cli_partition("gpt2", dagster_env)],
                            env=dagster_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    worker = None
    while worker is None and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.5)
        worker = next((p for p in psutil.Process(proc.pid).children(recursive=True) if _is_worker(p)), None)
    assert worker is not None, "the partition never started measuring"
    time.sleep(3)  # well inside the quick profile's gpt2 sweep
    # Every worker alive at the kill, not only the first one seen: one started after it (a
    # restart) removes its own scratch directory on its lifeline too, and may be the later to.
    workers = {worker, *(p for p in psutil.Process(proc.pid).children(recursive=True) if _is_worker(p))}
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    _, alive = psutil.wait_procs(list(workers), timeout=60)
    for process in alive:
        process.kill()
    assert not alive, "a worker outlived the process that started it"
    # A worker the fork server started between the look above and the kill is not among them;
    # it ends on its lifeline too and removes its directory on the way: wait for that (bounded).
    def left() -> set[Path]:
        return set(Path(tempfile.gettempdir()).glob(WORKER_SCRATCH_PREFIX + "*")) - scratch_before

    deadline = time.monotonic() + 60
    while left() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left(), f"scratch directories left behind: {sorted(map(str, left()))} by workers {[w.pid for w in workers]}"
    paths = DataPaths(tmp_path / "data")
    assert not list(paths.raw.glob("*.json")) if paths.raw.exists() else True
    report = load_landing_files(paths.database, paths.raw)
    assert report.loaded == [] and count(paths) == 0
