"""Models known by name beyond the catalog: the local model directories an operator registered.

Why: a name that reaches the API comes from anyone who can send a request, so the API must never
treat it as a path on the server (that would let a caller probe which directories exist and
make the server analyse any config it can reach). The operator names the local models the API
may analyse, either in the registry file `<data dir>/models.json` (`devicefit models add DIR`)
or with `devicefit serve --model-dir DIR`; `ModelNames` then resolves catalog names, Hugging
Face ids of catalog models and those registered names, and nothing else.

The registry file is small JSON written atomically (temp file + rename, under a lock file), so
a crash or two concurrent `models add` never leave it half-written or lose an entry. A
registered model is checked when it is registered and again when it is loaded (its config may
have changed since): config.json present and readable, an architecture transformers has, and
sizes within models/limits.py. Its weights files are checked when it is registered (and again
when benchmark loads them): weights devicefit would never load are refused at once.

`resolve_model` (models.resolve) consults the specs registered in this process
(`use_registered`, done by the API at start-up) and then the default data directory's registry
file, so the CLI and the pipeline resolve registered names too.
"""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import re
import tempfile
import threading
import unicodedata
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from models.catalog import InvalidModelError, ModelSpec, UnknownModelError, catalog_model, catalog_names, close_names, load_local_model
from models.errors import DevicefitError
from models.loading import check_weight_files

REGISTRY_FILE = "models.json"
REGISTRY_VERSION = 1
#: A registered name: letters, digits, '.', '_', '-', optionally one '/' (an "org/name" id).
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}(/[A-Za-z0-9][A-Za-z0-9._-]{0,99})?")


class RegistryError(DevicefitError, ValueError):
    """A registration that cannot be made, or a registry file that cannot be read."""
    http_status = 503  # the server's own registry file: the operator's problem, not the caller's

    def public_message(self) -> str:
        return "the model registry of this server cannot be read; see the server log"


def default_data_dir() -> Path:
    """The data directory the CLI uses (DEVICEFIT_DATA_DIR or ./data), as benchmark_runners.paths
    computes it; repeated here because models/ imports nothing above it."""
    return Path(os.environ.get("DEVICEFIT_DATA_DIR", "data")).resolve()


def registry_file(data_dir: Path) -> Path:
    return Path(data_dir) / REGISTRY_FILE


def control_character(name: str) -> str | None:
    """The first control character (Unicode Cc: a newline, tab, ESC, DEL) in `name`, as Python
    writes it ('\\n'), or None. The registry names it when it refuses such a name, and `benchmark`
    refuses a local directory's name holding one, which the store and every results file kept
    as-is. `benchmark` keeps the rest of a directory's name (a comma, a space), as it always has:
    only the registry holds names to NAME_PATTERN."""
    hidden = next((c for c in name if unicodedata.category(c) == "Cc"), None)
    return None if hidden is None else repr(hidden)[1:-1]


def check_name(name: str) -> str:
    """`name` if it may name a registered model: the pattern above, and not a catalog model."""
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        hidden = control_character(name) if isinstance(name, str) else None
        held = f" (it holds the control character '{hidden}')" if hidden else ""
        raise RegistryError(f"model name {name!r} is not allowed{held}: use letters, digits, '.', '_' and '-' "
                            "(at most 100), optionally as 'org/name'")
    if catalog_model(name) is not None:
        raise RegistryError(f"model name '{name}' is taken by the catalog model '{catalog_model(name).name}'; "
                            "choose another with --name")
    return name


def read_registry(data_dir: Path) -> dict[str, Path]:
    """Registered name -> directory; empty when there is no registry file."""
    path = registry_file(data_dir)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise RegistryError(f"cannot read the model registry {path}: {exc}") from exc
    try:
        document = json.loads(text)
        models = document["models"]
        if document.get("version") != REGISTRY_VERSION or not isinstance(models, dict):
            raise ValueError(f"expected version {REGISTRY_VERSION} with a 'models' object")
        return {str(name): Path(entry["path"]) for name, entry in models.items()}
    except RecursionError:  # JSON nested past the decoder: a damaged file, not a crash of every command and the server
        raise RegistryError(f"the model registry {path} is malformed (JSON nested too deeply to read); fix or remove it") from None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise RegistryError(f"the model registry {path} is malformed ({exc}); fix or remove it") from exc


