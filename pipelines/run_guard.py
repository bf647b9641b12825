"""Stale Dagster runs never hold the DuckDB writer.

`devicefit run` executes its Dagster runs in its own process. If that process dies (kill -9,
OOM killer, power loss) the run stays STARTED in the instance and keeps whatever concurrency
slot it claimed; nothing frees it without a daemon, so the next run would wait for the only
`duckdb_writer` slot forever. Here a run records who executes it (pid, host and the process's
start time, as run tags); later runs check that owner is still alive, mark dead owners' runs
failed with the reason (visible in the UI) and free their slots. Waiting for a slot that a live
run holds is bounded and fails with a message naming that run.

Plain functions over a DagsterInstance, called where runs are launched and watched: `devicefit
run` (pipelines/run.py, pipelines/run_watch.py) and the fleet's dispatch and workers
(pipelines/dispatch.py, pipelines/worker.py, pipelines/celery_fleet.py)."""
from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import psutil

from devicefit.errors import DevicefitError

if TYPE_CHECKING:
    from dagster import DagsterInstance, RunRecord

PID_TAG = "devicefit/pid"
HOST_TAG = "devicefit/host"
PROCESS_STARTED_TAG = "devicefit/process_started"  # the owner's start: a reused pid is not the owner
WRITER_POOL = "duckdb_writer"
# Two clocks (the run record's and the kernel's process start) may disagree by this much.
CLOCK_SLACK_S = 1.0
# An untagged run's owner is judged from the wall clock alone: its process counts as a reused pid
# only when it started this long after the run. psutil's start time is the kernel's boot time (whole
# seconds, moved by every clock step: NTP, a resumed VM) plus the process's ticks, so a live owner
# that started seconds before its run can read as younger by a second or a step. Reusing a pid
# within two minutes takes a wrap of the kernel's pid space (pid_max: 32768 by default, 4M where
# systemd raises it), some 270 forks a second at the least; runs devicefit starts carry the
# kernel's start mark instead, which no clock moves (owner_tags).
UNTAGGED_SLACK_S = 120.0


class WriterBusy(DevicefitError, RuntimeError):
    """A live run held the DuckDB writer slot for longer than we were willing to wait."""
    http_status = 503

    exit_code = 1


@dataclass(frozen=True)
class Owner:
    """The process that executes a run: enough to tell whether it still exists."""

    pid: int
    host: str | None
    started: float | str | None  # process_start_mark() ("ticks:N" on Linux) or epoch seconds; None when not recorded

    def describe(self) -> str:
        return f"pid {self.pid}" + (f" on {self.host}" if self.host else "")


def this_host() -> str:
    return socket.gethostname()


def process_start_mark(pid: int) -> str | None:
    """The process's start as the kernel counts it (clock ticks since boot, /proc/<pid>/stat field
    22): unlike a start *time*, it does not move when the wall clock is stepped (NTP, a resumed
    VM), so a live owner is never mistaken for a dead one. None off Linux or for no such pid."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) ": field 3 onwards
    return f"ticks:{fields[19]}"


def owner_tags() -> dict[str, str]:
    """Run tags naming this process as the run's owner (added to every run `devicefit run` executes)."""
    me = psutil.Process()
    mark = process_start_mark(me.pid) or repr(me.create_time())
    return {PID_TAG: str(me.pid), HOST_TAG: this_host(), PROCESS_STARTED_TAG: mark}


def owner_from_tags(tags: dict[str, str]) -> Owner | None:
    try:
        pid = int(tags[PID_TAG])
    except (KeyError, ValueError):
        return None
    mark = tags.get(PROCESS_STARTED_TAG)
    started: float | str | None = mark if mark and mark.startswith("ticks:") else None
    if started is None and mark:
        try:
            started = float(mark)
        except ValueError:
            started = None
    return Owner(pid, tags.get(HOST_TAG), started)


def owner_alive(owner: Owner, run_started_at: float | None = None, host: str | None = None) -> bool | None:
    """True if the owner still runs, False if it is gone, None when this machine cannot tell
    (the run executes on another host). A pid now used by a younger process (one started after
    the recorded start time, or after the run itself started) is gone; so is a zombie."""
    if owner.host is not None and owner.host != (host or this_host()):
        return None
    try:
        process = psutil.Process(owner.pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        created = process.create_time()
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True  # it exists; we may not look at it
    if isinstance(owner.started, str):
        return process_start_mark(owner.pid) == owner.started
    if owner.started is not None:
        return abs(created - owner.started) <= CLOCK_SLACK_S
    if run_started_at is not None and created > run_started_at + UNTAGGED_SLACK_S:
        return False
    return True


def _storage_is_local(instance: DagsterInstance) -> bool:
    """SQLite run storage lives in a file on this machine, so its runs executed here."""
    return "sqlite" in type(instance.run_storage).__module__


def _owner_from_engine_events(instance: DagsterInstance, run_id: str) -> Owner | None:
    """Runs that carry no owner tags (started before the tags existed): Dagster's own
    "Executing steps in process (pid: N)" engine event names the process."""
    from dagster import DagsterEventType

    for entry in instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT):
        data = entry.dagster_event.event_specific_data if entry.dagster_event else None
        pid = getattr(data, "metadata", {}).get("pid") if data is not None else None
        if pid is not None:
            try:
                return Owner(int(pid.value), None, None)
            except (TypeError, ValueError):
                continue
    return None


