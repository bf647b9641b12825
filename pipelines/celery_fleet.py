"""The fleet's Celery side, shared by the launching side (pipelines/dispatch.py), the fleet run
launcher (pipelines/fleet_launcher.py) and the worker (pipelines/worker.py): the broker (its
URL, a reachability check that names it), the device queues, the instance's Celery run
launcher, and whether the worker executing a run is still there (WorkerHealth). Celery and
Dagster are imported where used."""
from __future__ import annotations

import os
import re
import time
from typing import TYPE_CHECKING, Callable

from devicefit.errors import DevicefitError

if TYPE_CHECKING:
    from dagster import DagsterInstance, DagsterRun
    from dagster_celery.launcher import CeleryRunLauncher

BROKER_ENV = "DEVICEFIT_BROKER_URL"
QUEUE_TAG = "dagster-celery/queue"  # dagster_celery.tags.DAGSTER_CELERY_QUEUE_TAG: the queue the launcher sends a run to
TASK_ID_TAG = "dagster-celery/task_id"  # dagster_celery.tags.DAGSTER_CELERY_TASK_ID_TAG: set by the launcher
WORKER_TAG = "devicefit/celery_worker"  # the Celery node executing the run: set by the worker as it starts it
QUEUE_PREFIX = "devicefit."
WRITER_QUEUE = "devicefit.writer"  # every run but a measurement: it writes DuckDB, on the host that holds it (`devicefit worker --writer`)
BROKER_TIMEOUT_S = 3.0
PING_EVERY_S = 5.0
DEFAULT_PING_GRACE_S = 20.0  # a live worker's main process answers within a second, even under load


class BrokerUnreachable(DevicefitError, RuntimeError):
    """The Celery broker cannot be reached (the message names it, without its password)."""

    exit_code = 1
    http_status = 503


class DispatchUnavailable(DevicefitError, RuntimeError):
    """The instance cannot dispatch runs to workers: no Celery run launcher, or no broker."""


def broker_url() -> str | None:
    """DEVICEFIT_BROKER_URL, or None: no broker, runs execute in-process on this host."""
    return os.environ.get(BROKER_ENV, "").strip() or None


# Everything between the scheme and the host's '@' (the last one): a user and password.
_USERINFO = re.compile(r"(://).*@")


def redact_url(url: str) -> str:
    """The URL as it may be shown: its password masked. A URL no parser reads (a port that is
    not a number, an unclosed IPv6 bracket) is shown with its whole user part masked."""
    from kombu.utils.url import maybe_sanitize_url

    try:
        return maybe_sanitize_url(url, mask="***")
    except ValueError:
        return _USERINFO.sub(r"\1***@", url)


def check_broker(url: str, timeout_s: float = BROKER_TIMEOUT_S) -> None:
    """Connect to the broker once, within `timeout_s`; BrokerUnreachable names the URL and why."""
    from kombu import Connection

    shown = redact_url(url)
    try:
        with Connection(url, connect_timeout=timeout_s,
                        transport_options={"socket_connect_timeout": timeout_s, "socket_timeout": timeout_s}) as conn:
            conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0, interval_max=0, timeout=timeout_s)
            if conn.transport.driver_type == "redis":
                conn.default_channel.client.ping()  # a connection is not yet an answer: a password is checked here
    except Exception as exc:  # kombu and its transports raise many types; every one means "not usable"
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise BrokerUnreachable(f"the Celery broker {shown} ({BROKER_ENV}) is unreachable: {reason}. Start it (`make fleet-deps` "
                                f"installs redis-server) or fix {BROKER_ENV}; unset it to measure in-process on this host") from None


_QUEUE_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]")


def device_queue(device_id: str) -> str:
    """The Celery queue of a device: "devicefit.<device id>". Celery and Redis take '.', '+' and
    '-' in queue names; anything else (a comma would split `celery worker -Q`) becomes '_'. No
    device id is "writer" (ids are "<kind>-<fingerprint>[+profile]"), so no device queue is the
    writer's."""
    device_id = str(device_id).strip()
    if not device_id:
        raise ValueError("a device queue needs a device id")
    queue = QUEUE_PREFIX + _QUEUE_UNSAFE.sub("_", device_id)
    if queue == WRITER_QUEUE:
        raise ValueError(f"{device_id!r} is not a device id: {WRITER_QUEUE} is the writer's queue")
    return queue


