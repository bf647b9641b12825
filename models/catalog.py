"""The model catalog: one shipped config JSON per known model, plus any local Hugging Face
model directory. A `ModelSpec` is everything needed to build a model without the network."""
from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from models.class_facts import IDENTIFIER as _IDENTIFIER
from models.class_facts import TRANSFORMERS_LOCK as _TRANSFORMERS_LOCK
from models.class_facts import class_facts
from models.errors import DevicefitError
from models.limits import MAX_CONFIG_BYTES, ConfigLimitError, check_config_limits, position_problem

CATALOG_DIR = Path(__file__).parent / "catalog"
FAMILIES = ("embedding", "text_generation", "vision", "audio", "multimodal")
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json",
                "pytorch_model.bin.index.json")
# Directory names too generic to name a model; the parent directory is used with them.
_GENERIC_DIR_NAMES = {"model", "models", "weights", "checkpoint", "snapshot"}


class UnknownModelError(DevicefitError, LookupError):
    """A model name that is neither in the catalog nor a local model directory. `known_as` says
    what a name may be where it was looked up (the API accepts no directories, for instance)."""
    http_status = 404

    def __init__(self, name: str, suggestions: list[str], known_as: str | None = None):
        self.name = name
        self.suggestions = suggestions
        hint = f" Did you mean: {', '.join(suggestions)}?" if suggestions else ""
        known_as = known_as or "not in the catalog and not a local model directory (a directory with config.json)"
        super().__init__(
            f"Unknown model '{name}': {known_as}.{hint} "
            f"`devicefit models` lists the {len(catalog_names())} catalog models."
        )


class InvalidModelError(UnknownModelError, ValueError):
    """A local model directory devicefit cannot use: no config.json, a config that is not a
    usable Hugging Face config, an architecture transformers cannot build, or sizes over the
    limits of models/limits.py. A LookupError (the name resolves to no usable model) and a
    ValueError (bad input), so every caller that handles either reports it as one line.
    `reason` says what is wrong without naming the directory (for answers that must not
    reveal server paths); `str()` names both."""
    http_status = 422

    def public_message(self) -> str:
        # A registered model that no longer loads: its reason, never its directory.
        return f"model cannot be analysed: {self.reason}"

    def __init__(self, directory: Path, reason: str, limit: int | None = None):
        self.directory = directory
        self.reason = reason
        self.limit = limit  # the size limit exceeded, for a config over the limits
        self.name = str(directory)
        self.suggestions = []
        Exception.__init__(self, f"{directory}: {reason}")


@dataclass(frozen=True)
class ModelSpec:
    """A buildable model: its config, the class to instantiate, and where it came from."""

    name: str
    architecture: str
    config: dict[str, Any]
    tasks: tuple[str, ...] = ()
    hf_id: str | None = None
    source: str = "catalog"  # "catalog" or "local"
    path: Path | None = None  # the local directory, for source == "local"
    has_weights: bool = False
    published_parameters: int | None = None
    inputs: dict[str, Any] = field(default_factory=dict)  # default input sizes (image_size, ...)
    # A config-only entry: a model people deploy that is too large to sweep by default (7B-70B
    # language models, ViT-L, Whisper large). Built on the meta device for parameters, FLOPs
    # and memory, predicted everywhere, measured only when named (`--model`, `--all`), and then
    # skipped by the memory guard with the reason where it does not fit.
    config_only: bool = False
    published_active_parameters: int | None = None  # a mixture of experts: parameters one token uses
    built_parameters_differ_by: int = 0  # what transformers builds minus the checkpoint, with the reason
    built_parameters_differ_why: str | None = None

    @property
    def model_type(self) -> str:
        return str(self.config.get("model_type", ""))

    def build_config(self):
        """The transformers config object, built offline from the stored dict."""
        from transformers import AutoConfig

        kwargs = {k: v for k, v in self.config.items() if k != "model_type"}
        return AutoConfig.for_model(self.model_type, **kwargs)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "hf_id": self.hf_id,
            "architecture": self.architecture,
            "tasks": list(self.tasks),
            "source": self.source,
            "path": str(self.path) if self.path else None,
            "has_weights": self.has_weights,
            "published_parameters": self.published_parameters,
            "config_only": self.config_only,
        }