@contextlib.contextmanager
def _locked(data_dir: Path) -> Iterator[None]:
    """An exclusive lock on the registry for a read-modify-write (a lock file beside it)."""
    Path(data_dir).mkdir(parents=True, exist_ok=True)
    with open(registry_file(data_dir).with_suffix(".lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _write_registry(data_dir: Path, entries: Mapping[str, Mapping[str, Any]]) -> None:
    path = registry_file(data_dir)
    document = {"version": REGISTRY_VERSION, "models": dict(sorted(entries.items()))}
    fd, tmp = tempfile.mkstemp(prefix=".models-", suffix=".json", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(document, handle, indent=2)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _raw_entries(data_dir: Path) -> dict[str, dict[str, Any]]:
    read_registry(data_dir)  # validates the file
    path = registry_file(data_dir)
    return json.loads(path.read_text(encoding="utf-8"))["models"] if path.exists() else {}


def _file_key(name: str) -> str:
    return name.replace("/", "__").lower()


def register_model(data_dir: Path, directory: str | Path, name: str | None = None) -> ModelSpec:
    """Checks the model directory and records it under `name` (default: the directory's name).
    Registering the same directory under the same name again is a no-op; another directory
    under a taken name is refused."""
    directory = Path(directory).expanduser()
    if not directory.is_dir():
        raise InvalidModelError(directory, "not a directory")
    spec = load_local_model(directory)
    if spec.has_weights:
        # The weights benchmark would refuse (a pickle without a safetensors copy, an index naming
        # shards outside the directory) are refused now, not on the first measurement.
        check_weight_files(spec.path)
    name = check_name(name if name is not None else spec.name)
    with _locked(data_dir):
        entries = _raw_entries(data_dir)
        taken = {n.lower(): n for n in entries}
        existing = taken.get(name.lower())
        if existing is not None:
            if Path(entries[existing]["path"]) == spec.path and existing == name:
                return dataclasses.replace(spec, name=name)
            raise RegistryError(f"model name '{name}' is already registered for {entries[existing]['path']}; "
                                f"`devicefit models remove {existing}` first, or choose another with --name")
        # A partition's landing file is named after the model with "/" as "__"
        # (devicefit.landing.safe_name): `org/x` and `org__x` would write one file, each run
        # replacing the other's rows.
        clash = next((n for n in [*entries, *catalog_names()] if _file_key(n) == _file_key(name)), None)
        if clash is not None:
            raise RegistryError(f"model name '{name}' would share landing files with '{clash}' ('/' is written as '__' in "
                                "file names); choose another with --name")
        # One directory under two names was two models to the store (rows keyed by name), and
        # its path resolved to whichever name the file listed first.
        same = next((n for n, entry in entries.items() if Path(entry["path"]) == spec.path), None)
        if same is not None:
            raise RegistryError(f"{spec.path} is already registered as '{same}'; `devicefit models remove {same}` first "
                                "to register it under another name")
        entries[name] = {"path": str(spec.path), "registered_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        _write_registry(data_dir, entries)
    return dataclasses.replace(spec, name=name)


def unregister_model(data_dir: Path, name: str) -> Path:
    """Removes `name` from the registry; returns the directory it named."""
    with _locked(data_dir):
        entries = _raw_entries(data_dir)
        match = next((n for n in entries if n.lower() == name.lower()), None)
        if match is None:
            raise RegistryError(f"no model named '{name}' is registered in {registry_file(data_dir)}")
        path = Path(entries.pop(match)["path"])
        _write_registry(data_dir, entries)
    return path


def load_registered(name: str, directory: Path) -> ModelSpec:
    """The spec of a registered model, named by its registered name."""
    return dataclasses.replace(load_local_model(directory), name=name)


# Specs of registered models this process serves, by lower-case name. Filled at start-up
# (`use_registered`), read by resolve_model; never changed by a request.
_registered: dict[str, ModelSpec] = {}
_registered_lock = threading.Lock()


def use_registered(specs: Iterable[ModelSpec]) -> None:
    """Makes `resolve_model` resolve these specs' names in this process."""
    with _registered_lock:
        for spec in specs:
            _registered[spec.name.lower()] = spec


def registered_model(name: str) -> ModelSpec | None:
    """The registered model `name` names: one this process uses, else one in the default data
    directory's registry file (checked again as it is loaded); None when neither has it."""
    key = name.strip().lower()
    spec = _registered.get(key)
    if spec is not None or not NAME_PATTERN.fullmatch(name.strip()):
        return spec
    try:
        entries = read_registry(default_data_dir())
    except RegistryError:
        return None  # a broken registry is reported by `devicefit models`; here the name is just unknown
    match = next((n for n in entries if n.lower() == key), None)
    return _load_registered_cached(match, entries[match]) if match is not None else None


def default_registry() -> dict[str, Path]:
    """The default data directory's registry (name -> directory); empty where there is none or
    it cannot be read (`devicefit models` reports a broken one)."""
    try:
        return read_registry(default_data_dir())
    except RegistryError:
        return {}


def name_registered(name: str, entries: Mapping[str, Path]) -> bool:
    """Whether `name` is registered in this process or in `entries` (a registry read), decided
    without loading its model: another directory's broken entry is not this caller's problem."""
    key = name.strip().lower()
    return key in _registered or any(n.lower() == key for n in entries)


def registered_at(path: Path, entries: Mapping[str, Path]) -> ModelSpec | None:
    """The model `entries` (a registry read) register for the directory at `path`, under its
    registered name; None when none is."""
    try:
        target = Path(path).resolve()
    except (OSError, RuntimeError):
        return None
    for name, directory in entries.items():
        try:
            if Path(directory).resolve() == target:
                return registered_model(name)
        except (OSError, RuntimeError):  # a path that loops: not this one
            continue
    return None


# Loaded registered specs, keyed by what they depend on: the pipeline resolves a model once per
# row, and re-reading and re-checking its config each time would cost a class lookup per row.
_loaded: dict[tuple, ModelSpec] = {}


def _load_registered_cached(name: str, directory: Path) -> ModelSpec:
    try:
        stamp = (directory / "config.json").stat().st_mtime_ns
    except OSError:
        stamp = None  # load_registered says what is wrong with it
    key = (name, str(directory), stamp)
    spec = _loaded.get(key)
    if spec is None:
        spec = load_registered(name, directory)
        with _registered_lock:
            _loaded[key] = spec
    return spec


class ModelNames:
    """The model names one server accepts: catalog names (any case), Hugging Face ids of catalog
    models, the names of its registered models, and the aliases of models/aliases.py. A name is never looked up as a path, so the
    answer for an unknown name (404 with close names) is the same whether or not a file or
    directory of that name exists on the server."""

    KNOWN_AS = "not a catalog model or a model registered on this server (model names only, never paths)"

    def __init__(self, registered: Mapping[str, ModelSpec], broken: Mapping[str, InvalidModelError] | None = None):
        self.registered = {spec.name.lower(): spec for spec in registered.values()}
        # Registered names whose directory no longer loads (its config changed, or the registry
        # was edited by hand): a request for one is told why (422), not that it is unknown.
        self.broken = {name.lower(): exc for name, exc in (broken or {}).items()}

    @classmethod
    def load(cls, data_dir: Path, model_dirs: Iterable[str | Path] = ()) -> tuple["ModelNames", list[str]]:
        """The registry file's models (an entry that no longer loads is left out, with a warning
        returned for the log) and the `model_dirs` allow-list (each under its directory's name;
        any problem with one is an error: the operator just typed it). Also makes
        `resolve_model` resolve these names in this process."""
        specs: dict[str, ModelSpec] = {}
        broken: dict[str, InvalidModelError] = {}
        warnings: list[str] = []
        for name, directory in read_registry(data_dir).items():
            try:
                specs[name.lower()] = load_registered(check_name(name), directory)
            except (InvalidModelError, RegistryError) as exc:
                warnings.append(f"registered model '{name}' is not served: {exc}")
                if isinstance(exc, InvalidModelError):
                    broken[name] = exc
        for directory in model_dirs:
            directory = Path(directory).expanduser()
            if not directory.is_dir():
                raise InvalidModelError(directory, "--model-dir is not a directory")
            spec = load_local_model(directory)
            try:
                check_name(spec.name)
            except RegistryError as exc:
                raise RegistryError(f"--model-dir {directory}: {exc}; register it under another name with "
                                    f"`devicefit models add {directory} --name NAME`") from None
            clash = specs.get(spec.name.lower())
            if clash is not None and clash.path != spec.path:
                raise RegistryError(f"--model-dir {directory}: the name '{spec.name}' already names {clash.path}")
            specs[spec.name.lower()] = spec
        use_registered(specs.values())
        return cls(specs, {name: exc for name, exc in broken.items() if name.lower() not in specs}), warnings

    def names(self) -> list[str]:
        return [spec.name for spec in self.registered.values()]

    def resolve(self, name: str) -> ModelSpec:
        """The spec `name` names, or UnknownModelError (404) with close names."""
        from models.aliases import alias_model

        query = name.strip()
        spec = catalog_model(query) or self.registered.get(query.lower()) or alias_model(query)
        if spec is not None:
            return spec
        if query.lower() in self.broken:
            raise self.broken[query.lower()]
        from models.aliases import alias_names

        extra = {**alias_names(), **{key: spec.name for key, spec in self.registered.items()}}
        raise UnknownModelError(query[:200], close_names(query, extra), known_as=self.KNOWN_AS)
