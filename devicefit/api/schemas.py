"""The API's contract: spec 000's requests and responses as pydantic models.

Requests refuse unknown fields and out-of-range values (422, naming the field); responses keep
the spec's field names and nesting, and add what a user needs to trust a number (its `source`,
intervals, the predictor version)."""
from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, RootModel, StringConstraints, model_validator

from benchmark_runners import registry
from benchmark_runners.records import MAX_ASKED_BATCH_SIZE, MODES, PRECISIONS
from devicefit.select.distributed import MAX_GPU_COUNT
from models.catalog import FAMILIES

# Enums from the registry and the records: a registered backend's kinds appear here by themselves.
Backend = Literal[registry.backend_names()]
Family = Literal[FAMILIES]
Precision = Literal[PRECISIONS]
Mode = Literal[MODES]
MAX_KINDS = len(registry.kind_names())
# A hardware kind, or a torch device string of one ("cuda:0", what the client's
# get_optimal_device returns): answered for its kind (registry.kind_of_device).
DEVICE_PATTERN = rf"^(?:{'|'.join(registry.kind_names())})(?::[A-Za-z0-9_.-]{{1,64}})?$"
Hardware = Annotated[str, StringConstraints(pattern=DEVICE_PATTERN)]
TaskType = Literal["classification", "generation", "embedding", "speech_recognition", "fine_tuning", "training"]
MAX_BATCH_SIZE = MAX_ASKED_BATCH_SIZE
MAX_SEQUENCE_LENGTH = 32768
MAX_BATCH_MODELS = 50  # models per /hardware/batch request
MAX_NEW_TOKENS = 32768  # benchmark_runners.generation.MAX_NEW_TOKENS


def _gpu_count(value: Any) -> Any:
    """0 is what torch.cuda.device_count() gives on a machine without CUDA (spec 000's
    distributed example passes it straight in): say so, not just "at least 1"."""
    if value == 0 and not isinstance(value, bool):
        raise ValueError("0 GPUs: nothing to distribute training over (torch.cuda.device_count() is 0 on a machine without "
                         "CUDA); give the GPU count of the machine that will train, at least 1")
    return value


GpuCount = Annotated[int, BeforeValidator(_gpu_count), Field(ge=1, le=MAX_GPU_COUNT)]


class Request(BaseModel):
    """A request body: unknown fields, values of another JSON type ("4", 4.0 or true for a batch
    size of 4) and non-finite numbers are refused (422), never coerced into something asked."""
    model_config = ConfigDict(extra="forbid", protected_namespaces=(), strict=True, allow_inf_nan=False)


class Response(BaseModel):
    model_config = ConfigDict(protected_namespaces=())


BatchSizeValue = Annotated[int, Field(ge=1, le=MAX_BATCH_SIZE)]
BatchSize = Field(1, ge=1, le=MAX_BATCH_SIZE, description="Samples per batch")
SequenceLength = Field(None, ge=1, le=MAX_SEQUENCE_LENGTH, description="Tokens per sample (text models; default 128)")


class HealthResponse(Response):
    status: Literal["healthy", "degraded"]
    version: str
    available_components: dict[str, bool]
    database_connected: bool
    artifacts: dict[str, Any]


class DetectResponse(Response):
    hardware: dict[str, bool]
    reasons: dict[str, Optional[str]]


class SelectRequest(Request):
    model_name: str = Field(min_length=1, max_length=512)
    model_family: Optional[Family] = None
    batch_size: int = BatchSize
    sequence_length: Optional[int] = SequenceLength
    mode: Mode = "inference"
    precision: Precision = "fp32"
    available_hardware: Optional[list[Hardware]] = Field(None, min_length=1, max_length=MAX_KINDS)
    task_type: Optional[TaskType] = None
    distributed: bool = False
    gpu_count: GpuCount = 1
    max_latency_ms: Optional[float] = Field(None, gt=0, description="ms per batch; in mode generation, the whole request")
    new_tokens: Optional[int] = Field(None, ge=2, le=MAX_NEW_TOKENS, description="mode generation: tokens each request generates "
                                      "(default 64); sequence_length is then the prompt (default 256)")
    max_tpot_ms: Optional[float] = Field(None, gt=0, description="mode generation: bound on the predicted time per output token")
    max_ttft_ms: Optional[float] = Field(None, gt=0, description="mode generation: bound on the predicted time to first token")

    @model_validator(mode="after")
    def _one_mode(self) -> "SelectRequest":
        """A task_type decides the mode it is answered in: a mode given beside it that says
        otherwise, or `distributed` outside training, would be dropped silently (the CLI's
        select refuses both the same way). The generation scenario's fields outside it are a
        malformed request too (422, as /performance/predict answers new_tokens outside it)."""
        from devicefit.select.selector import TASK_MODES

        wanted = TASK_MODES.get(self.task_type) if self.task_type else None
        if wanted is not None and "mode" in self.model_fields_set and self.mode != wanted:
            raise ValueError(f"task_type {self.task_type} selects on {wanted} figures, not mode {self.mode}: give one of them")
        if self.distributed and (wanted or self.mode) != "training":
            raise ValueError(f"distributed plans training over several GPUs; this request is answered in mode {wanted or self.mode} "
                             "(give mode training, or task_type training or fine_tuning)")
        generation_only = [n for n in ("new_tokens", "max_tpot_ms", "max_ttft_ms") if getattr(self, n) is not None]
        if generation_only and (wanted or self.mode) != "generation":
            raise ValueError(f"{', '.join(generation_only)}: apply to mode generation (the generation scenario), "
                             f"not to mode {wanted or self.mode}")
        return self


