"""The landing format's rows described with the store's own types.

A landing file is only worth quarantining *before* it reaches DuckDB: a row that passes a loose
check but fails the insert (a string where a DOUBLE goes, a batch size past INTEGER, a timestamp
DuckDB cannot parse) used to raise in the middle of a load and block every later file. So a row
is checked here against exactly what the `measurements` columns hold: INTEGER and BIGINT bounds,
finite DOUBLEs, parseable TIMESTAMPs, lists of numbers, UTF-8 text and JSON-serialisable JSON
columns, with strict types (a boolean is not a number, "1" is not an integer). The landing format
(write_landing / read_document), the store's insert and the optimum-benchmark importer all use
these models, so what validates is what loads.
"""
from __future__ import annotations

from dataclasses import fields
from datetime import datetime, timezone
from typing import Annotated, Any, Callable, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from benchmark_runners.constraints import parse_profile_slug, profile_slug
from benchmark_runners.records import MODES, PRECISIONS, REASON_CODES, STATUSES, BenchmarkResult
from devicefit.errors import DevicefitError
from devicefit.landing_bounds import (
    INT32_MAX,
    is_invisible,
    is_utf8,
    json_value,
    measured_range_problem,
    probe_figure_problem,
    speed_reference_problem,
    timing_sample_problem,
    utf8_text,
)
from devicefit.results_io import FORMAT

INT64_MAX = 2**63 - 1
REQUIRED_RESULT_FIELDS = ("run_id", "config_key", "status", "model", "backend", "device", "precision", "mode",
                          "batch_size", "timestamp")
RESULT_FIELDS = frozenset(f.name for f in fields(BenchmarkResult))
# Fields that older versions wrote under another name: accepted, and read under the new one.
RENAMED_RESULT_FIELDS = {"tokens_per_s": "forward_tokens_per_s"}
MAX_ERRORS_SHOWN = 3
MAX_SUPERSEDED = 4  # the older partitions a document replaces (devicefit.landing.superseded_landing)


class LandingFileError(DevicefitError, ValueError):
    """A landing or ingest file that is not a valid devicefit results document."""


def parse_timestamp(value: str) -> datetime:
    """An ISO 8601 timestamp as the naive UTC datetime the TIMESTAMP columns hold (naive input is UTC)."""
    try:
        parsed = datetime.fromisoformat(value)
        if parsed.tzinfo is not None:
            parsed = parsed.astimezone(timezone.utc).replace(tzinfo=None)
    except (ValueError, OverflowError) as exc:
        raise ValueError(f"not an ISO 8601 timestamp ({exc})") from None
    return parsed


def _timestamp(value: str) -> str:
    parse_timestamp(value)
    return value


Text = Annotated[str, AfterValidator(utf8_text)]


def _profile_slug(value: str) -> str:
    """A slug as profile_slug writes it ("t1", "avx2", "t1-avx2"): one spelling per profile, so
    one device has one id (ValueError: pydantic reports it with the field's name)."""
    if not value.isascii() or profile_slug(*parse_profile_slug(value)) != value or not value:
        raise ValueError(f"{value!r} is not a constraint profile as devicefit writes one (t1, avx2, t1-avx2)")
    return value


def _fingerprint(value: str) -> str:
    if "+" in value:  # "+" separates a device id's fingerprint from its profile
        raise ValueError(f"a hardware fingerprint has no '+', got {value[:60]!r}")
    return value
Int32 = Annotated[int, Field(ge=-INT32_MAX - 1, le=INT32_MAX)]
PositiveInt32 = Annotated[int, Field(ge=1, le=INT32_MAX)]
ByteCount = Annotated[int, Field(ge=0, le=INT64_MAX)]  # BIGINT, never negative
Int64 = Annotated[int, Field(ge=-INT64_MAX - 1, le=INT64_MAX)]
Double = Annotated[float, Field(allow_inf_nan=False)]
NonNegativeDouble = Annotated[float, Field(ge=0, allow_inf_nan=False)]
PositiveDouble = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Timestamp = Annotated[str, AfterValidator(_timestamp)]
JsonValue = Annotated[Any, AfterValidator(json_value)]
JsonObject = Annotated[dict[str, Any], AfterValidator(json_value)]


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


