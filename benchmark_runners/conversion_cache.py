"""What the on-disk caches hold and which entries can go: `devicefit cache` and `devicefit cache prune`.

A converted model (<data>/cache/onnx, openvino, openvino-genai) is keyed by everything that
shapes it, the tool versions and a digest of the conversion's own code among them. That makes a
cached file safe to reuse, and it also means that an upgrade of torch, transformers, OpenVINO or
optimum-intel, or a change to a recipe, leaves every earlier entry behind, never read again: one
quick run of the catalog converts about 3.6 GB. Each entry's metadata records the identity its
key was made from, so an entry is judged by reading it, never by guessing from its name:

- current: this installation would read it;
- stale: it records another tool version or recipe than this installation's; a local model
  directory that is gone, no longer loads, or holds another config or other weights now; or a
  catalog model that is gone or whose config has changed since: never read again here;
- incomplete: no readable metadata, or a file it needs is missing (a conversion that stopped
  half-way before staging existed): never read, converted again;
- unknown: its metadata does not say what made it (or does not hash to its key), or its converter
  cannot run here now (a package missing or broken, the export venv absent or not answering);
- converting / abandoned: a staging directory whose writer holds its lock, or whose writer is gone.

The derived-facts cache (models.derived_cache: traces and counts, per code version) is listed by
kind; it bounds itself, so only `--all` or `--unused-days` prune it. Files the layout does not
explain are listed and never removed. Which entries a prune removes, and the removal itself, are
benchmark_runners.cache_prune's.
"""
from __future__ import annotations

import importlib
import json
import os
import re
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmark_runners.cache_files import LEGACY_AGE_S, LEGACY_TMP, STAGING_PREFIX, read_json_object, writer_gone

# The conversion caches: name -> (module with cache_dir() and installation_identity(), layout).
# "files": an entry is the regular files <stem><suffix> with a suffix its converter writes
# (_SUFFIXES), its metadata <stem>.json; "dirs": an entry is the directory <stem>, its metadata inside.
CONVERSIONS: dict[str, tuple[str, str]] = {
    "onnx": ("benchmark_runners.browser.export", "files"),
    "openvino": ("benchmark_runners.backends.openvino_backend", "files"),
    "openvino-genai": ("benchmark_runners.backends.openvino_genai", "dirs"),
}
GENAI_METADATA = "devicefit-export.json"
# The files an entry is not whole without, by cache: its main file(s) beside the metadata.
NEEDED = {"onnx": (".onnx", ".reference.npy"), "openvino": (".xml", ".bin", ".reference.npy")}
STEM = re.compile(r"(?P<stem>.+-(?P<key>[0-9a-f]{16}))(?P<suffix>[.-].*)?")
_SUFFIXES = {"onnx": re.compile(r"\.onnx|\.reference\.npy|\.json|-int8-dynamic-matmul\.onnx|-fp16\.onnx|-fp16\.json"),
             "openvino": re.compile(r"\.xml|\.bin|\.json|\.reference\.npy|\.reference-[a-z0-9]+\.npy")}
_DERIVED_FILE = re.compile(r"[0-9a-f]{24}\.json")  # models.derived_cache.entry_path's names
DERIVED = "derived"


@dataclass
class CacheEntry:
    cache: str  # onnx | openvino | openvino-genai | derived
    name: str  # the entry's stem or directory (derived: its kind)
    state: str  # current | stale | incomplete | unknown | converting | abandoned | unrecognised | derived
    reason: str  # why, for every state but current
    model: str | None
    size_bytes: int  # on disk
    last_used: float | None  # the metadata's mtime: written, or last read (cache_files.mark_used)
    files: int
    paths: list[str]
    model_path: str | None = None  # the local model directory its identity records (None: a catalog model, or none recorded)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "last_used": None if self.last_used is None else
                time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.last_used))}


