"""Writing converted models into the on-disk caches (<data>/cache/onnx, openvino, openvino-genai):
whole or not at all, and never onto a disk that cannot hold them.

A converted model is as large as its weights (clip-vit-base-patch32: 600 MB of fp32 ONNX). Written
straight to a fixed temporary name, a conversion that ran out of disk left its partial file
behind, holding the space every later config needed, and two workers converting the same model
wrote into one file. Here every write goes to a staging directory of its own beside the cache:
moved into place when complete, removed when anything fails, and swept at the next staging on
this host when its process was killed. Before writing, the free space is checked against the
conversion's estimated size, so a disk that cannot hold it is a failed row saying so (and the
next config runs), not a half-written file.
"""
from __future__ import annotations

import errno
import os
import re
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from models.errors import DevicefitError

MIB = 1024 * 1024
# Beyond the estimate: the file formats' own overhead (graph, names, alignment) and room for the
# store, the landing files and the logs of the run that asked.
HEADROOM_BYTES = 64 * MIB
HEADROOM_FRACTION = 0.05
# A write that failed with less than this left free failed for want of space, whatever it said.
FULL_BELOW_BYTES = 1 * MIB
_STAGING = re.compile(r"\.staging-(?P<host>[A-Za-z0-9_.-]+)-(?P<pid>\d+)-[a-z0-9_]+")
# The temporary names of earlier versions (fixed per file, never cleaned): swept once an hour old.
_LEGACY_TMP = re.compile(r"\..+\.(onnx\.tmp|tmp\.xml|tmp\.bin)")
LEGACY_AGE_S = 3600.0


class NotEnoughDiskSpace(DevicefitError):
    """The disk holding a cache cannot take a conversion: the row fails naming both figures."""
    exit_code = 1
    http_status = 507


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9_.]", "_", socket.gethostname())[:40] or "host"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_abandoned(directory: Path) -> list[str]:
    """Remove staging directories of this host's dead processes, and earlier versions' fixed-name
    temporary files an hour untouched; what was removed. Staging of another host (a shared data
    directory) or of a live process is left alone."""
    removed: list[str] = []
    try:
        entries = list(directory.iterdir())
    except OSError:
        return removed
    host, now = _host(), time.time()
    for entry in entries:
        staging = _STAGING.fullmatch(entry.name)
        try:
            if staging and staging["host"] == host and not _alive(int(staging["pid"])):
                shutil.rmtree(entry, ignore_errors=True)
                removed.append(entry.name)
            elif _LEGACY_TMP.fullmatch(entry.name) and entry.is_file() and now - entry.stat().st_mtime > LEGACY_AGE_S:
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


def disk_full(exc: BaseException) -> bool:
    """Whether `exc`, or an error it was raised from, is the disk being full. Converters written in
    C++ (onnx's protobuf writer, OpenVINO's serializer) say it only in their message."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        text = str(exc).lower()
        if (isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)) or "no space left on device" in text \
                or "disk quota exceeded" in text:
            return True
        exc = exc.__cause__ or exc.__context__
    return False


@contextmanager
def staging(directory: Path, what: str) -> Iterator[Path]:
    """A fresh directory beside the cache's files (same file system, so moving out of it is a
    rename) to write `what` into. Removed on leaving, whatever happened; a disk that filled while
    writing is NotEnoughDiskSpace naming `what`."""
    directory.mkdir(parents=True, exist_ok=True)
    sweep_abandoned(directory)
    stage = Path(tempfile.mkdtemp(prefix=f".staging-{_host()}-{os.getpid()}-", dir=directory))
    try:
        yield stage
    except Exception as exc:
        # OpenVINO's serializer says only "basic_ios::clear: iostream error": the disk is read
        # while the partial files still hold their space.
        if disk_full(exc) or _free_bytes(stage) < FULL_BELOW_BYTES:
            raise NotEnoughDiskSpace(f"the disk holding {directory} filled while writing {what}; the partial files were "
                                     f"removed ({type(exc).__name__}: {exc})") from exc
        raise
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def weight_bytes(module, bytes_per_parameter: float = 4.0) -> int:
    """The parameters and buffers of a torch module at `bytes_per_parameter` each: what a
    conversion of it to a file at that precision writes, about."""
    count = sum(p.numel() for p in module.parameters()) + sum(b.numel() for b in module.buffers())
    return int(count * bytes_per_parameter)
