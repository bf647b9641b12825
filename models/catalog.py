"""The model catalog: one shipped config JSON per known model, plus any local Hugging Face
model directory. A `ModelSpec` is everything needed to build a model without the network."""
from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

CATALOG_DIR = Path(__file__).parent / "catalog"
FAMILIES = ("embedding", "text_generation", "vision", "audio", "multimodal")
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json",
                "pytorch_model.bin.index.json")
# Directory names too generic to name a model; the parent directory is used with them.
_GENERIC_DIR_NAMES = {"model", "models", "weights", "checkpoint", "snapshot"}


class UnknownModelError(LookupError):
    """A model name that is neither in the catalog nor a local model directory."""

    def __init__(self, name: str, suggestions: list[str]):
        self.name = name
        self.suggestions = suggestions
        hint = f" Did you mean: {', '.join(suggestions)}?" if suggestions else ""
        super().__init__(
            f"Unknown model '{name}': not in the catalog and not a local model directory "
            f"(a directory with config.json).{hint} "
            f"`devicefit models` lists the {len(catalog_names())} catalog models."
        )


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


def _local_model_name(directory: Path) -> str:
    directory = directory.resolve()
    if directory.name.lower() in _GENERIC_DIR_NAMES:
        return f"{directory.parent.name}/{directory.name}"
    return directory.name


def _architecture_for_local(config: dict[str, Any], directory: Path) -> str:
    import transformers

    for arch in config.get("architectures") or ():
        if hasattr(transformers, arch):
            return arch
    model_type = config.get("model_type")
    if model_type:
        from transformers import AutoConfig, AutoModel

        cfg_cls = AutoConfig.for_model(model_type).__class__
        model_cls = AutoModel._model_mapping.get(cfg_cls)  # noqa: SLF001 - public mapping object
        if model_cls is not None:
            return model_cls.__name__
    raise ValueError(
        f"{directory}/config.json names no architecture transformers {transformers.__version__} "
        f"can build (architectures={config.get('architectures')}, model_type={model_type})."
    )


def load_local_model(directory: str | Path) -> ModelSpec:
    """A spec for a local Hugging Face model directory (config.json, optional weights)."""
    directory = Path(directory).expanduser()
    config_path = directory / "config.json"
    if not config_path.is_file():
        raise FileNotFoundError(f"{directory} is not a Hugging Face model directory: no config.json")
    try:
        config = json.loads(config_path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{config_path} is not valid JSON: {exc}") from exc
    if "model_type" not in config:
        raise ValueError(f"{config_path} has no model_type; cannot tell which model it describes")
    tasks: list[str] = []
    if (directory / "modules.json").is_file() or (directory / "sentence_bert_config.json").is_file():
        tasks = ["sentence-similarity", "feature-extraction"]  # a sentence-transformers export
    return ModelSpec(
        name=_local_model_name(directory),
        architecture=_architecture_for_local(config, directory),
        config=config,
        tasks=tuple(tasks),
        hf_id=config.get("_name_or_path") or None,
        source="local",
        path=directory.resolve(),
        has_weights=any((directory / f).is_file() for f in WEIGHT_FILES),
    )


def _is_directory(text: str) -> bool:
    """False for text no file system accepts as a path (too long, NUL bytes) rather than an error."""
    try:
        return Path(text).expanduser().is_dir()
    except (OSError, ValueError):
        return False


def resolve_model(name_or_path: str | Path) -> ModelSpec:
    """A catalog name (any case), a Hugging Face id of a catalog model, or a local directory."""
    name_or_path = str(name_or_path)
    if not name_or_path or not name_or_path.strip():
        raise UnknownModelError(name_or_path, [])
    catalog = load_catalog()
    query = name_or_path.strip()
    by_lower = {name.lower(): spec for name, spec in catalog.items()}
    by_lower.update({spec.hf_id.lower(): spec for spec in catalog.values() if spec.hf_id})
    if query.lower() in by_lower:
        return by_lower[query.lower()]
    if _is_directory(query):
        return load_local_model(Path(query).expanduser())
    # A hub id whose last part is a catalog name ("someone/gpt2") is not assumed to be it.
    suggestions = difflib.get_close_matches(query.lower(), list(by_lower), n=3, cutoff=0.5)
    names = []
    for s in suggestions:
        name = by_lower[s].name
        if name not in names:
            names.append(name)
    raise UnknownModelError(query, names)