def celery_launcher(instance: DagsterInstance) -> CeleryRunLauncher:
    """The instance's Celery run launcher; DispatchUnavailable says what to configure otherwise."""
    try:
        from dagster_celery.launcher import CeleryRunLauncher
    except ImportError:
        raise DispatchUnavailable("dagster-celery is not installed (pip install -e . installs it)") from None
    launcher = instance.run_launcher
    if not isinstance(launcher, CeleryRunLauncher):
        raise DispatchUnavailable(
            f"{BROKER_ENV} is set but the Dagster instance (DAGSTER_HOME={os.environ.get('DAGSTER_HOME')}) launches runs with "
            f"{type(launcher).__name__}: its dagster.yaml needs the Celery `run_launcher:` block (dagster_home/multihost/dagster.yaml "
            f"has it); unset {BROKER_ENV} to measure in-process on this host")
    if not launcher.broker:
        raise DispatchUnavailable(f"the Celery run launcher of DAGSTER_HOME={os.environ.get('DAGSTER_HOME')} names no broker: "
                                  f"set `broker: {{env: {BROKER_ENV}}}` in its dagster.yaml")
    return launcher


def ping_grace_s_from_env() -> float:
    from benchmark_runners.device_lock import wait_bound_env

    return wait_bound_env("DEVICEFIT_WORKER_PING_GRACE_S", DEFAULT_PING_GRACE_S)


def queue_workers(launcher: CeleryRunLauncher, timeout_s: float = 1.0) -> dict[str, list[str]]:
    """Queue name -> the Celery nodes consuming it now (those that answer within timeout_s)."""
    replies = launcher.celery.control.inspect(timeout=timeout_s).active_queues() or {}
    served: dict[str, list[str]] = {}
    for node, queues in replies.items():
        for q in queues or []:
            served.setdefault(q.get("name", ""), []).append(node)
    return served


class WorkerHealth:
    """Whether the workers executing runs are still there (see the module's docstring)."""

    def __init__(self, instance: DagsterInstance, launcher: CeleryRunLauncher, ping_grace_s: float,
                 clock: Callable[[], float] = time.monotonic):
        self.instance = instance
        self.launcher = launcher
        self.grace_s = ping_grace_s
        self.clock = clock
        self.unanswered_since: dict[str, float] = {}  # node -> when it first failed to answer a ping
        self.last_ping = -1e18
        self.task_states_readable = not str(launcher.backend or "rpc://").startswith("rpc://")

    def ping(self, nodes: set[str]) -> None:
        """Ping these nodes, at most every PING_EVERY_S; remember since when each is silent."""
        now = self.clock()
        if not nodes or now - self.last_ping < PING_EVERY_S:
            return
        self.last_ping = now
        try:
            replies = self.launcher.celery.control.ping(destination=sorted(nodes), timeout=1.0) or []
        except Exception:  # the broker itself is away: nobody can be judged by pings now
            return
        answered = {node for reply in replies for node in reply}
        for node in nodes:
            if node in answered:
                self.unanswered_since.pop(node, None)
            else:
                self.unanswered_since.setdefault(node, now)

    def dead_reason(self, run: DagsterRun, run_started_at: float | None) -> str | None:
        """Why the run's worker is gone, or None while it may be alive."""
        from pipelines import run_guard

        tags = dict(run.tags)
        node = tags.get(WORKER_TAG)
        if node is None:
            return None  # no worker took it yet (queued)
        queue = tags.get(QUEUE_TAG, "?")
        where = f"the Celery worker {node} (queue {queue})"
        owner = run_guard.owner_from_tags(tags)
        if owner is not None and run_guard.owner_alive(owner, run_started_at) is False:
            return (f"devicefit: {where} that executed this run is gone: its run process ({owner.describe()}) was killed or "
                    f"crashed while the run was {run.status.value}")
        if self.task_states_readable and tags.get(TASK_ID_TAG):
            try:
                result = self.launcher.celery.AsyncResult(tags[TASK_ID_TAG])
                state, info = result.state, result.info
            except Exception:
                state, info = None, None
            if state == "FAILURE":
                return f"devicefit: {where} lost this run: its Celery task failed ({type(info).__name__}: {info})"
        silent = self.unanswered_since.get(node)
        if silent is not None and self.clock() - silent >= self.grace_s:
            return (f"devicefit: {where} that executed this run has not answered pings for {self.clock() - silent:.0f} s "
                    f"(killed, crashed or cut off) while the run was {run.status.value}")
        return None
