"""The fleet's nightly loop under the real `dagster-daemon`, on the multi-host instance as
documented (dagster_home/multihost/dagster.yaml: PostgreSQL storage, the Celery run launcher):
the schedule's run for a registered device is launched by the daemon's run queue to the device's
worker, its partition lands, the daemon's automation sensor requests the derived chain, and the
fleet launcher routes those runs to the writer's queue, where `devicefit worker --writer`
executes them: the rows reach DuckDB once and the predictors, selection map and reports are
rebuilt, with no command beyond the schedule's tick.

The schedule's cron (02:00 UTC) cannot be waited for, so its evaluation is called for a night and
its run for bert-tiny is submitted to the run queue (`dagster job launch`, which creates the run
from the code location as the scheduler daemon does) with the request's tags and partition and a
one-config sweep instead of the full profile. Slow: a PostgreSQL server,
a redis-server, the daemon, two workers; it skips, saying `make fleet-deps`, where Debian's
servers are absent."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

import pytest

from pipelines import dispatch
from tests.fleet.postgres_server import postgres_url  # noqa: F401  (the fixture)
from tests.fleet.redis_server import redis_url  # noqa: F401  (the fixture)
from tests.fleet.test_celery_dispatch import DEVICEFIT, TINY, Worker, _cpu_fingerprint, _rows
from tests.pipelines.test_daemon_loop import SEED, SENSOR, _sensor_ticks, chain_rebuilt_since

ROOT = Path(__file__).resolve().parents[2]
MULTIHOST = ROOT / "dagster_home" / "multihost" / "dagster.yaml"


class Process:
    """A long-running process of the test (the daemon, the writer), stopped with its group."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path):
        self.log = log
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def _wait(predicate, timeout_s: float, what: str, procs: list) -> None:
    """Until `predicate()`, failing with the logs of `procs` (Process or Worker) if one exits."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        for p in procs:
            assert p.proc.poll() is None, f"{p.log.name}: exited {p.proc.returncode}:\n{p.log.read_text()[-3000:]}"
        time.sleep(2)
    logs = "\n".join(f"--- {p.log.name}\n{p.log.read_text()[-2500:]}" for p in procs)
    pytest.fail(f"{what} within {timeout_s:.0f} s\n{logs}")


@pytest.mark.slow
def test_the_daemon_sends_the_schedules_run_to_its_device_and_the_rebuild_to_the_writer(postgres_url, redis_url, tmp_path,  # noqa: F811
                                                                                        monkeypatch):
    import dagster as dg

    from assets.resources import DevicefitData
    from pipelines.schedules import nightly_benchmarks
    from pipelines.worker import node_name

    home, data = tmp_path / "dagster_home", tmp_path / "data"
    home.mkdir()
    shutil.copy(MULTIHOST, home / "dagster.yaml")  # the instance as documented, unchanged
    (data / "raw").mkdir(parents=True)
    for f in SEED.glob("partition__*.json"):  # another machine's real rows: enough models to train on
        if "bert-tiny" not in f.name:
            shutil.copy(f, data / "raw" / f.name)
    env = {**os.environ, "DAGSTER_HOME": str(home), "DEVICEFIT_DATA_DIR": str(data), dispatch.BROKER_ENV: redis_url,
           "DEVICEFIT_DAGSTER_PG_URL": postgres_url.replace("postgresql://", "postgresql+psycopg2://", 1)}
    for name in ("DAGSTER_HOME", "DEVICEFIT_DATA_DIR", dispatch.BROKER_ENV, "DEVICEFIT_DAGSTER_PG_URL"):
        monkeypatch.setenv(name, env[name])
    device = _cpu_fingerprint()
    procs: list[Process] = []
    workers: list[Worker] = []
    with dg.DagsterInstance.get() as instance:  # creates Dagster's tables once, before the others share them
        try:
            workers.append(Worker(device, env, tmp_path / "device-worker.log"))
            writer = Process([*DEVICEFIT, "worker", "--writer"], env, tmp_path / "writer.log")
            daemon = Process([sys.executable, "-m", "dagster._daemon", "run", "-w", str(ROOT / "workspace.yaml")], env,
                             tmp_path / "daemon.log")
            procs += [writer, daemon]
            workers[0].wait_serving(instance)
            launcher = dispatch.celery_launcher(instance)
            _wait(lambda: dispatch.WRITER_QUEUE in dispatch.queue_workers(launcher), 120, "the writer never served its queue", procs)
            # A second writer is refused: one store, one writer.
            second = subprocess.run([*DEVICEFIT, "worker", "--writer"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
            assert second.returncode != 0 and "already serves devicefit.writer" in second.stderr, second.stderr[-2000:]
            # The automation sensor's first evaluation starts its clock: a partition landing after it is new.
            _wait(lambda: _sensor_ticks(instance) > 0, 180, "the automation sensor never ticked", procs)

            with dg.build_schedule_context(instance=instance, scheduled_execution_time=datetime(2026, 11, 25, 2, tzinfo=timezone.utc),
                                           resources={"devicefit_data": DevicefitData(data_dir=str(data))}) as context:
                requests = list(nightly_benchmarks(context))
            key = f"{device}|bert-tiny"
            [request] = [r for r in requests if r.partition_key == key]
            assert request.tags[dispatch.QUEUE_TAG] == dispatch.device_queue(device)
            # Submitted as the scheduler daemon submits a request (a run of the code location's job,
            # with the request's tags and partition, to the run queue), through Dagster's own CLI.
            run_id = str(uuid.uuid4())
            tags = {**request.tags, "dagster/schedule_name": "nightly_benchmarks", "dagster/partition": key,
                    "dagster/partition/device": device, "dagster/partition/model": "bert-tiny"}
            launched = subprocess.run([sys.executable, "-m", "dagster", "job", "launch", "-w", str(ROOT / "workspace.yaml"),
                                       "-j", "measurements_job", "--run-id", run_id, "--tags", json.dumps(tags),
                                       "--config-json", json.dumps({"ops": {"measurements": {"config": TINY}}})],
                                      cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
            assert launched.returncode == 0, launched.stdout[-2000:] + launched.stderr[-2000:]
            run = instance.get_run_by_id(run_id)
            assert dispatch.TASK_ID_TAG not in run.tags  # queued: the daemon launches it, not this process
            submitted = time.time()

            def ended(run_id: str) -> bool:
                return instance.get_run_by_id(run_id).is_finished

            _wait(lambda: ended(run.run_id), 420, "the scheduled measurement run did not end", procs + workers)
            measured = instance.get_run_by_id(run.run_id)
            assert measured.status == dg.DagsterRunStatus.SUCCESS, measured.status
            assert measured.tags[dispatch.WORKER_TAG] == node_name(device)  # the device's worker executed it

            _wait(lambda: chain_rebuilt_since(instance, submitted), 600, "the derived chain was not rebuilt", procs + workers)
            derived = [r for r in instance.get_runs() if r.run_id != run.run_id]
            assert derived and all(r.tags.get(dispatch.QUEUE_TAG) == dispatch.WRITER_QUEUE for r in derived), \
                [(r.job_name, r.tags.get(dispatch.QUEUE_TAG)) for r in derived]
            assert any(r.tags.get("dagster/sensor_name") == SENSOR for r in derived), [r.tags for r in derived]
            assert {r.tags.get(dispatch.WORKER_TAG) for r in derived if r.status == dg.DagsterRunStatus.SUCCESS} == {node_name(None)}
            assert _rows(Path(data) / "devicefit.duckdb", "model = ?", ["bert-tiny"]) == [(device, 1, 1)]  # once
            assert (data / "outputs" / "selection_map.json").is_file()
            print(f"derived runs on the writer: {len(derived)} ({sorted({r.job_name for r in derived})}); "
                  f"schedule to rebuilt chain {time.time() - submitted:.0f} s")
        finally:
            for w in workers:
                w.stop()
            for p in reversed(procs):
                p.stop()
