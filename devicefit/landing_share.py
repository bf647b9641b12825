"""Landing files through storage both sides reach: the fleet's hand-over to the single writer.

A worker measures on its own host and writes its landing file (and its device record) into its
own data directory, as every partition does. With DEVICEFIT_LANDING_URL set (any fsspec/UPath
location: `file:///mnt/fleet`, `s3://bucket/devicefit`, `sftp://host/srv/devicefit`), each file
written is also pushed to `<url>/raw/...`, and the writer's load first pulls from there every file
whose bytes it does not hold yet, then loads its own raw/ as always. Unset (the default), a
shared DEVICEFIT_DATA_DIR does the same job: nothing here runs.

A file appears on the share whole or not at all: it is written under a hidden temporary name in
the same directory, then moved into place; the loader never reads hidden names. Pulled files are
written locally the same way. A file the loader quarantined is not pulled again while the share
holds the same bytes, so one bad file is reported once, not at every load; nor is one it retired
to raw/superseded/ (a later run replaced it). A local file written
after the share's copy (its `written_at`, a device record's `registered_at`) is kept: a partition
measured again while the share could not be written has the newer run locally, and the share's
older copy replaced it (and its rows in the store) at the next load. A file over the
landing size cap is the exception: it is never read, so nothing of it is held locally to compare,
and each load reports it again (as `share:<name>`, "left on the share, not read") until it is
removed from the share."""
from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from devicefit.errors import DevicefitError

SHARE_ENV = "DEVICEFIT_LANDING_URL"
RAW = "raw"
DEVICES = "devices"  # devicefit.landing.DEVICES_DIR
QUARANTINE = "quarantine"  # devicefit.landing.QUARANTINE_DIR
SUPERSEDED = "superseded"  # devicefit.landing.SUPERSEDED_DIR
MAX_LANDING_BYTES = 256 * 2**20  # devicefit.landing.MAX_LANDING_BYTES (which imports this module)


class LandingShareError(DevicefitError, OSError):
    """The landing share cannot be reached or written (its URL and the reason)."""

    exit_code = 1


def share_url() -> str | None:
    return os.environ.get(SHARE_ENV, "").strip() or None


def _root(url: str):
    from upath import UPath

    try:
        return UPath(url)
    except (ValueError, ImportError) as exc:  # an unknown protocol, or its fsspec package missing
        raise LandingShareError(f"{SHARE_ENV}={url!r} is not a location fsspec can open: {exc}") from None


def push(local: Path, raw_dir: Path, url: str | None = None) -> str | None:
    """Copy `local` (a file under `raw_dir`) to the same place under `<url>/raw/`; the share's
    path, or None with no share configured."""
    url = url or share_url()
    if url is None:
        return None
    relative = Path(local).resolve().relative_to(Path(raw_dir).resolve())
    target = _root(url).joinpath(RAW, *relative.parts)
    temporary = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary.write_bytes(Path(local).read_bytes())
        temporary.rename(target)
    except OSError as exc:
        try:
            temporary.unlink(missing_ok=True)
        except OSError:
            pass
        raise LandingShareError(f"cannot write {relative} to the landing share {url} ({type(exc).__name__}: {exc})") from None
    return str(target)


def shared_copy(name: str, url: str | None = None) -> bytes | None:
    """The bytes of the share's landing file `name` (under `<url>/raw/`); None with no share
    configured, no such file, or one over the landing size cap (never read). LandingShareError
    when the share cannot be read."""
    url = url or share_url()
    if url is None:
        return None
    remote = _root(url) / RAW / name
    try:
        if not remote.is_file() or remote.stat().st_size > MAX_LANDING_BYTES:
            return None
        return remote.read_bytes()
    except OSError as exc:
        raise LandingShareError(f"cannot read {name} on the landing share {url} ({type(exc).__name__}: {exc})") from None


@dataclass
class PullReport:
    pulled: list[str] = field(default_factory=list)  # paths under raw/ copied from the share
    unchanged: int = 0
    still_quarantined: list[str] = field(default_factory=list)  # bad files the share still holds
    still_superseded: list[str] = field(default_factory=list)  # files a later run replaced here, which the share still holds
    too_large: list[tuple[str, str]] = field(default_factory=list)  # (path under raw/, reason): files never read
    kept_newer: list[str] = field(default_factory=list)  # paths under raw/ whose local copy was written after the share's


