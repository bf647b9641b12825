"""`devicefit run`: materialize the pipeline through Dagster on this machine, one run per
(device, model) partition, then the results; every run is recorded in DAGSTER_HOME, so the
UI (`make ui`) shows them. The only place outside pipelines/ and assets/ that imports Dagster.

Every run carries its owner (pid, host, process start) as tags; before measuring and before
loading, runs whose owner died are marked failed and their slots freed (run_guard), so a
killed `devicefit run` never blocks the next one; the wait for the DuckDB writer is bounded
(DEVICEFIT_WRITER_WAIT_S, default 600 s) and SIGINT/SIGTERM end the run cleanly (run_watch)."""
from __future__ import annotations

import logging
import os
import uuid
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from devicefit.profiles import Selection
from models import stop_request
from pipelines.run_guard import WriterBusy  # noqa: F401  (callers catch it from here)
from pipelines.run_watch import RunInterrupted

if TYPE_CHECKING:
    from models.parallel_warm import Ahead, WarmReport

DEFAULT_WRITER_WAIT_S = 600.0


log = logging.getLogger("devicefit.run")


@dataclass
class PipelineRun:
    partitions: list[tuple[str, bool, dict]] = field(default_factory=list)  # (key, success, metadata)
    results_success: bool | None = None
    failed_checks: list[str] = field(default_factory=list)
    reaped: list[str] = field(default_factory=list)  # "run_id (job): reason" of stale runs marked failed
    dispatch_failures: list[str] = field(default_factory=list)  # "partition: reason" of dispatched runs that failed
    warm: WarmReport | None = None  # what was computed before measuring, and where
    map_ahead: str | None = None  # what became of the helper tracing the selection map's models during the results
    phases: list[tuple[str, float]] = field(default_factory=list)  # (phase, wall seconds) in the order they ran
    slowest_results_steps: list[tuple[str, float]] = field(default_factory=list)  # (asset step, seconds), slowest first

    def time_line(self) -> str:
        """Where this run's wall time went, for the summary: a user who finds `make run` slow
        sees which phase to look at (and `make ui` has every step's timing)."""
        if not self.phases:
            return ""
        parts = [f"{name} {seconds:.1f} s" for name, seconds in self.phases]
        line = f"time: {sum(s for _, s in self.phases):.1f} s in the pipeline: " + ", ".join(parts)
        if self.slowest_results_steps:
            line += "; slowest results steps: " + ", ".join(f"{k} {s:.1f} s" for k, s in self.slowest_results_steps)
        return line


def _instance():
    from dagster import DagsterInstance

    home = os.environ.get("DAGSTER_HOME")
    if not home:
        raise RuntimeError("DAGSTER_HOME is not set: export DAGSTER_HOME=$PWD/dagster_home (the Makefile does)")
    if not Path(home).is_absolute() or not Path(home).is_dir():
        raise RuntimeError(f"DAGSTER_HOME must be an absolute path to an existing directory, got {home!r}")
    return DagsterInstance.get()


def writer_wait_s() -> float:
    from benchmark_runners.device_lock import wait_bound_env

    try:
        return wait_bound_env("DEVICEFIT_WRITER_WAIT_S", DEFAULT_WRITER_WAIT_S)
    except ValueError as exc:
        raise RuntimeError(str(exc)) from None


