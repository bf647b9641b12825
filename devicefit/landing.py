"""Landing files: each partition (or ingested file) writes its rows to one JSON file under
data/raw/ by temp file + rename, so a file is either whole or absent. One loader moves them
into DuckDB; a file that fails validation is quarantined with its reason, never half-loaded."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from devicefit import store
from devicefit.landing_device import validated_device
from devicefit.landing_schema import REQUIRED_RESULT_FIELDS, LandingFileError, validated_rows
from devicefit.landing_share import MAX_LANDING_BYTES, pull, push
from devicefit.results_io import write_text_atomic

QUARANTINE_DIR = "quarantine"
SUPERSEDED_DIR = "superseded"  # landing files a newer partition replaced (kept, never loaded again)
__all__ = ["LandingFileError", "REQUIRED_RESULT_FIELDS", "LoadReport", "load_landing_files", "read_document",
           "validate_document", "write_landing", "quarantine", "landing_path", "safe_name",
           "superseded_landing", "retire_landing"]


def safe_name(source_key: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "__", source_key)


def landing_path(raw_dir: Path, source_key: str) -> Path:
    return Path(raw_dir) / f"{safe_name(source_key)}.json"


def write_landing(raw_dir: Path, source_key: str, document: dict[str, Any], share: bool = True) -> Path:
    """Validate and land `document` as `source_key`'s file; then push it to the fleet's landing
    share when one is configured (DEVICEFIT_LANDING_URL), unless `share` is False (the caller
    pushes: `devicefit ingest` lands every file of a directory before it pushes any)."""
    validate_document(document, f"rows for {source_key}")
    path = landing_path(raw_dir, source_key)
    text = json.dumps({**document, "source_key": source_key}, indent=1)
    try:
        same = path.is_file() and path.read_bytes() == text.encode()  # the same bytes keep their mtime: the load order (_load_order)
    except OSError:
        same = False  # unreadable here: replaced, as the rename allows
    if not same:
        write_text_atomic(path, text)
    if share:
        push(path, raw_dir)
    return path


def validate_document(document: Any, what: str) -> list[dict[str, Any]]:
    """Raise LandingFileError naming the first problem; accept only what the store can hold
    (each row against the `measurements` column types, see landing_schema). Returns the rows."""
    return validated_rows(document, what)


def read_document(path: Path, data: bytes | None = None) -> dict[str, Any]:
    """The validated document in `path` (whose bytes the caller may have read already)."""
    try:
        document = json.loads(Path(path).read_bytes() if data is None else data)
    except json.JSONDecodeError as exc:
        raise LandingFileError(f"{path}: not valid JSON ({exc})") from exc
    except UnicodeDecodeError as exc:
        raise LandingFileError(f"{path}: not UTF-8 text ({exc})") from exc
    except RecursionError:
        raise LandingFileError(f"{path}: JSON nested too deeply to read") from None
    validate_document(document, str(path))
    return document


def superseded_landing(raw_dir: Path, source_key: str, device_fingerprint: str, host: str | None) -> Path | None:
    """The landing file of `source_key` when every row in it was measured on this device of
    this host (a kind-level partition's file, "cpu|gpt2", or one under the device's id from
    before host-qualified ids, "openvino-4ebbcabb1705|gpt2", that a device partition now measures): the device partition's document says it supersedes that source, so the store
    keeps one partition's rows per device and model, not two runs' worth. None when there is no
    such file, when it holds rows of another device or host (copied from elsewhere: it stays),
    or when it does not validate (the loader quarantines it with its reason)."""
    from devicefit.store.loading import host_fingerprint, host_qualifier

    path = landing_path(raw_dir, source_key)
    try:
        document = read_document(path) if path.is_file() else None
    except (LandingFileError, OSError):
        return None
    if document is None or document.get("source_key", source_key) != source_key:
        return None
    _, qualify = host_qualifier(document)  # a file from before host-qualified ids names the device as this one does
    fingerprints = {qualify(str(r.get("device") or ""), r.get("hardware_fingerprint"), r.get("backend_config"))
                    for r in document["results"]} - {None}
    written_on = host_fingerprint(document)
    if not fingerprints <= {device_fingerprint} or (written_on and host and written_on != host):
        return None
    return path


def retire_landing(path: Path) -> Path:
    """Move a superseded landing file out of the loader's way (raw/superseded/), keeping it: a
    name retired before (a partition's file, or an ingested copy's, retired at each later run)
    gets a numbered one (`name.1.json`), as quarantine does; the same bytes retired before are
    not kept twice. os.replace onto the name lost the run retired before it."""
    from devicefit.landing_share import held_in

    target_dir = path.parent / SUPERSEDED_DIR
    target_dir.mkdir(parents=True, exist_ok=True)
    data = path.read_bytes()
    if (kept := held_in(target_dir, path.name, data)) is not None:
        path.unlink()
        return kept
    target = target_dir / _unused_name(target_dir, path.name)
    os.replace(path, target)
    return target


def _unused_name(directory: Path, name: str, *companions: str) -> str:
    """`name`, or its first numbered form (`name.1.json`, ...) that neither it nor a companion
    (`<it><companion>`, a quarantined file's `.reason.txt`) takes in `directory`."""
    candidate, n = name, 0
    while any(os.path.lexists(directory / f"{candidate}{c}") for c in ("", *companions)):
        n += 1
        candidate = f"{Path(name).stem}.{n}{Path(name).suffix}"
    return candidate


def quarantine(path: Path, reason: str) -> Path:
    """Move `path` into the quarantine beside it, with its reason in `<name>.reason.txt`. A name
    already quarantined (the same partition's file refused twice) gets a numbered one
    (`name.1.json`), so an earlier file and its reason are never overwritten."""
    target_dir = path.parent / QUARANTINE_DIR
    target_dir.mkdir(parents=True, exist_ok=True)
    name = _unused_name(target_dir, path.name, ".reason.txt")
    target = target_dir / name
    shutil.move(str(path), target)
    (target_dir / f"{name}.reason.txt").write_text(reason + "\n")
    return target


@dataclass
class LoadReport:
    loaded: list[tuple[str, int]] = field(default_factory=list)  # (source_key, rows stored)
    unchanged: list[str] = field(default_factory=list)
    quarantined: list[tuple[str, str]] = field(default_factory=list)  # (file, reason)
    # (source_key, rows skipped): rows whose (run_id, config_key) another source already holds
    duplicates: list[tuple[str, int]] = field(default_factory=list)
    differing: dict[str, int] = field(default_factory=dict)  # source_key: its skipped rows whose figures differ from the stored
    # (older source, the source that replaced it): kind-level partitions a device partition re-measured,
    # and a partition's own file or an ingested copy of it holding an earlier run than the other
    superseded: list[tuple[str, str]] = field(default_factory=list)
    devices_registered: list[str] = field(default_factory=list)  # new devices from raw/devices/
    pulled: list[str] = field(default_factory=list)  # files copied from the landing share before loading
    kept_newer: list[str] = field(default_factory=list)  # local files written after the share's copy: not replaced by it
    # (source_key, fingerprint, stamp): probes stamped past the store's clock, not taken as newer than a stamped one
    future_probes: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def rows_loaded(self) -> int:
        return sum(n for _, n in self.loaded)

    @property
    def duplicate_rows(self) -> int:
        return sum(n for _, n in self.duplicates)

    def duplicate_lines(self) -> list[str]:
        """What a load says of each source whose rows were skipped as another source's, one line
        each (`devicefit ingest` prints them, the benchmark_results asset logs them)."""
        return [f"skipped {skipped} rows of {key}: already stored by another source (same run_id and config_key), not stored twice"
                + (f"; {self.differing[key]} of them hold other figures than the stored rows, which are kept (the first source "
                   "to store a row owns it)" if self.differing.get(key) else "")
                for key, skipped in self.duplicates]

    def superseded_lines(self) -> list[str]:
        """What a load says of each source a later run replaced, one line each (`devicefit
        ingest` prints them, the benchmark_results asset logs them): its rows are out of the
        store (their samples stay in its history) and its file is kept in raw/superseded/."""
        return [f"{old}: replaced by {new}, a later run of the same device and model on the same machine; its rows are out "
                f"of the store, its file kept in raw/{SUPERSEDED_DIR}/" for old, new in self.superseded]

    def future_probe_lines(self) -> list[str]:
        """What a load says of each probe it met stamped past the store's clock, one line each
        (`devicefit ingest` prints them, the benchmark_results asset logs them)."""
        return [future_probe_line(*found) for found in self.future_probes]

    def future_probe_rows(self) -> list[dict[str, str]]:
        """The same probes as records (the benchmark_results asset's `future_probes` metadata)."""
        return [{"source": key, "fingerprint": fingerprint, "stamp": stamp} for key, fingerprint, stamp in self.future_probes]


def future_probe_line(source_key: str, fingerprint: str, stamp: str) -> str:
    """The line naming a probe stamped past the store's clock (devicefit.store.devices.kept_probe)."""
    return (f"{source_key}: the probe of {fingerprint} is stamped {stamp}, more than a day past this machine's clock: "
            "never kept over a probe with a believable stamp (or none), whatever either's contention")


def _origin(source_key: str) -> str:
    return "ingest" if source_key.startswith("ingest:") else "partition"


def _load_order(path: Path) -> tuple[bool, float, str]:
    """Partition files before ingested ones: the first source to store a row owns it, so a
    partition's own rows stay its own when a copy of them was ingested too. Ingested files in
    the order they were landed (their mtime), so a store rebuilt from raw/ gives a row to the
    source that held it before; by name (a hash) the owner flipped to whichever sorted first.
    Landing the same bytes again keeps the time (write_landing), a file pulled from the landing
    share takes the share's; a copy of raw/ must keep the times (`cp -p`, rsync -t)."""
    ingested = path.name.startswith("ingest")
    try:
        landed = path.stat().st_mtime if ingested else 0.0
    except OSError:
        landed = 0.0
    return (ingested, landed, path.name)


def load_landing_files(database: store.Source, raw_dir: Path) -> LoadReport:
    """Load every landing file whose content changed since its last load; quarantine bad ones
    with their reason and go on with the rest. A failure of the machine (disk full, I/O) stops
    the load with StoreError and leaves the file in place for the next run; each source is one
    transaction, so the store is never half-written. `database`: a path (opened and closed
    here, the close checked) or the caller's writable connection (the pipeline's)."""
    pulled = pull(Path(raw_dir))  # what workers elsewhere pushed to the landing share, if one is configured
    if not isinstance(database, (str, Path)):
        store.migrate(database)
        report = _load(database, Path(raw_dir), pulled.pulled)
    else:
        con = store.connect(database)
        failed = True
        try:
            store.migrate(con)
            report = _load(con, Path(raw_dir), pulled.pulled)
            failed = False
        finally:
            store.close(con, database, failed)
    report.quarantined += [(f"share:{name}", reason) for name, reason in pulled.too_large]
    report.kept_newer = pulled.kept_newer
    return report


DEVICES_DIR = "devices"  # raw/devices/<device id>.json: devices workers serve, registered at each load


def _host_qualified_record(device: dict[str, Any]) -> dict[str, Any]:
    """A device record written before host-qualified ids (an OpenVINO CPU plugin served as
    openvino-4ebbcabb1705) under the id detection gives it now, by the record's own host, so it
    registers the device its rows load under rather than the id every host shared."""
    from benchmark_runners.hardware.inventory import qualify_host_runtimes

    old = device["hardware_fingerprint"]
    described = {**(device.get("details") or {}), "fingerprint": old}
    described.setdefault("name", device.get("name"))
    qualify_host_runtimes({"cpu": [{"fingerprint": device.get("host_fingerprint")}], device["kind"]: [described]})
    new = described["fingerprint"]
    return device if new == old else {**device, "id": new + device["id"][len(old):], "hardware_fingerprint": new}


def _register_device_files(con, raw_dir: Path, report: "LoadReport") -> None:
    """Register (or refresh) the devices that workers wrote beside the landing files, so a
    device is in the fleet, with its own probe, before its first rows arrive. A bad file is
    quarantined with its reason, as a bad landing file is."""
    for path in sorted((raw_dir / DEVICES_DIR).glob("*.json")) if (raw_dir / DEVICES_DIR).is_dir() else []:
        if (why := _not_a_file(path)) is not None:
            _set_aside(path, why, f"{DEVICES_DIR}/{path.name}", report)
            continue
        try:
            try:
                document = json.loads(path.read_bytes())
            except (ValueError, RecursionError) as exc:
                raise LandingFileError(f"{path}: not a JSON device record ({type(exc).__name__})") from None
            device = _host_qualified_record(validated_device(document, str(path)))
            seen = con.execute("SELECT last_seen FROM devices WHERE id = ?", [device["id"]]).fetchone()
            written = datetime.fromtimestamp(path.stat().st_mtime, timezone.utc).replace(tzinfo=None)
            if seen and seen[0] >= written:
                continue  # registered since the worker wrote it: last_seen stays the worker's
            if store.register_device(con, device):
                report.devices_registered.append(device["id"])
        except LandingFileError as exc:
            quarantine(path, str(exc))
            report.quarantined.append((f"{DEVICES_DIR}/{path.name}", str(exc)))


def too_large(path: Path) -> str | None:
    """Why `path` is too large to be read as a landing document, or None. Every load reads each
    file whole: a file of gigabytes (a log or a dump saved under a *.json name) would take the
    pipeline's memory with it. A partition's file holds tens of kilobytes to a few megabytes."""
    try:
        size = path.stat().st_size
    except OSError:
        return None
    if size <= MAX_LANDING_BYTES:
        return None
    return (f"{path}: {size / 2**20:,.0f} MiB, over the {MAX_LANDING_BYTES // 2**20} MiB a landing document may hold "
            f"(a partition's file is tens of KB to a few MB); not read")


def _not_a_file(path: Path) -> str | None:
    """Why `path` (an entry of raw/ named *.json) is no landing file, or None for a readable regular
    file: a directory, a broken symlink, a pipe or a device would stop every load (or block it),
    and a file of gigabytes would be read whole."""
    if path.is_file():
        return too_large(path)
    what = "a broken symlink" if path.is_symlink() and not path.exists() else \
        "a directory" if path.is_dir() else "not a regular file (a pipe, socket or device)"
    return f"{path}: {what}, not a landing file"


def _set_aside(path: Path, reason: str, shown: str, report: "LoadReport") -> None:
    """Quarantine `path` with its reason; where even the move fails, leave it and say so."""
    try:
        quarantine(path, reason)
    except OSError as exc:
        reason = f"{reason} (left in place: {type(exc).__name__}: {exc})"
    report.quarantined.append((shown, reason))


def _claimed_key(con, path: Path) -> str | None:
    """The source key the file at `path` loads under, read cheaply; None when it cannot be read
    (the load then quarantines it with the full reason)."""
    try:
        data = path.read_bytes()
        loaded = store.source_loaded_from(con, str(path), hashlib.sha256(data).hexdigest())
        if loaded is not None:
            return loaded
        document = json.loads(data)
    except (OSError, ValueError, RecursionError):
        return None
    key = document.get("source_key") if isinstance(document, dict) else None
    return key if isinstance(key, str) and key else path.stem


def _shadowed(con, raw_dir: Path, files: list[Path]) -> dict[Path, Path]:
    """Files that claim the source key of another file in raw/ ({copy: the file that keeps the
    key}). Two files loading under one key replace each other's rows at every load, the last in
    name order winning (an older copy, `partition__cpu__gpt2.old.json`, took the newer rows out):
    the file at the key's own landing path keeps it, else the first in load order."""
    by_key: dict[str, list[Path]] = {}
    for path in files:
        key = _claimed_key(con, path)
        if key is not None:
            by_key.setdefault(key, []).append(path)
    out = {}
    for key, claimants in by_key.items():
        if len(claimants) > 1:
            own = landing_path(raw_dir, key)
            keeper = own if own in claimants else claimants[0]
            out.update({p: keeper for p in claimants if p != keeper})
    return out


def _load(con, raw_dir: Path, pulled: list[str] | None = None) -> LoadReport:
    report = LoadReport(pulled=list(pulled or []))
    _register_device_files(con, raw_dir, report)
    files = []
    for path in sorted(raw_dir.glob("*.json"), key=_load_order) if raw_dir.is_dir() else []:
        if (why := _not_a_file(path)) is not None:
            _set_aside(path, why, path.name, report)
        else:
            files.append(path)
    shadowed = _shadowed(con, raw_dir, files)
    for path in files:
        if path in shadowed:
            _set_aside(path, f"{path}: holds the same source as {shadowed[path].name}, which is loaded instead (two files "
                             f"of one source would replace each other's rows at every load)", path.name, report)
            continue
        if not path.exists():  # retired by a document loaded before it (below)
            continue
        data = path.read_bytes()
        sha = hashlib.sha256(data).hexdigest()
        unchanged = store.source_loaded_from(con, str(path), sha)
        if unchanged is not None:  # loaded before, byte for byte: no need to parse it again
            report.unchanged.append(unchanged)
            continue
        try:
            document = read_document(path, data)
            source_key = document.get("source_key") or path.stem
            if store.source_sha(con, source_key) == sha:
                report.unchanged.append(source_key)
                continue
            loaded = store.replace_source(con, source_key, _origin(source_key), document, str(path), sha)
            if loaded.superseded_by is not None:  # an older partition's file, turned up after its successor's
                report.superseded.append((source_key, loaded.superseded_by))
                retire_landing(path)
                continue
            report.loaded.append((source_key, loaded.rows))
            report.future_probes += [(source_key, fp, stamp) for fp, stamp in loaded.future_probes.items()]
            if loaded.duplicates:
                report.duplicates.append((source_key, loaded.duplicates))
            if loaded.differing:
                report.differing[source_key] = loaded.differing
            report.superseded += [(old, source_key) for old in loaded.superseded]
            for old in loaded.superseded:  # its file too, where the partition stopped before retiring it
                if (stale := landing_path(raw_dir, old)).is_file():
                    retire_landing(stale)
        except LandingFileError as exc:
            quarantine(path, str(exc))
            report.quarantined.append((path.name, str(exc)))
    return report
