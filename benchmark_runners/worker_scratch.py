"""Each worker's scratch directory (paths.WORKER_SCRATCH_ENV): made by the sweep, removed by it
after it reaps the worker, or by the worker itself when its parent was killed outright (its
lifeline). Where both were killed at once (a `systemctl stop` sends SIGTERM to every process of
the service, a test kills both), neither could remove it, and it stayed in the temporary
directory for good. So the sweep holds a lock on a file in each directory it made for as long
as the directory is its worker's, and a later sweep removes the directories whose lock nobody
holds: a lock is released by the kernel when its holder dies, however it dies.

The lock is flock(2) on `<dir>/.sweep`, taken by the sweep before it names the directory to the
worker. A directory without that file is never touched (made an instant ago and not yet locked,
made by a release before the lock, or made by someone else: its age says nothing, since a
directory's time changes only when its own entries do), nor one younger than STALE_AFTER_S (its
file made, not yet locked). An unlocked one means the sweep that made it is gone, and its
worker exits on its lifeline as soon as it notices."""
from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
import time
from pathlib import Path

from benchmark_runners.paths import WORKER_SCRATCH_PREFIX

LOCK_NAME = ".sweep"
STALE_AFTER_S = 60.0  # far longer than the making and locking of a directory take


class ScratchDirectory:
    """A worker's scratch directory, locked by this process until `remove`."""

    def __init__(self) -> None:
        self.path = tempfile.mkdtemp(prefix=WORKER_SCRATCH_PREFIX)
        self._lock: int | None = None
        try:
            self._lock = os.open(os.path.join(self.path, LOCK_NAME), os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o600)
            fcntl.flock(self._lock, fcntl.LOCK_EX)
        except BaseException:
            self.remove()
            raise

    def remove(self) -> None:
        """Remove the directory (whatever the worker left in it), then let the lock go."""
        shutil.rmtree(self.path, ignore_errors=True)
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None


def remove_abandoned(directory: str | None = None, now: float | None = None) -> list[str]:
    """Remove the scratch directories in `directory` (the system's temporary one) whose lock no
    live sweep holds and that are older than STALE_AFTER_S. Returns the ones removed. One
    without the lock file is left alone (the module's docstring says why)."""
    now = time.time() if now is None else now
    removed = []
    for path in Path(directory or tempfile.gettempdir()).glob(WORKER_SCRATCH_PREFIX + "*"):
        try:
            info = path.lstat()
            if not path.is_dir() or path.is_symlink() or info.st_uid != os.getuid() or now - info.st_mtime < STALE_AFTER_S \
                    or _held(path):
                continue  # not a directory of ours, too young, or its sweep is alive
        except OSError:
            continue  # removed meanwhile
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            removed.append(str(path))
    return removed


def _held(path: Path) -> bool:
    """Whether the directory's lock is held by a live process, or cannot be told (no lock file,
    one this process may not read): either way it is left alone. A lock taken here is let go at once."""
    try:
        fd = os.open(path / LOCK_NAME, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