def run_pipeline(selection: Selection, partition_keys: list[str], on_partition: Callable[[str, int, int], None] | None = None,
                 on_wait: Callable[[str], None] | None = None) -> PipelineRun:
    import dagster as dg

    from assets.measurements import SweepConfig
    from assets.partitions import add_partitions_for
    from benchmark_runners.hardware import detect_hardware
    from devicefit.fleet.inventory import registered_devices
    from devicefit.fleet.partitions import device_tag, dispatched_device_tags, host_of_inventory, is_software_device, resolve_local, split_partition_key
    from devicefit.paths import DataPaths
    from pipelines import dispatch, run_guard
    from pipelines.definitions import defs
    from pipelines.run_watch import RunWatch
    from pipelines.schedules import DEVICE_TAG

    wait_s = writer_wait_s()
    instance = _instance()
    clock = _PhaseClock()
    inventory = detect_hardware(probe=False)
    hardware = inventory.to_json()
    host = host_of_inventory(hardware)
    broker = dispatch.broker_url()
    if broker:  # each partition goes to its device's worker (pipelines/dispatch.py); clear errors before anything runs
        dispatch.celery_launcher(instance)
        dispatch.check_broker(broker)
        tags = dispatched_device_tags(partition_keys, hardware, registered_devices(DataPaths.default().database),
                                      set(instance.get_dynamic_partitions("devices")))
    else:  # the embedded default: every partition measured here, in-process; another host's device is refused
        targets = {key: resolve_local(split_partition_key(key)[0], hardware) for key in partition_keys}
        tags = {key: device_tag(t.kind, host, is_software_device(t.kind, hardware)) for key, t in targets.items()}
    outcome = PipelineRun()
    owner = run_guard.owner_tags()
    quiet = {"console": {"config": {"log_level": "WARNING"}}}  # the summary says what matters

    stop_request.raise_if_requested()  # a stop before our handlers that something swallowed
    with RunWatch(instance, writer_wait_s=wait_s) as watch, ExitStack() as measuring:
        if partition_keys and not broker:  # workers take their own devices' locks
            from benchmark_runners.device_lock import hold_devices
            from benchmark_runners.device_lock import physical_device as locked_device
            from benchmark_runners.sweep import start_fork_server

            # Outside Dagster's run queue, so its tag limit does not apply here: hold each device
            # measured for the whole measuring phase instead (each partition's sweep takes the
            # same locks again). Taken before the fork server starts: its imports would disturb
            # another process's measurement.
            measuring.enter_context(hold_devices({locked_device(t.device) for t in targets.values()}, on_wait=on_wait))
            start_fork_server()  # its imports overlap the inventory run's
            # The catalog's facts and every config's memory floor, on both cores before anything
            # is measured (devicefit/run_warm.py); the catalog asset and the guard read them back.
            from devicefit.run_warm import warm_for_run

            try:
                outcome.warm = warm_for_run(selection, partition_keys, inventory)
            except RunInterrupted:  # SIGINT/SIGTERM while warming: stop now, not after the rest of the warm-up
                raise
            except Exception as exc:  # noqa: BLE001 - a head start only: the catalog, the guard and the workers compute it anyway
                stop_request.raise_if_requested()  # a stop wrapped in another error (a lazy import's) is a stop
                log.warning("nothing computed ahead of measuring (%s: %s)", type(exc).__name__, exc)
        outcome.reaped += [f"{s.run_id} ({s.job_name}): {s.reason}" for s in run_guard.reap_stale_runs(instance)]
        add_partitions_for(instance, partition_keys)  # dynamic partitions: a new device or model is a new key
        outcome.phases.append(("before measuring", clock.lap()))

        def execute(job_name: str, uses_pools: bool = False, **kwargs):
            run_id = str(uuid.uuid4())  # chosen here so the watchdog knows the run before Dagster starts it
            with watch.running(run_id, job_name, uses_pools):
                return defs.resolve_job_def(job_name).execute_in_process(
                    instance=instance, run_id=run_id, raise_on_error=False,
                    **{**kwargs, "tags": {**owner, **kwargs.get("tags", {})}})

        execute("inventory_job", run_config=dg.RunConfig(loggers=quiet))
        outcome.phases.append(("inventory", clock.lap()))
        config = dg.RunConfig(loggers=quiet, ops={"measurements": SweepConfig(
            profile=selection.profile, batch_sizes=list(selection.batch_sizes), precisions=list(selection.precisions),
            training_mode=selection.training_mode, generation_mode=selection.generation_mode)})
        if broker:
            for i, key in enumerate(partition_keys):
                if on_partition:
                    on_partition(key, i, len(partition_keys))
            # Launched to every device's queue at once, then waited on (a signal fails the runs still out).
            runs = dispatch.launch_partitions(instance, partition_keys, config, tags_for_key=lambda key: {DEVICE_TAG: tags[key]},
                                              on_event=on_wait, sleep=_interruptible_sleep(watch))
            outcome.partitions += [r.as_tuple() for r in runs]
            outcome.dispatch_failures += [f"{r.key}: {r.reason}" for r in runs if not r.success and r.reason]
        for i, key in enumerate(partition_keys if not broker else []):
            if on_partition:
                on_partition(key, i, len(partition_keys))
            result = execute("measurements_job", run_config=config, partition_key=key, tags={DEVICE_TAG: tags[key]})
            metadata = {}
            for event in result.get_asset_materialization_events():
                metadata = {k: v.value for k, v in event.materialization.metadata.items() if k in dispatch.METADATA_KEYS}
            outcome.partitions.append((key, result.success, metadata))
        measuring.close()  # the devices are free for others while the results are built
        outcome.phases.append((f"measuring {len(partition_keys)} partition{'s' if len(partition_keys) != 1 else ''}", clock.lap()))
        # Measuring took minutes: a run may have died meanwhile. Wait (bounded) for the writer here,
        # where a signal ends the wait at once; the watchdog covers the rare slot taken in between.
        run_guard.wait_for_writer(instance, wait_s, sleep=_interruptible_sleep(watch), on_wait=on_wait)
        waited = clock.lap()
        if waited >= 0.1:
            outcome.phases.append(("waiting for the store's writer", waited))
        with ExitStack() as ahead:  # the selection map's traces, on the core the steps before the map leave idle
            helper = _map_traces_ahead(hardware, ahead)
            results = execute("results_job", uses_pools=True, run_config=dg.RunConfig(loggers=quiet))
        outcome.map_ahead = helper.describe() if helper is not None else None
        outcome.phases.append(("results", clock.lap()))
    outcome.results_success = results.success
    outcome.slowest_results_steps = _slowest_steps(instance, results.run_id)
    for event in results.all_events:
        if event.event_type_value == "ASSET_CHECK_EVALUATION":
            evaluation = event.event_specific_data
            if not evaluation.passed:
                outcome.failed_checks.append(f"{evaluation.check_name} ({evaluation.severity.value}): {evaluation.description}")
    return outcome