class _Open(BaseModel):
    """A JSON column whose known keys feed other columns; the rest is kept as it came."""
    model_config = ConfigDict(strict=True, extra="allow")

    @model_validator(mode="after")
    def _extras_are_json(self):
        json_value(self.__pydantic_extra__)
        return self


class InputDims(_Open):
    seq_length: PositiveInt32 | None = None  # -> measurements.seq_length INTEGER


class InputInfo(_Open):
    dims: InputDims | None = None


class GitInfo(_Open):
    commit: Text | None = None  # -> runs.git_commit VARCHAR
    dirty: bool | None = None  # -> runs.git_dirty BOOLEAN


class EnvironmentInfo(_Open):
    hostname: Text | None = None  # -> measurements.hostname, runs.hostname VARCHAR
    git: GitInfo | None = None
    versions: JsonValue = None


class MemoryBreakdown(_Open):
    """Generation's memory breakdown: the aggregates take the median of its byte counts as
    DOUBLEs (store/queries.py), so one row's "497 MB" there failed every later aggregation of
    the store with DuckDB's conversion error; the figures are byte counts, or null."""
    weights_bytes: ByteCount | None = None
    kv_cache_bytes: ByteCount | None = None
    activation_bytes: ByteCount | None = None
    expert_copy_bytes: ByteCount | None = None
    process_bytes: ByteCount | None = None
    estimated_peak_bytes: ByteCount | None = None
    measured_peak_bytes: ByteCount | None = None
    measured_over_estimate: NonNegativeDouble | None = None


def _measured_rate(problem: Callable[[str, float], str | None], field: str) -> Any:
    """The type of the measured figure `field`: a positive finite number that `problem` (a
    landing_bounds check: a probe's or a speed reference's bounds) finds no fault with; its
    ValueError names the bounds, pydantic the field."""
    def check(value: float) -> float:
        if (why := problem(field, value)) is not None:
            raise ValueError(why)
        return value
    return Annotated[float, Field(gt=0, allow_inf_nan=False), AfterValidator(check)]


def _probe_figure(field: str) -> Any:
    """The type of the probe's figure `field`: within what a machine can measure (landing_bounds.PROBE_RANGES)."""
    return _measured_rate(probe_figure_problem, field)


class SpeedReference(_Open):
    """The worker's fixed-kernel rates around a config (benchmark_runners/speed_reference.py):
    training scales the row's time by them and regression verdicts read them, so both must be
    real rates, within what a machine measures (landing_bounds.SPEED_REFERENCE_RANGES); the kernel's
    description and threads ride along."""
    before_gflops: _measured_rate(speed_reference_problem, "before_gflops")
    after_gflops: _measured_rate(speed_reference_problem, "after_gflops")
    # the worker's copy kernel (once a process): training's bandwidth
    copy_gbs: _measured_rate(speed_reference_problem, "copy_gbs") | None = None


