"""models.parallel_warm: every task computed exactly once, here or in the helper, whatever
becomes of the helper."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from models import parallel_warm
from models.parallel_warm import warm

WAIT_FOR_HELPER_S = 60.0


def _in_helper(task: tuple[str, int, int]) -> bool:
    return os.getpid() != task[2]  # the caller's pid travels in the task


def record_once(task: tuple[str, int, int]) -> None:
    """Create the task's file; a second computation of the same task fails (O_EXCL)."""
    directory, index, _ = task
    fd = os.open(Path(directory) / f"{index}", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)


def record_after_helper_starts(task: tuple[str, int, int]) -> None:
    """The caller's first task waits for the helper's first, so both processes take part."""
    directory, index, _ = task
    if _in_helper(task):
        (Path(directory) / "helper-started").touch()
    elif index == 0:
        deadline = time.monotonic() + WAIT_FOR_HELPER_S
        while not (Path(directory) / "helper-started").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
    record_once(task)


def helper_dies(task: tuple[str, int, int]) -> None:
    """The helper exits (as a crash would) on its first task, which it has claimed."""
    directory, _, _ = task
    if _in_helper(task):
        (Path(directory) / "helper-started").touch()
        os._exit(3)
    record_after_helper_starts(task)


def fails_on_odd(task: tuple[str, int, int]) -> None:
    if task[1] % 2:
        raise ValueError(f"task {task[1]} refused")
    record_once(task)


def _tasks(tmp_path: Path, n: int) -> list[tuple[str, int, int]]:
    return [(str(tmp_path), i, os.getpid()) for i in range(n)]


def _pids(tmp_path: Path, n: int) -> list[str]:
    return [(tmp_path / str(i)).read_text() for i in range(n)]


def test_every_task_runs_once_across_the_caller_and_the_helper(tmp_path):
    report = warm(_tasks(tmp_path, 30), record_after_helper_starts, helpers=1)
    assert report.failed == []
    pids = _pids(tmp_path, 30)
    assert report.by_caller == pids.count(str(os.getpid()))
    assert report.by_helper == 30 - report.by_caller >= 1
    assert report.helper == "finished"


def test_without_a_helper_every_task_runs_here(tmp_path):
    report = warm(_tasks(tmp_path, 5), record_once, helpers=0)
    assert (report.by_caller, report.by_helper, report.failed) == (5, 0, [])
    assert set(_pids(tmp_path, 5)) == {str(os.getpid())}


def test_a_task_the_helper_claimed_and_did_not_finish_is_done_here(tmp_path):
    report = warm(_tasks(tmp_path, 12), helper_dies, helpers=1)
    assert report.helper == "exited with 3"
    assert report.failed == []
    assert set(_pids(tmp_path, 12)) == {str(os.getpid())}  # the helper finished none of them
    assert report.by_caller == 12


@pytest.mark.parametrize("helpers", [0, 1])
def test_a_failing_task_is_reported_and_the_others_still_run(tmp_path, helpers):
    report = warm(_tasks(tmp_path, 8), fails_on_odd, helpers=helpers)
    assert len(report.failed) == 4
    assert all("refused" in f or "failed in the helper" in f for f in report.failed)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0", "2", "4", "6"]


def test_no_tasks_starts_nothing(tmp_path):
    report = warm([], record_once, helpers=1)
    assert (report.tasks, report.by_caller, report.by_helper, report.helper) == (0, 0, 0, "not needed")


def record_threads(task: tuple[str, int, int]) -> None:
    """Which process ran the task, with the OpenMP and torch threads it computed with."""
    import torch

    directory, index, _ = task
    record_after_helper_starts(task)
    (Path(directory) / f"{index}.threads").write_text(f"{os.environ.get('OMP_NUM_THREADS')} {torch.get_num_threads()}")


def test_both_processes_compute_on_one_thread_and_this_one_gets_its_threads_back(tmp_path):
    """Two processes of two OpenMP threads each on two cores spin against each other."""
    import torch

    before = torch.get_num_threads()
    report = warm(_tasks(tmp_path, 6), record_threads, helpers=1)
    assert report.failed == [] and report.by_helper >= 1
    assert torch.get_num_threads() == before
    for i, pid in enumerate(_pids(tmp_path, 6)):
        omp, threads = (tmp_path / f"{i}.threads").read_text().split()
        assert threads == "1" and (omp == "1" or pid == str(os.getpid()))


