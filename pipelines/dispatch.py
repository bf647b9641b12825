"""Measurement runs dispatched to the hosts that have their devices, on Celery (DESIGN.md,
"Devices and the fleet").

With DEVICEFIT_BROKER_URL unset nothing here runs: `devicefit run` executes each partition in
its own process (the embedded default). With it set, each (device, model) partition becomes a
Dagster run of measurements_job that the instance's run launcher (dagster-celery's
CeleryRunLauncher, configured in dagster.yaml's `run_launcher:`) sends to its device's queue,
`device_queue(device id)`; `devicefit worker --device ID` (pipelines/worker.py) on the host that
has the device consumes that queue alone and executes the run there. The rows come back as the
partition's landing file, written atomically when the measurement completes, for the single
DuckDB writer to load.

- The run's code is named, not shipped: its job code origin points at the code location's
  module (pipelines.definitions, attribute `defs`) with no working directory, so each worker
  imports the package installed in its own checkout.
- Every run is launched first (all device queues at once), then waited on: run records are read
  every `poll_s` seconds, sleeping in between (never a busy loop: on a 2-core host a spinning
  launcher steals a core from a measurement).
- A run whose worker died does not hang. The worker tags a run as it starts executing it with
  its owner (the pool process's pid, host and start mark: run_guard's owner tags) and its Celery
  node name. A run whose owner is gone (same host), whose Celery task failed (the worker lost
  its pool process), or whose worker stopped answering pings for `ping_grace_s` (any host) is
  marked failed with the reason, naming the worker. A killed run lands nothing (its landing file
  is written only at the end), so rerunning the partition completes it without duplicates.
- Owner tags name the process that executes a run, so a launcher's own owner tags are never put
  on a dispatched run (a `devicefit run` that exits must not make the next one reap runs its
  workers are still executing); the launcher is recorded as devicefit/launched_by instead.

Plain, typed functions over a DagsterInstance; Dagster and Celery are imported where used."""
from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from pipelines.celery_fleet import (  # noqa: F401  (re-exported: callers and tests name them from here)
    BROKER_ENV,
    BROKER_TIMEOUT_S,
    DEFAULT_PING_GRACE_S,
    PING_EVERY_S,
    QUEUE_PREFIX,
    QUEUE_TAG,
    TASK_ID_TAG,
    WORKER_TAG,
    WRITER_QUEUE,
    BrokerUnreachable,
    DispatchUnavailable,
    WorkerHealth,
    broker_url,
    celery_launcher,
    check_broker,
    device_queue,
    ping_grace_s_from_env,
    queue_workers,
    redact_url,
)

if TYPE_CHECKING:
    from dagster import DagsterInstance, DagsterRun
    from dagster._core.origin import JobPythonOrigin
    from dagster_celery.launcher import CeleryRunLauncher


LAUNCHED_BY_TAG = "devicefit/launched_by"  # "pid@host" of the process that launched the run
CODE_MODULE, CODE_ATTRIBUTE = "pipelines.definitions", "defs"  # the code location (workspace.yaml)
MEASUREMENTS_JOB = "measurements_job"
# What a partition's materialization tells the run's summary (assets/measurements.py writes them).
METADATA_KEYS = ("rows", "ok", "skipped", "over_call_budget", "failed", "contended", "duration_s", "landing_file", "speed_references", "copy_references")
POLL_S = 1.5
UNSERVED_NOTICE_AFTER_S = 10.0


def job_code_origin(job_name: str = MEASUREMENTS_JOB) -> JobPythonOrigin:
    """Where a worker finds the job: the code location's module and attribute, no working
    directory (each host imports its own installed checkout), as `dagster` itself loads it."""
    from dagster._core.definitions.reconstruct import ReconstructableRepository

    return ReconstructableRepository.for_module(CODE_MODULE, CODE_ATTRIBUTE).get_reconstructable_job(job_name).get_python_origin()


def _code_location_job(job_name: str):
    """The job as the code location defines it, loaded by module name (as a worker loads it),
    so this module does not import pipelines.definitions, which imports the schedule, which
    imports this module."""
    from dagster._core.definitions.reconstruct import ReconstructableRepository

    return ReconstructableRepository.for_module(CODE_MODULE, CODE_ATTRIBUTE).get_definition().get_job(job_name)


