"""The guides' spellings of list options, accepted beside the canonical comma-separated ones.

The guides (../shared/spec) write `--hardware cuda cpu` and `--batch-sizes 1 8 32`, space-
separated, where devicefit's options take one comma-separated value (`--hardware cuda,cpu`).
Click has no variadic options, so the root command group rewrites the argument list once, before
parsing: after one of LIST_OPTIONS, the following arguments that are themselves valid values of
that option (a known hardware kind, an integer, a precision) are joined to its value with commas.
An argument that is not such a value (a positional model name, another option) ends the list,
so nothing else is ever swallowed."""
from __future__ import annotations

from typing import Callable


def _is_kind(token: str) -> bool:
    """A hardware kind (`cuda`, `cuda:1`) or a registered device's id (`cpu-e1d9c1f8fde0+t1`)."""
    from benchmark_runners import registry
    from devicefit.profiles import is_device_id

    return token.split(":", 1)[0] in registry.kind_names() or is_device_id(token)


def _is_int(token: str) -> bool:
    return token.isdigit()


def _is_precision(token: str) -> bool:
    from benchmark_runners.records import PRECISIONS

    return token in PRECISIONS


def _is_family(token: str) -> bool:
    from models.catalog import FAMILIES

    return token in FAMILIES


LIST_OPTIONS: dict[str, Callable[[str], bool]] = {
    "--hardware": _is_kind, "--hw": _is_kind, "--batch-sizes": _is_int, "--precision": _is_precision,
    "--families": _is_family, "--category": _is_family,
}


def join_list_values(args: list[str]) -> list[str]:
    """`args` with space-separated values of LIST_OPTIONS joined by commas."""
    out: list[str] = []
    i = 0
    while i < len(args):
        token = args[i]
        out.append(token)
        i += 1
        valid = LIST_OPTIONS.get(token)
        if valid is None or i >= len(args) or args[i].startswith("-"):
            continue
        values = [args[i]]
        i += 1
        while i < len(args) and not args[i].startswith("-") and all(valid(v) for v in args[i].split(",") if v) \
                and all(valid(v) for v in values[-1].split(",") if v):
            values.append(args[i])
            i += 1
        out.append(",".join(values))
    return out
