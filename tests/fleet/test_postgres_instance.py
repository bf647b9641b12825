"""The multi-host instance (dagster_home/multihost/dagster.yaml): runs, events and schedules in
PostgreSQL. The slow test runs one real partition through `devicefit run` against a throwaway
server (tests/fleet/postgres_server.py; it skips, saying `make fleet-deps`, where none can run)."""
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from devicefit import store
from devicefit.paths import DataPaths
from tests.fleet.postgres_server import postgres_url  # noqa: F401  (the fixture)

ROOT = Path(__file__).resolve().parents[2]
MULTIHOST = ROOT / "dagster_home" / "multihost" / "dagster.yaml"
SINGLE_HOST = ROOT / "dagster_home" / "dagster.yaml"
URL_ENV = "DEVICEFIT_DAGSTER_PG_URL"


def _documented_url() -> str:
    """The example URL the file's header tells users to export."""
    found = re.search(rf"export {URL_ENV}=(\S+)", MULTIHOST.read_text())
    assert found, f"the header shows no `export {URL_ENV}=...` line"
    return found.group(1)


def test_the_multihost_instance_keeps_storage_in_postgres_from_the_environment(monkeypatch):
    config = yaml.safe_load(MULTIHOST.read_text())
    assert config["storage"] == {"postgres": {"postgres_url": {"env": URL_ENV}}}
    assert config["telemetry"] == {"enabled": False}
    single = yaml.safe_load(SINGLE_HOST.read_text())
    for key in ("concurrency", "run_retries", "run_monitoring"):  # the same run queue, pools and guards as one host
        assert config[key] == single[key], key
    # Valid for this Dagster's instance schema, and the URL resolved from the environment, without a server.
    from dagster._config import process_config
    from dagster._core.instance.config import dagster_instance_config
    from dagster._core.storage.config import pg_config

    monkeypatch.setenv(URL_ENV, _documented_url())
    dagster_instance_config(str(MULTIHOST.parent))  # raises on a key or value the schema refuses
    resolved = process_config(pg_config(), config["storage"]["postgres"])
    assert resolved.success and resolved.value["postgres_url"] == _documented_url(), resolved.errors
    # The documented URL names a driver that is installed (SQLAlchemy 2.1 reads a bare
    # postgresql:// as psycopg 3; dagster-postgres brings psycopg2).
    from sqlalchemy.engine import make_url

    make_url(_documented_url()).get_dialect().import_dbapi()


@pytest.mark.slow
def test_a_partition_runs_through_the_postgres_instance(postgres_url, tmp_path, monkeypatch):  # noqa: F811
    home, data = tmp_path / "dagster_home", tmp_path / "data"
    home.mkdir()
    shutil.copy(MULTIHOST, home / "dagster.yaml")
    dagster_url = postgres_url.replace("postgresql://", "postgresql+psycopg2://", 1)  # the driver dagster-postgres installs
    env = {**os.environ, "DAGSTER_HOME": str(home), URL_ENV: dagster_url, "DEVICEFIT_DATA_DIR": str(data)}
    started = time.monotonic()
    out = subprocess.run([str(Path(sys.executable).parent / "devicefit"), "run", "--model", "bert-tiny", "--hardware", "cpu",
                          "--precision", "fp32", "--batch-sizes", "1", "--no-training-mode"],
                         env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, f"exit {out.returncode} after {time.monotonic() - started:.0f}s\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"

    from dagster import AssetKey, DagsterInstance, DagsterRunStatus, RunsFilter
    from dagster_postgres import PostgresEventLogStorage, PostgresRunStorage, PostgresScheduleStorage

    for name, value in env.items():
        if name in ("DAGSTER_HOME", URL_ENV, "DEVICEFIT_DATA_DIR"):
            monkeypatch.setenv(name, value)
    with DagsterInstance.get() as instance:
        assert isinstance(instance.run_storage, PostgresRunStorage)
        assert isinstance(instance.event_log_storage, PostgresEventLogStorage)
        assert isinstance(instance.schedule_storage, PostgresScheduleStorage)
        for job in ("measurements_job", "results_job"):
            runs = instance.get_runs(filters=RunsFilter(job_name=job, statuses=[DagsterRunStatus.SUCCESS]))
            assert runs, f"no successful {job} run in the instance"
        assert instance.get_runs() and all(r.status == DagsterRunStatus.SUCCESS for r in instance.get_runs())
        assert instance.fetch_materializations(AssetKey("measurements"), limit=10).records
    assert not list(home.rglob("*.db")), "something went to SQLite under DAGSTER_HOME"

    # The rows are in PostgreSQL itself, read with its own client.
    import psycopg2

    with psycopg2.connect(postgres_url) as con, con.cursor() as cur:
        cur.execute("SELECT pipeline_name, count(*) FROM runs GROUP BY pipeline_name")
        per_job = dict(cur.fetchall())
    con.close()
    assert per_job.get("measurements_job", 0) >= 1 and per_job.get("results_job", 0) >= 1, per_job

    # And the measurements in the DuckDB store of the data dir.
    status = store.status(DataPaths(data).database)
    assert status["statuses"].get("ok", 0) >= 1, status
    con = store.connect(DataPaths(data).database, read_only=True)
    try:
        rows = store.query(con, "SELECT backend FROM measurements WHERE model = 'bert-tiny' AND status = 'ok'")
    finally:
        con.close()
    assert "torch" in {r["backend"] for r in rows}, rows