def _config_dict(run_config: Any) -> dict[str, Any]:
    if run_config is None:
        return {}
    to_dict = getattr(run_config, "to_config_dict", None)  # a dg.RunConfig
    return dict(to_dict() if callable(to_dict) else run_config)


def create_partition_run(instance: DagsterInstance, partition_key: str, run_config: Any = None,
                         tags: Mapping[str, str] | None = None) -> DagsterRun:
    """A NOT_STARTED run of measurements_job for one partition, with the partition's tags as
    `execute_in_process(partition_key=...)` gives them and the job's code origin. The run config
    is validated here (an execution plan is built), before anything is sent."""
    from dagster._core.execution.execute_in_process import merge_run_tags

    job = _code_location_job(MEASUREMENTS_JOB)
    config = _config_dict(run_config)
    merged = merge_run_tags(job_def=job, partition_key=partition_key, tags=dict(tags or {}), asset_selection=None,
                            instance=instance, run_config=config)
    return instance.create_run_for_job(job_def=job, run_config=config, tags=dict(merged), job_code_origin=job_code_origin())


@dataclass
class Launched:
    """A partition's run as launched: sent to `queue`, or refused with `error`."""

    key: str
    run_id: str | None
    queue: str
    error: str | None = None


@dataclass
class PartitionRun:
    """A partition's dispatched run once it ended (or was given up on)."""

    key: str
    run_id: str | None
    queue: str
    success: bool
    status: str
    metadata: dict[str, Any] = field(default_factory=dict)  # the materialization's counts, as run_pipeline collects them
    reason: str | None = None  # why it failed: the run's failure message
    worker: str | None = None  # the Celery node that executed it

    def as_tuple(self) -> tuple[str, bool, dict[str, Any]]:
        """(key, success, metadata): run_pipeline's PipelineRun.partitions entry."""
        return self.key, self.success, self.metadata


def _launcher_tag() -> str:
    from pipelines.run_guard import this_host

    return f"{os.getpid()}@{this_host()}"


def launch_runs(instance: DagsterInstance, partition_keys: Iterable[str], run_config: Any = None,
                tags_for_key: Callable[[str], Mapping[str, str]] | None = None,
                on_event: Callable[[str], object] | None = None) -> list[Launched]:
    """Create and launch one run per partition, each to its device's queue, without waiting.
    The broker is checked first (BrokerUnreachable); a launch that fails after that (the broker
    went away meanwhile) is recorded as that partition's error, its run marked failed by Dagster."""
    from assets.partitions import add_partitions_for
    from devicefit.fleet.partitions import split_partition_key
    from pipelines.run_guard import HOST_TAG, PID_TAG, PROCESS_STARTED_TAG

    keys = list(dict.fromkeys(partition_keys))
    launcher = celery_launcher(instance)
    check_broker(launcher.broker)
    add_partitions_for(instance, keys)  # a run's partition must exist before the run
    owner_tags = {PID_TAG, HOST_TAG, PROCESS_STARTED_TAG}
    launched: list[Launched] = []
    for key in keys:
        queue = device_queue(split_partition_key(key)[0])
        extra = {k: v for k, v in (tags_for_key(key) if tags_for_key else {}).items() if k not in owner_tags}
        run = create_partition_run(instance, key, run_config, {**extra, QUEUE_TAG: queue, LAUNCHED_BY_TAG: _launcher_tag()})
        try:
            with warnings.catch_warnings():
                # dagster-celery registers its task again at every launch; Celery warns, once, that the first one is kept
                warnings.filterwarnings("ignore", message=r"Task name '(execute|resume)_job' is already registered")
                instance.launch_run(run.run_id, workspace=None)  # type: ignore[arg-type]  # the Celery launcher needs none
        except Exception as exc:  # Dagster has marked the run failed with the error; the other partitions go on
            launched.append(Launched(key, run.run_id, queue, f"not sent to {queue}: {type(exc).__name__}: {exc}"))
            _tell(on_event, f"{key}: run {run.run_id} could not be sent to queue {queue}: {exc}")
            continue
        launched.append(Launched(key, run.run_id, queue))
        _tell(on_event, f"{key}: run {run.run_id} sent to queue {queue}")
    return launched


