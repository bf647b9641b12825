"""`devicefit cache prune`: which of the entries benchmark_runners.conversion_cache lists a prune
removes (by state, age or model: a catalog or registered model's name, or a local model
directory's path), and their removal, metadata first, while no measurement on this machine may
read them."""
from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from benchmark_runners.cache_files import read_json_object
from benchmark_runners.conversion_cache import DERIVED, GENAI_METADATA, NEEDED, STEM, CacheEntry, derived_files, disk_bytes
from models.errors import DevicefitError

_VARIANT = re.compile(r"-(fp32_weights|int8_asym_weights)$")  # openvino_backend's variants, in its stems
# What prune removes unless told more: entries no run here would read, and abandoned staging.
UNREAD_STATES = ("stale", "incomplete", "abandoned")
_LOCK_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")  # the device locks' file names (lock_files)


class AmbiguousModel(DevicefitError):
    """`--model NAME` names local models of several directories (runs/v1/checkpoint-500 and
    runs/v2/checkpoint-500 are both 'checkpoint-500'): pruning all of them was never asked for."""


class CacheInUse(DevicefitError):
    """A measurement is running on this machine, and pruning entries it may read would fail its rows."""
    exit_code = 1
    http_status = 409


@dataclass
class PruneReport:
    removed: list[CacheEntry]
    kept: int
    freed_bytes: int
    dry_run: bool


def matches_model(entry: CacheEntry, model: str) -> bool:
    """The entry records `model`; or, recording none, its name is that model's file name and a key
    (never another model whose name begins with this one's: 'bert-tiny' vs 'bert-tiny-local')."""
    if entry.model is not None or entry.cache == DERIVED or (match := STEM.fullmatch(entry.name)) is None:
        return entry.model == model
    named = match["stem"][:-17]
    return (_VARIANT.sub("", named) if entry.cache == "openvino" else named) == model.replace("/", "_")


def model_entries(entries: list[CacheEntry], model: str) -> list[CacheEntry]:
    """The entries `--model` names. A local model directory's path names the entries recording
    that directory; a name names the entries of that name (matches_model), unless they record
    several directories (two local models share a directory name: runs/v1/checkpoint-500 and
    runs/v2/checkpoint-500), which is AmbiguousModel listing them: a prune of one model's entries
    removed every directory's of that name."""
    try:
        target = str(Path(model).expanduser().resolve())
    except (OSError, RuntimeError, ValueError):  # not a path at all (a NUL byte, a loop)
        target = None
    by_path = [e for e in entries if e.cache != DERIVED and e.model_path is not None and e.model_path == target]
    if by_path:
        return by_path
    by_name = [e for e in entries if e.cache != DERIVED and matches_model(e, model)]
    sources = {e.model_path for e in by_name if e.model is not None}
    if len(sources) > 1:
        where = ", ".join(sorted(p or "the catalog model" for p in sources))
        raise AmbiguousModel(f"cache entries of {len(sources)} models are named {model!r}: {where}; give the model "
                             "directory's path to --model to prune one")
    return by_name


def chosen(entries: list[CacheEntry], everything: bool = False, unused_days: float | None = None,
           model: str | None = None, now: float | None = None) -> list[CacheEntry]:
    """The entries a prune with these options removes: never one being written, never a file the
    layout does not explain. By default what no run reads (UNREAD_STATES); `everything`: all;
    `unused_days`: also what was not read or written for that long (the derived kinds' entries
    included); `model`: only that model's entries (model_entries: a name or a local model
    directory's path), all of them unless `unused_days` narrows it (never the derived cache,
    which names no model)."""
    now = time.time() if now is None else now
    named = None if model is None else {id(e) for e in model_entries(entries, model)}
    out = []
    for e in entries:
        if e.state in ("converting", "unrecognised"):
            continue
        if named is not None and id(e) not in named:
            continue
        unused = unused_days is not None and (e.last_used is None or now - e.last_used > unused_days * 86400)
        if everything or unused or (model is not None and unused_days is None) or (e.state in UNREAD_STATES and e.cache != DERIVED):
            out.append(e)
    return out


