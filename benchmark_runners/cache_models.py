"""Which cache entries `cache prune --model` names: a catalog or registered model's name, or a
local model directory's path (benchmark_runners.conversion_cache lists and prunes them)."""
from __future__ import annotations

import re
from pathlib import Path

from benchmark_runners.conversion_cache import _STEM, DERIVED, CacheEntry
from models.errors import DevicefitError

_VARIANT = re.compile(r"-(fp32_weights|int8_asym_weights)$")  # openvino_backend's variants, in its stems


class AmbiguousModel(DevicefitError):
    """`--model NAME` names local models of several directories (runs/v1/checkpoint-500 and
    runs/v2/checkpoint-500 are both 'checkpoint-500'): pruning all of them was never asked for."""


def matches_model(entry: CacheEntry, model: str) -> bool:
    """The entry records `model`; or, recording none, its name is that model's file name and a key
    (never another model whose name begins with this one's: 'bert-tiny' vs 'bert-tiny-local')."""
    if entry.model is not None or entry.cache == DERIVED or (match := _STEM.fullmatch(entry.name)) is None:
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