class SelectResponse(Response):
    model_family: str
    model_name: str
    model_size: int
    model_size_category: str
    batch_size: int
    sequence_length: Optional[int]
    precision: str
    mode: str
    new_tokens: Optional[int] = None  # mode generation
    primary_recommendation: str
    fallback_options: list[str]
    compatible_hardware: list[str]
    explanation: str
    prediction_source: str
    all_scores: dict[str, Any]
    config_source: str
    predictor_version: str


class BatchModel(Request):
    name: str = Field(min_length=1, max_length=512)
    family: Optional[Family] = None


class BatchRequest(Request):
    models: list[BatchModel] = Field(min_length=1, max_length=MAX_BATCH_MODELS)
    batch_size: int = BatchSize
    mode: Mode = "inference"

    @model_validator(mode="after")
    def _one_family_per_name(self) -> "BatchRequest":
        """The answer is keyed by the name asked: one name asked with two families would get one
        family's answer under both (the last one's, silently)."""
        families: dict[str, Optional[str]] = {}
        for m in self.models:
            if families.setdefault(m.name, m.family) != m.family:
                raise ValueError(f"models: {m.name[:200]!r} is asked with two families ({families[m.name]}, {m.family}); "
                                 "the answer is keyed by name, so give it once")
        return self


class BatchEntry(Response):
    primary: Optional[str]
    fallbacks: list[str]
    explanation: str


class BatchResponse(RootModel[dict[str, BatchEntry]]):
    pass


class MapRequest(Request):
    model_families: Optional[list[Family]] = Field(None, min_length=1, max_length=5)
    batch_sizes: Optional[list[BatchSizeValue]] = Field(None, min_length=1, max_length=10)
    hardware_platforms: Optional[list[Hardware]] = Field(None, min_length=1, max_length=MAX_KINDS,
                                                         description="kinds or torch device strings (cuda:0), answered for their kinds")


class MapResponse(Response):
    timestamp: str
    model_families: dict[str, Any]
    batch_sizes: list[int]
    hardware_platforms: list[str]
    config_source: str
    predictor_version: str


class PredictRequest(Request):
    model_name: str = Field(min_length=1, max_length=512)
    model_family: Optional[Family] = None
    hardware: Annotated[list[Hardware], Field(min_length=1, max_length=MAX_KINDS)] | Hardware = Field(
        "cpu", description="kinds or torch device strings (cuda:0); predictions are keyed as asked")
    batch_size: int = BatchSize
    sequence_length: Optional[int] = SequenceLength
    mode: Mode = "inference"
    precision: Precision = "fp32"
    new_tokens: Optional[int] = Field(None, ge=2, le=MAX_NEW_TOKENS, description="mode generation: tokens each request "
                                                                               "generates (default 64); sequence_length is the prompt (default 256)")


class HardwarePrediction(Response):
    throughput: Optional[float]  # generation: decode tokens/s
    latency: Optional[float]  # generation: the whole request, TTFT + (N - 1) x TPOT
    memory_usage: Optional[float]
    source: str
    detail: str
    interval_level: Optional[float]
    throughput_interval: Optional[list[float]]
    latency_interval: Optional[list[float]]
    memory_interval: Optional[list[float]]
    # mode generation (devicefit/predict/generation.py), each figure with the link that answered it
    prompt_tokens: Optional[int] = None
    new_tokens: Optional[int] = None
    ttft_ms: Optional[float] = None
    ttft_source: Optional[str] = None
    ttft_detail: Optional[str] = None
    ttft_generate_step_ms: Optional[float] = None  # generate()'s per-step cost included in ttft_ms (the host line's)
    tpot_ms: Optional[float] = None
    tpot_source: Optional[str] = None
    tpot_detail: Optional[str] = None
    decode_tokens_per_s: Optional[float] = None
    request_ms: Optional[float] = None
    kv_cache_mb: Optional[float] = None
    kv_cache: Optional[dict[str, Any]] = None
    kv_cache_source: Optional[str] = None
    decode_transient_mb: Optional[float] = None  # a decode step's transient beside the KV cache (a GPU's batched experts)
    memory_detail: Optional[str] = None


