"""The backend contract: what a measurement backend declares and does.

A backend says which device kinds it measures (and on which device a partition of each kind
runs), which precisions and modes it serves, with the reason where it does not, and how it
prepares a model and times one step. The worker (`benchmark_runners/measure.py`) knows nothing
else about it. Registered in `benchmark_runners/registry.py`.

Shaped like optimum-benchmark's backend base: class-level declarations, one prepared-model type
shared by every backend (what is backend-private lives in its `state`), and a timed step that
carries its own amortization.
"""
from __future__ import annotations

import contextlib
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from importlib import metadata
from typing import TYPE_CHECKING, Any, Callable, ClassVar, ContextManager, Mapping

from benchmark_runners.records import MODES, PRECISIONS
from benchmark_runners.timers import IterationClock
from models.errors import DevicefitError

if TYPE_CHECKING:
    from benchmark_runners.records import BenchmarkConfig
    from models.catalog import ModelSpec


class OutputMismatch(DevicefitError, RuntimeError):
    """A backend's output disagrees with the torch reference beyond its precision's tolerance:
    the row fails (reason code output_mismatch) rather than time a wrong computation."""

    exit_code = 1


class InvalidOutput(DevicefitError, RuntimeError):
    """A model's output is not a real computation's (non-finite, all zero, or vanished into the
    denormal range; benchmark_runners.output_check): the row fails (reason code invalid_output)
    rather than time arithmetic no deployed model does."""

    exit_code = 1


@dataclass
class PreparedModel:
    """A model ready to step, on any backend. The elapsed preparation is the row's load time."""

    handle: Any  # what the step runs: a torch module, a compiled OpenVINO model, ...
    device: str
    precision: str
    mode: str
    recipe: str  # how the precision was applied, in words, recorded in the row
    load_time_s: float
    input_float_dtype: Any = None  # dtype of float inputs (a torch dtype); None: fp32
    backend_config: dict[str, Any] | None = None  # settings that decide the numbers, recorded in the row
    state: Any = None  # backend-private (torch: optimizer, grad scaler, autocast dtype)
    loss_kind: str | None = None  # training: model (its task loss) | mean_square_of_output
    memory: dict[str, int] = field(default_factory=dict)  # rss_before_load_bytes, rss_after_load_bytes
    weights_recipe: str | None = None  # how the weights were set (random seeded and calibrated, or loaded)
    denormal_policy: str | None = None  # flush-to-zero / denormals-are-zero as set for this model, in words


@dataclass(frozen=True)
class TimedStep:
    """One timed iteration. `amortize` > 1 when a call runs that many batches in flight (the
    harness's samples are divided by it, so a sample is always the time of one batch).
    `last_output`, where the backend keeps it, returns the first output of the last timed
    iteration: the output check reads it instead of running the model once more (at batch 16
    of a large model that extra forward was a quarter of the config's wall time)."""

    run: Callable[[IterationClock], None]
    amortize: int = 1
    last_output: Callable[[], Any] | None = None
    # The step's own clock, where the time is taken elsewhere (the browser page's
    # performance.now()); None: the device's clock (benchmark_runners.timers.clock_for).
    clock: IterationClock | None = None
    # The generation scenario's per-token times of every request the step ran, cold call and
    # warm-up included (benchmark_runners.generation.RequestTiming); None for other modes.
    token_timings: Callable[[], list[Any]] | None = None
    # A runtime's own figures over its last n requests (openvino-genai's TTFT/TPOT), recorded
    # beside the harness's in the row's backend_config; None where the runtime reports none.
    runtime_figures: Callable[[int], dict[str, Any]] | None = None

    def __post_init__(self):
        if not isinstance(self.amortize, int) or self.amortize < 1:
            raise ValueError(f"amortize must be a positive integer, got {self.amortize!r}")