def launch_partitions(instance: DagsterInstance, partition_keys: Iterable[str], run_config: Any = None,
                      tags_for_key: Callable[[str], Mapping[str, str]] | None = None, wait_timeout_s: float = 12 * 3600.0,
                      on_event: Callable[[str], object] | None = None, sleep: Callable[[float], object] = time.sleep,
                      poll_s: float = POLL_S, ping_grace_s: float | None = None) -> list[PartitionRun]:
    """Launch every partition to its device's worker, then wait for all of them (bounded by
    `wait_timeout_s`); one PartitionRun per key, in order. `sleep` is how the wait sleeps (a
    caller that must end on a signal passes one that raises)."""
    launched = launch_runs(instance, partition_keys, run_config, tags_for_key, on_event)
    return wait_for_runs(instance, launched, wait_timeout_s, on_event=on_event, sleep=sleep, poll_s=poll_s, ping_grace_s=ping_grace_s)


def fail_run(instance: DagsterInstance, launcher: CeleryRunLauncher | None, run_id: str, reason: str) -> bool:
    """Revoke the run's Celery task (a live worker kills it; a task still queued is dropped),
    then mark the run failed with the reason and free its concurrency slots, unless it ended
    meanwhile. True if it was marked."""
    from pipelines.run_guard import release_slots

    run = instance.get_run_by_id(run_id)
    if run is None or run.is_finished:
        return False
    task_id = run.tags.get(TASK_ID_TAG)
    if launcher is not None and task_id:
        try:
            # SIGKILL: a run busy in native code never sees a SIGTERM; killed, it lands nothing (the
            # landing file is written only at the end) and its measuring subprocesses follow their lifeline.
            launcher.celery.control.revoke(task_id, terminate=True, signal="SIGKILL")
        except Exception:  # the broker is away: the run is failed regardless, and a late worker ignores a finished run
            pass
    run = instance.get_run_by_id(run_id)
    if run is None or run.is_finished:
        return False
    instance.report_run_failed(run, reason)
    release_slots(instance, run_id)
    return True


def wait_for_runs(instance: DagsterInstance, launched: list[Launched], timeout_s: float,
                  on_event: Callable[[str], object] | None = None, sleep: Callable[[float], object] = time.sleep,
                  poll_s: float = POLL_S, ping_grace_s: float | None = None) -> list[PartitionRun]:
    """Block until every launched run ended, sleeping `poll_s` between reads of the run records.
    A run whose worker is gone is marked failed with the reason; runs still unfinished after
    `timeout_s`, or when the wait is interrupted (an exception out of `sleep`: Ctrl-C, SIGTERM),
    are revoked and marked failed, as an in-process run would stop. One PartitionRun per entry
    of `launched`, in order."""
    from dagster import RunsFilter

    launcher = celery_launcher(instance)
    health = WorkerHealth(instance, launcher, ping_grace_s_from_env() if ping_grace_s is None else ping_grace_s)
    by_run = {item.run_id: item for item in launched if item.run_id and item.error is None}
    pending = set(by_run)
    started: set[str] = set()
    told_unserved: set[str] = set()
    deadline = time.monotonic() + timeout_s
    next_unserved_check = time.monotonic() + UNSERVED_NOTICE_AFTER_S
    try:
        while pending:
            records = instance.get_run_records(RunsFilter(run_ids=sorted(pending)))
            for record in records:
                run = record.dagster_run
                if run.is_finished:
                    pending.discard(run.run_id)
                    continue
                node = run.tags.get(WORKER_TAG)
                if node and run.run_id not in started:
                    started.add(run.run_id)
                    _tell(on_event, f"{by_run[run.run_id].key}: run {run.run_id} executing on {node}")
                reason = health.dead_reason(run, record.start_time)
                if reason and fail_run(instance, launcher, run.run_id, reason):
                    _tell(on_event, f"{by_run[run.run_id].key}: run {run.run_id} marked failed: {reason}")
                    pending.discard(run.run_id)
            pending &= {r.dagster_run.run_id for r in records}  # a run deleted meanwhile is not waited for
            if not pending:
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                _give_up(instance, launcher, [by_run[r] for r in sorted(pending)], f"did not finish within {timeout_s:g} s", on_event)
                break
            active = [r.dagster_run for r in records if r.dagster_run.run_id in pending]
            health.ping({n for n in (r.tags.get(WORKER_TAG) for r in active) if n})
            if time.monotonic() >= next_unserved_check:
                next_unserved_check = time.monotonic() + 6 * PING_EVERY_S
                _notice_unserved(launcher, [by_run[r.run_id] for r in active if WORKER_TAG not in r.tags], told_unserved, on_event)
            sleep(min(poll_s, remaining))
    except BaseException as exc:
        _give_up(instance, launcher, [by_run[r] for r in sorted(pending)],
                 f"was given up: the launcher's wait was interrupted ({type(exc).__name__})", on_event)
        raise
    return [_outcome(instance, item) for item in launched]