class PredictResponse(Response):
    model_name: str
    model_family: str
    batch_size: int
    sequence_length: Optional[int]
    mode: str
    precision: str
    predictions: dict[str, HardwarePrediction]
    predictor_version: str


class DistributedRequest(Request):
    model_name: str = Field(min_length=1, max_length=512)
    model_family: Optional[Family] = None
    gpu_count: GpuCount = 1
    batch_size: int = BatchSize
    max_memory_gb: Optional[float] = Field(None, gt=0, le=4096)
    sequence_length: Optional[int] = SequenceLength
    mixed_precision: bool = True


class EstimatedMemory(Response):
    parameters_gb: float
    gradients_gb: float
    optimizer_gb: float
    activations_gb: float
    gathered_layer_gb: float
    cuda_context_gb: float
    total_gb: float
    per_gpu_gb: float
    basis: str


class DistributedResponse(Response):
    model_family: str
    model_name: str
    parameters: int
    distributed_strategy: str
    zero_stage: int
    equivalent: Optional[str]
    gpu_count: int
    per_gpu_batch_size: int
    micro_batch_size: int
    global_batch_size: int
    sequence_length: int
    mixed_precision: bool
    gradient_accumulation_steps: int
    activation_checkpointing: bool
    cpu_offload: bool
    eight_bit_optimizer: bool
    max_memory_gb: Optional[float]
    fits: bool
    estimated_memory: EstimatedMemory
    activation_method: str
    notes: list[str]


class AnalysisRequest(Request):
    model_name: str = Field(min_length=1, max_length=512)
    model_family: Optional[Family] = None
    batch_sizes: list[BatchSizeValue] = Field(default_factory=lambda: [1, 8, 32], min_length=1, max_length=8)
    hardware_platforms: Optional[list[Hardware]] = Field(None, min_length=1, max_length=MAX_KINDS,
                                                         description="kinds or torch device strings (cuda:0), answered for their kinds")


class AnalysisEntry(HardwarePrediction):
    """A measured entry (`source: "measured"`) keeps the prediction for the same config beside it."""

    prediction: Optional[HardwarePrediction] = None


class ModeAnalysis(Response):
    performance: dict[str, dict[str, AnalysisEntry]]
    recommendations: dict[str, dict[str, Any]]


class AnalysisResponse(Response):
    model_name: str
    model_family: str
    hardware_platforms: list[str]
    batch_sizes: list[int]
    timestamp: str
    inference: ModeAnalysis
    training: ModeAnalysis
    predictor_version: str
    benchmark_snapshot: Optional[str] = Field(None, description="generated_at of the benchmark snapshot measured entries came from")


class BenchmarkRow(Response):
    """One measured configuration: medians over the runs that measured it (torch or openvino backend)."""

    model: str
    family: Optional[str]
    backend: str
    device_kind: str
    device_name: Optional[str]
    hardware_fingerprint: Optional[str]
    hostname: Optional[str]
    precision: str
    mode: str
    batch_size: int
    input_dims: dict[str, Any]
    seq_length: Optional[int]
    runs: int
    rows: int
    p50_ms: float
    p95_ms: Optional[float]
    throughput_samples_per_s: Optional[float]
    peak_rss_bytes: Optional[int]
    device_reserved_peak_bytes: Optional[float] = Field(None, description="a GPU's own memory: the caching allocator's reserved peak")
    worst_ci_rel_half_width: Optional[float]
    speedup_vs_cpu_fp32: Optional[float]
    is_best_precision: Optional[bool]
    last_measured: Optional[str]
    # mode generation (p50_ms is then the whole request): absent from a forward-pass row
    ttft_ms: Optional[float] = None
    tpot_p50_ms: Optional[float] = None
    tpot_p90_ms: Optional[float] = None
    decode_tokens_per_s: Optional[float] = None
    kv_cache_bytes: Optional[float] = None


class BenchmarksResponse(Response):
    generated_at: str
    model: Optional[str] = Field(None, description="the model the `model` filter resolved to (its catalog or registered name; "
                                                   "an alias or Hugging Face id answers for it); null without that filter")
    total: int = Field(description="rows matching the filters before the limit")
    results: list[BenchmarkRow]


class CatalogModel(Response):
    name: str
    hf_id: Optional[str]
    family: Optional[str]
    parameters: int
    published_parameters: Optional[int]
    tasks: list[str]
    source: Literal["catalog", "registered"] = Field("catalog", description="a catalog model, or one the operator registered")


class PredictorVersion(Response):
    version: str
    trained_at: str
    rows: int
    models: int
    current: bool
    within_bars: dict[str, bool]
    held_out: dict[str, dict[str, Optional[float]]]


class ErrorResponse(Response):
    status: Literal["error"] = "error"
    message: str
