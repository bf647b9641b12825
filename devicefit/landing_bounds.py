"""Bounds a landing row's values keep so that everything computed from them stays finite and
every copy of them terminates: how deep a JSON column nests, what range a measured figure of an
'ok' row, a probe or a speed reference lies in; and what text may be (valid Unicode, something
visible in a name). Checked by devicefit.landing_schema (and the optimum-benchmark importer)."""
from __future__ import annotations

import json
import math
import unicodedata
from typing import Any

INT32_MAX = 2**31 - 1

# How deep a JSON column's value may nest. The rows are copied field by field in Python
# (dataclasses.asdict, recursive) on their way into the store: a value nested some 400 levels
# passed json.dumps here and then raised RecursionError in the middle of every later load.
# Real values nest at most 3 levels (a hardware block 6).
MAX_JSON_DEPTH = 64


def nests_deeper(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether `value` nests lists and objects more than `limit` deep (looked at without recursion,
    and only down to `limit + 1` levels)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > limit:
                return True
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return False


# What an 'ok' row's figures can be: a timing from a nanosecond (the finest clock any backend
# reads) to a year (the optimum importer's MAX_LATENCY), a throughput between one sample a year
# and a batch of INT32_MAX a nanosecond. A positive 5e-321 ms passed as a timing, and the
# aggregates' ratio of two timings (speedup_vs_cpu_fp32) overflowed: the published benchmarks.json
# held Infinity, which is not JSON. Within these bounds every ratio of two figures is finite.
MIN_TIMING_MS, MAX_TIMING_MS = 1e-6, 3.2e10
MEASURED_RANGES = {"samples_ms": (MIN_TIMING_MS, MAX_TIMING_MS), "p50_ms": (MIN_TIMING_MS, MAX_TIMING_MS),
                   "mean_ms": (MIN_TIMING_MS, MAX_TIMING_MS),
                   "throughput_samples_per_s": (1e3 / MAX_TIMING_MS, INT32_MAX * 1e3 / MIN_TIMING_MS)}


def measured_range_problem(row: Any) -> str | None:
    """'<field> <value>: why' for the first of `row`'s measured figures (attributes, a number or a
    list of them) outside MEASURED_RANGES, or None."""
    for key, (low, high) in MEASURED_RANGES.items():
        value = getattr(row, key)
        for v in value if isinstance(value, list) else [value]:
            if v is not None and not low <= v <= high:
                return (f"{key} {v!r}: not a measurement (a timing is a nanosecond to a year, {MIN_TIMING_MS:g} to "
                        f"{MAX_TIMING_MS:g} ms; a throughput one sample a year to a batch of {INT32_MAX} a nanosecond)")
    return None


# What a hardware probe's figures can be (benchmark_runners/hardware/probe.py): they become a
# device's peaks, which predictions scale by, so a figure past any machine's (1e300 GFLOP/s was
# stored as a CPU's peak) is no measurement. The bounds sit orders of magnitude outside every
# real device: a matmul from a megaflop to 100 petaflops a second (an H200's bf16 measured
# 786,429 GFLOP/s), a copy from a megabyte to a petabyte a second (HBM3e moves about 8,000
# GB/s), a tiny kernel's call from a nanosecond to ten seconds (real ones: 1-9 µs).
_MATMUL_GFLOPS = (1e-3, 1e8, "GFLOP/s (a megaflop to 100 petaflops a second)")
_COPY_GBS = (1e-3, 1e6, "GB/s (a megabyte to a petabyte a second)")
PROBE_RANGES: dict[str, tuple[float, float, str]] = {
    "matmul_gflops_best": _MATMUL_GFLOPS, "matmul_gflops_bf16_best": _MATMUL_GFLOPS,
    "matmul_gflops_fp16_best": _MATMUL_GFLOPS, "memory_bandwidth_gbs_best": _COPY_GBS, "cache_copy_gbs_best": _COPY_GBS,
    # the medians beside the bests: only shown (devicefit detect), bounded alike (a 1e300 passed)
    "matmul_gflops_median": _MATMUL_GFLOPS, "memory_bandwidth_gbs_median": _COPY_GBS,
    "tiny_kernel_us_median": (1e-3, 1e7, "µs (a nanosecond to ten seconds)"),
}


# The speed-reference kernel's readings around a config or a probe (benchmark_runners/
# speed_reference.py: a 512x512 fp32 matmul, a 64 MiB copy): the predictors scale each row and
# probe by them, so they keep the same bounds as the probe's own matmul and copy (a row's
# before_gflops of 1e300 passed as any positive number).
SPEED_REFERENCE_RANGES: dict[str, tuple[float, float, str]] = {
    "before_gflops": _MATMUL_GFLOPS, "after_gflops": _MATMUL_GFLOPS, "copy_gbs": _COPY_GBS,
}


def probe_figure_problem(field: str, value: float) -> str | None:
    """Why `value` is no reading of the probe's figure `field` (PROBE_RANGES), or None."""
    return _range_problem("a probe's", field, value, PROBE_RANGES[field])


def speed_reference_problem(field: str, value: float) -> str | None:
    """Why `value` is no reading of the speed reference's rate `field` (SPEED_REFERENCE_RANGES), or None."""
    return _range_problem("a speed reference's", field, value, SPEED_REFERENCE_RANGES[field])


def _range_problem(whose: str, field: str, value: float, bounds: tuple[float, float, str]) -> str | None:
    low, high, unit = bounds
    if low <= value <= high:
        return None
    return f"{value!r} is not a measurement: {whose} {field} lies between {low:g} and {high:g} {unit}"


def utf8_text(value: str) -> str:
    # Python strings may hold lone surrogates ("\ud800" in JSON); DuckDB's VARCHAR cannot.
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"text is not valid Unicode ({exc.reason})") from None
    return value


def json_value(value: Any) -> Any:
    """What the store writes with json.dumps into a JSON column must serialise, be UTF-8 and
    nest at most MAX_JSON_DEPTH levels."""
    if nests_deeper(value):
        raise ValueError(f"nested more than {MAX_JSON_DEPTH} levels deep")
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError, RecursionError) as exc:  # UnicodeEncodeError is a ValueError
        raise ValueError(f"not storable as JSON ({type(exc).__name__}: {str(exc)[:80]})") from None
    return value


def is_utf8(value: str) -> bool:
    try:
        utf8_text(value)
    except ValueError:
        return False
    return True


# Characters that show nothing where a name is printed, besides whitespace: format characters
# (Cf: zero-width space U+200B, word joiner U+2060, byte-order mark U+FEFF, ...), which
# str.strip keeps, and control characters (Cc).
INVISIBLE_CATEGORIES = frozenset({"Cf", "Cc"})


def is_invisible(value: str) -> bool:
    """Whether `value` has no visible character: only whitespace, format and control characters
    ("", "   ", "\u200b\u200b", "\ufeff")."""
    return all(c.isspace() or unicodedata.category(c) in INVISIBLE_CATEGORIES for c in value)


def timing_sample_problem(row: Any) -> str | None:
    """The old, specific wording for a bad timing sample, kept because people grep for it."""
    samples = row.get("samples_ms") if isinstance(row, dict) else None
    if isinstance(samples, list) and any(isinstance(s, (int, float)) and not isinstance(s, bool)
                                         and (not math.isfinite(s) or s <= 0) for s in samples):
        return "has a NaN, infinite, zero or negative timing sample"
    return None
