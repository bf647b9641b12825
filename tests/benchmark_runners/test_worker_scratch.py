"""The worker's scratch directory (benchmark_runners.paths.WORKER_SCRATCH_ENV): an orphaned worker
removes it, so it must only ever be a directory the sweep made, never one the variable names."""
from __future__ import annotations

from pathlib import Path

from benchmark_runners.paths import WORKER_SCRATCH_ENV, WORKER_SCRATCH_PREFIX, worker_scratch


def test_only_a_directory_the_sweep_made_is_a_workers_scratch(monkeypatch, tmp_path):
    made = tmp_path / f"{WORKER_SCRATCH_PREFIX}abc123"
    made.mkdir()
    monkeypatch.setenv(WORKER_SCRATCH_ENV, str(made))
    assert worker_scratch() == made
    for named in (tmp_path, tmp_path / "home", "/", f"{made}-gone"):  # a user's directory, the root, a missing one
        if named == tmp_path / "home":
            named.mkdir()
        monkeypatch.setenv(WORKER_SCRATCH_ENV, str(named))
        assert worker_scratch() is None
    monkeypatch.delenv(WORKER_SCRATCH_ENV)
    assert worker_scratch() is None


# A sweep that made a scratch directory and was then killed (SIGKILL), with its worker.
KILLED_SWEEP = """
import sys, time
from benchmark_runners.worker_scratch import ScratchDirectory
made = ScratchDirectory()
open(made.path + "/left-by-a-browser", "w").close()
print(made.path, flush=True)
time.sleep(600)
"""


def test_a_directory_whose_sweep_was_killed_with_its_worker_is_removed_by_a_later_sweep(tmp_path, monkeypatch):
    """Nobody removes it then (a `systemctl stop` sends SIGTERM to the sweep and its worker at
    once); a later sweep does, once it is older than STALE_AFTER_S and its lock is free, and
    never a directory whose sweep is alive, a young one, one without the lock file, a link or
    another kind of file."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from benchmark_runners import worker_scratch as scratch_dirs

    monkeypatch.setattr(scratch_dirs.tempfile, "tempdir", str(tmp_path))  # where mkdtemp makes them here
    live = scratch_dirs.ScratchDirectory()
    try:
        with subprocess.Popen([sys.executable, "-c", KILLED_SWEEP], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "TMPDIR": str(tmp_path)}) as sweep:
            try:
                abandoned = sweep.stdout.readline().strip()  # "" if it died first
                assert abandoned.startswith(str(tmp_path)), abandoned
                assert scratch_dirs.remove_abandoned(str(tmp_path), now=time.time() + 3600) == []  # its sweep is alive: held
            finally:
                sweep.send_signal(signal.SIGKILL)
        young = tmp_path / f"{WORKER_SCRATCH_PREFIX}young"  # its lock file made, not yet locked
        young.mkdir()
        (young / scratch_dirs.LOCK_NAME).touch()
        unlocked_file = tmp_path / f"{WORKER_SCRATCH_PREFIX}file"
        unlocked_file.write_text("not a directory")
        lockless = tmp_path / f"{WORKER_SCRATCH_PREFIX}lockless"  # an older release's, or not a sweep's at all
        lockless.mkdir()
        link = tmp_path / f"{WORKER_SCRATCH_PREFIX}link"
        link.symlink_to(abandoned)
        assert scratch_dirs.remove_abandoned(str(tmp_path)) == []  # all younger than STALE_AFTER_S
        later = time.time() + scratch_dirs.STALE_AFTER_S + 1
        assert sorted(scratch_dirs.remove_abandoned(str(tmp_path), now=later)) == sorted([abandoned, str(young)])
        assert not Path(abandoned).exists() and Path(live.path).is_dir() and unlocked_file.is_file() and lockless.is_dir()
        assert link.is_symlink()
    finally:
        live.remove()
    assert not Path(live.path).exists()


def test_every_sweep_removes_the_abandoned_directories_first(monkeypatch):
    from benchmark_runners import sweep
    from benchmark_runners.hardware import detect_hardware

    calls = []
    monkeypatch.setattr(sweep, "remove_abandoned", lambda: calls.append(1) or ["/tmp/devicefit-worker-gone"])
    assert sweep.run_sweep([], inventory=detect_hardware(probe=False)) == [] and calls == [1]
