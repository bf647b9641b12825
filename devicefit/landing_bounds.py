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
_TIMING = (MIN_TIMING_MS, MAX_TIMING_MS)
_RATE = (1e3 / MAX_TIMING_MS, INT32_MAX * 1e3 / MIN_TIMING_MS)
# Every timing and rate an 'ok' row carries, not only the four the reports divide by: a p95 of
# -1e300 and a ttft of 1e308 loaded, and /benchmarks served them (the percentiles, a training
# row's phases, generation's token figures, the warm-up's and each phase's samples).
MEASURED_RANGES = {**{key: _TIMING for key in (
    "samples_ms", "p50_ms", "mean_ms", "p90_ms", "p95_ms", "p99_ms", "min_ms", "max_ms", "ci_low_ms", "ci_high_ms",
    "warmup_ms", "first_inference_ms", "forward_ms", "backward_ms", "optimizer_ms", "ttft_ms", "ttft_p90_ms",
    "tpot_p50_ms", "tpot_p90_ms")},
    **{key: _RATE for key in ("throughput_samples_per_s", "forward_tokens_per_s", "decode_tokens_per_s", "prefill_tokens_per_s")}}
# A spread is zero with one sample; never negative, never past a year.
SPREAD_RANGES = {"stdev_ms": (0.0, MAX_TIMING_MS), "cv": (0.0, MAX_TIMING_MS)}
# The order statistics of one row's samples: a row whose p99 is below its p50 was not computed
# from samples (relative slack for the last bit of interpolation).
ORDERED_FIGURES = ("min_ms", "p50_ms", "p90_ms", "p95_ms", "p99_ms", "max_ms")
ORDER_SLACK = 1e-9


def measured_range_problem(row: Any) -> str | None:
    """'<field> <value>: why' for the first of `row`'s measured figures (attributes, a number or a
    list of them; phase_samples_ms's lists by phase) outside MEASURED_RANGES or SPREAD_RANGES,
    or its percentiles (or the median's interval) out of order; None when there is none."""
    for key, (low, high) in {**MEASURED_RANGES, **SPREAD_RANGES}.items():
        value = getattr(row, key)
        for v in value if isinstance(value, list) else [value]:
            if v is not None and not low <= v <= high:
                return (f"{key} {v!r}: not a measurement (a timing is a nanosecond to a year, {MIN_TIMING_MS:g} to "
                        f"{MAX_TIMING_MS:g} ms; a throughput one sample a year to a batch of {INT32_MAX} a nanosecond; "
                        "a spread is not negative)")
    for phase, values in (getattr(row, "phase_samples_ms", None) or {}).items():
        for v in values:
            if not MIN_TIMING_MS <= v <= MAX_TIMING_MS:
                return f"phase_samples_ms[{phase!r}] {v!r}: not a measurement (a timing is {MIN_TIMING_MS:g} to {MAX_TIMING_MS:g} ms)"
    given = [(key, getattr(row, key)) for key in ORDERED_FIGURES if getattr(row, key) is not None]
    for (a, x), (b, y) in zip(given, given[1:]):
        if x > y * (1 + ORDER_SLACK):
            return f"{a} {x!r} above {b} {y!r}: not order statistics of one set of samples"
    low, median, high = row.ci_low_ms, row.p50_ms, row.ci_high_ms
    if median is not None and ((low is not None and low > median * (1 + ORDER_SLACK))
                               or (high is not None and median > high * (1 + ORDER_SLACK))):
        return f"the median's interval {low!r} to {high!r} ms does not hold its p50 {median!r}"
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
    # the medians beside the bests, bounded alike (a 1e300 passed): the matmul's sets the
    # predictors' compute peaks (hardware_specs.typical_matmul_share), the rest are shown
    "matmul_gflops_median": _MATMUL_GFLOPS, "memory_bandwidth_gbs_median": _COPY_GBS,
    "tiny_kernel_us_median": (1e-3, 1e7, "µs (a nanosecond to ten seconds)"),
    # each backend's GEMM rate at the models' shapes (benchmark_runners/hardware/gemm_suite.py)
    "backend_gemm_gflops": _MATMUL_GFLOPS,
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
    """What the store writes with json.dumps into a JSON column must serialise, be UTF-8, hold
    only finite numbers and nest at most MAX_JSON_DEPTH levels. Python's json reads and writes
    NaN and Infinity, which JSON has no token for: a file's `"dims": {"x": Infinity}` was stored
    as such, and the published benchmarks.json then held Infinity, which strict parsers refuse."""
    if nests_deeper(value):
        raise ValueError(f"nested more than {MAX_JSON_DEPTH} levels deep")
    try:
        json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except (TypeError, ValueError, RecursionError) as exc:  # UnicodeEncodeError is a ValueError
        if type(exc) is ValueError and "JSON compliant" in str(exc):  # json's own words for a NaN or an infinity
            raise ValueError("holds a NaN or infinite number, which JSON has no number for (write null, or the figure as text)") from None
        raise ValueError(f"not storable as JSON ({type(exc).__name__}: {str(exc)[:80]})") from None
    return value


def finite_json(value: Any) -> Any:
    """`value` with every NaN or infinite float inside it written as text ("nan", "inf", "-inf"),
    for the documents devicefit writes itself: a figure that can be infinite where it is
    recorded (OpenVINO's agreement with torch when the output shapes differ) keeps what it said,
    and the file stays JSON that json_value accepts. A typed column's non-finite figure still
    fails the landing check, by its field's name (text is no number)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(v) for v in value]
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