def disk_bytes(path: Path) -> tuple[int, int]:
    """Bytes on disk and file count under `path` (a file or a directory), links not followed."""
    try:
        if not path.is_dir() or path.is_symlink():
            st = path.lstat()
            return st.st_blocks * 512, 1
    except OSError:
        return 0, 0
    total = count = 0
    for root, _dirs, names in os.walk(path):
        for name in names:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
                count += 1
            except OSError:
                continue
    return total, count


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def _normal(value: Any) -> Any:
    """As the key's JSON sees it (tuples as lists, other objects as text)."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def _key_of(identity: dict[str, Any]) -> str:
    import hashlib

    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _model_reason(identity: dict[str, Any], catalog: dict[str, Any]) -> str | None:
    """Why no model here has this identity any more: its directory is gone, no longer loads, or
    holds another config or other weights than it did; a catalog model of that name is gone or
    its config has changed (None: the model is still what it was)."""
    from models.errors import DevicefitError as ModelError
    from models.loading import weights_kind
    from models.resolve import model_at_path

    path, name = identity.get("path"), identity.get("model")
    if path:
        if not Path(path).is_dir():
            return f"its model directory {path} is gone"
        try:
            spec = model_at_path(str(path))
        except (ModelError, OSError, ValueError) as exc:
            return f"its model directory {path} no longer loads ({exc})"
        if spec is None:
            return f"{path} is no longer a model directory"
        if _normal(spec.config) != _normal(identity.get("config")):
            return f"the config of {path} has changed since"
        if weights_kind(spec) != identity.get("weights"):
            return f"{path} holds {weights_kind(spec)} weights now, {identity.get('weights')} when converted"
        return None
    spec = catalog.get(name)
    if spec is None:
        return f"no catalog model is named {name} any more"
    if _normal(spec.config) != _normal(identity.get("config")):
        return f"the catalog's config of {name} has changed since"
    return None


def _judge(identity: Any, key: str, installed: dict[str, Any] | str, catalog: dict[str, Any]) -> tuple[str, str]:
    if isinstance(installed, str):  # its converter cannot run here now: kept unless asked (it may again)
        return "unknown", installed
    if not isinstance(identity, dict) or _key_of(identity) != key:
        return "unknown", "its metadata does not record the identity its key was made from (an earlier version's entry)"
    changed = [f"{field} {identity.get(field)!r} (here: {value!r})" for field, value in _normal(installed).items()
               if _normal(identity.get(field)) != value]
    if changed:
        return "stale", "made with " + ", ".join(changed)
    if (why := _model_reason(identity, catalog)) is not None:
        return "stale", why
    return "current", ""


def _staging_entry(cache: str, path: Path) -> CacheEntry:
    size, files = disk_bytes(path)
    staging_dir = path.name.startswith(STAGING_PREFIX)
    if path.is_symlink() or not (path.is_dir() if staging_dir else path.is_file()):
        return _unrecognised(cache, path)  # a link, or a file or directory of that name: not what staging writes
    if staging_dir:
        try:
            gone = writer_gone(path)
        except OSError:  # unreadable: nothing tells its writer is gone
            gone = False
        state, reason = ("abandoned", "a conversion's staging whose writer is gone") if gone else \
            ("converting", "a conversion writing now (its writer holds the staging lock)")
    else:
        old = (time.time() - (_mtime(path) or time.time())) > LEGACY_AGE_S
        state, reason = ("abandoned", "an earlier version's temporary file, an hour untouched") if old else \
            ("converting", "an earlier version's temporary file, written in the last hour")
    return CacheEntry(cache, path.name, state, reason, None, size, _mtime(path), files, [str(path)])


def _file_entries(cache: str, directory: Path, names: list[str], installed: dict[str, Any] | str, catalog: dict[str, Any]) -> list[CacheEntry]:
    groups: dict[str, list[str]] = {}
    loose: list[str] = []
    for name in names:
        match = STEM.fullmatch(name)
        ours = match is not None and _SUFFIXES[cache].fullmatch(match["suffix"] or "") and (directory / name).is_file() \
            and not (directory / name).is_symlink()
        (groups.setdefault(match["stem"], []) if ours else loose).append(name)
    entries = []
    for stem, members in sorted(groups.items()):
        paths = [directory / m for m in sorted(members)]
        meta = directory / f"{stem}.json"
        cached = read_json_object(meta)
        missing = [s for s in NEEDED[cache] if not (directory / f"{stem}{s}").exists()]
        if cached is None or missing:
            state, reason = "incomplete", ("no readable metadata" if cached is None else f"no {stem}{missing[0]}") + \
                ": a conversion that did not finish; never read (converted again)"
            model = cached.get("identity", {}).get("model") if isinstance(cached, dict) and isinstance(cached.get("identity"), dict) else None
        else:
            identity = cached.get("identity")
            state, reason = _judge(identity, stem[-16:], installed, catalog)
            model = identity.get("model") if isinstance(identity, dict) else None
        sizes = [disk_bytes(p) for p in paths]
        entries.append(CacheEntry(cache, stem, state, reason, model, size_bytes=sum(s for s, _ in sizes), last_used=_mtime(meta),
                                  files=sum(n for _, n in sizes), paths=[str(p) for p in paths], model_path=_recorded_path(cached)))
    entries.extend(_unrecognised(cache, directory / n) for n in loose)
    return entries


def _recorded_path(cached: Any) -> str | None:
    """The local model directory an entry's metadata records, or None."""
    identity = cached.get("identity") if isinstance(cached, dict) else None
    path = identity.get("path") if isinstance(identity, dict) else None
    return path if isinstance(path, str) and path else None


