"""Measurement runs dispatched on Celery (pipelines/dispatch.py, `devicefit worker`).

The fast tests need no broker: naming, errors, the instance's launcher config, the run a
partition becomes, how a dead worker is told. The slow test is the acceptance: a throwaway
redis-server (tests/fleet/redis_server.py; skips saying `make fleet-deps` where there is none),
two `devicefit worker` processes serving this CPU as it is and under a 1-thread profile, runs
fanned out to both queues and their rows in DuckDB once each; then a worker killed with SIGKILL
mid-run: the run ends failed naming the worker, nothing lands, and rerunning the partition
completes it."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
import yaml

from devicefit.errors import DevicefitError
from pipelines import dispatch
from tests.fleet.redis_server import redis_url  # noqa: F401  (the fixture)
from tests.pipelines.test_graph import _is_worker

ROOT = Path(__file__).resolve().parents[2]
SINGLE_HOST = ROOT / "dagster_home" / "dagster.yaml"
MULTIHOST = ROOT / "dagster_home" / "multihost" / "dagster.yaml"
DEVICEFIT = [sys.executable, "-m", "pipelines.cli"]
TINY = {"batch_sizes": [1], "precisions": ["fp32"], "training_mode": False}


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the socket is: nothing listens there


def _cpu_fingerprint() -> str:
    from benchmark_runners.hardware import detect_hardware

    return detect_hardware(probe=False).to_json()["platforms"]["cpu"]["devices"][0]["fingerprint"]


def _fleet_home(tmp_path: Path) -> Path:
    """A DAGSTER_HOME: the single-host instance (SQLite: the workers and the launcher share this
    machine) plus the multi-host instance's Celery run launcher block, as documented."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    config = {**yaml.safe_load(SINGLE_HOST.read_text()), "run_launcher": yaml.safe_load(MULTIHOST.read_text())["run_launcher"]}
    (home / "dagster.yaml").write_text(yaml.safe_dump(config))
    return home


