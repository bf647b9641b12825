"""Fill the derived cache (models.derived_cache) on two cores instead of one.

Tracing models on the meta device is single-threaded Python: `make run` spent about 22 s
counting the catalog and another 20 s tracing memory floors at the start of its measurement
partitions, one core busy and the other idle, while nothing was being measured. Every such
computation stores its result on disk, keyed by what it depends on, so a second process can do
part of them and the caller reads them back in a fraction of a second.

`warm(tasks, compute)` runs `compute(task)` for every task, in this process and in
one helper: a fresh interpreter (`python -m models.parallel_warm`), never a fork of a process
that holds threads and an OpenMP pool, and never a re-import of the caller's `__main__` (as
multiprocessing's spawn does, which re-runs a script without a main guard). This process takes
tasks from the front of the list and the helper from the back, claiming each under a lock on a
small state file, so the helper's start-up (its imports, seconds) costs nothing when the work is
short: the caller simply does more of it, and stops a helper that has claimed nothing. The helper
reports each task it finished on its stdout; tasks it claimed and did not report (it died, or
was stopped after HELPER_WAIT_S) are done here after it, so a task runs once, or twice where
the helper was stopped between finishing it and saying so; one that failed in the helper is not
retried. The helper never outlives the call: its whole session is killed when the call
returns or raises (a signal that stops `devicefit run`). `compute` must be a module-level
function and the tasks picklable; its return value is dropped (the cache is the result). A task whose `compute` raises is logged and
counted: the caller's own later call meets the same error with its own handling. A stop
(models.errors.Interrupted, or models.stop_request's check between tasks) is raised, not counted.

`ahead(tasks, compute)` is the helper alone, computing while this process does other work
that leaves a core idle (`devicefit run`'s results before the selection map), until `stop()`.

Never used while something is being measured: the helper would take a core from it.
"""
from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from models import stop_request
from models.errors import Interrupted
from models.lifeline import LIFELINE_ENV, follow_parent, open_lifeline

log = logging.getLogger("devicefit.parallel_warm")
HELPER_WAIT_S = 600.0  # a helper still busy this long after the caller finished is stopped
# Each process computes with one thread: two processes of two OpenMP threads each on two cores
# spin against each other (OpenVINO's conversions with torch's reference forward took 95 s
# that way, against 69 s in one process).
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
ORPHANED_EXIT = 75  # the helper's exit status when its caller died before it finished
CALLER_DIR_ENV = "DEVICEFIT_WARM_DIR"  # the caller's temporary directory, which an orphaned helper removes


