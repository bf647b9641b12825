"""One name, one model: the store keys a model's rows (and its `models` row) by name, so two
local model directories called alike (`runs/v1/checkpoint-500` and `runs/v2/checkpoint-500`, as
a trainer names its checkpoints) were stored as one model: their medians merged and the `models`
row kept whichever parameter count came last. A local model's rows whose parameter count differs
from what the store (or the same document) already holds under that name are refused, naming
both; a catalog model's name is the catalog's, so only local models are checked."""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import duckdb

from benchmark_runners.records import BenchmarkResult
from devicefit.landing_schema import LandingFileError
from devicefit.store.connection import Source, opened

ADVICE = "the store keys a model's rows by name; register it under a name of its own with `devicefit models add DIR --name NAME`"


def stored_sizes(con: duckdb.DuckDBPyConnection, names: Iterable[str], other_than: str | None = None) -> dict[str, dict[int, str | None]]:
    """Name -> {parameter count: a model path stored with it} of the local models `names` name,
    among the rows of every source but `other_than`."""
    names = sorted(set(names))
    if not names:
        return {}
    rows = con.execute("SELECT model, parameters, any_value(model_path) FROM measurements WHERE model_source = 'local' "
                       "AND parameters IS NOT NULL AND source_key IS DISTINCT FROM ? AND model IN (SELECT unnest(?)) "
                       "GROUP BY model, parameters", [other_than, names]).fetchall()
    sizes: dict[str, dict[int, str | None]] = {}
    for name, parameters, path in rows:
        sizes.setdefault(name, {})[int(parameters)] = path
    return sizes


def _where(path: str | None) -> str:
    return f" ({path})" if path else ""


def check_one_model_per_name(con: duckdb.DuckDBPyConnection, source_key: str, results: list[BenchmarkResult]) -> None:
    """LandingFileError when `results` hold two local models of one name, or a local model under
    a name the store's other sources hold for a model of another parameter count."""
    mine: dict[str, dict[int, str | None]] = {}
    for r in results:
        if r.model_source == "local" and r.parameters is not None:
            mine.setdefault(r.model, {}).setdefault(int(r.parameters), r.model_path)
    for name, sizes in mine.items():
        if len(sizes) > 1:
            (a, pa), (b, pb) = list(sizes.items())[:2]
            raise LandingFileError(f"rows for {source_key}: two models are named '{name}', of {a} parameters{_where(pa)} and "
                                   f"{b}{_where(pb)}; {ADVICE}")
    stored = stored_sizes(con, mine, other_than=source_key)
    for name, sizes in mine.items():
        (count, path), = sizes.items()
        other = next(((n, p) for n, p in stored.get(name, {}).items() if n != count), None)
        if other is not None:
            raise LandingFileError(f"rows for {source_key}: the store holds another model named '{name}' ({other[0]} parameters"
                                   f"{_where(other[1])}) than this one ({count}{_where(path)}); {ADVICE}")


def name_clash(source: Source, name: str, parameters: int, path: Path | None) -> str | None:
    """Why a local model of `parameters` at `path` cannot be stored as `name` in `source` (a store
    that holds another model by that name), or None; for a check before anything is measured."""
    if isinstance(source, (str, Path)) and not Path(source).is_file():
        return None
    with opened(source, read_only=True) as con:
        if not con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'measurements'").fetchone()[0]:
            return None
        stored = stored_sizes(con, [name]).get(name, {})
    other = next(((n, p) for n, p in stored.items() if n != parameters), None)
    if other is None:
        return None
    return (f"{source} holds another model named '{name}' ({other[0]} parameters{_where(other[1])}) than "
            f"{path or name} ({parameters}); {ADVICE}")