class Backend(ABC):
    name: ClassVar[str]
    # kind -> the device a partition of that kind measures ("cuda": "cuda:0")
    kinds: ClassVar[Mapping[str, str]]
    device_pattern: ClassVar[str]  # regex of the device strings it accepts
    device_help: ClassVar[str]  # those devices, in words, for error messages
    precisions: ClassVar[tuple[str, ...]] = PRECISIONS
    modes: ClassVar[tuple[str, ...]] = MODES
    packages: ClassVar[tuple[str, ...]] = ()  # distributions whose versions every row records
    # Shapes or settings compiled in per batch: a loaded model is reused only for the same shapes.
    reload_per_batch: ClassVar[bool] = False
    input_device: ClassVar[str | None] = None  # where inputs are built; None: the config's device
    # A graph compiler that runs element-wise ops inside the GEMM or convolution before them, folds
    # zero pads into convolutions and launches nothing for allocations (models.op_tracer's `fused`):
    # the predictors' roofline charges those ops a fitted share of their eager cost on it.
    fuses_post_ops: ClassVar[bool] = False

    def accepts_device(self, device: str) -> bool:
        return re.fullmatch(self.device_pattern, device) is not None

    def declared_reason(self, precision: str, mode: str) -> str | None:
        """Why this backend never serves a precision or mode (None: it may; the device decides)."""
        if mode not in self.modes:
            return self.mode_reason(mode)
        if precision not in self.precisions:
            return f"the {self.name} backend has no {precision} recipe (it serves {', '.join(self.precisions)})"
        return None

    def mode_reason(self, mode: str) -> str:
        return f"the {self.name} backend does not run {mode} (it runs {', '.join(self.modes)})"

    def kind_reason(self, kind: str, precision: str, mode: str) -> str | None:
        """Why this backend never serves a precision or mode on a device kind, whatever the
        device and model (None: it may): what is never measured is never predicted either."""
        return self.declared_reason(precision, mode)

    def model_reason(self, model: str, linear_flops_fraction: float, precision: str, mode: str) -> str | None:
        """Why this backend never measures a precision for this model, from what the model's
        analysis says (None: it may); the predictors answer such a config "unavailable" with it."""
        return None

    def versions(self) -> dict[str, str | None]:
        out: dict[str, str | None] = {}
        for package in self.packages:
            try:
                out[package] = metadata.version(package)
            except metadata.PackageNotFoundError:
                out[package] = None
        return out

    def unsupported_reason(self, spec: "ModelSpec", config: "BenchmarkConfig") -> str | None:
        """Why this config cannot run here (a `skipped` row's reason), or None. The declared
        limits first, then what the device and model say."""
        return self.declared_reason(config.precision, config.mode) or self.device_reason(spec, config)

    @abstractmethod
    def device_reason(self, spec: "ModelSpec", config: "BenchmarkConfig") -> str | None:
        """What this device and model rule out, beyond the declared limits."""

    @abstractmethod
    def prepare(self, spec: "ModelSpec", config: "BenchmarkConfig") -> PreparedModel:
        """Build, convert and place the model for this config."""

    @abstractmethod
    def make_step(self, prepared: PreparedModel, inputs: dict[str, Any]) -> TimedStep:
        """The timed iteration over these inputs."""

    @abstractmethod
    def output(self, prepared: PreparedModel, inputs: dict[str, Any]) -> Any:
        """The model's first output for these inputs (a tensor or an array), computed outside
        the timing, for the validity check every measured row gets (`output_check`) when the
        step does not keep its own (`TimedStep.last_output`)."""

    def release(self, prepared: PreparedModel) -> None:
        """Free what the prepared model holds outside this process (a browser page's session);
        called when the worker drops it. In-process objects need nothing: they are collected."""

    def shutdown(self) -> None:
        """Stop what this process started for the backend and keeps between models (the
        browser): called once, when the worker is done, before it exits without the
        interpreter's teardown. Nothing here."""

    def helper_pids(self, prepared: PreparedModel) -> list[int]:
        """Processes besides the worker that do the timed work (the browser's): their CPU time is
        the measurement's own, not contention. None here: the worker does it all."""
        return []

    def memory_after_timing(self, prepared: PreparedModel) -> tuple[int, str] | None:
        """(bytes, method) of the memory the model's run occupies where this process's RSS does
        not see it (the browser's processes); None: the worker's own peak RSS is the figure."""
        return None

    def measurement_context(self, prepared: PreparedModel) -> ContextManager:
        """Entered around warm-up and timing (torch: inference_mode)."""
        return contextlib.nullcontext()

    def cache_key(self, config: "BenchmarkConfig") -> tuple | None:
        """Configs with the same key share what `fill_cache` keeps on disk; None: nothing."""
        return None

    def fill_cache(self, spec: "ModelSpec", configs: "list[BenchmarkConfig]") -> None:
        """Do now, outside any worker, what `prepare` would otherwise do once per machine and keep
        on disk for later processes (OpenVINO: the conversion, torch's reference outputs, the
        GenAI export), for configs that share one `cache_key`; `prepare` then reads it back, and
        its row says so. `devicefit run` calls this on both cores before it measures
        (devicefit/run_warm.py). Nothing here by default."""

    def host_gemm_seconds(self, m: int, k: int, n: int, budget_s: float) -> list[float] | None:
        """Seconds of each timed call of a linear layer's fp32 GEMM (m rows of k inputs into n
        outputs, against constant weights) run with this backend's own kernels on the host CPU,
        with the threads its worker would use, after one untimed call (gemm_suite.time_gemm);
        None where the backend runs none there (the default). The CPU
        probe times each backend that has one at the models' shapes
        (benchmark_runners/hardware/gemm_suite.py): one backend's matmul rate does not say
        another's on the same CPU."""
        return None

    def loaded_key(self, config: "BenchmarkConfig") -> tuple:
        """Configs with the same key share one prepared model."""
        # new_tokens: a generation model's settings (max_new_tokens) are set when it is prepared
        key = (config.model, config.backend, config.device, config.precision, config.mode, config.new_tokens)
        if self.reload_per_batch:
            key += (config.batch_size, config.seq_length, config.image_size, config.audio_seconds, config.threads)
        return key