@contextmanager
def _no_measurement_running(needed: bool) -> Iterator[None]:
    """Hold every device lock this machine has (without waiting) while entries a run may read are
    removed; a lock held elsewhere is CacheInUse naming its holder."""
    if not needed:
        yield
        return
    from benchmark_runners.lock_files import DeviceBusy, hold_devices, lock_dir

    try:
        names = sorted(p.stem for p in lock_dir().glob("*.lock") if _LOCK_NAME.fullmatch(p.stem))
    except OSError:
        names = []
    try:
        with hold_devices(names, wait_s=0):
            yield
    except DeviceBusy as exc:
        raise CacheInUse(f"not pruning entries a measurement may read: {exc}. Prune after it ends, or prune only "
                         f"what no run reads (devicefit cache prune, without --all, --unused-days or --model)") from None


def _remove(entry: CacheEntry, derived_older_than: float | None) -> int:
    """Remove the entry's files, its metadata first (a reader then sees no entry, never half of
    one); bytes freed. A derived kind pruned by age loses only its entries older than that."""
    freed = 0
    if entry.cache == DERIVED:  # its entries' files only: the kind's directory may hold others'
        for path in derived_files(Path(entry.paths[0]), derived_older_than):
            try:
                size = path.lstat().st_blocks * 512
                path.unlink()
                freed += size
            except OSError:
                continue
        return freed
    paths = sorted((Path(p) for p in entry.paths), key=lambda p: not p.name.endswith(".json"))
    for path in paths:
        size, _ = disk_bytes(path)
        try:
            if path.is_dir() and not path.is_symlink():
                (path / GENAI_METADATA).unlink(missing_ok=True)
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
            freed += size
        except OSError:
            continue
    return freed


def prune(entries: list[CacheEntry], everything: bool = False, unused_days: float | None = None, model: str | None = None,
          dry_run: bool = False, on_remove: Callable[[CacheEntry], None] | None = None) -> PruneReport:
    """Remove what `chosen` picks. Entries a run could read (current, unknown, derived) are removed
    only while no measurement holds a device lock on this machine (CacheInUse otherwise)."""
    if unused_days is not None and not unused_days >= 0:
        raise ValueError(f"--unused-days must be a number of days >= 0, got {unused_days}")
    picked = chosen(entries, everything, unused_days, model)
    cutoff = None if everything or unused_days is None else time.time() - unused_days * 86400
    if dry_run:  # a derived kind pruned by age: only its entries older than that
        return PruneReport(picked, len(entries) - len(picked), sum(sum(disk_bytes(p)[0] for p in derived_files(Path(e.paths[0]), cutoff))
                                                                   if e.cache == DERIVED else e.size_bytes for e in picked), True)
    readable = any(e.state in ("current", "unknown") for e in picked)  # a derived entry read as it goes is computed again
    freed = 0
    removed = []
    with _no_measurement_running(readable):
        for entry in picked:
            if entry.state == "incomplete" and not (everything or model is not None) and _whole_now(entry):
                continue  # listed while its writer moved it into place (no lock taken): now read
            freed += _remove(entry, cutoff)
            removed.append(entry)
            if on_remove is not None:
                on_remove(entry)
    return PruneReport(removed, len(entries) - len(removed), freed, False)


def _whole_now(entry: CacheEntry) -> bool:
    """Whether an entry listed as incomplete is whole now (a conversion finished: its metadata moved in last)."""
    first = Path(entry.paths[0])
    if entry.cache == "openvino-genai":
        return read_json_object(first / GENAI_METADATA) is not None and (first / "openvino_model.xml").exists()
    return read_json_object(first.with_name(entry.name + ".json")) is not None and \
        all(first.with_name(entry.name + s).exists() for s in NEEDED[entry.cache])