class ResultRow(_Strict):
    """One `measurements` row as the landing format carries it; each type is its column's type."""
    run_id: Text
    config_key: Text
    status: Literal[STATUSES]
    model: Text
    backend: Text
    device: Text
    precision: Literal[PRECISIONS]
    mode: Literal[MODES]
    batch_size: PositiveInt32
    timestamp: Timestamp
    error: Text | None = None
    reason_code: Literal[REASON_CODES] | None = None
    model_source: Text | None = None
    model_path: Text | None = None
    family: Text | None = None
    architecture: Text | None = None
    parameters: ByteCount | None = None
    weights: Text | None = None
    input: InputInfo = Field(default_factory=InputInfo)
    forward_flops_per_sample: ByteCount | None = None
    weight_bytes: ByteCount | None = None
    precision_recipe: Text | None = None
    weights_recipe: Text | None = None
    backend_config: JsonObject | None = None
    denormal_policy: Text | None = None
    output_check: JsonObject | None = None
    device_name: Text | None = None
    hardware_fingerprint: Annotated[Text, AfterValidator(_fingerprint)] | None = None
    # A constraint profile's slug ("t1", "avx2", "t1-avx2"): it becomes part of a device id.
    device_profile: Annotated[str, Field(max_length=64), AfterValidator(_profile_slug)] | None = None
    other_cpu_share: Annotated[float, Field(ge=0, le=1)] | None = None
    contended: bool | None = None
    contention_attempts: Annotated[int, Field(ge=1, le=INT32_MAX)] | None = None
    speed_reference: SpeedReference | None = None
    minor_faults_per_iteration: NonNegativeDouble | None = None
    samples_ms: list[PositiveDouble] = Field(default_factory=list)
    warmup_ms: list[Double] = Field(default_factory=list)
    warmup_steady: bool | None = None
    iterations: Annotated[int, Field(ge=0, le=INT32_MAX)] | None = None
    stop_reason: Text | None = None
    ci_target: Double | None = None
    mean_ms: NonNegativeDouble | None = None
    p50_ms: NonNegativeDouble | None = None
    p90_ms: Double | None = None
    p95_ms: Double | None = None
    p99_ms: Double | None = None
    min_ms: Double | None = None
    max_ms: Double | None = None
    stdev_ms: Double | None = None
    cv: Double | None = None
    ci_low_ms: Double | None = None
    ci_high_ms: Double | None = None
    ci_rel_half_width: Double | None = None
    throughput_samples_per_s: NonNegativeDouble | None = None
    forward_tokens_per_s: NonNegativeDouble | None = None
    prompt_tokens: PositiveInt32 | None = None
    new_tokens: PositiveInt32 | None = None
    ttft_ms: NonNegativeDouble | None = None
    ttft_p90_ms: NonNegativeDouble | None = None
    tpot_p50_ms: NonNegativeDouble | None = None
    tpot_p90_ms: NonNegativeDouble | None = None
    decode_tokens_per_s: NonNegativeDouble | None = None
    prefill_tokens_per_s: NonNegativeDouble | None = None
    token_times_ms: list[list[NonNegativeDouble]] | None = None
    kv_cache_bytes: ByteCount | None = None
    kv_cache: JsonObject | None = None
    memory_breakdown: MemoryBreakdown | None = None
    load_time_s: NonNegativeDouble | None = None
    first_inference_ms: NonNegativeDouble | None = None
    forward_ms: Double | None = None
    backward_ms: Double | None = None
    optimizer_ms: Double | None = None
    phase_samples_ms: dict[Text, list[Double]] = Field(default_factory=dict)
    loss_kind: Text | None = None
    peak_rss_bytes: ByteCount | None = None
    rss_after_load_bytes: ByteCount | None = None
    rss_before_load_bytes: ByteCount | None = None
    memory_method: Text | None = None
    device_allocated_peak_bytes: ByteCount | None = None
    device_reserved_peak_bytes: ByteCount | None = None
    environment: EnvironmentInfo = Field(default_factory=EnvironmentInfo)
    policy: JsonObject = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _renamed_fields(cls, data: Any) -> Any:
        """Files written before the rename carry `tokens_per_s`: the forward-pass rate, by its
        name now. A file carrying both names is ambiguous and refused by field name."""
        if not isinstance(data, dict):
            return data
        for old, new in RENAMED_RESULT_FIELDS.items():
            if old in data:
                if new in data:
                    raise ValueError(f"{old} and {new} are the same figure (its old and new name): give one")
                data = {(new if k == old else k): v for k, v in data.items()}
        return data


class HardwareDevice(_Open):
    fingerprint: Text | None = None  # -> hardware.fingerprint VARCHAR
    name: Text | None = None


class HardwarePlatform(_Open):
    devices: list[HardwareDevice] | None = None


