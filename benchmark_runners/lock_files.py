"""The flock machinery behind device_lock (which see): the lock directory, the bounded wait,
holding and probing the locks by name. Apart from device_lock's naming of devices, which reads
the hardware detection, so that the detection itself can ask whether a device is measuring
elsewhere before it probes it (hardware/inventory.py) without an import cycle."""
from __future__ import annotations

import fcntl
import json
import math
import os
import re
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable, Iterator

from benchmark_runners import registry
from models.errors import DevicefitError

# `devicefit run` holds its devices across all its partitions: a full sweep takes hours. The kernel
# frees the lock of a dead holder, so a long wait is a live measurement, not a stale lock.
DEFAULT_WAIT_S = 12 * 3600.0
POLL_S = 0.5
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")  # lock names become file names: nothing else


class DeviceBusy(DevicefitError):
    exit_code = 4
    http_status = 409


class BadWaitBound(DevicefitError):
    """DEVICEFIT_DEVICE_WAIT_S is not a number of seconds (a configuration error, exit 2)."""


class BadLockDir(DevicefitError):
    """DEVICEFIT_LOCK_DIR (or the default) names something that is not a directory (exit 2)."""


def lock_dir() -> Path:
    """Machine-wide (every data directory and DAGSTER_HOME on this host shares the devices):
    DEVICEFIT_LOCK_DIR, or devicefit-device-locks under the system's temporary directory."""
    return Path(os.environ.get("DEVICEFIT_LOCK_DIR") or Path(tempfile.gettempdir()) / "devicefit-device-locks")


def wait_bound_env(name: str, default: float) -> float:
    """A bound on a wait, in seconds, from environment variable `name` (`default` when unset):
    a finite number >= 0, never "wait forever"; anything else raises ValueError naming it."""
    raw = os.environ.get(name, "")
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not (value >= 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a number of seconds >= 0, got {raw!r}")
    return value


def wait_bound_s() -> float:
    try:
        return wait_bound_env("DEVICEFIT_DEVICE_WAIT_S", DEFAULT_WAIT_S)
    except ValueError as exc:
        raise BadWaitBound(str(exc)) from None


def lock_name(device: str, software: bool = False) -> str:
    """The lock name of a device whose kind is (`software`) or is not software: "cpu" and
    "openvino:CPU" -> "cpu", "cuda" and "cuda:0" -> "cuda-0", "cuda:1" -> "cuda-1"."""
    kind, _, index = device.partition(":")
    shared = registry.physical_kind(kind, software=software)
    name = shared if shared != kind else "cpu" if kind == "cpu" else f"{kind}-{index or '0'}"
    if not _NAME.fullmatch(name):  # it becomes a file name under the lock directory
        raise ValueError(f"not a device: {device!r}")
    return name


_held: dict[str, tuple[int, int]] = {}  # lock name -> (fd, depth), this process's
_guard = threading.Lock()


def _holder(path: Path) -> str:
    try:
        info = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return "another process"
    return f"pid {info.get('pid')} ({info.get('command', '?')}) since {info.get('since', '?')}"


def _open_lock_file(name: str) -> tuple[int, Path, bool]:
    """(fd, path, writable). The directory and files are shared by every user of the machine
    (sticky, world-writable, like /tmp); a file another user created and this one cannot write
    is still lockable read-only (flock needs no write access), just without the holder record."""
    if not _NAME.fullmatch(name):
        raise ValueError(f"not a device lock name: {name!r}")
    directory = lock_dir()
    if not directory.is_dir():
        if directory.exists() or directory.is_symlink():  # else mkdir's "File exists" names no problem
            raise BadLockDir(f"the device lock directory {directory} is not a directory (DEVICEFIT_LOCK_DIR names it)")
        directory.mkdir(parents=True, exist_ok=True)
        try:
            os.chmod(directory, 0o1777)
        except OSError:
            pass
    path = directory / f"{name}.lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            os.fchmod(fd, 0o666)
        except OSError:
            pass
        return fd, path, True
    except PermissionError:
        return os.open(path, os.O_RDONLY), path, False


def _acquire(name: str, deadline: float, on_wait: Callable[[str], None] | None) -> None:
    fd, path, writable = _open_lock_file(name)
    told = False
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise DeviceBusy(f"device {name} is still measuring for {_holder(path)}; gave up waiting "
                                     f"(DEVICEFIT_DEVICE_WAIT_S bounds the wait)") from None
                if not told and on_wait:
                    on_wait(f"waiting for device {name}: {_holder(path)} is measuring on it")
                    told = True
                time.sleep(POLL_S)  # a SIGINT/SIGTERM handler may raise out of this
        if writable:  # who holds it, for a waiter's message; best effort (a full /tmp must not keep the lock)
            record = json.dumps({"pid": os.getpid(), "command": " ".join(sys.argv[:3])[:200],
                                 "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, record.encode(), 0)
            except OSError:
                pass
    except BaseException:
        os.close(fd)
        raise
    with _guard:
        _held[name] = (fd, 1)


def busy_elsewhere(devices: Iterable[str]) -> list[str]:
    """The devices another process is measuring on now (a snapshot: free ones are taken for an
    instant and given back). What must not start beside a measurement, e.g. an early worker
    whose imports would disturb it, asks this first."""
    busy = []
    for name in sorted(set(devices)):
        if name in _held:
            continue
        try:
            with hold_devices([name], wait_s=0):
                pass
        except DeviceBusy:
            busy.append(name)
    return busy


@contextmanager
def hold_devices(devices: Iterable[str], wait_s: float | None = None,
                 on_wait: Callable[[str], None] | None = None) -> Iterator[list[str]]:
    """Hold the locks of these physical devices (names from `physical_device`) for the block;
    taken in sorted order, so two holders of overlapping sets cannot deadlock."""
    names = sorted(set(devices))
    deadline = time.monotonic() + (wait_bound_s() if wait_s is None else wait_s)
    taken: list[str] = []
    try:
        for name in names:
            with _guard:
                if name in _held:
                    fd, depth = _held[name]
                    _held[name] = (fd, depth + 1)
                    taken.append(name)
                    continue
            _acquire(name, deadline, on_wait)
            taken.append(name)
        yield names
    finally:
        for name in reversed(taken):
            with _guard:
                fd, depth = _held[name]
                if depth > 1:
                    _held[name] = (fd, depth - 1)
                else:
                    del _held[name]
                    os.close(fd)  # closing the last descriptor releases the flock