def _cli(args: list[str], env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*DEVICEFIT, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


# ---- fast: no broker ----------------------------------------------------------------------------
def test_device_queues_keep_device_ids_and_match_dagster_celery_tags():
    from dagster_celery.tags import DAGSTER_CELERY_QUEUE_TAG, DAGSTER_CELERY_TASK_ID_TAG

    assert (dispatch.QUEUE_TAG, dispatch.TASK_ID_TAG) == (DAGSTER_CELERY_QUEUE_TAG, DAGSTER_CELERY_TASK_ID_TAG)
    assert dispatch.device_queue("cpu-e1d9c1f8fde0") == "devicefit.cpu-e1d9c1f8fde0"
    assert dispatch.device_queue("cpu-e1d9c1f8fde0+t2-avx2") == "devicefit.cpu-e1d9c1f8fde0+t2-avx2"  # Redis and Celery take '+'
    assert dispatch.device_queue("cuda-0a1b,c d@e") == "devicefit.cuda-0a1b_c_d_e"  # a comma would split `celery worker -Q`
    with pytest.raises(ValueError):
        dispatch.device_queue(" ")


def test_broker_url_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv(dispatch.BROKER_ENV, raising=False)
    assert dispatch.broker_url() is None  # the embedded default: in-process
    monkeypatch.setenv(dispatch.BROKER_ENV, " redis://h:6379/0 ")
    assert dispatch.broker_url() == "redis://h:6379/0"


def test_an_unreachable_broker_is_a_clear_error_at_once():
    port = _closed_port()
    started = time.monotonic()
    with pytest.raises(dispatch.BrokerUnreachable) as caught:
        dispatch.check_broker(f"redis://:s3cret@127.0.0.1:{port}/0", timeout_s=2.0)
    assert time.monotonic() - started < 5
    message = str(caught.value)
    assert f"redis://:***@127.0.0.1:{port}/0" in message and "s3cret" not in message  # named, without its password
    assert "unreachable" in message and "refused" in message.lower() and dispatch.BROKER_ENV in message
    assert isinstance(caught.value, DevicefitError) and caught.value.exit_code == 1


@pytest.mark.parametrize("url, shown", [
    ("redis://:s3cret@127.0.0.1:notaport/0", "redis://***@127.0.0.1:notaport/0"),
    ("redis://:s3cret@127.0.0.1:99999/0", "redis://***@127.0.0.1:99999/0"),
    ("redis://user:s3c@ret@[::1/0", "redis://***@[::1/0"),
])
def test_a_malformed_broker_url_is_a_clear_error_without_its_password(url, shown):
    """Before: redact_url let kombu's ValueError ("Port could not be cast to integer value")
    escape, and `devicefit run` / `devicefit worker` printed a traceback."""
    assert dispatch.redact_url(url) == shown
    with pytest.raises(dispatch.BrokerUnreachable) as caught:
        dispatch.check_broker(url, timeout_s=1.0)
    assert shown in str(caught.value) and "s3c" not in str(caught.value)


def test_the_worker_refuses_a_device_of_another_host_before_anything_else(monkeypatch):
    env = {**os.environ, dispatch.BROKER_ENV: f"redis://127.0.0.1:{_closed_port()}/0"}
    env.pop("DAGSTER_HOME", None)  # refused before the instance, the broker or any registration
    out = _cli(["worker", "--device", "cpu-000000000000+t1"], env)
    said = " ".join(out.stderr.split())
    assert out.returncode == 2, out.stderr
    assert "device cpu-000000000000+t1 is not on this host" in said and _cpu_fingerprint() in said, said


def test_the_worker_needs_a_reachable_broker(tmp_path):
    home = _fleet_home(tmp_path)
    env = {**os.environ, "DAGSTER_HOME": str(home), "DEVICEFIT_DATA_DIR": str(tmp_path / "data")}
    env.pop(dispatch.BROKER_ENV, None)
    out = _cli(["worker", "--device", _cpu_fingerprint()], env)
    assert out.returncode == 2 and f"{dispatch.BROKER_ENV} is not set" in " ".join(out.stderr.split()), out.stderr
    port = _closed_port()
    out = _cli(["worker", "--device", _cpu_fingerprint()], {**env, dispatch.BROKER_ENV: f"redis://127.0.0.1:{port}/0"})
    said = " ".join(out.stderr.split())
    assert out.returncode == 1 and f"the Celery broker redis://127.0.0.1:{port}/0" in said and "unreachable" in said, said
    assert not (tmp_path / "data" / "raw" / "devices").exists()  # nothing registered for a worker that cannot serve


def test_the_worker_serves_a_device_or_the_writer_and_the_writer_needs_a_broker(tmp_path):
    env = {**os.environ, "DAGSTER_HOME": str(_fleet_home(tmp_path)), "DEVICEFIT_DATA_DIR": str(tmp_path / "data")}
    env.pop(dispatch.BROKER_ENV, None)
    for args in (["worker"], ["worker", "--writer", "--device", _cpu_fingerprint()]):
        out = _cli(args, env)
        assert out.returncode == 2 and "--device ID" in out.stderr and "--writer" in out.stderr, out.stderr
    out = _cli(["worker", "--writer"], env)
    assert out.returncode == 2 and f"{dispatch.BROKER_ENV} is not set" in " ".join(out.stderr.split()), out.stderr
    port = _closed_port()
    out = _cli(["worker", "--writer"], {**env, dispatch.BROKER_ENV: f"redis://127.0.0.1:{port}/0"})
    said = " ".join(out.stderr.split())
    assert out.returncode == 1 and f"the Celery broker redis://127.0.0.1:{port}/0" in said and "unreachable" in said, said


def test_the_multihost_instance_launches_through_celery_with_the_broker_from_the_environment(tmp_path, monkeypatch):
    from dagster import DagsterInstance
    from dagster_celery.launcher import CeleryRunLauncher

    block = yaml.safe_load(MULTIHOST.read_text())["run_launcher"]
    assert block == {"module": "pipelines.fleet_launcher", "class": "FleetRunLauncher",
                     "config": {"broker": {"env": dispatch.BROKER_ENV}, "backend": {"env": dispatch.BROKER_ENV}}}
    monkeypatch.setenv("DAGSTER_HOME", str(_fleet_home(tmp_path)))
    monkeypatch.setenv(dispatch.BROKER_ENV, "redis://broker-host:6379/0")
    with DagsterInstance.get() as instance:
        launcher = dispatch.celery_launcher(instance)
        assert isinstance(launcher, CeleryRunLauncher)
        assert launcher.broker == launcher.backend == "redis://broker-host:6379/0"


def test_without_a_celery_launcher_dispatch_says_what_to_configure(tmp_path, monkeypatch):
    from dagster import DagsterInstance

    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text(SINGLE_HOST.read_text())
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    with DagsterInstance.get() as instance, pytest.raises(dispatch.DispatchUnavailable, match="run_launcher"):
        dispatch.celery_launcher(instance)


def test_a_partition_run_carries_its_queue_partition_and_code_origin(tmp_path, monkeypatch):
    from dagster import DagsterInstance
    from dagster._core.origin import JobPythonOrigin
    from dagster._utils.hosted_user_process import recon_job_from_origin

    from assets.partitions import add_partitions_for

    monkeypatch.setenv("DAGSTER_HOME", str(_fleet_home(tmp_path)))
    monkeypatch.setenv(dispatch.BROKER_ENV, "redis://broker-host:6379/0")
    key = "cpu-0123456789ab+t1|bert-tiny"  # another host's device: nothing resolves it here
    with DagsterInstance.get() as instance:
        add_partitions_for(instance, [key])
        run = dispatch.create_partition_run(instance, key, {"ops": {"measurements": {"config": TINY}}},
                                            {dispatch.QUEUE_TAG: dispatch.device_queue("cpu-0123456789ab+t1")})
        assert run.status.value == "NOT_STARTED" and run.job_name == "measurements_job"
        assert run.tags["dagster/partition"] == key and run.tags[dispatch.QUEUE_TAG] == "devicefit.cpu-0123456789ab+t1"
        assert run.tags["dagster/partition/device"] == "cpu-0123456789ab+t1" and run.tags["dagster/partition/model"] == "bert-tiny"
        origin = run.job_code_origin
        pointer = origin.repository_origin.code_pointer
        assert (pointer.module, pointer.fn_name, pointer.working_directory) == ("pipelines.definitions", "defs", None)
        assert isinstance(origin, JobPythonOrigin)
        assert recon_job_from_origin(origin).get_definition().name == "measurements_job"


def _fake_launcher(pings: list[dict], task_state: str = "STARTED"):
    control = SimpleNamespace(ping=lambda destination, timeout: pings, revoke=lambda *a, **k: None)
    result = SimpleNamespace(state=task_state, info=RuntimeError("Worker exited prematurely: signal 9 (SIGKILL)"))
    return SimpleNamespace(celery=SimpleNamespace(control=control, AsyncResult=lambda task_id: result),
                           backend="redis://broker-host:6379/0", broker="redis://broker-host:6379/0")


def _fake_run(**tags: str):
    return SimpleNamespace(tags={dispatch.QUEUE_TAG: "devicefit.cpu-0123456789ab", **tags}, status=SimpleNamespace(value="STARTED"))


def test_a_dead_worker_is_told_by_its_owner_its_task_or_its_silence():
    from pipelines import run_guard

    node = "devicefit-cpu-0123456789ab@hostB"
    now = [1000.0]
    clock = lambda: now[0]  # noqa: E731
    queued = _fake_run()
    here_alive = _fake_run(**{dispatch.WORKER_TAG: node, dispatch.TASK_ID_TAG: "t1", **run_guard.owner_tags()})
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    here_dead = _fake_run(**{dispatch.WORKER_TAG: node, run_guard.PID_TAG: str(dead.pid), run_guard.HOST_TAG: run_guard.this_host(),
                             run_guard.PROCESS_STARTED_TAG: "ticks:1"})
    elsewhere = _fake_run(**{dispatch.WORKER_TAG: node, dispatch.TASK_ID_TAG: "t2", run_guard.PID_TAG: "4242",
                             run_guard.HOST_TAG: "hostB", run_guard.PROCESS_STARTED_TAG: "ticks:9"})

    health = dispatch.WorkerHealth(None, _fake_launcher([{node: {"ok": "pong"}}]), ping_grace_s=20, clock=clock)
    health.ping({node})
    assert health.dead_reason(queued, None) is None  # no worker took it yet
    assert health.dead_reason(here_alive, None) is None and health.dead_reason(elsewhere, None) is None
    reason = health.dead_reason(here_dead, None)
    assert reason and node in reason and f"pid {dead.pid}" in reason and "killed or crashed" in reason

    lost = dispatch.WorkerHealth(None, _fake_launcher([{node: {"ok": "pong"}}], task_state="FAILURE"), ping_grace_s=20, clock=clock)
    assert "Celery task failed" in lost.dead_reason(elsewhere, None) and "SIGKILL" in lost.dead_reason(elsewhere, None)

    silent = dispatch.WorkerHealth(None, _fake_launcher([]), ping_grace_s=20, clock=clock)
    silent.ping({node})
    assert silent.dead_reason(elsewhere, None) is None  # one missed ping is not death
    now[0] += dispatch.PING_EVERY_S
    silent.ping({node})
    now[0] += 20
    reason = silent.dead_reason(elsewhere, None)
    assert reason and node in reason and "has not answered pings" in reason


def test_register_device_writes_a_description_the_store_accepts(tmp_path, monkeypatch):
    from dagster import DagsterInstance

    from benchmark_runners.hardware import detect_hardware
    from devicefit.landing_device import validated_device
    from devicefit.paths import DataPaths
    from pipelines import worker

    monkeypatch.setenv("DAGSTER_HOME", str(_fleet_home(tmp_path)))
    paths = DataPaths(tmp_path / "data")
    hardware = detect_hardware(probe=False).to_json()
    fp = hardware["platforms"]["cpu"]["devices"][0]["fingerprint"]
    with DagsterInstance.get() as instance:
        for device_id in (fp, f"{fp}+t1"):
            registration = worker.register_device(worker.resolve_device(device_id, hardware), instance, paths, hardware, probe=False)
            assert registration.queue == dispatch.device_queue(device_id) and registration.new_partition
            assert registration.description == paths.raw / "devices" / f"{device_id}.json"
            document = json.loads(registration.description.read_text())
            assert validated_device(document, str(registration.description))["id"] == device_id
        assert set(instance.get_dynamic_partitions("devices")) == {fp, f"{fp}+t1"}
        again = worker.register_device(worker.resolve_device(fp, hardware), instance, paths, hardware, probe=False)
        assert not again.new_partition
    assert worker.node_name(f"{fp}+t1", "hostA") == f"devicefit-{fp}+t1@hostA"


def test_a_run_no_worker_takes_is_given_up_at_the_timeout_or_on_interrupt(redis_url, tmp_path, monkeypatch):  # noqa: F811
    """A real broker, no worker: the launcher says nobody serves the queue, and the wait is bounded."""
    from dagster import DagsterInstance

    monkeypatch.setenv("DAGSTER_HOME", str(_fleet_home(tmp_path)))
    monkeypatch.setenv(dispatch.BROKER_ENV, redis_url)
    monkeypatch.setattr(dispatch, "UNSERVED_NOTICE_AFTER_S", 0.0)
    events: list[str] = []
    sleeps: list[float] = []
    config = {"ops": {"measurements": {"config": TINY}}}
    with DagsterInstance.get() as instance:
        started = time.monotonic()
        [outcome] = dispatch.launch_partitions(instance, ["cpu-0123456789ab|bert-tiny"], config, wait_timeout_s=3.0, on_event=events.append,
                                               sleep=lambda s: (sleeps.append(s), time.sleep(s)))
        assert time.monotonic() - started < 20
        assert sleeps and all(0 < s <= dispatch.POLL_S for s in sleeps)  # it slept between reads, never spun
        assert not outcome.success and outcome.status == "FAILURE" and outcome.queue == "devicefit.cpu-0123456789ab"
        assert "did not finish within 3 s" in outcome.reason and "no worker had taken it" in outcome.reason, outcome.reason
        assert any("no worker serves queue devicefit.cpu-0123456789ab" in e for e in events), events
        run = instance.get_run_by_id(outcome.run_id)
        assert run.tags[dispatch.TASK_ID_TAG] and run.tags[dispatch.LAUNCHED_BY_TAG].startswith(f"{os.getpid()}@")

        def interrupted(_seconds):
            raise KeyboardInterrupt

        [launched] = dispatch.launch_runs(instance, ["cpu-0123456789ab|bert-tiny"], config)
        with pytest.raises(KeyboardInterrupt):
            dispatch.wait_for_runs(instance, [launched], 600, sleep=interrupted)
        run = instance.get_run_by_id(launched.run_id)
        assert run.status.value == "FAILURE"
        [message] = [e.message for e in instance.all_logs(run.run_id) if e.dagster_event and e.dagster_event.event_type_value == "PIPELINE_FAILURE"]
        assert "interrupted (KeyboardInterrupt)" in message


# ---- slow: the acceptance, on a real broker and two real workers ------------------------------
_is_measuring = _is_worker  # a measurement worker, as the kill test of a partition tells one


class Worker:
    """A `devicefit worker --device ID` subprocess, its output in a log file."""

    def __init__(self, device_id: str, env: dict[str, str], log: Path):
        self.device_id, self.log = device_id, log
        with open(log, "ab") as out:
            self.proc = subprocess.Popen([*DEVICEFIT, "worker", "--device", device_id], cwd=ROOT, env=env, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        self.seen: set[int] = {self.proc.pid}  # every process of its tree ever seen, to check none outlives it

    def tree(self) -> list[psutil.Process]:
        try:
            main = psutil.Process(self.proc.pid)
            procs = [main, *main.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []
        self.seen |= {p.pid for p in procs}
        return procs

    def wait_serving(self, instance, timeout_s: float = 240) -> None:
        launcher = dispatch.celery_launcher(instance)
        queue = dispatch.device_queue(self.device_id)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"worker {self.device_id} exited {self.proc.returncode}:\n{self.log.read_text()[-3000:]}"
            if queue in dispatch.queue_workers(launcher):
                return
            time.sleep(1)
        raise AssertionError(f"worker {self.device_id} not serving {queue} after {timeout_s} s:\n{self.log.read_text()[-3000:]}")

    def kill(self) -> list[psutil.Process]:
        procs = self.tree()
        for p in procs:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        gone, alive = psutil.wait_procs(procs, timeout=30)
        assert not alive, alive
        self.proc.wait()
        return procs

    def stop(self) -> None:
        self.tree()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # a warm shutdown: nothing runs now
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.kill()


def _rows(database: Path, where: str, params: list) -> list[tuple]:
    from devicefit import store

    con = store.connect(database, read_only=True)
    try:
        return con.execute(f"SELECT device_id, count(*), count(DISTINCT config_key) FROM measurements WHERE {where} "
                           "GROUP BY device_id ORDER BY device_id", params).fetchall()
    finally:
        con.close()


@pytest.mark.slow
def test_runs_fan_out_to_device_workers_and_a_killed_worker_fails_its_run(redis_url, tmp_path, monkeypatch):  # noqa: F811
    import dagster as dg

    from assets.measurements import SweepConfig
    from devicefit import store
    from devicefit.fleet.partitions import device_tag
    from devicefit.landing import load_landing_files
    from devicefit.paths import DataPaths
    from pipelines import run_guard
    from pipelines.schedules import DEVICE_TAG
    from pipelines.worker import node_name

    WORKER_NODE_TAG = dispatch.WORKER_TAG

    started = time.monotonic()
    home, data = _fleet_home(tmp_path), DataPaths(tmp_path / "data")
    env = {**os.environ, "DAGSTER_HOME": str(home), "DEVICEFIT_DATA_DIR": str(data.root), dispatch.BROKER_ENV: redis_url}
    for name in ("DAGSTER_HOME", "DEVICEFIT_DATA_DIR", dispatch.BROKER_ENV):
        monkeypatch.setenv(name, env[name])
    fp = _cpu_fingerprint()
    plain, t1 = fp, f"{fp}+t1"
    events: list[str] = []
    workers: list[Worker] = []
    with dg.DagsterInstance.get() as instance:  # creates the SQLite storage once, before the workers share it
        try:
            # One after the other: the first caches this host's probe for the second.
            for device_id in (plain, t1):
                workers.append(Worker(device_id, env, tmp_path / f"worker-{len(workers)}.log"))
                workers[-1].wait_serving(instance)
            assert psutil.Process(workers[1].proc.pid).environ().get("OMP_NUM_THREADS") == os.environ.get("OMP_NUM_THREADS")
            assert {plain, t1} <= set(instance.get_dynamic_partitions("devices"))
            assert {p.name for p in (data.raw / "devices").glob("*.json")} == {f"{plain}.json", f"{t1}.json"}

            # One `devicefit run` fans out to both queues: each partition to its device's worker,
            # then this process alone loads the landing files and retrains the predictors.
            models = ["bert-tiny", "mobilenet-v2", "resnet-18"]  # the predictors need three models
            run = _cli(["run", "--model", ",".join(models), "--hardware", f"{plain},{t1}", "--precision", "fp32",
                        "--batch-sizes", "1", "--no-training-mode"], env, timeout=900)
            assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
            assert "dispatched run failed" not in run.stderr
            runs = [r for r in instance.get_runs(dg.RunsFilter(job_name="measurements_job"))]
            assert len(runs) == 6 and all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs)
            for r in runs:
                device = r.tags["dagster/partition"].split("|")[0]
                assert r.tags[dispatch.QUEUE_TAG] == dispatch.device_queue(device)
                assert r.tags[WORKER_NODE_TAG] == node_name(device)  # executed by that device's worker
                assert r.tags[run_guard.PID_TAG] != str(os.getpid())  # owned by the worker's run process
                assert r.tags[DEVICE_TAG] == device_tag("cpu", fp)
            for model in models:
                assert _rows(data.database, "model = ?", [model]) == [(plain, 1, 1), (t1, 1, 1)]  # once each
            con = store.connect(data.database, read_only=True)
            try:
                assert {plain, t1} <= {d["id"] for d in store.devices(con)}  # the workers' descriptions, registered by the load
                [version] = store.predictor_versions(con)  # retrained on both devices' rows
            finally:
                con.close()
            from devicefit.predict import artifacts

            artifact = artifacts.load_current(data)
            assert artifact["version"] == version["version"] and artifact["rows"] == 6
            fanned_out = time.monotonic() - started

            # A worker killed with SIGKILL mid-run: the run fails naming it, nothing lands.
            key = f"{t1}|all-MiniLM-L6-v2"
            longer = dg.RunConfig(ops={"measurements": SweepConfig(batch_sizes=[1, 8], precisions=["fp32"], training_mode=False)})
            landed = sorted(p.name for p in data.raw.glob("*.json"))
            [launched] = dispatch.launch_runs(instance, [key], longer, on_event=events.append)
            deadline = time.monotonic() + 240
            while not (instance.get_run_by_id(launched.run_id).status == dg.DagsterRunStatus.STARTED
                       and any(_is_measuring(p) for p in workers[1].tree())):
                ended = instance.get_run_by_id(launched.run_id).is_finished
                assert time.monotonic() < deadline and not ended, \
                    f"the run never started measuring (ended: {ended}): {events}\n{workers[1].log.read_text()[-3000:]}"
                time.sleep(0.5)
            time.sleep(1.0)  # well inside the sweep (about 10 s on the 2-core Xeon)
            killed = workers[1].kill()
            assert not any(psutil.pid_exists(p.pid) and psutil.Process(p.pid).status() != psutil.STATUS_ZOMBIE for p in killed)
            told = time.monotonic()
            [failed] = dispatch.wait_for_runs(instance, [launched], 120, on_event=events.append)
            assert time.monotonic() - told < 30, "the dead worker was not noticed promptly"
            assert not failed.success and failed.status == "FAILURE"
            assert node_name(t1) in failed.reason and "killed or crashed" in failed.reason, failed.reason
            assert sorted(p.name for p in data.raw.glob("*.json")) == landed  # no landing file: no partial rows
            assert load_landing_files(data.database, data.raw).loaded == []
            assert _rows(data.database, "model = ?", ["all-MiniLM-L6-v2"]) == []

            # Restarted, the worker completes the partition; its rows land once.
            workers.append(Worker(t1, env, tmp_path / "worker-restarted.log"))
            workers[-1].wait_serving(instance)
            [done] = dispatch.launch_partitions(instance, [key], longer, wait_timeout_s=600, on_event=events.append)
            assert done.success, (done, events)
            document = json.loads(Path(done.metadata["landing_file"]).read_text())
            load_landing_files(data.database, data.raw)
            n = len(document["results"])
            assert n == 2 and _rows(data.database, "model = ?", ["all-MiniLM-L6-v2"]) == [(t1, n, n)]
            assert _rows(data.database, "model = ?", ["bert-tiny"]) == [(plain, 1, 1), (t1, 1, 1)]
        finally:
            for w in workers:
                w.stop()
    for w in workers:
        assert w.proc.poll() is not None
        leftovers = [pid for pid in w.seen if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
        assert not leftovers, [" ".join(psutil.Process(pid).cmdline()) for pid in leftovers]
    print(f"fan-out {fanned_out:.0f} s, total {time.monotonic() - started:.0f} s")


def test_the_daemons_health_check_fails_a_run_whose_worker_died(tmp_path, monkeypatch):
    """Runs the daemon launched (schedule, UI) are judged by the run-monitoring daemon through the
    launcher's health check: dagster-celery's alone keeps a SIGKILLed worker's run STARTED."""
    from dagster import DagsterInstance
    from dagster._core.launcher import WorkerStatus

    from pipelines import run_guard
    from pipelines.fleet_launcher import FleetRunLauncher

    monkeypatch.setenv("DAGSTER_HOME", str(_fleet_home(tmp_path)))
    monkeypatch.setenv(dispatch.BROKER_ENV, "redis://broker-host:6379/0")
    node = "devicefit-cpu-0123456789ab@hostB"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with DagsterInstance.get() as instance:
        launcher = instance.run_launcher
        assert isinstance(launcher, FleetRunLauncher) and launcher.supports_check_run_worker_health
        fake = _fake_launcher([{node: {"ok": "pong"}}])  # the worker's node answers; its task says STARTED
        launcher.celery = fake.celery
        launcher._health = dispatch.WorkerHealth(instance, fake, ping_grace_s=20)
        alive = _fake_run(**{dispatch.WORKER_TAG: node, dispatch.TASK_ID_TAG: "t1", **run_guard.owner_tags()})
        assert launcher.check_run_worker_health(alive).status == WorkerStatus.RUNNING
        gone = _fake_run(**{dispatch.WORKER_TAG: node, dispatch.TASK_ID_TAG: "t2", run_guard.PID_TAG: str(dead.pid),
                            run_guard.HOST_TAG: run_guard.this_host(), run_guard.PROCESS_STARTED_TAG: "ticks:1"})
        result = launcher.check_run_worker_health(gone)
        assert result.status == WorkerStatus.FAILED and node in result.msg and "killed or crashed" in result.msg


def test_a_run_without_a_queue_goes_to_its_devices_queue_or_the_writers():
    from pipelines.fleet_launcher import run_queue

    def run(job: str, **tags: str):
        return SimpleNamespace(job_name=job, tags=tags)

    assert run_queue(run("measurements_job", **{"dagster/partition": "cpu-0123456789ab+t1|gpt2"})) == "devicefit.cpu-0123456789ab+t1"
    assert run_queue(run("measurements_job", **{"dagster/partition": "cpu-0123456789ab|gpt2",
                                                 dispatch.QUEUE_TAG: "devicefit.x"})) is None  # tagged: kept
    # The automation sensor's derived runs (Dagster's implicit asset job), results_job, inventory:
    # they write DuckDB, so they go to the writer's queue, never Celery's unserved default.
    for job in ("__ASSET_JOB", "results_job", "inventory_job"):
        assert run_queue(run(job)) == dispatch.WRITER_QUEUE
    assert run_queue(run("results_job", **{dispatch.QUEUE_TAG: "dagster"})) is None
    assert run_queue(run("measurements_job")) is None  # no partition: no device to send it to
    assert run_queue(run("measurements_job", **{"dagster/partition": "no-separator"})) is None
    assert run_queue(run("measurements_job", **{"dagster/partition": "writer|gpt2"})) is None  # never the writer's queue
    with pytest.raises(ValueError):
        dispatch.device_queue("writer")


def test_a_measurements_run_launched_without_a_queue_is_routed_by_its_partition(redis_url, tmp_path, monkeypatch):  # noqa: F811
    """What a run launched from the UI meets: the instance's launcher sends it to its device's queue."""
    from dagster import DagsterInstance

    from assets.partitions import add_partitions_for

    monkeypatch.setenv("DAGSTER_HOME", str(_fleet_home(tmp_path)))
    monkeypatch.setenv(dispatch.BROKER_ENV, redis_url)
    key = "cpu-0123456789ab+t1|bert-tiny"
    with DagsterInstance.get() as instance:
        add_partitions_for(instance, [key])
        run = dispatch.create_partition_run(instance, key, {"ops": {"measurements": {"config": TINY}}})
        assert dispatch.QUEUE_TAG not in run.tags
        instance.launch_run(run.run_id, workspace=None)
        tags = instance.get_run_by_id(run.run_id).tags
        assert tags[dispatch.QUEUE_TAG] == "devicefit.cpu-0123456789ab+t1" and tags[dispatch.TASK_ID_TAG]
        dispatch.fail_run(instance, dispatch.celery_launcher(instance), run.run_id, "test: nobody serves this queue")
