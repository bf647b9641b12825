"""One name, one model: the store keys a model's rows (and its `models` row) by name, so two
local model directories called alike (`runs/v1/checkpoint-500` and `runs/v2/checkpoint-500`, as
a trainer names its checkpoints) were stored as one model: their medians merged and the `models`
row kept whichever parameter count came last. A local model's rows whose parameter count differs
from what the store (or the same document) already holds under that name, or that take a catalog
model's name (a file from before local directories named like one were renamed), are refused,
naming both. Catalog rows of one name are one model whatever their size (a catalog fix changes it)."""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import duckdb

from benchmark_runners.records import BenchmarkResult
from devicefit.landing_schema import LandingFileError
from devicefit.store.connection import Source, opened

ADVICE = "the store keys a model's rows by name; register it under a name of its own with `devicefit models add DIR --name NAME`"


Identity = tuple[str, int | None]  # (model_source, parameters): a catalog model is its name, whatever its size


def _identity(source: str | None, parameters: int | None) -> Identity | None:
    if source == "local":
        return None if parameters is None else ("local", int(parameters))
    return ("catalog", None) if source == "catalog" else None


def stored_identities(con: duckdb.DuckDBPyConnection, names: Iterable[str], other_than: Iterable[str] = ()) -> dict[str, dict[Identity, str | None]]:
    """Name -> {identity: a model path stored with it} of the models `names` name, among the rows
    of every source but those `other_than` names."""
    names = sorted(set(names))
    if not names:
        return {}
    rows = con.execute("SELECT model, model_source, parameters, any_value(model_path) FROM measurements "
                       "WHERE NOT list_contains(?, source_key) AND model IN (SELECT unnest(?)) "
                       "GROUP BY model, model_source, parameters", [sorted(set(other_than)), names]).fetchall()
    found: dict[str, dict[Identity, str | None]] = {}
    for name, source, parameters, path in rows:
        identity = _identity(source, parameters)
        if identity is not None:
            found.setdefault(name, {})[identity] = path
    return found


def _describe(identity: Identity, path: str | None) -> str:
    if identity[0] == "catalog":
        return "the catalog model"
    return f"a local model of {identity[1]} parameters" + (f" ({path})" if path else "")


def _other(mine: Identity, stored: dict[Identity, str | None]) -> tuple[Identity, str | None] | None:
    """For a local model, an identity in `stored` that is another model. A catalog model owns its
    name: its rows are never refused (catalog rows of any size are one model), so stale local
    rows under a catalog name never block the catalog's own measurements."""
    return next(((i, p) for i, p in stored.items() if i != mine), None) if mine[0] == "local" else None


def check_one_model_per_name(con: duckdb.DuckDBPyConnection, source_key: str, results: list[BenchmarkResult],
                             replaced: Iterable[str] = ()) -> None:
    """LandingFileError when `results` hold a local model and another model of its name, or a
    local model under a name the store's other sources hold for another (a local model of
    another parameter count, or the catalog model). The sources this load replaces (`replaced`:
    the kind-level partitions a device partition supersedes) do not count: their rows go."""
    mine: dict[str, dict[Identity, str | None]] = {}
    for r in results:
        identity = _identity(r.model_source, r.parameters)
        if identity is not None:
            mine.setdefault(r.model, {}).setdefault(identity, r.model_path)
    for name, identities in mine.items():
        for identity, path in identities.items():
            other = _other(identity, identities)
            if other is not None:
                raise LandingFileError(f"rows for {source_key}: two models are named '{name}', {_describe(identity, path)} and "
                                       f"{_describe(*other)}; {ADVICE}")
    stored = stored_identities(con, mine, other_than=[source_key, *replaced])
    for name, identities in mine.items():
        for identity, path in identities.items():
            other = _other(identity, stored.get(name, {}))
            if other is not None:
                raise LandingFileError(f"rows for {source_key}: the store holds another model named '{name}' "
                                       f"({_describe(*other)}) than this one ({_describe(identity, path)}); {ADVICE}")


def name_clash(source: Source, name: str, parameters: int, path: Path | None) -> str | None:
    """Why a local model of `parameters` at `path` cannot be stored as `name` in `source` (a store
    that holds another model by that name), or None; for a check before anything is measured."""
    if isinstance(source, (str, Path)) and not Path(source).is_file():
        return None
    with opened(source, read_only=True) as con:
        if not con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'measurements'").fetchone()[0]:
            return None
        stored = stored_identities(con, [name]).get(name, {})
    other = _other(("local", int(parameters)), stored)
    if other is None:
        return None
    return (f"{source} holds another model named '{name}' ({_describe(*other)}) than {path or name} ({parameters} "
            f"parameters); {ADVICE}")