def _listing(directory) -> list:
    if not directory.is_dir():  # nothing pushed there yet
        return []
    return [p for p in directory.iterdir() if p.name.endswith(".json") and not p.name.startswith(".") and p.is_file()]


def held_in(directory: Path, name: str, data: bytes) -> Path | None:
    """Where these bytes are held in `directory` under `name` or one of its numbered names
    (`name.1.json`, ...: the quarantine and raw/superseded/ keep each file of a name), or None."""
    stem, suffix = Path(name).stem, Path(name).suffix
    candidate, n = directory / name, 0
    while candidate.is_file():
        if candidate.read_bytes() == data:
            return candidate
        n += 1
        candidate = directory / f"{stem}.{n}{suffix}"
    return None


def _written(data: bytes) -> datetime | None:
    """When the bytes of a landing document or device record say they were written (None: unreadable)."""
    from devicefit.results_io import written_at

    try:
        return written_at(json.loads(data))
    except (ValueError, RecursionError):
        return None


def _local_is_newer(local: Path, data: bytes) -> bool:
    """Whether the local copy says it was written after the share's bytes (both must say when)."""
    ours, theirs = _written(local.read_bytes()), _written(data)
    return ours is not None and theirs is not None and ours > theirs


def pull(raw_dir: Path, url: str | None = None) -> PullReport:
    """Copy into `raw_dir` every landing file and device record of the share whose bytes differ
    from the local copy, unless the local copy was written after it; nothing with no share
    configured."""
    url = url or share_url()
    report = PullReport()
    if url is None:
        return report
    root = _root(url) / RAW
    try:
        for sub in ((), (DEVICES,)):
            local_dir = Path(raw_dir).joinpath(*sub)
            for remote in _listing(root.joinpath(*sub)):
                if (size := remote.stat().st_size) > MAX_LANDING_BYTES:  # read whole, it would take the writer's memory
                    report.too_large.append(("/".join((*sub, remote.name)), f"{url}: {'/'.join((RAW, *sub, remote.name))} is "
                                             f"{size / 2**20:,.0f} MiB, over the {MAX_LANDING_BYTES // 2**20} MiB a landing "
                                             f"document may hold; left on the share, not read"))
                    continue
                data = remote.read_bytes()
                local = local_dir / remote.name
                if local.is_file() and local.read_bytes() == data:
                    report.unchanged += 1
                    continue
                if local.is_file() and _local_is_newer(local, data):
                    report.kept_newer.append("/".join((*sub, remote.name)))
                    try:  # the share gets the newer run too, so nothing read from it later takes the older
                        push(local, raw_dir, url)
                    except LandingShareError:
                        pass  # the local copy is kept either way; the next load tries again
                    continue
                if held_in(local_dir / QUARANTINE, remote.name, data) is not None:
                    report.still_quarantined.append("/".join((*sub, remote.name)))
                    continue
                if held_in(local_dir / SUPERSEDED, remote.name, data) is not None:
                    # a later run replaced it here (the loader retired it): pulled back, it was
                    # loaded and retired again at every load, saying so each time
                    report.still_superseded.append("/".join((*sub, remote.name)))
                    continue
                local_dir.mkdir(parents=True, exist_ok=True)
                temporary = local_dir / f".{remote.name}.{uuid.uuid4().hex}.tmp"
                temporary.write_bytes(data)
                if not sub and remote.name.startswith("ingest"):
                    # the share's time, not the pull's: ingested files load in the order they were
                    # landed (devicefit.landing._load_order). Not a device record's: its time says
                    # when the worker wrote it, which registration compares with the store's.
                    try:
                        landed = float(remote.stat().st_mtime)
                        if landed > 0:  # 0: a store that keeps no time (universal_pathlib's default)
                            os.utime(temporary, (landed, landed))
                    except (AttributeError, TypeError, ValueError, OSError):
                        pass
                os.replace(temporary, local)
                report.pulled.append("/".join((*sub, remote.name)))
    except OSError as exc:
        raise LandingShareError(f"cannot read the landing share {url} ({type(exc).__name__}: {exc})") from None
    return report