@dataclass
class WarmReport:
    tasks: int = 0
    by_caller: int = 0
    by_helper: int = 0
    failed: list[str] = field(default_factory=list)  # "task: error"
    helper: str = "not needed"  # what became of the helper: "finished", "not started (why)", ...
    seconds: float = 0.0


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _claim(state: Path, from_back: bool) -> int | None:
    """The next unclaimed index from the front or the back (exclusive) of the state file's
    "front back" pair; None once they meet."""
    with open(state, "r+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        front, back = map(int, f.read().split())
        if front >= back:
            return None
        index = back - 1 if from_back else front
        front, back = (front, back - 1) if from_back else (front + 1, back)
        f.seek(0)
        f.write(f"{front} {back}".ljust(40))
        f.flush()
        return index


def _run_one(compute: Callable[[Any], Any], task: Any) -> str | None:
    try:
        compute(task)
        return None
    except Interrupted:  # a stop request (`devicefit run`'s SIGINT/SIGTERM handler raises it): not a task's failure
        raise
    except Exception as exc:  # noqa: BLE001 - a warm-up never fails its caller; the caller's own call will
        return f"{task}: {type(exc).__name__}: {exc}"


def _helper_main(preload: Sequence[str]) -> int:
    """In the helper: import `preload` (while the caller still lists the tasks), read
    (sys.path, state file, compute, tasks) from stdin, then claim from the back until nothing is
    left, printing "done <i>" or "failed <i>" for each."""
    import importlib

    caller_dir = os.environ.pop(CALLER_DIR_ENV, "")
    # A caller killed with SIGKILL takes its helper (and what the helper started) with it, and
    # the helper removes the directory the caller can no longer remove (its TMPDIR is inside).
    follow_parent(ORPHANED_EXIT, (lambda: shutil.rmtree(caller_dir, ignore_errors=True)) if caller_dir else None)
    for name in preload:
        with contextlib.suppress(Exception):  # a head start only: a task needing it meets the error itself
            importlib.import_module(name)
    paths, state, payload = pickle.loads(sys.stdin.buffer.read())
    sys.path[:0] = [p for p in paths if p not in sys.path]
    reports = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # what `compute` prints is not a report
    compute, tasks = pickle.loads(payload)
    while (i := _claim(Path(state), from_back=True)) is not None:
        problem = _run_one(compute, tasks[i])
        reports.write(f"{'done' if problem is None else 'failed'} {i}\n")
    return 0


SCRATCH_REMOVE_ATTEMPTS = 10
SCRATCH_REMOVE_PAUSE_S = 0.2


@contextlib.contextmanager
def helper_scratch(prefix: str) -> Iterator[str]:
    """The helper's directory (its state file, stderr and TMPDIR), removed when the block ends.
    What the helper started in a session of its own can still write into it for a moment after
    the helper is stopped (a headless Chromium that Playwright launched: its profile's `Default`
    directory), and a plain TemporaryDirectory then raised OSError ("Directory not empty") over
    a `devicefit run` whose work was all done, leaving the directory behind. The removal is
    retried for about SCRATCH_REMOVE_ATTEMPTS x SCRATCH_REMOVE_PAUSE_S; what still cannot be
    removed is logged with the reason and left, never raised."""
    directory = tempfile.mkdtemp(prefix=prefix)
    try:
        yield directory
    finally:
        remove_scratch(Path(directory))


def remove_scratch(directory: Path, attempts: int = SCRATCH_REMOVE_ATTEMPTS, pause_s: float = SCRATCH_REMOVE_PAUSE_S) -> bool:
    """Whether `directory` is gone (helper_scratch's removal; a missing directory is gone)."""
    problem: OSError | None = None
    for attempt in range(attempts):
        try:
            shutil.rmtree(directory)
            return True
        except FileNotFoundError as exc:  # an entry its writer removed meanwhile: the directory may be gone
            if not directory.exists():
                return True
            problem = exc
        except OSError as exc:
            problem = exc
        if attempt + 1 < attempts:
            time.sleep(pause_s)
    log.warning("could not remove the helper's directory %s (%s); left in place", directory, problem)
    return False


def _start_helper(directory: Path, preload: Sequence[str]) -> subprocess.Popen:
    """The helper, in a session of its own (so that `_stop` reaches whatever it starts, such as
    an exporter's subprocess), importing `preload` until `_send` gives it the tasks. `-P`: a
    `models/` directory in the caller's working directory must not stand in for this package.
    It follows a lifeline (models.lifeline): a session of its own is not killed with its caller.
    Its temporary files go under the caller's `directory` (TMPDIR), which the caller removes:
    a helper killed mid-task cannot clean up after itself. (So its `tempfile.gettempdir()` is
    not the caller's: a helper never measures, and takes no device lock under it.)"""
    scratch = directory / "tmp"
    scratch.mkdir(exist_ok=True)
    lifeline_read, lifeline_write = open_lifeline()
    try:
        with open(directory / "helper.stderr", "wb") as err:
            proc = subprocess.Popen([sys.executable, "-P", "-m", "models.parallel_warm", *preload], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=err, start_new_session=True, pass_fds=(lifeline_read,),
                                    env={**os.environ, **ONE_THREAD, "TMPDIR": str(scratch), CALLER_DIR_ENV: str(directory),
                                         LIFELINE_ENV: str(lifeline_read)})
    except BaseException:
        os.close(lifeline_write)
        raise
    finally:
        os.close(lifeline_read)
    proc.devicefit_lifeline = lifeline_write  # closed by `_stop`, with the pipes
    return proc


def _send(proc: subprocess.Popen, state: Path, compute: Callable[[Any], Any], tasks: list[Any]) -> None:
    payload = pickle.dumps((list(sys.path), str(state), pickle.dumps((compute, tasks))))
    try:
        proc.stdin.write(payload)
        proc.stdin.close()
        proc.stdin = None  # written and closed: communicate() must not flush it
    except OSError:
        _stop(proc)
        raise


def _stop(proc: subprocess.Popen) -> None:
    """Kill the helper's whole session (its exporter's subprocess too) and reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=30)
    finally:
        if (lifeline := getattr(proc, "devicefit_lifeline", None)) is not None:
            proc.devicefit_lifeline = None
            os.close(lifeline)
        for pipe in (proc.stdin, proc.stdout):  # stdin too: a helper stopped before `_send` has it open
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


def _tail(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return f": {lines[-1][:300]}" if lines else ""


def _join(proc: subprocess.Popen, state: Path, total: int, stderr: Path, report: WarmReport) -> dict[int, str]:
    """Wait for the helper (or stop it, when it has claimed nothing: it is still starting) and
    read what it finished: index -> "done" or "failed"."""
    claimed = _claim_count_from_back(state, total)
    if claimed == 0 and proc.poll() is None:
        _stop(proc)
        report.helper = "not needed (this process finished first)"
        return {}
    try:
        out, _ = proc.communicate(timeout=HELPER_WAIT_S)
    except subprocess.TimeoutExpired:
        out = b""
        report.helper = f"stopped after {HELPER_WAIT_S:.0f} s"
    finally:
        _stop(proc)  # also what its tasks started and left behind
    done = {}
    for line in out.decode(errors="replace").splitlines():
        word, _, index = line.partition(" ")
        if word in ("done", "failed") and index.isdigit():
            done[int(index)] = word
    if not report.helper.startswith("stopped"):
        report.helper = ("finished" if proc.returncode == 0 else
                         f"exited with {proc.returncode}{' before claiming a task' if claimed == 0 else ''}{_tail(stderr)}")
    return done


def warm(tasks: Sequence[Any] | Callable[[], Sequence[Any]], compute: Callable[[Any], Any], helpers: int | None = None,
         preload: Sequence[str] = ()) -> WarmReport:
    """Run `compute` over `tasks`, here and in one helper process when this process may use
    two CPUs or more (`helpers=0`: here only). `tasks` may be a function that lists them: the
    helper then starts first and imports `preload` (module names, such as "torch") while this
    process lists, so its start-up overlaps the listing instead of following it."""
    started = time.perf_counter()
    helpers = (1 if usable_cpus() >= 2 else 0) if helpers is None else min(helpers, 1)
    here: set[int] = set()
    helper_done: dict[int, str] = {}
    report = WarmReport()
    with helper_scratch("devicefit-warm-") as directory:
        state, stderr = Path(directory) / "claims", Path(directory) / "helper.stderr"
        proc = None
        try:
            if helpers and (callable(tasks) or len(tasks) > 1):
                try:
                    proc = _start_helper(Path(directory), preload)
                except OSError as exc:
                    report.helper = f"not started ({type(exc).__name__}: {exc})"
            try:
                tasks = list(tasks() if callable(tasks) else tasks)
            except BaseException:  # a stop the listing wrapped in its own error is still a stop
                stop_request.raise_if_requested()
                raise
            stop_request.raise_if_requested()  # asked while listing (whose errors are logged, not raised)
            report.tasks = len(tasks)
            state.write_text(f"0 {len(tasks)}".ljust(40))
            if proc is not None and len(tasks) <= 1:
                _stop(proc)  # nothing to share
                proc = None
            elif proc is not None:
                try:
                    _send(proc, state, compute, tasks)
                except (OSError, pickle.PicklingError, AttributeError, TypeError) as exc:  # all of it here
                    _stop(proc)
                    proc = None
                    report.helper = f"not started ({type(exc).__name__}: {exc})"
            elif len(tasks) > 1 and report.helper == "not needed":
                report.helper = "not started (one usable CPU)" if usable_cpus() < 2 else "not started (helpers=0)"
            with _one_torch_thread(proc is not None):
                while True:
                    stop_request.raise_if_requested()  # a stop a task swallowed ends the loop here
                    if (i := _claim(state, from_back=False)) is None:
                        break
                    here.add(i)
                    if problem := _run_one(compute, tasks[i]):
                        report.failed.append(problem)
            if proc is not None:
                helper_done = _join(proc, state, len(tasks), stderr, report)
        finally:
            if proc is not None and proc.returncode is None:  # interrupted (a signal, Ctrl-C): no helper outlives us
                _stop(proc)
    # Claimed by a helper that did not report them: here, now.
    for i, task in enumerate(tasks):
        if i in here:
            continue
        if helper_done.get(i) == "failed":
            report.failed.append(f"{task}: failed in the helper")
        elif i not in helper_done:
            stop_request.raise_if_requested()
            here.add(i)
            if problem := _run_one(compute, task):
                report.failed.append(problem)
    report.by_caller = len(here)
    report.by_helper = len(tasks) - len(here)
    report.seconds = time.perf_counter() - started
    if report.failed:
        log.info("cache warm-up: %d of %d tasks failed (the callers will meet them again): %s",
                 len(report.failed), len(tasks), "; ".join(report.failed[:3]))
    return report


@dataclass
class Ahead:
    """The helper `ahead` started (None: none was, `why_not` says why), and what became of it."""

    proc: subprocess.Popen | None
    why_not: str = ""
    started: float = field(default_factory=time.perf_counter)
    stopped_after_s: float | None = None  # when `stop` killed it while it still ran
    _reaped: bool = False

    def stop(self) -> None:
        """Kill it if it still runs (what it finished is in the cache), and reap it, once."""
        if self.proc is None or self._reaped:
            return
        if self.proc.poll() is None:
            self.stopped_after_s = time.perf_counter() - self.started
        _stop(self.proc)  # also what its session started, and its pipe closed
        self._reaped = True

    def wait(self, timeout_s: float) -> bool:
        """Whether it has exited (its tasks done), waiting up to `timeout_s` for it."""
        if self.proc is None:
            return True
        try:
            self.proc.wait(timeout=timeout_s)
            return True
        except subprocess.TimeoutExpired:
            return False

    def describe(self) -> str:
        if self.proc is None:
            return f"not started ({self.why_not})"
        if self.stopped_after_s is not None:
            return f"stopped after {self.stopped_after_s:.1f} s"
        code = self.proc.poll()
        return "running" if code is None else "finished" if code == 0 else f"exited with {code}"


@contextlib.contextmanager
def ahead(tasks: Sequence[Any], compute: Callable[[Any], Any], preload: Sequence[str] = ()) -> Iterator[Ahead]:
    """The helper alone computing `tasks` (from the back, as in `warm`) while this process does
    other work; stopped when the block ends, so it never outlives it, or earlier by `stop()`
    (a task it was in the middle of is left to whoever needs it). Nothing is started where
    fewer than two CPUs are usable, or for no tasks; a helper that cannot start is logged, not
    raised: this is a head start only. The helper reports to a pipe nobody reads while it runs:
    a line per task, far below a pipe's buffer for the tens of tasks this is for."""
    helper = Ahead(None, "no tasks" if not tasks else "one usable CPU" if usable_cpus() < 2 else "")
    with helper_scratch("devicefit-ahead-") as directory:
        state = Path(directory) / "claims"
        state.write_text(f"0 {len(tasks)}".ljust(40))
        if not helper.why_not:
            try:
                helper.proc = _start_helper(Path(directory), preload)
                _send(helper.proc, state, compute, list(tasks))
            except (OSError, pickle.PicklingError, AttributeError, TypeError) as exc:
                log.info("no helper ahead (%s: %s)", type(exc).__name__, exc)
                if helper.proc is not None:
                    _stop(helper.proc)
                helper.proc, helper.why_not = None, f"{type(exc).__name__}: {exc}"
            except BaseException:  # a signal while starting it: no helper outlives this block
                if helper.proc is not None:
                    _stop(helper.proc)
                raise
        try:
            yield helper
        finally:
            helper.stop()


@contextlib.contextmanager
def _one_torch_thread(active: bool):
    """torch's intra-op threads in this process set to one while a helper computes beside it
    (the helper starts with one: ONE_THREAD), and given back after."""
    if not active:
        yield
        return
    import torch  # the tasks would import it anyway, with as many threads as cores

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _claim_count_from_back(state: Path, total: int) -> int:
    with open(state) as f:
        fcntl.flock(f, fcntl.LOCK_SH)
        _, back = map(int, f.read().split())
    return total - back


if __name__ == "__main__":
    sys.exit(_helper_main(sys.argv[1:]))
