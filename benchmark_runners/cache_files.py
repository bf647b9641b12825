"""Writing converted models into the on-disk caches (<data>/cache/onnx, openvino, openvino-genai):
whole or not at all, and never onto a disk that cannot hold them.

A converted model is as large as its weights (clip-vit-base-patch32: 600 MB of fp32 ONNX). Written
straight to a fixed temporary name, a conversion that ran out of disk left its partial file
behind, holding the space every later config needed, and two workers converting the same model
wrote into one file. Here every write goes to a staging directory of its own beside the cache:
moved into place when complete, removed when anything fails, and, where its writer was killed,
swept by the next staging in that directory once the writer's lock is free (from any host or
PID namespace sharing it). Before writing, the free space is checked against the conversion's
estimated size, so a disk that cannot hold it is a failed row saying so (and the next config
runs), not a half-written file.
"""
from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from models.errors import DevicefitError, is_disk_full

MIB = 1024 * 1024
# Beyond the estimate: the file formats' own overhead (graph, names, alignment) and room for the
# store, the landing files and the logs of the run that asked.
HEADROOM_BYTES = 64 * MIB
HEADROOM_FRACTION = 0.05
# A write that failed with less than this left free failed for want of space, whatever it said.
FULL_BELOW_BYTES = 1 * MIB
STAGING_PREFIX = ".staging-"
# Held (flock) by the process writing into a staging directory for as long as it writes: a lock
# the kernel frees when its holder dies, whatever host name or PID namespace that holder had.
WRITER_LOCK = ".writer.lock"
# A staging directory without a lock to test (its writer died between creating it and locking,
# or the file system has no locks) is left this long before it counts as abandoned.
UNLOCKED_AGE_S = 24 * 3600.0
# The temporary names of earlier versions (fixed per file, never cleaned): swept once an hour old.
LEGACY_TMP = re.compile(r"\..+\.(onnx\.tmp|tmp\.xml|tmp\.bin)")
LEGACY_AGE_S = 3600.0


class NotEnoughDiskSpace(DevicefitError):
    """The disk holding a cache cannot take a conversion: the row fails naming both figures."""
    exit_code = 1
    http_status = 507


def _age_s(path: Path) -> float:
    return time.time() - path.stat().st_mtime


def writer_gone(stage: Path) -> bool:
    """Whether the process that wrote into `stage` is gone: its lock can be taken at once."""
    try:
        fd = os.open(stage / WRITER_LOCK, os.O_RDWR)
    except FileNotFoundError:
        return _age_s(stage) > UNLOCKED_AGE_S
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False  # held: the writer is alive, on this host or another sharing the directory
    except OSError:  # no locks on this file system: only age tells
        return _age_s(stage) > UNLOCKED_AGE_S
    finally:
        os.close(fd)  # (releases the lock taken above)
    return True


def sweep_abandoned(directory: Path) -> list[str]:
    """Remove staging directories whose writer is gone (killed mid-conversion), and earlier
    versions' fixed-name temporary files an hour untouched; what was removed. A staging
    directory whose writer holds its lock is left alone, wherever that writer runs."""
    removed: list[str] = []
    try:
        entries = list(directory.iterdir())
    except OSError:
        return removed
    for entry in entries:
        try:
            if entry.name.startswith(STAGING_PREFIX) and entry.is_dir() and not entry.is_symlink() and writer_gone(entry):
                shutil.rmtree(entry, ignore_errors=True)
                removed.append(entry.name)
            elif LEGACY_TMP.fullmatch(entry.name) and entry.is_file() and _age_s(entry) > LEGACY_AGE_S:
                entry.unlink()
                removed.append(entry.name)
        except OSError:
            continue
    return removed


def require_free_space(directory: Path, need_bytes: int, what: str) -> None:
    """Raise NotEnoughDiskSpace unless the file system holding `directory` has `need_bytes` free
    beyond the headroom."""
    directory.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(directory).free
    wanted = int(need_bytes * (1 + HEADROOM_FRACTION)) + HEADROOM_BYTES
    if free < wanted:
        raise NotEnoughDiskSpace(
            f"not enough disk space for {what}: it needs about {wanted / MIB:,.0f} MiB in {directory} "
            f"({need_bytes / MIB:,.0f} MiB estimated, plus headroom) and {free / MIB:,.0f} MiB are free; "
            f"nothing was written (free space, or set DEVICEFIT_DATA_DIR to a larger disk)")


def _free_bytes(path: Path) -> int:
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return 1 << 62


def read_json_object(path: Path, required: tuple[str, ...] = ()) -> dict[str, Any] | None:
    """A cache entry's metadata: the JSON object in `path` holding the `required` keys, or None
    where it is absent, unreadable or short of them. Metadata is written last, so an entry
    without readable metadata is not known whole and is converted again."""
    try:
        cached = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return cached if isinstance(cached, dict) and all(k in cached for k in required) else None


def mark_used(metadata: Path) -> None:
    """Record a read of a cached entry on its metadata's mtime, which `devicefit cache prune
    --unused-days` goes by (a cache shared read-only is still read, just never marked)."""
    try:
        os.utime(metadata)
    except OSError:
        pass


@contextmanager
def staging(directory: Path, what: str) -> Iterator[Path]:
    """A fresh directory beside the cache's files (same file system, so moving out of it is a
    rename) to write `what` into. Removed on leaving, whatever happened; a disk that filled while
    writing is NotEnoughDiskSpace naming `what`."""
    directory.mkdir(parents=True, exist_ok=True)
    sweep_abandoned(directory)
    stage = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=directory))
    lock = os.open(stage / WRITER_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            pass  # a file system without locks: the sweep goes by age there
        yield stage
    except NotEnoughDiskSpace:
        raise
    except Exception as exc:
        # The disk is read while the partial files still hold their space: OpenVINO's serializer
        # says only "basic_ios::clear: iostream error", and a full disk elsewhere (a temporary
        # directory on its own file system) must not be blamed on this one.
        free = _free_bytes(stage)
        if free < FULL_BELOW_BYTES or (is_disk_full(exc) and free < HEADROOM_BYTES):
            raise NotEnoughDiskSpace(f"the disk holding {directory} filled while writing {what}; the partial files were "
                                     f"removed ({type(exc).__name__}: {exc})") from exc
        if is_disk_full(exc):
            raise NotEnoughDiskSpace(f"a disk filled while writing {what}, not the one holding {directory} ({free / MIB:,.0f} MiB "
                                     f"free there; the error names the file): {type(exc).__name__}: {exc}") from exc
        raise
    finally:
        os.close(lock)
        shutil.rmtree(stage, ignore_errors=True)


def weight_bytes(module, bytes_per_parameter: float = 4.0) -> int:
    """The parameters and buffers of a torch module at `bytes_per_parameter` each: what a
    conversion of it to a file at that precision writes, about."""
    count = sum(p.numel() for p in module.parameters()) + sum(b.numel() for b in module.buffers())
    return int(count * bytes_per_parameter)
