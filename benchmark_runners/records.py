"""The typed records of a benchmark: what to measure (BenchmarkConfig) and what was measured
(BenchmarkResult). A result is one row: a measurement, a skip with its reason, or a failure
with its error; never a number without its provenance."""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from benchmark_runners import registry
from benchmark_runners.constraints import ISA_CAPS, profile_slug
from benchmark_runners.harness import TimingPolicy

PRECISIONS = ("fp32", "fp16", "bf16", "int8")
# inference: one forward pass per sample; training: forward, backward and optimizer step;
# generation: one request of prompt + new tokens, greedy with the KV cache (generation.py).
MODES = ("inference", "training", "generation")
STATUSES = ("ok", "skipped", "failed")
# Why a row was skipped or failed, as a code to filter on; `error` says it in words.
REASON_CODES = (
    "device_unavailable",  # skipped: the kind or the device is not present on this host
    "insufficient_memory",  # skipped: the memory guard's floor exceeds what the device has free
    "unsupported",  # skipped: the backend, the device or the model rules the config out
    "over_call_budget",  # skipped: one call predicted over the profile's call budget (call_budget), left to the predictors
    "output_mismatch",  # failed: the backend's output disagrees with torch's beyond tolerance
    "invalid_output",  # failed: the output is non-finite, all zero or denormal-dominated (output_check)
    "exception",  # failed: measuring raised (out of memory included)
    "timeout",  # failed: the config ran past its deadline; its worker was killed
    "worker_died",  # failed: the worker crashed, was killed, or broke the protocol
)


# The largest batch a row can record (DuckDB INTEGER); the memory guard refuses far smaller ones
# that cannot fit, so this bound only keeps absurd input from reaching torch as an overflow.
MAX_BATCH_SIZE = 2**31 - 1
# The largest batch a prediction or a selection is asked for (the API and the CLI alike): far
# beyond what any measurement informs, and within every column a served prediction is kept in.
MAX_ASKED_BATCH_SIZE = 4096
MAX_TIMEOUT_S = 7 * 24 * 3600  # beyond it a deadline overflows the event loop's and the OS's time types

@dataclass(frozen=True)
class BenchmarkConfig:
    model: str  # catalog name, catalog hf id, or a local model directory
    device: str = "cpu"
    backend: str = "torch"
    precision: str = "fp32"
    mode: str = "inference"
    batch_size: int = 1
    seq_length: int | None = None  # None: the model's default (128, capped at its limit)
    image_size: int | None = None
    audio_seconds: float | None = None
    threads: int | None = None  # None: one per physical core
    # An instruction-set cap (constraints.ISA_CAPS: "avx2", "avx512"): measured in a worker
    # started with the cap's environment, as an older fleet host would run. None: the CPU's own.
    isa: str | None = None
    # generation: the tokens each request generates (None: generation.DEFAULT_NEW_TOKENS); the
    # prompt is seq_length (None: generation.DEFAULT_PROMPT_TOKENS). Counted in the key only when set.
    new_tokens: int | None = None
    timeout_s: float = 600.0  # per config, load included
    policy: TimingPolicy = field(default_factory=TimingPolicy)

    def __post_init__(self):
        problems = []
        if self.precision not in PRECISIONS:
            problems.append(f"unknown precision '{self.precision}' (known: {', '.join(PRECISIONS)})")
        if self.mode not in MODES:
            problems.append(f"unknown mode '{self.mode}' (known: {', '.join(MODES)})")
        problems += _backend_device_problems(self.backend, self.device)
        if not isinstance(self.batch_size, int) or isinstance(self.batch_size, bool) or self.batch_size < 1:
            problems.append(f"batch size must be a positive integer, got {self.batch_size!r}")
        elif self.batch_size > MAX_BATCH_SIZE:
            problems.append(f"batch size {self.batch_size} is over {MAX_BATCH_SIZE:,} (the store's INTEGER column)")
        if self.seq_length is not None and self.seq_length < 1:
            problems.append(f"sequence length must be a positive integer, got {self.seq_length}")
        if self.threads is not None and self.threads < 1:
            problems.append(f"threads must be a positive integer, got {self.threads}")
        if self.isa is not None and self.isa not in ISA_CAPS:
            problems.append(f"unknown ISA cap {self.isa!r} (known: {', '.join(ISA_CAPS)})")
        elif self.isa is not None and registry.kind_of_device(self.device) != "cpu":
            problems.append(f"an ISA cap applies to torch on the CPU, not to {self.device}")
        if self.new_tokens is not None:
            from benchmark_runners.generation import MIN_NEW_TOKENS

            if self.mode != "generation":
                problems.append(f"new tokens apply to the generation scenario, not to {self.mode}")
            elif not isinstance(self.new_tokens, int) or isinstance(self.new_tokens, bool) or self.new_tokens < MIN_NEW_TOKENS:
                problems.append(f"new tokens must be an integer of at least {MIN_NEW_TOKENS} (one decode step), "
                                f"got {self.new_tokens!r}")
        if not isinstance(self.timeout_s, (int, float)) or not 0 < self.timeout_s <= MAX_TIMEOUT_S:  # NaN fails too
            problems.append(f"timeout must be a positive number of seconds up to {MAX_TIMEOUT_S:,} (a week), got {self.timeout_s}")
        if problems:
            raise ValueError("invalid benchmark config: " + "; ".join(problems))

    @property
    def device_kind(self) -> str:
        return registry.kind_of_device(self.device)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "BenchmarkConfig":
        data = dict(data)
        data["policy"] = TimingPolicy(**data.get("policy", {}))
        return cls(**data)

    @property
    def profile(self) -> str:
        """The constraint profile's slug ("t1", "avx2", ...; "" for none): the part of the
        device id that tells this device from the same device unconstrained. Only torch on the
        CPU is measured under a profile; elsewhere --threads is a setting, not another device."""
        if registry.kind_of_device(self.device) != "cpu":
            return ""
        return profile_slug(self.threads, self.isa)

    def key(self) -> str:
        """Identifies the configuration (not the run): same key, comparable measurements. A
        field added later (isa, new_tokens) counts only when set, so configs measured before keep their keys."""
        ident = {k: v for k, v in self.to_json().items()
                 if k not in ("timeout_s", "policy") and not (k in ("isa", "new_tokens") and v is None)}
        return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]


