"""Writing a sweep's rows as one self-describing JSON document, atomically."""
from __future__ import annotations

import errno
import json
import os
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmark_runners.records import BenchmarkResult
from devicefit.landing_bounds import finite_json

FORMAT = "devicefit.benchmark_results/1"


def results_document(run_id: str, results: list[BenchmarkResult], hardware: dict[str, Any]) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "run_id": run_id,
        "written_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "hardware": finite_json(hardware),
        "results": [finite_json(r.to_json()) for r in results],
    }


def written_at(document: Any) -> datetime | None:
    """When a results document (`written_at`) or a device record (`registered_at`) says it was
    written, as an aware UTC datetime; None where it says nothing readable of it."""
    try:
        written = datetime.fromisoformat(document.get("written_at") or document.get("registered_at"))
    except (ValueError, TypeError, AttributeError):
        return None
    return written if written.tzinfo is not None else written.replace(tzinfo=timezone.utc)


def write_json_atomic(path: Path, document: dict[str, Any]) -> None:
    """Temp file + rename: a reader never sees half a file, and a failed write keeps the old one."""
    write_text_atomic(path, json.dumps(document, indent=1))


def write_text_atomic(path: Path, text: str) -> None:
    """`text` to `path` through a temp file of its own beside it and a rename; a path that is a
    directory is refused naming it, and a failed write leaves no temp file behind."""
    path = Path(path)
    if path.is_dir():  # else the rename fails naming the temporary file, not the path the caller gave
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    if path.exists() and not path.is_file():
        # A device or a pipe (`--output /dev/stdout`, a FIFO): written to as a stream. The rename
        # would have put a regular file in its place (as root, /dev/full became the map's JSON).
        _write_stream(path, text)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp's 0600 would hide outputs from a server run by another user
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _write_stream(path: Path, text: str) -> None:
    """`text` into a character device or a FIFO at `path`; anything else that is not a regular
    file (a socket) is refused. A FIFO nothing reads is an error, not a wait for ever."""
    import stat

    mode = path.stat().st_mode
    if not (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):
        raise OSError(errno.EINVAL, "not a regular file, a device or a pipe (a socket?): nothing written", str(path))
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise OSError(errno.ENXIO, "a pipe that no process reads: nothing written", str(path)) from None
        raise
    os.set_blocking(fd, True)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)


def _umask() -> int:
    """This process's umask, read without setting it (os.umask sets it, for every thread at once);
    022 where /proc does not say."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022