# A backend's registered name, and a GEMM's "MxKxN" (benchmark_runners/hardware/gemm_suite.py).
_GemmBackend = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,31}$")]
_GemmShape = Annotated[str, Field(pattern=r"^[1-9][0-9]{0,5}x[1-9][0-9]{0,5}x[1-9][0-9]{0,5}$")]
_GemmRate = _probe_figure("backend_gemm_gflops")


class BackendGemm(_Open):
    """Each backend's fp32 GEMM rates on the host CPU at the models' shapes (GFLOP/s): bounded as
    the probe's matmul, by names of the shape a probe writes and at most 16 backends of 16
    shapes, so a transfer between machines can scale by them."""
    dtype: Literal["fp32"] | None = None
    gflops_median: Annotated[dict[_GemmBackend, Annotated[dict[_GemmShape, _GemmRate], Field(max_length=16)]],
                             Field(max_length=16)] | None = None
    median_over_shapes: Annotated[dict[_GemmBackend, _GemmRate], Field(max_length=16)] | None = None
    shapes: Annotated[list[_GemmShape], Field(max_length=16)] | None = None
    errors: Annotated[dict[_GemmBackend, Annotated[Text, Field(max_length=400)]], Field(max_length=16)] | None = None


class HardwareProbe(_Open):
    """A probe's figures become a device's peaks (predictions scale by them): when present they
    are positive finite numbers within what a machine can measure."""
    fingerprint: Text | None = None
    matmul_gflops_best: _probe_figure("matmul_gflops_best") | None = None
    matmul_gflops_median: _probe_figure("matmul_gflops_median") | None = None
    memory_bandwidth_gbs_best: _probe_figure("memory_bandwidth_gbs_best") | None = None
    memory_bandwidth_gbs_median: _probe_figure("memory_bandwidth_gbs_median") | None = None
    cache_copy_gbs_best: _probe_figure("cache_copy_gbs_best") | None = None
    tiny_kernel_us_median: _probe_figure("tiny_kernel_us_median") | None = None
    matmul_gflops_bf16_best: _probe_figure("matmul_gflops_bf16_best") | None = None
    matmul_gflops_fp16_best: _probe_figure("matmul_gflops_fp16_best") | None = None
    speed_reference: SpeedReference | None = None  # the kernel's readings around the probe: training scales the peaks by them
    backend_gemm: BackendGemm | None = None  # the host CPU's probe: each backend's own GEMM rates


class HardwareInventory(_Open):
    """The `hardware` block of a document, as far as the `hardware` table reads it."""
    hostname: Text | None = None
    platforms: dict[Text, HardwarePlatform] | None = None
    probes: dict[Text, HardwareProbe] | None = None


