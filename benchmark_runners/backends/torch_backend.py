"""The PyTorch backend on cpu, cuda and mps.

Precision recipes, as deployed in practice and recorded in every row:
- inference fp16/bf16: weights and activations cast to that dtype;
- training fp16/bf16: autocast with fp32 master weights (fp16 adds a GradScaler);
- int8 (inference, CPU): torch.ao dynamic quantization of nn.Linear layers.
A combination the device cannot run is reported by `unsupported_reason`, never faked.
"""
from __future__ import annotations

import contextlib
import time
import warnings
from dataclasses import dataclass
from typing import Any

from benchmark_runners import registry
from benchmark_runners.backends.base import Backend, PreparedModel, TimedStep
from benchmark_runners.generation import TokenTimer, logits_processor, request_shape
from benchmark_runners.records import BenchmarkConfig
from benchmark_runners.timers import IterationClock
from models.analysis import flop_count_per_sample
from models.catalog import ModelSpec
from models.loading import build

# Below this share of forward FLOPs in linear layers, "dynamic int8" would mostly time fp32 layers.
MIN_INT8_LINEAR_FRACTION = 0.5


def linear_equivalents(model) -> int:
    """Replace transformers' Conv1D (y = x @ W + b, W stored transposed) by the identical
    nn.Linear, so dynamic quantization reaches GPT-2-style layers. Returns how many."""
    import torch

    replaced = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child).__name__ == "Conv1D":
                n_in, n_out = child.weight.shape
                linear = torch.nn.Linear(n_in, n_out, bias=child.bias is not None)
                with torch.no_grad():
                    linear.weight.copy_(child.weight.t())
                    if child.bias is not None:
                        linear.bias.copy_(child.bias)
                setattr(parent, name, linear)
                replaced += 1
    return replaced


def _torch_dtype(precision: str):
    import torch

    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16, "int8": torch.float32}[precision]


