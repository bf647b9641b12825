"""The models under test: the shipped catalog, local Hugging Face directories, the family
classifier and analytic facts (parameters, FLOPs, weight bytes) computed from a config.

Nothing here imports Dagster or the benchmark runners; nothing here downloads anything.
"""
from models.catalog import FAMILIES, ModelSpec, UnknownModelError, catalog_names, load_catalog
from models.resolve import resolve_model

__all__ = [
    "FAMILIES",
    "ModelSpec",
    "UnknownModelError",
    "catalog_names",
    "load_catalog",
    "resolve_model",
]
