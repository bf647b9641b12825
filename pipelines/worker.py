"""`devicefit worker --device ID`: serve one device of this host to the fleet (DESIGN.md,
"Devices and the fleet"; pipelines/dispatch.py is the launching side). `devicefit worker
--writer`: serve the fleet's writer queue on the host that holds the DuckDB store (the runs that
are not measurements: loading, aggregates, predictors, reports; `serve_writer`).

In order: the device id is resolved on this host (a device of another host is refused by name,
before anything else); the broker is checked (a clear error when it is unreachable, before
seconds of probing); the device is registered, in a fresh interpreter: added to the instance's
"devices" dynamic partitions and described in <DEVICEFIT_DATA_DIR>/raw/devices/<device id>.json
(written atomically; the single DuckDB writer registers it at its next load), with its own probe
when a constraint profile applies. Then a Celery worker runs in this process, consuming only the
device's queue, with `concurrency` pool processes (1: one benchmark at a time on a device).

Each run executes in a pool process forked from this one, so with this process's code (the
installed checkout), environment, DAGSTER_HOME and data directory; a fresh pool process per run.
This process never runs torch (hence registering elsewhere): a process forked after OpenMP ran
spins forever in its first parallel region. The constraint profile's environment is not applied
here: measure_partition applies it to the measuring subprocesses only. As a pool process starts
a run it tags the run with its owner (pid, host, start: run_guard's owner tags) and its Celery
node name, so the launcher and run_guard can tell when the process executing a run is gone."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from devicefit.errors import DevicefitError

if TYPE_CHECKING:
    from celery import Celery
    from dagster import DagsterInstance

    from devicefit.fleet.partitions import LocalTarget
    from devicefit.paths import DataPaths



class WorkerSetupError(DevicefitError, RuntimeError):
    """The worker cannot start as configured (DAGSTER_HOME, no broker URL): a configuration error."""


@dataclass(frozen=True)
class Registration:
    device_id: str
    queue: str
    description: Path  # raw/devices/<device id>.json
    new_partition: bool


def dagster_instance() -> DagsterInstance:
    """The instance under DAGSTER_HOME (checked as `devicefit run` checks it)."""
    from dagster import DagsterInstance

    home = os.environ.get("DAGSTER_HOME")
    if not home:
        raise WorkerSetupError("DAGSTER_HOME is not set: export DAGSTER_HOME=$PWD/dagster_home/multihost (every host of a fleet "
                               "shares its instance)")
    if not Path(home).is_absolute() or not Path(home).is_dir():
        raise WorkerSetupError(f"DAGSTER_HOME must be an absolute path to an existing directory, got {home!r}")
    return DagsterInstance.get()


def resolve_device(device_id: str, hardware: dict[str, Any] | None = None) -> LocalTarget:
    """The device on this host (DeviceUnavailable names this host's devices when it is not here)."""
    from benchmark_runners.hardware import detect_hardware
    from devicefit.fleet.partitions import resolve_local

    return resolve_local(device_id, hardware if hardware is not None else detect_hardware(probe=False).to_json())


def node_name(device_id: str | None, host: str | None = None) -> str:
    """The Celery node serving a device: devicefit-<device id>@<host> (what the launcher pings);
    None: the writer's node, devicefit-writer@<host>."""
    from pipelines.celery_fleet import WRITER_QUEUE, device_queue

    queue = WRITER_QUEUE if device_id is None else device_queue(device_id)
    return f"{queue.replace('.', '-', 1)}@{host or socket.gethostname()}"


def description_path(paths: DataPaths, device_id: str) -> Path:
    from devicefit.landing import DEVICES_DIR  # where the loader reads device records

    return paths.raw / DEVICES_DIR / f"{device_id}.json"


def _host_probe(target: LocalTarget, hardware: dict[str, Any]) -> dict[str, Any] | None:
    """The detection's own probe of the device as it is (no profile), if it has a good one."""
    for probe in (hardware.get("probes") or {}).values():
        if isinstance(probe, dict) and probe.get("fingerprint") == target.hardware_fingerprint and "error" not in probe:
            return probe
    return None


def register_device(target: LocalTarget, instance: DagsterInstance, paths: DataPaths, hardware: dict[str, Any],
                    probe: bool = True) -> Registration:
    """Add the device to the instance's "devices" partitions and write its description beside
    the landing files. A profiled device is probed under its profile (devicefit.fleet.profile_probe,
    cached per detection); a device as it is carries the detection's probe of it."""
    from assets.partitions import DEVICES
    from devicefit.fleet.devices import local_device
    from devicefit.landing_bounds import finite_json
    from devicefit.landing_share import push
    from devicefit.results_io import write_json_atomic
    from pipelines.celery_fleet import device_queue

    new = target.device_id not in set(instance.get_dynamic_partitions(DEVICES.name))
    if new:
        instance.add_dynamic_partitions(DEVICES.name, [target.device_id])
    device = local_device(target.kind, hardware, target.profile, target.index)
    if probe:
        if target.profile.empty:
            device.probe = _host_probe(target, hardware)
        else:
            from devicefit.fleet.profile_probe import profile_probe

            device.probe = profile_probe(target, hardware, paths.root)
    path = description_path(paths, device.id)
    write_json_atomic(path, finite_json(device.to_json()))  # JSON with no NaN or Infinity: the loader refuses them
    push(path, paths.raw)  # to the fleet's landing share, when one is configured (DEVICEFIT_LANDING_URL)
    return Registration(device.id, device_queue(device.id), path, new)


def worker_app(broker: str, backend: str | None = None) -> Celery:
    """dagster-celery's app as the CeleryRunLauncher builds it (the same task names and routes),
    with the run tasks registered and the settings of a device worker: no prefetch (a message
    waits in the broker, not in a busy worker that may die), early acknowledgement (a run is
    never executed twice: a lost run is failed and relaunched, not redelivered), a fresh pool
    process per run."""
    from dagster_celery.config import DEFAULT_CONFIG
    from dagster_celery.make_app import make_app
    from dagster_celery.tasks import create_execute_job_task, create_resume_job_task

    app = make_app({"broker": broker, "backend": backend or broker, "include": [], "config_source": dict(DEFAULT_CONFIG),
                    "task_default_queue": DEFAULT_CONFIG["task_default_queue"]})
    create_execute_job_task(app)
    create_resume_job_task(app)
    app.conf.update(
        worker_prefetch_multiplier=1,
        worker_disable_prefetch=broker.startswith(("redis://", "rediss://", "redis+socket://")),  # Celery supports it on Redis only
        task_acks_late=False,
        worker_max_tasks_per_child=1,
        broker_connection_retry_on_startup=True,
    )
    return app


def _run_id_of(kwargs: dict[str, Any] | None) -> str | None:
    from dagster._serdes import unpack_value

    packed = (kwargs or {}).get("execute_job_args_packed") or (kwargs or {}).get("resume_job_args_packed")
    if packed is None:
        return None
    return getattr(unpack_value(packed), "run_id", None)


def claim_run(task: Any = None, kwargs: dict[str, Any] | None = None, **_: Any) -> None:
    """Celery's task_prerun, in the pool process about to execute a run: tag the run with this
    process as its owner and with this worker's node name. Never fails the task."""
    import logging

    from dagster import DagsterInstance

    from pipelines import celery_fleet, run_guard

    try:
        run_id = _run_id_of(kwargs)
        if run_id is None:
            return
        with DagsterInstance.get() as instance:
            run = instance.get_run_by_id(run_id)
            if run is None or run.is_finished:
                return  # a late message of a run that ended: Dagster ignores it, leave its tags alone
            node = getattr(getattr(task, "request", None), "hostname", None) or f"?@{socket.gethostname()}"
            instance.add_run_tags(run_id, {**run_guard.owner_tags(), celery_fleet.WORKER_TAG: node})
    except Exception:  # the run executes regardless; the launcher then judges it by pings
        logging.getLogger(__name__).exception("devicefit: could not tag the run with its worker")


def worker_argv(queue: str, node: str, concurrency: int, loglevel: str) -> list[str]:
    return ["worker", "--queues", queue, "--hostname", node, "--concurrency", str(concurrency), "--pool", "prefork",
            "--loglevel", loglevel, "--without-mingle", "--without-gossip", "--prefetch-multiplier", "1"]


def register_in_subprocess(device_id: str, probe: bool = True, timeout_s: float = 600.0) -> Registration:
    """`register_device` in a fresh interpreter, which then exits. The worker's own process must
    never run torch: its pool processes are forked from it, and a process forked after OpenMP ran
    (the probes' matrix products) spins forever in its first parallel region."""
    cmd = [sys.executable, "-m", "pipelines.worker", "register", device_id, "--probe" if probe else "--no-probe"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise WorkerSetupError(f"registering {device_id} took over {timeout_s:.0f} s") from None
    if out.returncode != 0:
        lines = [line for line in out.stderr.strip().splitlines() if line.strip()]
        raise WorkerSetupError(f"registering {device_id} failed (exit {out.returncode}): {lines[-1] if lines else 'no message'}")
    document = json.loads(out.stdout.strip().splitlines()[-1])
    return Registration(document["device_id"], document["queue"], Path(document["description"]), bool(document["new_partition"]))


def _instance_backend(broker: str, on_info: Callable[[str], object]) -> str | None:
    """The task-state backend of DAGSTER_HOME's Celery run launcher (where it reads task
    states), warning when that launcher sends runs to another broker than this worker's."""
    from pipelines.celery_fleet import BROKER_ENV, celery_launcher, redact_url

    with dagster_instance() as instance:
        try:
            launcher = celery_launcher(instance)
        except DevicefitError:
            on_info("note: DAGSTER_HOME's dagster.yaml has no Celery run launcher; runs reach this worker only from an instance "
                    "that has one (dagster_home/multihost/dagster.yaml)")
            return None
        if launcher.broker != broker:
            on_info(f"warning: DAGSTER_HOME's run launcher sends runs to {redact_url(launcher.broker)}, this worker listens on "
                    f"{redact_url(broker)} ({BROKER_ENV})")
        return launcher.backend


def _checked_broker() -> str:
    from pipelines.celery_fleet import BROKER_ENV, broker_url, check_broker

    broker = broker_url()
    if broker is None:
        raise WorkerSetupError(f"{BROKER_ENV} is not set: a worker takes runs from the fleet's Celery broker "
                               f"(e.g. export {BROKER_ENV}=redis://broker-host:6379/0)")
    check_broker(broker)
    return broker


def _consume(broker: str, backend: str | None, queue: str, node: str, concurrency: int, loglevel: str,
             on_info: Callable[[str], object]) -> None:
    from celery import signals

    from pipelines.celery_fleet import redact_url

    app = worker_app(broker, backend)
    signals.task_prerun.connect(claim_run, weak=False)
    on_info(f"serving queue {queue} as {node} on {redact_url(broker)} (concurrency {concurrency})")
    app.worker_main(worker_argv(queue, node, concurrency, loglevel))


def serve(device_id: str, concurrency: int = 1, loglevel: str = "INFO", probe: bool = True,
          on_info: Callable[[str], object] = print) -> None:
    """Resolve, check, register, then consume the device's queue until stopped (SIGTERM: a warm
    shutdown that lets a running benchmark finish; a second SIGTERM or SIGQUIT stops at once)."""
    if concurrency < 1:
        raise WorkerSetupError(f"--concurrency is 1 or more, got {concurrency}")
    target = resolve_device(device_id)  # detection without probes: no torch in this process
    broker = _checked_broker()
    backend = _instance_backend(broker, on_info)
    if probe:
        on_info(f"registering {target.device_id} with its probe" + (" under its profile" if not target.profile.empty else "")
                + " (seconds the first time; cached per detection)")
    registration = register_in_subprocess(target.device_id, probe)
    on_info(f"registered {registration.device_id} ({'new partition' if registration.new_partition else 'known partition'}); "
            f"description {registration.description}")
    _consume(broker, backend, registration.queue, node_name(target.device_id), concurrency, loglevel, on_info)


def serve_writer(loglevel: str = "INFO", on_info: Callable[[str], object] = print) -> None:
    """Consume the writer's queue (celery_fleet.WRITER_QUEUE) on the host that holds the DuckDB
    store: the runs that are not measurements (loading landing files, aggregates, predictors,
    reports), which the daemon's automation sensor requests after measurements land and the UI
    launches. One run at a time (DuckDB allows one writing process), each in a fresh pool
    process. Refused while another node serves the writer's queue: a fleet has one store."""
    from devicefit.paths import DataPaths
    from pipelines.celery_fleet import WRITER_QUEUE

    broker = _checked_broker()
    backend = _instance_backend(broker, on_info)
    node = node_name(None)
    others = _queue_consumers(broker, backend, WRITER_QUEUE)  # this host's too: two writers would share one node name
    if others:
        raise WorkerSetupError(f"{', '.join(sorted(others))} already serves {WRITER_QUEUE}: a fleet has one writer (one DuckDB store); "
                               f"stop it first, or serve this host's devices with --device")
    paths = DataPaths.default()
    paths.root.mkdir(parents=True, exist_ok=True)
    on_info(f"writer of the store {paths.database} (DEVICEFIT_DATA_DIR); landing files read from {paths.raw}")
    _consume(broker, backend, WRITER_QUEUE, node, 1, loglevel, on_info)


def _queue_consumers(broker: str, backend: str | None, queue: str, timeout_s: float = 1.0) -> list[str]:
    """The Celery nodes consuming `queue` now (those that answer within timeout_s)."""
    replies = worker_app(broker, backend).control.inspect(timeout=timeout_s).active_queues() or {}
    return [node for node, queues in replies.items() if any(q.get("name") == queue for q in queues or [])]


def _register_main(argv: list[str]) -> int:
    """`python -m pipelines.worker register DEVICE_ID [--no-probe]`: register_device, then print
    the registration as one JSON line (what register_in_subprocess reads)."""
    import argparse

    from benchmark_runners.hardware import detect_hardware
    from devicefit.paths import DataPaths

    parser = argparse.ArgumentParser(prog="python -m pipelines.worker")
    parser.add_argument("command", choices=["register"])
    parser.add_argument("device_id")
    parser.add_argument("--probe", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args(argv)
    try:
        hardware = detect_hardware(probe=args.probe).to_json()
        target = resolve_device(args.device_id, hardware)
        with dagster_instance() as instance:
            registration = register_device(target, instance, DataPaths.default(), hardware, probe=args.probe)
    except DevicefitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(json.dumps({"device_id": registration.device_id, "queue": registration.queue,
                      "description": str(registration.description), "new_partition": registration.new_partition}))
    return 0


if __name__ == "__main__":
    sys.exit(_register_main(sys.argv[1:]))
