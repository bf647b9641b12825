"""Values go into generated Python source only as escaped literals.

A model's name comes from a directory name, a config or a request, so it may hold quotes,
newlines or code. The generator never pastes such text into source: every value passes through
`python_literal` (strings as ASCII JSON string literals, which Python reads back unchanged), and
the module docstring is a parenthesized run of such literals, one per line. File names keep only
[A-Za-z0-9_].
"""
from __future__ import annotations

import ast
import json
import math
import re
from typing import Any

from devicefit.errors import DevicefitError

MAX_FILE_STEM = 120


class UnsafeLiteral(DevicefitError, TypeError):
    """A value of a type the generator does not write into source."""


def python_literal(value: Any) -> str:
    """Source text that evaluates to `value`; only str, int, float, bool, None, lists/tuples and
    dicts of them. `ast.literal_eval` of the result equals the value (checked)."""
    text = _literal(value)
    if ast.literal_eval(text) != (list(value) if isinstance(value, tuple) else value):
        raise UnsafeLiteral(f"{value!r} does not round-trip as a Python literal")
    return text


def _literal(value: Any) -> str:
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):
        if not math.isfinite(value):
            raise UnsafeLiteral(f"{value!r} has no Python literal")
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=True)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_literal(str(k))}: {_literal(v)}" for k, v in value.items()) + "}"
    raise UnsafeLiteral(f"{type(value).__name__} values are not written into generated source")


def python_docstring(text: str) -> str:
    """A module docstring for `text`: one string literal per line inside parentheses (adjacent
    literals concatenate at compile time, so `ast.get_docstring` sees the whole text)."""
    lines = text.splitlines(keepends=True) or [""]
    return "(\n" + "".join(f"    {python_literal(line)}\n" for line in lines) + ")"


def safe_file_stem(name: str) -> str:
    """A file-name stem from a model name: ASCII letters, digits and underscores only."""
    stem = re.sub(r"[^A-Za-z0-9_]+", "_", name).strip("_")[:MAX_FILE_STEM]
    return stem or "model"