def _give_up(instance: DagsterInstance, launcher: CeleryRunLauncher, items: list[Launched], why: str,
             on_event: Callable[[str], object] | None) -> None:
    """Revoke and mark failed the runs no longer waited for, saying where each stood."""
    for item in items:
        run = instance.get_run_by_id(item.run_id) if item.run_id else None
        if run is None or run.is_finished:
            continue
        node = run.tags.get(WORKER_TAG)
        where = (f"it was executing on {node}" if node else
                 f"no worker had taken it (is `devicefit worker --device {item.key.split('|')[0]}` running on the device's host?)")
        reason = f"devicefit: the run sent to queue {item.queue} {why}; {where}; revoked and marked failed by {_launcher_tag()}"
        if fail_run(instance, launcher, run.run_id, reason):
            _tell(on_event, f"{item.key}: run {run.run_id} marked failed: {reason}")


def _notice_unserved(launcher: CeleryRunLauncher, waiting: list[Launched], told: set[str], on_event: Callable[[str], object] | None) -> None:
    """Say once per queue that no worker consumes it (the run waits for one)."""
    if not waiting or on_event is None:
        return
    try:
        served = queue_workers(launcher)
    except Exception:
        return
    for item in waiting:
        if item.queue not in served and item.queue not in told:
            told.add(item.queue)
            on_event(f"{item.key}: no worker serves queue {item.queue} yet; the run waits for `devicefit worker --device "
                     f"{item.key.split('|')[0]}` on the device's host")


def _outcome(instance: DagsterInstance, item: Launched) -> PartitionRun:
    from dagster import DagsterEventType, DagsterRunStatus

    if item.run_id is None:
        return PartitionRun(item.key, None, item.queue, False, "NOT_LAUNCHED", reason=item.error)
    run = instance.get_run_by_id(item.run_id)
    if run is None:
        return PartitionRun(item.key, item.run_id, item.queue, False, "MISSING", reason=item.error or "the run record is gone")
    metadata: dict[str, Any] = {}
    for entry in instance.all_logs(item.run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION):
        materialization = entry.asset_materialization
        if materialization is not None:
            metadata = {k: v.value for k, v in materialization.metadata.items() if k in METADATA_KEYS}
    reason = item.error
    if run.status != DagsterRunStatus.SUCCESS:
        failures = [e.dagster_event.message or e.user_message for e in instance.all_logs(item.run_id, of_type=DagsterEventType.PIPELINE_FAILURE)
                    if e.dagster_event is not None]
        reason = reason or (failures[-1] if failures else f"run ended {run.status.value}")
    return PartitionRun(item.key, item.run_id, item.queue, run.status == DagsterRunStatus.SUCCESS, run.status.value, metadata, reason,
                        run.tags.get(WORKER_TAG))


def _tell(on_event: Callable[[str], object] | None, message: str) -> None:
    if on_event is not None:
        on_event(message)