def _spec_from_entry(entry: dict[str, Any]) -> ModelSpec:
    return ModelSpec(
        name=entry["name"],
        architecture=entry["architecture"],
        config=entry["config"],
        tasks=tuple(entry.get("tasks", ())),
        hf_id=entry.get("hf_id"),
        published_parameters=entry.get("published_parameters"),
        inputs=dict(entry.get("inputs", {})),
        config_only=bool(entry.get("config_only", False)),
        published_active_parameters=entry.get("published_active_parameters"),
        built_parameters_differ_by=int(entry.get("built_parameters_differ_by", 0)),
        built_parameters_differ_why=entry.get("built_parameters_differ_why"),
    )


@lru_cache(maxsize=1)
def load_catalog() -> dict[str, ModelSpec]:
    specs: dict[str, ModelSpec] = {}
    for path in sorted(CATALOG_DIR.glob("*.json")):
        try:
            entry = json.loads(path.read_text())
            spec = _spec_from_entry(entry)
        except (json.JSONDecodeError, KeyError) as exc:
            raise ValueError(f"Catalog file {path} is malformed: {exc}") from exc
        specs[spec.name] = spec
    return specs


def catalog_names() -> list[str]:
    return list(load_catalog())


def swept_catalog_names() -> list[str]:
    """The catalog models a sweep measures by default (the full profile): all but config-only ones."""
    return [name for name, spec in load_catalog().items() if not spec.config_only]


def _local_model_name(directory: Path) -> str:
    directory = directory.resolve()
    if directory.name.lower() in _GENERIC_DIR_NAMES:
        return f"{directory.parent.name}/{directory.name}"
    return directory.name


def _architecture_for_local(config: dict[str, Any], directory: Path) -> str:
    """The transformers model class named by `architectures` (the first one this transformers
    has), else the base model class for `model_type`. An `architectures` entry that is not a list
    of class names, or names no class transformers has, is an error rather than a guess. The
    class check reads models/class_facts.py's cache: no import of the class's module."""
    from importlib.metadata import version

    architectures = config.get("architectures")
    if architectures is not None:
        if not isinstance(architectures, list) or not all(isinstance(a, str) for a in architectures):
            raise InvalidModelError(directory, f"config.json 'architectures' must be a list of class names, got {architectures!r}"[:300])
        for arch in architectures:
            if not _IDENTIFIER.fullmatch(arch):
                raise InvalidModelError(directory, f"config.json 'architectures' entry {arch[:100]!r} is not a class name")
        for arch in architectures:
            if class_facts(arch).is_model:
                return arch
        if architectures:
            raise InvalidModelError(directory, f"config.json names architectures {architectures}, none of them a model class of "
                                               f"transformers {version('transformers')} (custom code is never run)"[:400])
    model_type = config["model_type"]
    import transformers
    from transformers import AutoConfig, AutoModel

    with _TRANSFORMERS_LOCK:
        try:
            cfg_cls = AutoConfig.for_model(model_type).__class__
        except (ValueError, KeyError) as exc:
            raise InvalidModelError(directory, f"config.json model_type {model_type!r} is not one transformers "
                                               f"{transformers.__version__} knows") from exc
        model_cls = AutoModel._model_mapping.get(cfg_cls, None)  # noqa: SLF001 - public mapping object; its get() needs the default
    if model_cls is not None:
        return model_cls.__name__
    raise InvalidModelError(directory, f"config.json names no architecture transformers {transformers.__version__} "
                                       f"can build (architectures={architectures}, model_type={model_type})")


