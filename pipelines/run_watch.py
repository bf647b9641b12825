"""SIGTERM and SIGINT end `devicefit run` cleanly, and no run waits for a slot forever.

Dagster's in-process execution turns SIGINT/SIGTERM into a flag that only a running step looks
at, so a run waiting for a concurrency slot ignores them (issue 21). Hence three paths:
- outside Dagster's execution our own handler raises RunInterrupted at once;
- inside a step Dagster raises its interrupt there (a DuckDB load that has not committed never
  will: rows whole or absent; landing files are renamed into place whole), the run ends failed,
  and RunWatch.running raises RunInterrupted after it;
- while the run waits for a slot, or when a step has not ended within a grace period, a watchdog
  thread marks the run failed with the reason, frees its slots and exits with 128+signum.
  The in-process executor runs no step while it waits, so nothing is half-written then, and a
  DuckDB transaction that did not commit is discarded with the process anyway.
The watchdog learns of signals through signal.set_wakeup_fd, so it blocks instead of polling
(a spinning parent would slow the measurement worker). Only while a run that needs a pool slot
is in flight does it also look at the pool every few seconds: it reaps holders whose process is
gone (run_guard) and ends a wait longer than the bound with a message naming the holder."""
from __future__ import annotations

import os
import select
import signal
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterator

from devicefit.errors import Interrupted
from models import stop_request
from pipelines import run_guard

if TYPE_CHECKING:
    from dagster import DagsterInstance

SIGNALS = (signal.SIGINT, signal.SIGTERM)
_SYNC = 0  # a byte no signal number uses: "you have read everything before me"


class RunInterrupted(Interrupted, RuntimeError):
    """`devicefit run` was asked to stop; exit_code follows the shell's 128 + signal number."""

    def __init__(self, signum: int, detail: str):
        self.signum = signum
        self.exit_code = 128 + signum
        super().__init__(f"stopped by {signal.Signals(signum).name}: {detail}")


@contextmanager
def stops_cleanly() -> Iterator[None]:
    """SIGINT/SIGTERM are recorded while the block runs (main thread), outside RunWatch's handlers
    (which take over inside it and give these back), and models.stop_request's check raises
    RunInterrupted at the next point that asks (after the hardware detection, before RunWatch):
    `devicefit run` stopped while it detects the hardware or imports Dagster's definitions, before
    any run, ends with one line and 128 + the signal, not Python's defaults (a KeyboardInterrupt
    traceback; death by SIGTERM without a word). Recorded, not raised from the handler: raised
    there, it can land in a garbage collector's callback during those imports, which prints
    "Exception ignored ... Traceback" and drops it."""
    if threading.current_thread() is not threading.main_thread():
        yield  # no handlers off the main thread: RunWatch says why the run cannot go on there
        return
    received: list[int] = []

    def stop(signum: int, frame) -> None:
        if received:  # a second one: whatever hangs (a device's start-up) is not waited for
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
        received.append(signum)

    def check() -> None:
        if received:
            raise RunInterrupted(received[0], "before any of its runs started; nothing was being written")

    old = {s: signal.signal(s, stop) for s in SIGNALS}
    try:
        with stop_request.checked_by(check):
            yield
        if received:  # after RunWatch gave these handlers back: its runs ended, their results are written
            raise RunInterrupted(received[0], "after its runs ended (their results are written); the summary was not printed")
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


@dataclass
class _Flight:
    run_id: str
    job_name: str
    uses_pools: bool
    blocked_since: float | None = None


def end_run(instance: DagsterInstance, run_id: str, reason: str) -> None:
    """Mark the run failed with the reason (or, if it already ended, log the reason on it) and
    free every slot it holds or waits for."""
    run = instance.get_run_by_id(run_id)
    if run is not None and run.status in run_guard.active_statuses():
        instance.report_run_failed(run, reason)
    elif run is not None:
        instance.report_engine_event(reason, dagster_run=run)
    run_guard.release_slots(instance, run_id)


