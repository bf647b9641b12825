"""Metadata the Dagster UI renders as tables: row counts and column schemas on table assets
(Dagster's `dagster/row_count` and `dagster/column_schema` keys, what TableMetadataSet writes),
and rows a person reads as `MetadataValue.table` instead of markdown."""
from __future__ import annotations

from typing import Any, Sequence

import dagster as dg

OWNERS = ["team:devicefit"]
_TYPES = {bool: "bool", int: "int", float: "float", str: "string"}


def _cell(value: Any) -> str | int | float | bool | None:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def table_schema(columns: Sequence[tuple[str, str]]) -> dg.TableSchema:
    return dg.TableSchema(columns=[dg.TableColumn(name, type_) for name, type_ in columns])


def table_metadata(row_count: int, columns: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """What the asset page shows for a table: its row count and its columns with their types."""
    return {"dagster/row_count": dg.MetadataValue.int(int(row_count)),
            "dagster/column_schema": dg.MetadataValue.table_schema(table_schema(columns))}


def rows_table(rows: Sequence[dict[str, Any]], columns: Sequence[str], limit: int = 200) -> dg.TableMetadataValue:
    """Rows as a table the UI renders and sorts; the first `limit` rows (the row count says how many there are)."""
    types: dict[str, str] = {}
    for c in columns:
        kinds = {type(r.get(c)) for r in rows if r.get(c) is not None}
        if kinds and kinds <= {int, float}:
            types[c] = "float" if float in kinds else "int"
        else:
            types[c] = _TYPES.get(next(iter(kinds)), "string") if len(kinds) == 1 else "string"
    return dg.MetadataValue.table(
        records=[dg.TableRecord({c: _cell(r.get(c)) if types[c] != "string" or r.get(c) is None else str(r.get(c))
                                 for c in columns}) for r in rows[:limit]],  # one type per column
        schema=table_schema([(c, types[c]) for c in columns]))