def _read_config(directory: Path, filename: str = "config.json") -> dict[str, Any]:
    config_path = directory / filename
    try:
        if not config_path.is_file():
            raise InvalidModelError(directory, "not a Hugging Face model directory: no config.json" if filename == "config.json" else f"no file {filename}")
        size = config_path.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise InvalidModelError(directory, f"{filename} is {size} bytes, over the {MAX_CONFIG_BYTES} byte limit")
        text = config_path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidModelError(directory, f"cannot read {filename}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise InvalidModelError(directory, f"{filename} is not UTF-8 text: {exc.reason}") from exc
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidModelError(directory, f"{filename} is not valid JSON: {exc}") from exc
    except RecursionError:
        raise InvalidModelError(directory, f"{filename} nests too deeply to be a model config") from None
    if not isinstance(config, dict):
        raise InvalidModelError(directory, f"{filename} must hold a JSON object, got {type(config).__name__}")
    if "model_type" not in config:
        raise InvalidModelError(directory, f"{filename} has no model_type; cannot tell which model it describes")
    if not isinstance(config["model_type"], str) or not _IDENTIFIER.fullmatch(config["model_type"].replace("-", "_")):
        raise InvalidModelError(directory, f"{filename} model_type must be a model type name, got {config['model_type']!r}"[:300])
    return config


def load_local_model(directory: str | Path) -> ModelSpec:
    """A spec for a local Hugging Face model directory (config.json, optional weights), checked
    before anything is built: its sizes against models/limits.py, its architecture against the
    classes transformers has, and its config by building the transformers config object. Every
    problem is an InvalidModelError saying what is wrong."""
    return _local_spec(Path(directory).expanduser(), "config.json")


def load_config_file(path: str | Path) -> ModelSpec:
    """A spec for a bare config file: `.../config.json` is its directory (with its weights, if
    any); any other `NAME.json` is a config-only model named NAME (random weights, like a
    catalog entry), checked as a directory's config is."""
    path = Path(path).expanduser()
    if path.name == "config.json":
        return load_local_model(path.parent)
    if path.suffix.lower() != ".json":
        raise InvalidModelError(path, "a model config file is a .json file (a Hugging Face config.json)")
    return _local_spec(path.parent, path.name)


def _local_spec(directory: Path, filename: str) -> ModelSpec:
    config = _read_config(directory, filename)
    where = directory if filename == "config.json" else directory / filename
    try:
        check_config_limits(config, filename)
    except ConfigLimitError as exc:
        raise InvalidModelError(where, str(exc), exc.limit) from None
    tasks: list[str] = []
    whole_directory = filename == "config.json"
    if whole_directory and ((directory / "modules.json").is_file() or (directory / "sentence_bert_config.json").is_file()):
        tasks = ["sentence-similarity", "feature-extraction"]  # a sentence-transformers export
    name_or_path = config.get("_name_or_path")
    spec = ModelSpec(
        name=_local_model_name(directory) if whole_directory else Path(filename).stem,
        architecture=_architecture_for_local(config, where),
        config=config,
        tasks=tuple(tasks),
        hf_id=name_or_path if isinstance(name_or_path, str) and name_or_path else None,
        source="local",
        path=where.resolve(),
        has_weights=whole_directory and any((directory / f).is_file() for f in WEIGHT_FILES),
    )
    try:
        with _TRANSFORMERS_LOCK:
            spec.build_config()
    except Exception as exc:  # noqa: BLE001 - any failure of transformers on this user input is the input's fault
        raise InvalidModelError(where, f"{filename} is not a valid {config['model_type']} config: "
                                       f"{type(exc).__name__}: {exc}"[:400]) from exc
    problem = position_problem(config)
    if problem is not None:
        raise InvalidModelError(where, f"{filename}: {problem}")
    return spec


@lru_cache(maxsize=1)
def _catalog_by_lower() -> dict[str, ModelSpec]:
    catalog = load_catalog()
    by_lower = {name.lower(): spec for name, spec in catalog.items()}
    by_lower.update({spec.hf_id.lower(): spec for spec in catalog.values() if spec.hf_id})
    return by_lower


def catalog_model(name: str) -> ModelSpec | None:
    """The catalog model `name` names (its name in any case, or its Hugging Face id), if any."""
    return _catalog_by_lower().get(name.strip().lower())


def close_names(query: str, extra: dict[str, str] | None = None) -> list[str]:
    """Up to three distinct catalog names (matched by name or Hugging Face id, and names in
    `extra`, lower-case -> name: aliases, registered models) close to `query`, closest first."""
    known = {k: s.name for k, s in _catalog_by_lower().items()}
    known.update(extra or {})
    names: list[str] = []
    for s in difflib.get_close_matches(query.strip().lower(), list(known), n=12, cutoff=0.5):
        if known[s] not in names:  # an alias and its model are one suggestion
            names.append(known[s])
    return names[:3]