def waiting_for_slot(instance: DagsterInstance, run_id: str) -> bool:
    """The run has a step queued for a pool slot that it has not claimed: it executes nothing."""
    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits:
        return False
    for info in storage.get_concurrency_infos(list(storage.get_concurrency_keys())).values():
        claimed = {(s.run_id, s.step_key) for s in info.claimed_slots}
        if any(p.run_id == run_id and (p.run_id, p.step_key) not in claimed for p in info.pending_steps):
            return True
    return False


class RunWatch:
    """Context for the whole of `devicefit run` (main thread only)."""

    def __init__(self, instance: DagsterInstance, writer_wait_s: float, grace_s: float = 20.0, poll_s: float = 2.0,
                 exit: Callable[[int], None] = os._exit):
        self.instance = instance
        self.writer_wait_s = writer_wait_s
        self.grace_s = grace_s
        self.poll_s = poll_s
        self._exit = exit
        self.signum: int | None = None
        self._signal_at = 0.0
        self._flight: _Flight | None = None
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._stop = False
        self._last_problem = ""

    # -- set-up -------------------------------------------------------------------------------
    def __enter__(self) -> RunWatch:
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("devicefit run must run in the main thread (it handles SIGINT and SIGTERM)")
        self._stderr = os.dup(2)  # Dagster redirects fd 2 into its log capture while a run executes
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self._old_wakeup = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        self._old_handlers = {s: signal.signal(s, self._on_signal) for s in SIGNALS}
        self._thread = threading.Thread(target=self._watch, name="devicefit-run-watch", daemon=True)
        self._thread.start()
        self._checked = stop_request.checked_by(self._raise_if_signalled)
        self._checked.__enter__()  # loops that could swallow our RunInterrupted ask between tasks
        self._old_unraisable = sys.unraisablehook
        sys.unraisablehook = self._unraisable
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._checked.__exit__(None, None, None)
        for s, handler in self._old_handlers.items():  # first: a signal during the join cannot skip the rest
            signal.signal(s, handler)
        sys.unraisablehook = self._old_unraisable
        self._stop = True
        self._poke()
        self._thread.join(timeout=10)
        signal.set_wakeup_fd(self._old_wakeup)
        for fd in (self._read, self._write, self._stderr):
            os.close(fd)
        if exc_type is None and self.signum is not None:  # raised where nothing could take it (see _unraisable)
            raise RunInterrupted(self.signum, "after its runs ended (their results are written); the summary was not printed")

    def _on_signal(self, signum: int, frame) -> None:
        self.signum, self._signal_at = signum, time.monotonic()
        raise RunInterrupted(signum, "before its runs finished; nothing was being written")

    def _unraisable(self, info) -> None:
        """sys.unraisablehook while we watch: our handler's RunInterrupted raised inside a garbage
        collector's callback or a __del__ cannot propagate, and Python printed it as "Exception
        ignored in ... Traceback" on the user's terminal. The signal is recorded (self.signum)
        and the next check, the end of the current run or __exit__ raises it again; anything
        else goes to the hook that was there before."""
        if isinstance(info.exc_value, RunInterrupted):
            return
        self._old_unraisable(info)

    def _raise_if_signalled(self) -> None:
        """models.stop_request's check: the signal's RunInterrupted again, where whatever was
        running when it arrived swallowed it."""
        if self.signum is not None:
            raise RunInterrupted(self.signum, "before its runs finished; nothing was being written")

    def _poke(self) -> None:
        try:
            os.write(self._write, bytes([_SYNC]))
        except BlockingIOError:
            pass  # the pipe is full of wake-ups already

    # -- around each Dagster run --------------------------------------------------------------
    def check(self) -> None:
        if self.signum is not None:
            raise RunInterrupted(self.signum, "before its remaining runs started")
        stop_request.raise_if_requested()  # a signal that came just before our handlers were in place

    @contextmanager
    def running(self, run_id: str, job_name: str, uses_pools: bool) -> Iterator[None]:
        """Execute one Dagster run under watch; raise RunInterrupted after it if a signal came."""
        self.check()
        with self._lock:
            self._flight = _Flight(run_id, job_name, uses_pools)
        self._poke()
        interrupted = None
        try:
            yield
        except (KeyboardInterrupt, RunInterrupted) as exc:
            interrupted = exc
        except BaseException as exc:  # Dagster's DagsterExecutionInterruptedError is a BaseException
            if type(exc).__name__ != "DagsterExecutionInterruptedError":
                raise
            interrupted = exc
        finally:
            with self._lock:
                self._flight = None
        self._sync()
        if interrupted is not None and self.signum is None:
            self.signum = signal.SIGINT
        if self.signum is not None:
            name = signal.Signals(self.signum).name
            end_run(self.instance, run_id, f"devicefit: run stopped by {name} (pid {os.getpid()}); "
                                           "rows it was loading were not committed, its slots are freed")
            raise RunInterrupted(self.signum, f"{job_name} run {run_id} marked failed; rows are whole or absent")

    def _sync(self) -> None:
        """Wait until the watchdog has read every signal that arrived so far."""
        self._synced.clear()
        self._poke()
        self._synced.wait(timeout=5)

    # -- the watchdog thread ------------------------------------------------------------------
    def _watch(self) -> None:
        while not self._stop:
            with self._lock:
                flight = self._flight
            timeout = None
            if flight is not None and (flight.uses_pools or self.signum is not None):
                timeout = self.poll_s
            ready, _, _ = select.select([self._read], [], [], timeout)
            if ready:
                self._drain()
            if self._stop:
                return
            with self._lock:
                flight = self._flight
            if flight is not None:
                try:
                    self._inspect(flight)
                except Exception as exc:  # the watchdog must not die silently: say so (once), keep watching
                    problem = f"devicefit run: watchdog could not inspect run {flight.run_id}: {exc}"
                    if problem != self._last_problem:
                        self._last_problem = problem
                        self._say(problem)

    def _drain(self) -> None:
        try:
            data = os.read(self._read, 4096)
        except BlockingIOError:
            return
        for byte in data:
            if byte == _SYNC:
                self._synced.set()
            elif byte in SIGNALS and self.signum is None:
                self.signum, self._signal_at = byte, time.monotonic()

    def _inspect(self, flight: _Flight) -> None:
        if self.signum is not None:
            name = signal.Signals(self.signum).name
            if waiting_for_slot(self.instance, flight.run_id):
                self._abort(flight, f"stopped by {name} while run {flight.run_id} ({flight.job_name}) waited for a "
                                    "concurrency slot; nothing was being written", 128 + self.signum)
            elif time.monotonic() - self._signal_at > self.grace_s:
                self._abort(flight, f"stopped by {name}: run {flight.run_id} ({flight.job_name}) did not end within "
                                    f"{self.grace_s:g} s; uncommitted rows are discarded", 128 + self.signum)
            return
        if not flight.uses_pools:
            return
        if not waiting_for_slot(self.instance, flight.run_id):
            flight.blocked_since = None
            return
        run_guard.reap_stale_runs(self.instance)  # a dead holder's slot goes to the queue: to us
        now = time.monotonic()
        flight.blocked_since = flight.blocked_since or now
        if now - flight.blocked_since > self.writer_wait_s:
            _, holders = run_guard.slot_holders(self.instance, exclude_run=flight.run_id)
            self._abort(flight, run_guard.busy_message(run_guard.WRITER_POOL, holders, self.writer_wait_s),
                        run_guard.WriterBusy.exit_code)

    def _abort(self, flight: _Flight, message: str, code: int) -> None:
        try:
            end_run(self.instance, flight.run_id, f"devicefit: {message} (pid {os.getpid()})")
        finally:
            self._say(f"error: {message}")
            self._exit(code)

    def _say(self, line: str) -> None:
        os.write(self._stderr, (" ".join(line.split()) + "\n").encode(errors="replace"))
