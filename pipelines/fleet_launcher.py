"""The fleet's run launcher: dagster-celery's CeleryRunLauncher, plus a worker health check that
sees a worker killed mid-run.

dagster-celery's own check reads the Celery task's state, which stays STARTED forever when the
worker was killed (SIGKILL, a crash, a host gone), so the run-monitoring daemon kept such runs
STARTED. Runs launched by `devicefit run` were already failed by its wait (pipelines/dispatch.py);
runs the daemon launches (the nightly schedule, the UI) are checked here, by the same signals:
the run process that executed the run is gone (same host), its Celery task failed, or its worker
node has not answered pings for DEVICEFIT_WORKER_PING_GRACE_S. The daemon then fails the run with
the reason (and retries it where dagster.yaml's run_retries allow).

It also routes a run launched without a queue (by the UI, or the daemon: the schedule tags its
runs, the automation sensor's derived runs carry no queue): a measurements run to its
partition's device queue, any other run (loading landing files, aggregates, predictors, reports:
DuckDB writes) to the writer's queue, which `devicefit worker --writer` consumes on the host that
holds the store. Without it they would wait in Celery's default queue, which nobody serves.
Configured in
dagster_home/multihost/dagster.yaml as `run_launcher: {module: pipelines.fleet_launcher, class:
FleetRunLauncher}`."""
from __future__ import annotations

from dagster import DagsterRun
from dagster._core.launcher import CheckRunHealthResult, LaunchRunContext, WorkerStatus
from dagster_celery.launcher import CeleryRunLauncher

from pipelines.celery_fleet import QUEUE_TAG, WORKER_TAG, WRITER_QUEUE, WorkerHealth, device_queue, ping_grace_s_from_env
from pipelines.dispatch import MEASUREMENTS_JOB

PARTITION_TAG = "dagster/partition"


def run_queue(run: DagsterRun) -> str | None:
    """The queue of a run that names none (launched from the UI, by the automation sensor, or by
    a caller that did not tag it): a measurements run's partition's device queue, any other run
    the writer's. None when the run names its queue (kept), or is a measurements run without a
    readable partition key (Dagster fails it: it has no device to run on)."""
    from devicefit.fleet.partitions import BadPartitionKey, split_partition_key

    if QUEUE_TAG in run.tags:
        return None
    if run.job_name != MEASUREMENTS_JOB:
        return WRITER_QUEUE
    try:
        return device_queue(split_partition_key(run.tags.get(PARTITION_TAG, ""))[0])
    except (BadPartitionKey, ValueError):
        return None


class FleetRunLauncher(CeleryRunLauncher):
    """CeleryRunLauncher whose health check also tells a dead worker (see the module docstring)."""

    _health: WorkerHealth | None = None
    _nodes: set[str] | None = None  # the worker nodes of the runs checked: pinged together

    def _worker_health(self) -> WorkerHealth:
        if self._health is None:  # one per launcher: it remembers since when each node is silent
            self._health = WorkerHealth(self._instance, self, ping_grace_s_from_env())
        return self._health

    def launch_run(self, context: LaunchRunContext) -> None:
        """As dagster-celery launches, after routing a run that names no queue (`run_queue`)."""
        queue = run_queue(context.dagster_run)
        if queue is not None:
            self._instance.add_run_tags(context.dagster_run.run_id, {QUEUE_TAG: queue})
            context = LaunchRunContext(dagster_run=self._instance.get_run_by_id(context.dagster_run.run_id), workspace=context.workspace)
        super().launch_run(context)

    def check_run_worker_health(self, run: DagsterRun) -> CheckRunHealthResult:
        health = self._worker_health()
        node = run.tags.get(WORKER_TAG)
        if node:
            self._nodes = (self._nodes or set()) | {node}
            health.ping(self._nodes)  # at most every few seconds, every node at once
        reason = health.dead_reason(run, None)
        if reason is not None:
            return CheckRunHealthResult(WorkerStatus.FAILED, reason)
        return super().check_run_worker_health(run)