def run_owner(instance: DagsterInstance, record: RunRecord) -> Owner | None:
    owner = owner_from_tags(dict(record.dagster_run.tags))
    if owner is None and _storage_is_local(instance):
        owner = _owner_from_engine_events(instance, record.dagster_run.run_id)
    return owner


@dataclass(frozen=True)
class StaleRun:
    run_id: str
    job_name: str
    status: str
    reason: str


def active_statuses():
    from dagster import DagsterRunStatus

    return [DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING, DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING]


def release_slots(instance: DagsterInstance, run_id: str) -> None:
    """Free every concurrency slot the run holds or waits for."""
    instance.event_log_storage.free_concurrency_slots_for_run(run_id)


def reap_stale_runs(instance: DagsterInstance) -> list[StaleRun]:
    """Mark failed every unfinished run whose owner process is gone, with the reason, and free
    every concurrency slot held by a run that is finished, gone or unknown. Returns the runs
    it marked. Runs it cannot judge (another host, no owner recorded) are left alone."""
    from dagster import RunsFilter

    stale: list[StaleRun] = []
    for record in instance.get_run_records(RunsFilter(statuses=active_statuses())):
        run = record.dagster_run
        owner = run_owner(instance, record)
        if owner is None or owner_alive(owner, record.start_time) is not False:
            continue
        current = instance.get_run_by_id(run.run_id)  # another process may have reaped it meanwhile
        if current is None or current.status not in active_statuses():
            continue
        reason = (f"devicefit: the process that executed this run ({owner.describe()}) is gone (killed or crashed) "
                  f"while the run was {run.status.value}; marked failed and its concurrency slots freed by "
                  f"pid {os.getpid()} on {this_host()}")
        instance.report_run_failed(current, reason)
        release_slots(instance, run.run_id)
        stale.append(StaleRun(run.run_id, run.job_name, run.status.value, reason))
    storage = instance.event_log_storage
    if storage.supports_global_concurrency_limits:
        # Holders first, their runs second: a run claims only after it exists, so a holder whose
        # run is finished or missing really has ended (it cannot be a run about to start).
        holders: set[str] = set()
        for info in storage.get_concurrency_infos(list(storage.get_concurrency_keys())).values():
            holders |= {s.run_id for s in info.claimed_slots} | {p.run_id for p in info.pending_steps}
        for run_id in holders:
            run = instance.get_run_by_id(run_id)
            if run is None or run.status not in active_statuses():
                release_slots(instance, run_id)  # the run ended (or was deleted) without giving its slot back
    return stale


@dataclass(frozen=True)
class Holder:
    run_id: str
    job_name: str | None
    status: str | None
    owner: Owner | None

    def describe(self) -> str:
        who = self.owner.describe() if self.owner else "owner unknown"
        return f"run {self.run_id} ({self.job_name or 'unknown job'}, {self.status or 'no run record'}, {who})"


def slot_holders(instance: DagsterInstance, pool: str = WRITER_POOL, exclude_run: str | None = None) -> tuple[int | None, list[Holder]]:
    """The pool's capacity (None: no limit) and the other runs that hold one of its slots."""
    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits:
        return None, []
    info = storage.get_concurrency_info(pool)
    capacity = info.slot_count or info.limit  # before its first claim a pool has no slot rows yet
    holders = []
    for run_id in dict.fromkeys(s.run_id for s in info.claimed_slots if s.run_id != exclude_run):
        record = next(iter(instance.get_run_records(_by_id(run_id), limit=1)), None)
        holders.append(Holder(run_id, record.dagster_run.job_name if record else None,
                              record.dagster_run.status.value if record else None,
                              run_owner(instance, record) if record else None))
    return capacity, holders


def _by_id(run_id: str):
    from dagster import RunsFilter

    return RunsFilter(run_ids=[run_id])


def writer_available(instance: DagsterInstance, pool: str = WRITER_POOL, exclude_run: str | None = None) -> tuple[bool, list[Holder]]:
    capacity, holders = slot_holders(instance, pool, exclude_run)
    return capacity is None or len(holders) < capacity, holders


def wait_for_writer(instance: DagsterInstance, timeout_s: float, pool: str = WRITER_POOL, poll_s: float = 1.0,
                    sleep: Callable[[float], object] = time.sleep, on_wait: Callable[[str], object] | None = None) -> None:
    """Return once the pool has a free slot, reaping stale holders while waiting; raise
    WriterBusy naming the holders when none frees within timeout_s. `on_wait` hears once, when
    the wait begins, who holds the writer (so a person knows why nothing moves)."""
    deadline = time.monotonic() + timeout_s
    told = False
    while True:
        reap_stale_runs(instance)
        free, holders = writer_available(instance, pool)
        if free:
            return
        if on_wait is not None and not told:
            names = "; ".join(h.describe() for h in holders) or "a run that took the slot meanwhile"
            on_wait(f"waiting up to {timeout_s:g} s for the DuckDB writer (pool {pool}), held by {names}")
            told = True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise WriterBusy(busy_message(pool, holders, timeout_s))
        sleep(min(poll_s, remaining))


def busy_message(pool: str, holders: list[Holder], waited_s: float) -> str:
    names = "; ".join(h.describe() for h in holders) or "a run that took the slot meanwhile"
    return (f"the DuckDB writer (pool {pool}) is still held after {waited_s:g} s by {names}; "
            f"let it finish or terminate it (or raise DEVICEFIT_WRITER_WAIT_S)")