def interrupted_while_the_helper_works(task: tuple[str, int, int]) -> None:
    """The helper starts a grandchild and sleeps; the caller is interrupted (Ctrl-C, or the
    signal that stops `devicefit run`) once both are under way."""
    import subprocess
    import sys

    directory, _, _ = task
    if _in_helper(task):
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        (Path(directory) / "pids").write_text(f"{os.getpid()} {child.pid}")
        time.sleep(120)
        return
    deadline = time.monotonic() + WAIT_FOR_HELPER_S
    while not (Path(directory) / "pids").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    raise KeyboardInterrupt


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "zombie" in status.read_text()  # killed, not yet reaped by its (dead) parent


def test_an_interrupted_warm_up_leaves_no_helper_nor_what_it_started(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        warm(_tasks(tmp_path, 4), interrupted_while_the_helper_works, helpers=1)
    helper, grandchild = map(int, (tmp_path / "pids").read_text().split())
    deadline = time.monotonic() + 10
    while not (_gone(helper) and _gone(grandchild)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(helper) and _gone(grandchild)


def _helpers_now() -> list[list[str]]:
    import psutil

    return [p.cmdline() for p in psutil.Process().children() if "models.parallel_warm" in " ".join(p.cmdline())]


def test_a_listing_function_runs_while_the_helper_starts_and_imports(tmp_path):
    """Given a function that lists the tasks, the helper is started first, importing `preload`
    while the listing runs; then every task still runs once."""
    seen: list[list[list[str]]] = []

    def listing():
        seen.append(_helpers_now())
        return _tasks(tmp_path, 30)

    report = warm(listing, record_after_helper_starts, helpers=1, preload=("json",))
    assert len(seen) == 1 and len(seen[0]) == 1 and seen[0][0][-1] == "json", (seen, report.helper)
    assert report.tasks == 30 and report.failed == [] and report.helper == "finished"
    assert report.by_helper >= 1 and len(_pids(tmp_path, 30)) == 30
    assert _helpers_now() == []


def test_a_listing_with_one_task_or_a_failure_leaves_no_helper(tmp_path):
    report = warm(lambda: _tasks(tmp_path, 1), record_once, helpers=1)
    assert (report.tasks, report.by_caller, report.helper) == (1, 1, "not needed")

    def broken():
        raise RuntimeError("listing failed")

    with pytest.raises(RuntimeError, match="listing failed"):
        warm(broken, record_once, helpers=1)
    assert _helpers_now() == []


def record_then_linger(task: tuple[str, int, int]) -> None:
    """Record the task, then stay busy long past any test: only a stop ends the helper."""
    record_once(task)
    time.sleep(120)


def test_a_helper_ahead_computes_the_tasks_alone_while_this_process_does_other_work(tmp_path, monkeypatch):
    monkeypatch.setattr(parallel_warm, "usable_cpus", lambda: 2)
    with parallel_warm.ahead(_tasks(tmp_path, 5), record_once, preload=("json",)) as helper:
        assert helper.wait(WAIT_FOR_HELPER_S), "the helper did not finish five file writes"
        assert helper.proc.returncode == 0
    pids = _pids(tmp_path, 5)
    assert len(set(pids)) == 1 and pids[0] != str(os.getpid())  # all in the helper, none here
    assert _helpers_now() == []


def test_a_helper_ahead_is_killed_by_stop_and_never_outlives_its_block(tmp_path, monkeypatch):
    """It takes from the back; stopped in the middle of a task, it does no other; and a block
    left without a stop (a results run that raised) kills it too."""
    monkeypatch.setattr(parallel_warm, "usable_cpus", lambda: 2)
    with parallel_warm.ahead(_tasks(tmp_path, 3), record_then_linger) as helper:
        deadline = time.monotonic() + WAIT_FOR_HELPER_S
        while not (tmp_path / "2").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert (tmp_path / "2").exists()
        helper.stop()
        assert helper.proc.returncode == -signal.SIGKILL
        assert not (tmp_path / "1").exists() and not (tmp_path / "0").exists()
    (tmp_path / "2").unlink()
    with pytest.raises(RuntimeError, match="the block failed"):
        with parallel_warm.ahead(_tasks(tmp_path, 3), record_then_linger) as helper:
            raise RuntimeError("the block failed")
    assert helper.proc.returncode == -signal.SIGKILL and _helpers_now() == []


def test_no_helper_ahead_on_one_cpu_or_for_no_tasks(tmp_path, monkeypatch):
    monkeypatch.setattr(parallel_warm, "usable_cpus", lambda: 1)
    with parallel_warm.ahead(_tasks(tmp_path, 3), record_once) as helper:
        assert helper.proc is None and helper.wait(0)
    monkeypatch.setattr(parallel_warm, "usable_cpus", lambda: 2)
    with parallel_warm.ahead([], record_once) as helper:
        assert helper.proc is None
    assert list(tmp_path.iterdir()) == []


def record_scratch_then_linger(task: tuple[str, int, int]) -> None:
    """Make a temporary directory where any task would (tempfile's default), name it in the
    task's file, then stay busy until stopped: a helper killed here cannot remove it."""
    import tempfile

    scratch = tempfile.mkdtemp(prefix="helper-scratch-")
    (Path(task[0]) / "scratch").write_text(scratch)
    record_then_linger(task)


def test_a_stopped_helper_leaves_no_temporary_files_behind(tmp_path, monkeypatch):
    """Its TMPDIR is inside the caller's directory, which the caller removes (the selection map's
    helper, killed mid-trace, left a directory in /tmp on every `devicefit run`)."""
    monkeypatch.setattr(parallel_warm, "usable_cpus", lambda: 2)
    with parallel_warm.ahead(_tasks(tmp_path, 1), record_scratch_then_linger) as helper:
        deadline = time.monotonic() + WAIT_FOR_HELPER_S
        while not (tmp_path / "0").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        scratch = Path((tmp_path / "scratch").read_text())
        assert scratch.is_dir()
        helper.stop()
    assert not scratch.exists() and _helpers_now() == []


_PROFILE_WRITER = """
import os, sys, time
profile, seconds = sys.argv[1], float(sys.argv[2])
os.makedirs(profile)
end, i = time.monotonic() + seconds, 0
while time.monotonic() < end:
    try:  # into the directory as it is: once removed, nothing is written (nor made again)
        open(os.path.join(profile, str(i)), "x").close()
    except OSError:
        pass
    i += 1
"""


def start_a_browser_like_writer_then_linger(task: tuple[str, int, int]) -> None:
    """What Playwright does in the selection map's helper: a process in a session of its own
    (out of reach of the helper's session kill) writing its profile's `Default` directory under
    the helper's TMPDIR, for a moment after the helper is gone."""
    import subprocess
    import sys
    import tempfile

    profile = Path(tempfile.gettempdir()) / "playwright_chromiumdev_profile-x" / "Default"
    writer = subprocess.Popen([sys.executable, "-c", _PROFILE_WRITER, str(profile), "1.2"], start_new_session=True)
    (Path(task[0]) / "writer").write_text(f"{writer.pid} {profile}")
    record_then_linger(task)


def test_a_process_still_writing_in_the_helpers_directory_never_fails_its_caller(tmp_path, monkeypatch):
    """A `devicefit run` failed after all its work with "Directory not empty: Default
    (OSError)": the caller's temporary directory could not be removed while the browser the
    helper had started still wrote its profile there. The block now ends without raising, and
    the directory is gone once the writer stops."""
    import psutil

    monkeypatch.setattr(parallel_warm, "usable_cpus", lambda: 2)
    with parallel_warm.ahead(_tasks(tmp_path, 1), start_a_browser_like_writer_then_linger) as helper:
        deadline = time.monotonic() + WAIT_FOR_HELPER_S
        while not (tmp_path / "0").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        pid, profile = (tmp_path / "writer").read_text().split(" ", 1)
        while not (Path(profile).is_dir() and any(Path(profile).iterdir())) and time.monotonic() < deadline:
            time.sleep(0.01)
        helper.stop()
        assert psutil.pid_exists(int(pid))  # the writer outlives the helper, as the browser did
        scratch = Path(profile).parents[2]
    assert not scratch.exists() and _helpers_now() == []


def test_a_directory_that_cannot_be_removed_is_logged_and_left(tmp_path, caplog):
    """remove_scratch never raises: a directory it cannot remove (here a file stands where its
    parent must be written) is named in the log, with the reason."""
    import logging

    locked = tmp_path / "locked"
    (locked / "inner").mkdir(parents=True)
    (locked / "inner" / "f").write_text("x")
    os.chmod(locked / "inner", 0o500)  # its entries cannot be removed (except by root)
    try:
        with caplog.at_level(logging.WARNING, logger="devicefit.parallel_warm"):
            gone = parallel_warm.remove_scratch(locked, attempts=2, pause_s=0.01)
        if os.geteuid() == 0:  # root removes it anyway
            assert gone and not locked.exists()
        else:
            assert not gone and locked.exists() and str(locked) in caplog.text and "left in place" in caplog.text
    finally:
        if (locked / "inner").exists():
            os.chmod(locked / "inner", 0o700)
    assert parallel_warm.remove_scratch(tmp_path / "never-made")


def spawn_then_linger(task: tuple[str, int, int]) -> None:
    """Start a child that would run for minutes (as an exporter's subprocess does), name it,
    record the task, then stay busy until stopped."""
    import subprocess

    child = subprocess.Popen(["sleep", "300"])
    (Path(task[0]) / "child").write_text(str(child.pid))
    record_then_linger(task)


_KILLED_CALLER = """
import sys, time
sys.path[:0] = {paths!r}
from models import parallel_warm
from tests.models.test_parallel_warm import spawn_then_linger
parallel_warm.usable_cpus = lambda: 2
with parallel_warm.ahead([({directory!r}, 0, 0)], spawn_then_linger) as helper:
    print(helper.proc.pid, flush=True)
    time.sleep(300)
"""


def test_a_helper_dies_with_a_caller_killed_by_sigkill(tmp_path):
    """The helper runs in a session of its own, so a caller killed outright (the OOM killer, a CI
    timeout) does not take it along by signal: its lifeline does, within moments, instead of a
    core left busy beside the next run's measurements. What the helper started goes with it,
    and the caller's temporary directory, which the caller can no longer remove, goes too."""
    import subprocess
    import sys

    work, temporary = tmp_path / "work", tmp_path / "tmp"
    work.mkdir()
    temporary.mkdir()
    caller = subprocess.Popen([sys.executable, "-c", _KILLED_CALLER.format(paths=sys.path, directory=str(work))],
                              stdout=subprocess.PIPE, text=True, env={**os.environ, "TMPDIR": str(temporary)})
    helper = child = None
    try:
        helper = int(caller.stdout.readline())
        deadline = time.monotonic() + WAIT_FOR_HELPER_S
        while not (work / "0").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert (work / "0").exists(), "the helper never started its task"
        child = int((work / "child").read_text())
        assert [p.name for p in temporary.iterdir()] and not _gone(child)
        caller.kill()
        caller.wait(timeout=30)
        deadline = time.monotonic() + WAIT_FOR_HELPER_S
        while not (_gone(helper) and _gone(child)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gone(helper), f"the helper outlived its killed caller by {WAIT_FOR_HELPER_S:.0f} s"
        assert _gone(child), "the helper's own subprocess outlived it"
        assert list(temporary.iterdir()) == [], "the killed caller's temporary directory was left behind"
    finally:
        caller.kill()
        caller.stdout.close()
        for pid in (helper, child):
            if pid is not None and not _gone(pid):
                os.kill(pid, signal.SIGKILL)


class _Stop(Exception):
    pass


def interrupts_on_two(task: tuple[str, int, int]) -> None:
    """Task 2 is where a SIGTERM's handler raises (as `devicefit run`'s does); the others record.
    The helper records nothing before the caller has done its task 1 (the caller may still be
    importing torch when the helper starts), so the tasks up to 2 are the caller's."""
    from models.errors import Interrupted

    directory, index, _ = task
    if _in_helper(task):
        deadline = time.monotonic() + WAIT_FOR_HELPER_S
        while not (Path(directory) / "1").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
    elif index == 2:
        raise Interrupted("stopped by SIGTERM")
    record_once(task)


@pytest.mark.parametrize("helpers", [0, 1])
def test_a_stop_raised_in_a_task_ends_the_warm_up_there(tmp_path, helpers):
    from models.errors import Interrupted

    tasks = _tasks(tmp_path, 40)
    with pytest.raises(Interrupted):
        warm(tasks, interrupts_on_two, helpers=helpers)
    done_here = [p for p in tmp_path.iterdir() if p.name.isdigit() and p.read_text() == str(os.getpid())]
    assert sorted(int(p.name) for p in done_here) == [0, 1]  # not counted as a failure and carried on past
    assert not _helpers_now()


def test_a_stop_a_task_swallowed_ends_the_warm_up_before_the_next_task(tmp_path):
    """A stop request caught by a task's own broad `except` is raised at the next task boundary."""
    from models import stop_request

    requested: list[bool] = []

    def check() -> None:
        if requested:
            raise _Stop

    def swallows_on_one(task: tuple[str, int, int]) -> None:
        if task[1] == 1:
            requested.append(True)  # the signal arrived; the task's handler swallowed what it raised
        record_once(task)

    with stop_request.checked_by(check), pytest.raises(_Stop):
        warm(_tasks(tmp_path, 10), swallows_on_one, helpers=0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0", "1"]
    stop_request.raise_if_requested()  # the check is gone with its block