class _PhaseClock:
    """Wall seconds since the last lap (perf_counter: the phases are seconds to minutes long)."""

    def __init__(self) -> None:
        import time

        self._now = time.perf_counter
        self._last = self._now()

    def lap(self) -> float:
        now = self._now()
        elapsed, self._last = now - self._last, now
        return elapsed


def _slowest_steps(instance, run_id: str, count: int = 4) -> list[tuple[str, float]]:
    """The results run's slowest asset steps, from Dagster's own step records (what `make ui`
    shows): a timing the summary reports must not be lost to a storage that cannot answer."""
    try:
        stats = instance.get_run_step_stats(run_id)
    except Exception as exc:  # noqa: BLE001 - the summary line only; the run itself is recorded
        log.warning("no step timings for run %s (%s: %s)", run_id, type(exc).__name__, exc)
        return []
    timed = [(s.step_key, s.end_time - s.start_time) for s in stats if s.start_time is not None and s.end_time is not None]
    return sorted(timed, key=lambda item: item[1], reverse=True)[:count]


def _map_traces_ahead(hardware: dict, stack: ExitStack) -> Ahead | None:
    """devicefit.select.selection_map.traces_ahead entered on `stack`, or None where it cannot
    start (a head start only: the map traces what it needs itself)."""
    from devicefit.select.selection_map import traces_ahead

    try:
        return stack.enter_context(traces_ahead(hardware))
    except RunInterrupted:
        raise
    except Exception as exc:  # noqa: BLE001 - the map step does the same work without it
        stop_request.raise_if_requested()
        log.warning("the selection map's traces were not started ahead (%s: %s)", type(exc).__name__, exc)
        return None


def _interruptible_sleep(watch) -> Callable[[float], None]:
    import time

    def sleep(seconds: float) -> None:
        watch.check()
        time.sleep(seconds)  # our SIGINT/SIGTERM handler raises RunInterrupted out of this
        watch.check()

    return sleep