def _where(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _union_tag(part: Any) -> bool:
    """pydantic names the member of a union it tried ("constrained-int", "function-after[...]");
    that is not a field of the document, so it is left out of the path."""
    return isinstance(part, str) and ("[" in part or part.startswith(("constrained-", "function-", "lax-", "strict-")))


def describe(exc: ValidationError, prefix: str = "") -> str:
    """A pydantic error in one line: each failing field by its path (under `prefix`), what was
    wrong, what came."""
    parts = []
    for e in exc.errors()[:MAX_ERRORS_SHOWN]:
        loc = _where(((prefix,) if prefix else ()) + tuple(p for p in e["loc"] if not _union_tag(p)))
        shown = repr(e.get("input"))
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        parts.append(f"{loc or 'value'}: {e['msg']} (got {shown})")
    more = exc.error_count() - MAX_ERRORS_SHOWN
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def _blank_fields(row: dict[str, Any]) -> list[str]:
    """The required fields of `row` given as text with no visible character: a model, run or
    config named "   " or "\u200b" is no name (the store keys rows and models by them)."""
    return [k for k in REQUIRED_RESULT_FIELDS if isinstance(row.get(k), str) and is_invisible(row[k])]


def _check_row(row: Any, where: str) -> dict[str, Any]:
    if not isinstance(row, dict):
        raise LandingFileError(f"{where} is not an object")
    missing = [k for k in REQUIRED_RESULT_FIELDS if row.get(k) is None or row.get(k) == ""]
    if missing:
        raise LandingFileError(f"{where} lacks {', '.join(missing)}")
    if blank := _blank_fields(row):
        raise LandingFileError(f"{where} lacks {', '.join(blank)}: only whitespace or invisible characters")
    unknown = sorted(map(str, set(row) - RESULT_FIELDS - set(RENAMED_RESULT_FIELDS)))
    if unknown:
        raise LandingFileError(f"{where} has unknown fields {', '.join(unknown)}")
    try:
        parsed = ResultRow.model_validate(row)
    except ValidationError as exc:
        raise LandingFileError(f"{where}: {describe(exc)}") from None
    if parsed.status == "ok":
        if not parsed.samples_ms:
            raise LandingFileError(f"{where} is 'ok' without samples_ms")
        for key in ("p50_ms", "mean_ms", "throughput_samples_per_s"):
            if getattr(parsed, key) is None:
                raise LandingFileError(f"{where} has {key}=None")
            # Its samples are all positive, so these are too; a 0 passed as a valid figure and
            # divided the reports by zero (and the store's invalid_timing_rows check calls it invalid).
            if getattr(parsed, key) <= 0:
                raise LandingFileError(f"{where} is 'ok' with {key}={getattr(parsed, key)}: a measured figure must be positive")
        if (problem := measured_range_problem(parsed)) is not None:
            raise LandingFileError(f"{where} is 'ok' with {problem}")
    elif not parsed.error:
        raise LandingFileError(f"{where} is {parsed.status!r} without the reason in 'error'")
    return parsed.model_dump(exclude_unset=True)


def validated_rows(document: Any, what: str) -> list[dict[str, Any]]:
    """The document's rows, each checked against the store's column types; raises
    LandingFileError naming the first bad row and field. Rows sharing a natural key (run_id,
    config_key) within one document are refused: the store holds a row once."""
    if not isinstance(document, dict):
        raise LandingFileError(f"{what}: expected a JSON object, got {type(document).__name__}")
    if document.get("format") != FORMAT:
        raise LandingFileError(f"{what}: format is {str(document.get('format'))[:80]!r}, expected {FORMAT!r}")
    results = document.get("results")
    if not isinstance(results, list):
        raise LandingFileError(f"{what}: 'results' must be a list")
    source_key = document.get("source_key")
    if source_key is not None and not (isinstance(source_key, str) and source_key and is_utf8(source_key)):
        raise LandingFileError(f"{what}: source_key must be a non-empty string, got {str(source_key)[:60]!r}")
    supersedes = document.get("supersedes")
    if supersedes is not None and not (isinstance(supersedes, list) and len(supersedes) <= MAX_SUPERSEDED and all(
            isinstance(k, str) and k.startswith("partition:") and len(k) <= 300 and is_utf8(k) for k in supersedes)):
        raise LandingFileError(f"{what}: supersedes must be a list of at most {MAX_SUPERSEDED} partition source keys "
                               f"('partition:...'), got {str(supersedes)[:80]!r}")
    try:
        HardwareInventory.model_validate(document.get("hardware") or {})
    except ValidationError as exc:
        raise LandingFileError(f"{what}: {describe(exc, 'hardware')}") from None
    rows, seen = [], {}
    for i, row in enumerate(results):
        where = f"{what}: results[{i}]"
        timing = timing_sample_problem(row)
        if timing and isinstance(row, dict) and row.get("status") == "ok":
            raise LandingFileError(f"{where} {timing}")
        rows.append(_check_row(row, where))
        key = (rows[-1]["run_id"], rows[-1]["config_key"])
        if key in seen:
            raise LandingFileError(f"{where} repeats run_id {key[0]!r} and config_key {key[1]!r} of results[{seen[key]}]")
        seen[key] = i
    return rows