def _unrecognised(cache: str, path: Path) -> CacheEntry:
    size, files = disk_bytes(path)
    return CacheEntry(cache, path.name, "unrecognised", "not a file this cache writes: left alone", None, size, _mtime(path),
                      files, [str(path)])


def _dir_entries(cache: str, directory: Path, names: list[str], installed: dict[str, Any] | str, catalog: dict[str, Any]) -> list[CacheEntry]:
    entries = []
    for name in sorted(names):
        path = directory / name
        match = STEM.fullmatch(name)
        if not match or not path.is_dir() or path.is_symlink():
            entries.append(_unrecognised(cache, path))
            continue
        meta = path / GENAI_METADATA
        cached = read_json_object(meta)
        if cached is None or not (path / "openvino_model.xml").exists():
            state, reason, model = "incomplete", "no readable metadata or IR: an export that did not finish; exported again", None
        else:
            identity = cached.get("identity")
            state, reason = _judge(identity, match["key"], installed, catalog)
            model = identity.get("model") if isinstance(identity, dict) else None
        size, files = disk_bytes(path)
        entries.append(CacheEntry(cache, name, state, reason, model, size, _mtime(meta), files, [str(path)], _recorded_path(cached)))
    return entries


def conversion_entries(caches: Iterable[str] = tuple(CONVERSIONS)) -> list[CacheEntry]:
    """Every entry of the named conversion caches, judged against this installation."""
    from models.catalog import load_catalog

    catalog = load_catalog()
    entries: list[CacheEntry] = []
    for cache in caches:
        module_name, layout = CONVERSIONS[cache]
        module = importlib.import_module(module_name)
        directory: Path = module.cache_dir()
        try:
            names = sorted(os.listdir(directory))
        except FileNotFoundError:
            continue
        staging_names = [n for n in names if n.startswith(STAGING_PREFIX) or LEGACY_TMP.fullmatch(n)]
        entries.extend(_staging_entry(cache, directory / n) for n in staging_names)
        rest = [n for n in names if n not in staging_names]
        if not rest:
            continue
        try:
            installed: dict[str, Any] | str = module.installation_identity()
            if isinstance(installed.get("exporter"), str):  # the export venv missing, or its probe failed
                installed = f"this installation cannot tell whether it reads it: the export python {installed['exporter']}"
        except ImportError as exc:  # the converter's package is gone or broken: perhaps for now only
            installed = f"this installation cannot tell whether it reads it ({type(exc).__name__}: {exc})"
        read = _file_entries if layout == "files" else _dir_entries
        entries.extend(read(cache, directory, rest, installed, catalog))
    return entries


def derived_entries() -> list[CacheEntry]:
    """The derived-facts cache, one entry per kind (its entries are keyed by a hash: no model to name)."""
    from models.derived_cache import cache_home

    home = cache_home()  # DEVICEFIT_CACHE_DIR may name a directory shared with others: only its entries' files count
    try:
        kinds = sorted(p for p in home.iterdir() if p.is_dir() and not p.is_symlink())
    except OSError:
        return []
    out = []
    for kind in kinds:
        files = derived_files(kind)
        if not files:
            continue
        times = [t for t in (_mtime(p) for p in files) if t is not None]
        out.append(CacheEntry(DERIVED, kind.name, DERIVED, f"derived facts of this kind, bounded at {_derived_bound()} entries "
                              "(last used: its least recently used entry)", None, sum(disk_bytes(p)[0] for p in files),
                              min(times, default=None), len(files), [str(kind)]))
    return out


def derived_files(kind: Path, older_than: float | None = None) -> list[Path]:
    """The derived cache's entry files of this kind (regular files named as entry_path names
    them), those last used before `older_than` where given."""
    try:
        found = [p for p in kind.iterdir() if _DERIVED_FILE.fullmatch(p.name) and p.is_file() and not p.is_symlink()]
    except OSError:
        return []
    return [p for p in found if older_than is None or (_mtime(p) or older_than) < older_than]


def _derived_bound() -> int:
    from models.derived_cache import MAX_ENTRIES

    return MAX_ENTRIES


def all_entries(include_derived: bool = True) -> list[CacheEntry]:
    return conversion_entries() + (derived_entries() if include_derived else [])