def _backend_device_problems(backend: str, device: str) -> list[str]:
    backends = registry.backends()
    if backend not in backends:
        return [f"unknown backend '{backend}' (known: {', '.join(backends)})"]
    if backends[backend].accepts_device(device):
        return []
    owner = next((b for b in backends.values() if b.accepts_device(device)), None)
    if owner is None:
        known = "; ".join(f"{b.name}: {b.device_help}" for b in backends.values())
        return [f"unknown device '{device}' ({known})"]
    return [f"backend '{backend}' cannot run on device '{device}' ({backend} runs on {backends[backend].device_help}; "
            f"{device} is {owner.name}'s)"]


@dataclass
class BenchmarkResult:
    # identity
    run_id: str
    config_key: str
    status: str  # ok | skipped | failed
    model: str
    backend: str
    device: str
    precision: str
    mode: str
    batch_size: int
    timestamp: str
    error: str | None = None  # the skip reason or failure, verbatim
    reason_code: str | None = None  # one of REASON_CODES for a skipped or failed row
    # the model
    model_source: str | None = None  # catalog | local
    model_path: str | None = None  # the local directory, for local models
    family: str | None = None
    architecture: str | None = None
    parameters: int | None = None
    weights: str | None = None  # random | pretrained
    input: dict[str, Any] = field(default_factory=dict)  # modality, dims, shapes
    forward_flops_per_sample: int | None = None
    weight_bytes: int | None = None
    precision_recipe: str | None = None
    weights_recipe: str | None = None  # random seeded + BatchNorm calibration (models.calibration), or pretrained
    # backend settings that decide the numbers (OpenVINO: precision and performance hints,
    # infer requests, conversion/compile times, output agreement with torch)
    backend_config: dict[str, Any] | None = None
    denormal_policy: str | None = None  # flush-to-zero / denormals-are-zero as the backend set them
    output_check: dict[str, Any] | None = None  # the measured output's figures (benchmark_runners.output_check)
    # the hardware
    device_name: str | None = None
    hardware_fingerprint: str | None = None
    # The constraint profile measured under ("t1", "avx2", ...; None: the device as it is). The
    # row's device id is hardware_fingerprint + "+" + this (devicefit.fleet.devices.device_id).
    device_profile: str | None = None
    # interference: share of the host's CPU other processes used while timing (contention.py)
    other_cpu_share: float | None = None
    contended: bool | None = None  # other_cpu_share above contention.CONTENDED_SHARE on the kept attempt
    contention_attempts: int | None = None  # 2: the first attempt was contended and measured again
    # the host CPU's rate on a fixed kernel just before and after timing (speed_reference.py):
    # a VM's neighbours slow it without a trace in /proc/stat
    speed_reference: dict[str, Any] | None = None
    # timings (milliseconds per batch)
    samples_ms: list[float] = field(default_factory=list)
    warmup_ms: list[float] = field(default_factory=list)
    warmup_steady: bool | None = None
    iterations: int | None = None
    stop_reason: str | None = None
    ci_target: float | None = None
    mean_ms: float | None = None
    p50_ms: float | None = None
    p90_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    min_ms: float | None = None
    max_ms: float | None = None
    stdev_ms: float | None = None
    cv: float | None = None
    ci_low_ms: float | None = None
    ci_high_ms: float | None = None
    ci_rel_half_width: float | None = None
    throughput_samples_per_s: float | None = None  # batch * iterations / total timed time
    # Inference rows of text models: throughput * sequence length, the tokens one forward pass
    # over the whole sequence processes per second (for a decoder, a prefill rate). Never a
    # generation rate: that is decode_tokens_per_s, in generation rows.
    forward_tokens_per_s: float | None = None
    # generation rows (benchmark_runners/generation.py): samples are whole requests
    prompt_tokens: int | None = None  # None for a prompt that is not tokens (Whisper's audio)
    new_tokens: int | None = None
    ttft_ms: float | None = None  # time to first token, p50 over requests (prefill included)
    ttft_p90_ms: float | None = None
    tpot_p50_ms: float | None = None  # time per output token: the per-step gaps' median over all requests
    tpot_p90_ms: float | None = None
    decode_tokens_per_s: float | None = None  # batch x (new - 1) x requests / their decode time
    prefill_tokens_per_s: float | None = None  # batch x prompt / TTFT p50
    token_times_ms: list[list[float]] | None = None  # per timed request, each token's time from its start
    kv_cache_bytes: int | None = None  # computed from the config (generation.kv_cache), at the request's end
    kv_cache: dict[str, Any] | None = None  # its terms: layers, kv heads, head dim, positions, bytes per element
    # process, weights, KV cache and activations beside the measured peak (generation.memory_breakdown)
    memory_breakdown: dict[str, Any] | None = None
    load_time_s: float | None = None
    first_inference_ms: float | None = None
    # training phases (p50 ms, and all samples)
    forward_ms: float | None = None
    backward_ms: float | None = None
    optimizer_ms: float | None = None
    phase_samples_ms: dict[str, list[float]] = field(default_factory=dict)
    loss_kind: str | None = None  # model (its task loss) | mean_square_of_output
    # memory
    peak_rss_bytes: int | None = None
    rss_after_load_bytes: int | None = None
    rss_before_load_bytes: int | None = None
    memory_method: str | None = None
    # Minor page faults per timed sample (one batch, as samples_ms) in the measuring process (all
    # its threads; None where the model runs in other processes): glibc's malloc hands large
    # activations back to the OS between calls, and touching them again costs a kernel entry and
    # a zeroed page each (bert-base at batch 16 on a 2-core VM: 80-140k a call, about 7% of its time).
    minor_faults_per_iteration: float | None = None
    device_allocated_peak_bytes: int | None = None
    device_reserved_peak_bytes: int | None = None
    # environment and reproduction
    environment: dict[str, Any] = field(default_factory=dict)
    policy: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "BenchmarkResult":
        known = {f.name for f in fields(cls)}
        if "tokens_per_s" in data and "forward_tokens_per_s" not in data:  # rows written before the rename
            data = {**data, "forward_tokens_per_s": data["tokens_per_s"]}
        return cls(**{k: v for k, v in data.items() if k in known})

    @classmethod
    def for_config(cls, config: BenchmarkConfig, run_id: str, timestamp: str, status: str,
                   error: str | None = None, reason_code: str | None = None, **extra: Any) -> "BenchmarkResult":
        model = extra.pop("model", config.model)  # the resolved name once the model is known
        policy = extra.pop("policy", config.policy.to_json())  # rows measured elsewhere carry their own
        extra.setdefault("device_profile", config.profile or None)
        return cls(run_id=run_id, config_key=config.key(), status=status, model=model,
                   backend=config.backend, device=config.device, precision=config.precision,
                   mode=config.mode, batch_size=config.batch_size, timestamp=timestamp, error=error, reason_code=reason_code,
                   policy=policy, **extra)
