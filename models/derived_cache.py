"""Facts derived from a model's config on the meta device (parameter counts, FLOPs, per-operator
traces), kept on disk between processes.

Why: each process that predicts (an asset step, the CLI, the API server) traced the same models
again. In a `make run` on a 2-core AMD EPYC, the selection map step spent 22 of its 25 s tracing
models (and 7B-70B configs) that the step before, or the run before, had traced already in
another process. A trace is a pure function of the model's config, the input shapes, the code
in `models/` that builds and traces it, and the torch and transformers versions, so each entry
is keyed by a digest of exactly those: a change to any of them is a new entry. An entry that
cannot be read, or does not decode into the value its kind stores (a truncated, edited or
foreign file), is computed again and written over; an unwritable cache directory costs the
next process the same work and loses nothing.
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

log = logging.getLogger("devicefit.cache")
T = TypeVar("T")
_ROOT = Path(__file__).resolve().parents[1]


def cache_home() -> Path:
    """The machine's cache of derived facts that are the same whatever the data directory:
    DEVICEFIT_CACHE_DIR, else $XDG_CACHE_HOME/devicefit, else ~/.cache/devicefit. Entries are
    keyed by what decides them, so two data directories, or two checkouts, can share it."""
    explicit = os.environ.get("DEVICEFIT_CACHE_DIR")
    if explicit:
        return Path(explicit).resolve()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "devicefit"


def source_digest(root: Path, packages: tuple[str, ...]) -> str:
    """A digest of the Python sources of `packages` under `root`: each file's path (relative to
    `root`) and bytes, in a fixed order. Also the measurement code version's
    (benchmark_runners/code_version.py)."""
    digest = hashlib.sha256()
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _code_identity() -> str:
    from importlib.metadata import version

    source = source_digest(_ROOT, ("models",))[:12]
    return f"{source}|torch {version('torch')}|transformers {version('transformers')}"


# Taken when `models` is imported, beside the code it names: a process that outlives a change
# to the sources (a server, and then a `git pull`) keeps writing under its own code's key.
_CODE = _code_identity()


def code_identity() -> str:
    """The sources of `models/` (how a model is built, given inputs and traced) and the versions
    of the libraries that run the trace (read from their metadata: importing them costs seconds)."""
    return _CODE


def entry_path(kind: str, identity: Any) -> Path:
    """Where the entry of `identity` (anything JSON can write, with str() for the rest) lives."""
    text = json.dumps({"kind": kind, "identity": identity, "code": code_identity()}, sort_keys=True, default=str)
    return cache_home() / kind / f"{hashlib.sha256(text.encode()).hexdigest()[:24]}.json"


def disk_cached(kind: str, identity: Any, compute: Callable[[], T], encode: Callable[[T], Any],
                decode: Callable[[Any], T]) -> T:
    """The stored value of (kind, identity), else `compute()`, stored. `decode` turns the JSON
    back into the value and raises (ValueError, TypeError, KeyError, ArithmeticError) on
    anything it would not have written; `encode` gives what JSON can write."""
    try:
        path = entry_path(kind, identity)
    except (OSError, RuntimeError, KeyError) as exc:  # no home directory to put the cache in
        log.info("no cache directory (%s): computed, not cached", exc)
        return compute()
    try:
        value = decode(json.loads(path.read_text()))
        try:
            os.utime(path)  # read recently: the last to go when the kind is pruned
        except OSError:  # a cache shared read-only: still read, never pruned by us
            pass
        return value
    except FileNotFoundError:
        pass
    except (OSError, ValueError, TypeError, KeyError, IndexError, ArithmeticError, RecursionError) as exc:
        log.info("cache entry %s unreadable (%s): computed again", path, exc)
    value = compute()
    _write(path, encode(value))
    return value


# Entries kept per kind. Sequence lengths come from requests (an API client may ask for any up
# to a model's limit), so without a bound the cache grows on a client's say-so; a trace entry is
# 10-300 KB (bert-tiny to a 70B config), so a full kind is tens of MB.
MAX_ENTRIES = 1024


def _write(path: Path, document: Any) -> None:
    temporary = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp", delete=False) as out:
            temporary = Path(out.name)
            out.write(json.dumps(document, default=str))
        temporary.replace(path)  # whole or absent, whoever else writes the same entry
        _prune(path.parent)
    except OSError as exc:  # a read-only home: computed again next time, nothing lost
        log.info("not cached (%s): %s", path, exc)
        if temporary is not None:
            temporary.unlink(missing_ok=True)


# A write's temporary file older than this was left by a writer that died mid-write (a helper
# process stopped by its caller, models/parallel_warm.py): a write takes milliseconds.
STALE_TEMPORARY_S = 600.0


def _prune(directory: Path) -> None:
    """The least recently read or written entries beyond MAX_ENTRIES, removed; and temporary
    files their writers left behind."""
    entries, now = [], time.time()
    for e in os.scandir(directory):
        if e.name.endswith(".json"):
            entries.append(e)
        elif e.name.endswith(".tmp"):
            try:
                if now - e.stat().st_mtime > STALE_TEMPORARY_S:
                    Path(e.path).unlink(missing_ok=True)
            except OSError:  # renamed into place meanwhile: a live write
                pass
    if len(entries) <= MAX_ENTRIES:
        return
    entries.sort(key=lambda e: e.stat().st_mtime)
    for entry in entries[: len(entries) - MAX_ENTRIES]:
        Path(entry.path).unlink(missing_ok=True)


def is_number(value: Any) -> bool:
    """A finite, non-negative JSON number (every figure cached here is a count, a size or a
    time); bools, strings, nulls, NaN, infinities and numbers beyond a float are not."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(float(value)) and value >= 0
    except OverflowError:
        return False


def number(value: Any) -> float:
    if not is_number(value):
        raise ValueError(f"not a finite non-negative number: {value!r}")
    return float(value)


def integer(value: Any) -> int:
    if not is_number(value) or not isinstance(value, int):
        raise ValueError(f"not a non-negative integer: {value!r}")
    return value