def synchronize(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize(device)
    elif device == "mps":
        torch.mps.synchronize()


def set_denormal_policy(device: str) -> str:
    """Denormals are kept on CPU (IEEE arithmetic, torch's default and what a deployed model
    gets): set explicitly, since a library could have turned flush-to-zero on in this process.
    Realistic activations (models.calibration) keep denormals out of the timed work, and the
    output check fails a row whose output is denormal-dominated, rather than hiding the cost."""
    import torch

    if device == "cpu":
        torch.set_flush_denormal(False)
        return "ieee: denormals kept on CPU (torch.set_flush_denormal(False), torch's default)"
    return f"{device.split(':')[0]}: the device's default (torch does not set flush-to-zero there)"


@dataclass
class TorchState:
    """What a torch training step needs besides the module."""

    autocast_dtype: Any = None
    optimizer: Any = None
    scaler: Any = None
    generation: Any = None  # the generation scenario's transformers GenerationConfig


def generation_config(model, spec: ModelSpec, config: BenchmarkConfig):
    """Greedy decoding with the KV cache, to exactly N new tokens (min_new_tokens ==
    max_new_tokens, so an early end-of-sequence token cannot shorten a request), as
    optimum-benchmark and the LLM-Perf leaderboard run it. Recorded in the row's backend_config."""
    import copy

    from transformers import GenerationConfig

    new = request_shape(spec, config.seq_length, config.new_tokens).new_tokens
    generation = copy.deepcopy(getattr(model, "generation_config", None) or GenerationConfig())
    eos = generation.eos_token_id
    pad = generation.pad_token_id if generation.pad_token_id is not None else (eos[0] if isinstance(eos, list) else eos)
    generation.update(max_new_tokens=new, min_new_tokens=new, do_sample=False, num_beams=1, use_cache=True,
                      max_length=None, pad_token_id=pad if pad is not None else 0)
    if getattr(model.config, "is_encoder_decoder", False) and generation.decoder_start_token_id is None:
        # T5 starts its decoder from the padding token; a catalog config may leave that implicit.
        start = getattr(model.config, "decoder_start_token_id", None)
        generation.decoder_start_token_id = start if start is not None else generation.pad_token_id
    return generation


class TorchBackend(Backend):
    name = "torch"
    kinds = {"cpu": "cpu", "cuda": "cuda:0", "rocm": "rocm:0", "mps": "mps"}
    device_pattern = r"cpu|mps|cuda(:\d+)?|rocm(:\d+)?"
    device_help = "cpu, cuda, cuda:N, rocm, rocm:N (an AMD GPU, through a ROCm build of torch) or mps"
    packages = ("torch", "transformers")

    def kind_reason(self, kind: str, precision: str, mode: str) -> str | None:
        if precision == "int8" and kind != "cpu":
            return "torch dynamic int8 quantization (torch.ao.quantization.quantize_dynamic) runs on CPU only"
        if precision == "int8" and mode == "training":
            return "dynamically quantized int8 layers have no gradients, so int8 training cannot run"
        return super().kind_reason(kind, precision, mode)

    def host_gemm_seconds(self, m: int, k: int, n: int, budget_s: float) -> list[float]:
        """F.linear in fp32 without autograd, the kernel a model's Linear layers run, at this
        process's torch threads (the probe's: its CPU budget's)."""
        import torch

        from benchmark_runners.hardware.gemm_suite import time_gemm

        x, w = torch.randn(m, k), torch.randn(n, k)
        with torch.no_grad():
            return time_gemm(lambda: torch.nn.functional.linear(x, w), budget_s)

    def model_reason(self, model: str, linear_flops_fraction: float, precision: str, mode: str) -> str | None:
        if precision == "int8" and linear_flops_fraction < MIN_INT8_LINEAR_FRACTION:
            return (f"dynamic int8 quantizes linear layers only, which do {linear_flops_fraction:.0%} of {model}'s "
                    f"forward FLOPs; the row would mostly time fp32 layers (convolutions)")
        return None

    def device_reason(self, spec: ModelSpec, config: BenchmarkConfig) -> str | None:
        import torch

        device, precision, mode = registry.torch_device_string(config.device), config.precision, config.mode
        if precision == "int8":
            reason = self.kind_reason(device.split(":")[0], precision, mode)
            if reason:
                return reason
            if not any(e in torch.backends.quantized.supported_engines for e in ("x86", "fbgemm", "qnnpack", "onednn")):
                return f"this torch build has no quantized engine (supported: {torch.backends.quantized.supported_engines})"
            share = flop_count_per_sample(spec, config.seq_length, config.image_size, config.audio_seconds).linear_fraction
            if reason := self.model_reason(spec.name, share, precision, mode):
                return reason
        if precision == "bf16" and device.startswith("cuda"):
            index = int(device.split(":")[1]) if ":" in device else 0
            major, minor = torch.cuda.get_device_capability(index)
            if major < 8:
                return f"bf16 needs compute capability 8.0 or newer; this GPU is {major}.{minor}"
        if precision == "bf16" and device == "mps":
            import platform

            macos = platform.mac_ver()[0]
            if macos and int(macos.split(".")[0]) < 14:
                return f"bf16 on MPS needs macOS 14 or newer; this is macOS {macos}"
        return None

    def prepare(self, spec: ModelSpec, config: BenchmarkConfig) -> PreparedModel:
        """Build, convert and place the model; the elapsed time is the row's load time."""
        import torch

        # torch's name for the device: a ROCm GPU ("rocm:0") is "cuda:0" to torch's HIP build.
        device, precision, mode = registry.torch_device_string(config.device), config.precision, config.mode
        started = time.perf_counter()
        cast = mode in ("inference", "generation") and precision in ("fp16", "bf16")
        built = build(spec, _torch_dtype(precision) if cast else torch.float32)
        model = built.model
        backend_config: dict[str, Any] | None = None
        autocast_dtype = scaler = optimizer = None
        if precision == "int8":
            converted = linear_equivalents(model)
            with warnings.catch_warnings():
                # quantize_dynamic works in this torch; its warnings are about a future removal.
                warnings.simplefilter("ignore", DeprecationWarning)
                warnings.filterwarnings("ignore", message=".*deprecated.*", category=UserWarning)
                model = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
            share = flop_count_per_sample(spec, config.seq_length, config.image_size, config.audio_seconds).linear_fraction
            backend_config = {"int8_linear_flops_fraction": round(share, 4), "quantized_engine": torch.backends.quantized.engine}
            recipe = (f"dynamic int8 (quantize_dynamic, engine {torch.backends.quantized.engine}): linear layers "
                      f"({share:.0%} of forward FLOPs) int8, other layers fp32")
            if converted:
                recipe += f"; {converted} Conv1D layers converted to equivalent nn.Linear first"
        elif cast:
            recipe = f"weights and activations cast to {precision}"
        elif mode == "training" and precision in ("fp16", "bf16"):
            autocast_dtype = _torch_dtype(precision)
            recipe = f"mixed precision: autocast {precision}, fp32 master weights"
            if precision == "fp16":
                scaler = torch.amp.GradScaler(device.split(":")[0])
                recipe += ", GradScaler"
        else:
            recipe = "fp32"
        model = model.to(device)
        if mode == "training":
            model.train()
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
            recipe += "; AdamW"
        generation = None
        if mode == "generation":
            generation = generation_config(model, spec, config)
            backend_config = {**(backend_config or {}), "generation": generation.to_diff_dict()}
            recipe += "; greedy generation with the KV cache"
        synchronize(device)
        return PreparedModel(
            handle=model, device=device, precision=precision, mode=mode, recipe=recipe,
            load_time_s=time.perf_counter() - started, input_float_dtype=_torch_dtype(precision) if cast else torch.float32,
            backend_config=backend_config, state=TorchState(autocast_dtype, optimizer, scaler, generation),
            weights_recipe=built.weights_recipe, denormal_policy=set_denormal_policy(device),
        )

    def output(self, prepared: PreparedModel, inputs: dict[str, Any]) -> Any:
        """The first output of a forward pass (training: in training mode, without gradients;
        with labels among the inputs that is the loss)."""
        import torch

        with torch.no_grad(), (torch.autocast(prepared.device.split(":")[0], dtype=prepared.state.autocast_dtype)
                               if prepared.state.autocast_dtype else contextlib.nullcontext()):
            out = prepared.handle(**inputs)
        return out[0]

    def measurement_context(self, prepared: PreparedModel):
        import torch

        return torch.inference_mode() if prepared.mode in ("inference", "generation") else contextlib.nullcontext()

    def make_step(self, prepared: PreparedModel, inputs: dict[str, Any]) -> TimedStep:
        model = prepared.handle
        if prepared.mode == "inference":
            # The previous iteration's output is dropped before the next forward allocates, as
            # a loop that discards it would: the peak memory is the same, and the last one is
            # what the output check reads.
            kept: list[Any] = [None]

            def inference_step(clock: IterationClock) -> None:
                kept[0] = None
                kept[0] = model(**inputs)

            return TimedStep(inference_step, last_output=lambda: kept[0][0])
        if prepared.mode == "generation":
            return self._generation_step(prepared, inputs)
        return TimedStep(self._training_step(prepared, inputs))

    @staticmethod
    def _generation_step(prepared: PreparedModel, inputs: dict[str, Any]) -> TimedStep:
        """One request: generate() over the prompt to the fixed length, every token timed as it
        comes (benchmark_runners.generation.TokenTimer). The decoder's own inputs are generate()'s
        to make (the start token), so a seq2seq signature's decoder_input_ids are left out."""
        model, config = prepared.handle, prepared.state.generation
        timer = TokenTimer(None if prepared.device == "cpu" else (lambda: synchronize(prepared.device)))
        processors = [logits_processor(timer)]
        prompt = {k: v for k, v in inputs.items() if k != "decoder_input_ids"}
        new = config.max_new_tokens

        def generation_step(clock: IterationClock) -> None:
            timer.begin()
            out = model.generate(**prompt, generation_config=config, logits_processor=processors)
            timer.end()
            if len(timer.requests[-1].token_ns) != new:
                raise RuntimeError(f"generate() produced {len(timer.requests[-1].token_ns)} tokens instead of {new}")
            del out

        # No last_output: the scores generate() hands a logits processor are already processed
        # (the end-of-sequence token at -inf until the fixed length), so the output check runs
        # one forward over the prompt instead (`output`), outside the timing.
        return TimedStep(generation_step, token_timings=lambda: timer.requests)

    def _training_step(self, prepared: PreparedModel, inputs: dict[str, Any]):
        import torch

        state: TorchState = prepared.state
        model, opt, scaler = prepared.handle, state.optimizer, state.scaler
        device_type = prepared.device.split(":")[0]
        autocast = (lambda: torch.autocast(device_type, dtype=state.autocast_dtype)) if state.autocast_dtype else contextlib.nullcontext

        def loss_of(out) -> Any:
            loss = getattr(out, "loss", None)
            if loss is not None:
                prepared.loss_kind = "model"
                return loss
            # A base model has no task head: a mean-square objective on its output drives
            # the same backward pass through every layer.
            prepared.loss_kind = "mean_square_of_output"
            return out[0].float().pow(2).mean()

        def training_step(clock: IterationClock) -> None:
            with autocast():
                loss = loss_of(model(**inputs))
            clock.mark("forward")
            (scaler.scale(loss) if scaler else loss).backward()
            clock.mark("backward")
            if scaler:
                scaler.step(opt)
                scaler.update()
            else:
                opt.step()
            opt.zero_grad(set_to_none=True)
            clock.mark("optimizer")

        return training_step
