"""Resolving a model name: the one chain every caller goes through.

A catalog name (any case), a Hugging Face id of a catalog model, a model the operator registered
by name (models.registry), an alias (models.aliases: `bert`, `llama-7b`), a local model
directory, or a bare config file (`.../config.json`, `my-model.json`), in that order. It sits above both the catalog
and the registry of local models, so neither imports the other's caller.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from models.aliases import alias_model, alias_names
from models.catalog import ModelSpec, UnknownModelError, catalog_model, close_names, load_config_file, load_local_model
from models.registry import control_character, default_registry, name_registered, registered_at, registered_model


def _is_directory(text: str) -> bool:
    """False for text no file system accepts as a path (too long, NUL bytes) rather than an error."""
    try:
        return Path(text).expanduser().is_dir()
    except (OSError, ValueError):
        return False


def _is_config_file(text: str) -> bool:
    try:
        path = Path(text).expanduser()
        return path.suffix.lower() == ".json" and path.is_file()
    except (OSError, ValueError):
        return False


def resolve_model(name_or_path: str | Path) -> ModelSpec:
    """A catalog name (any case), a Hugging Face id of a catalog model, a model the operator
    registered by name (models.registry), an alias, a local directory or a config file. For
    names from an untrusted caller use models.registry.ModelNames, which never treats a name
    as a path."""
    name_or_path = str(name_or_path)
    if not name_or_path or not name_or_path.strip():
        raise UnknownModelError(name_or_path, [])
    query = name_or_path.strip()
    spec = model_by_name(query) or model_at_path(query)
    if spec is not None:
        return spec
    # A hub id whose last part is a catalog name ("someone/gpt2") is not assumed to be it.
    raise UnknownModelError(query, close_names(query, alias_names()))


def model_by_name(name: str) -> ModelSpec | None:
    """A catalog name (any case) or Hugging Face id of a catalog model, a registered model, or
    an alias; never a path."""
    return catalog_model(name) or registered_model(name) or alias_model(name)


def model_at_path(text: str) -> ModelSpec | None:
    """The model of a local directory or a config file, None where `text` names neither."""
    if _is_directory(text):
        return own_name(load_local_model(Path(text).expanduser()))
    if _is_config_file(text):
        return own_name(load_config_file(text))
    return None


def own_name(spec: ModelSpec) -> ModelSpec:
    """`spec` under a name no other model answers to. A directory is named after itself, so a
    directory called bert-tiny holding another config took the catalog model's name, and the
    store, which keys a model's rows by name, took the medians of both as one model's. Such a
    model is named `<name>-local-<8 hex digits of its config>`: the same directory keeps one
    name from run to run. A registered directory is its registered model, by that name. (The
    registry refuses a taken name: `devicefit models add DIR --name NAME` names a model.)"""
    entries = default_registry()  # read once for both questions
    registered = registered_at(spec.path, entries) if spec.path is not None else None
    if registered is not None:
        return registered
    if not (catalog_model(spec.name) or alias_model(spec.name) or name_registered(spec.name, entries)):
        return spec
    digest = hashlib.sha256(json.dumps(spec.config, sort_keys=True, default=str).encode()).hexdigest()[:8]
    return dataclasses.replace(spec, name=f"{spec.name}-local-{digest}")


def shared_name(specs: list[ModelSpec]) -> str | None:
    """Why `specs` (one command's models) cannot be measured together: two local models (other
    directories or config files) under one name, which the store would key as one model; or None."""
    seen: dict[str, ModelSpec] = {}
    for spec in specs:
        other = seen.setdefault(spec.name.lower(), spec)
        if other is not spec and (other.source, other.path) != (spec.source, spec.path):
            return (f"two models are named '{spec.name}': {other.path or other.name} and {spec.path or spec.name}; the store keys a "
                    "model's rows by name: register one under another name with `devicefit models add DIR --name NAME`")
    return None


def unnamable_local(specs: list[ModelSpec]) -> str | None:
    """Why a local model of `specs` (a directory or config file) cannot be measured under its
    own name: a control character in it (models.registry.control_character: a newline or ESC in a
    directory's name), which the store and every results file would keep as-is; or None.
    Registering the directory under another name gives it one."""
    for spec in specs:
        hidden = control_character(spec.name) if spec.source == "local" else None
        if hidden is not None:
            return (f"{str(spec.path)!r}: the model name {spec.name!r} holds the control character '{hidden}', which "
                    "the registry refuses too; register it under another name with `devicefit models add DIR --name NAME`")
    return None
