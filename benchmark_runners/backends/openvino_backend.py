"""The OpenVINO backend, beside torch behind the same contract (`backends/base.py`).

Each catalog model is converted from the same torch module the torch backend measures
(`openvino.convert_model` with example inputs of its modality), through a thin wrapper that
passes the inputs by name, turns off the key/value cache (a single forward pass has no use for
it, and its cache objects cannot be traced) and returns the model's first output. The converted
model is cached per model and precision variant, in process and on disk, keyed by everything
that shapes it (model config, OpenVINO/torch/transformers versions).

Precisions: fp32/bf16/fp16 compile the same model with `INFERENCE_PRECISION_HINT` set to f32,
bf16 or f16 explicitly (OpenVINO's CPU default is bf16 where the CPU has it, which would make
"fp32" rows silently bf16); int8 is NNCF INT8_ASYM weight compression, activations f32. A
precision the device lacks is a `skipped` row with the device's capabilities.

Performance hints: batch 1 measures latency (`PERFORMANCE_HINT=LATENCY`, one synchronous infer
request); larger batches measure throughput (`PERFORMANCE_HINT=THROUGHPUT`, the device's optimal
number of asynchronous infer requests in flight; a sample is the wall time of one round of them
divided by their count, so batch x iterations / time is the sustained throughput; the cold
call and warm-up are rounds divided the same way).

On conversion, torch's output for the traced inputs is kept; each precision's compiled model is
compared with it once (max |difference| over max |torch output|), and a difference beyond the
precision's tolerance fails the row with the figure. Recorded in the row's backend_config.
"""
from __future__ import annotations

import functools
import hashlib
import inspect
import json
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark_runners.backends import openvino_genai
from benchmark_runners.backends.base import Backend, InvalidOutput, OutputMismatch, PreparedModel, TimedStep
from benchmark_runners.backends.traced_wrapper import NamedInputs, recipe_source, torch_output_in
from benchmark_runners.cache_files import mark_used, read_json_object, require_free_space, staging, weight_bytes
from benchmark_runners.hardware.cpu_budget import restricted_threads
from benchmark_runners.output_check import TORCH_REFERENCE_MARGIN, agreement_tolerance, check_output  # noqa: F401 - the margin, for callers
from benchmark_runners.records import BenchmarkConfig
from benchmark_runners.timers import IterationClock
from models.catalog import ModelSpec

PRECISION_HINTS = {"fp32": "f32", "bf16": "bf16", "fp16": "f16", "int8": "f32"}
CAPABILITY_NEEDED = {"bf16": "BF16", "fp16": "FP16"}
# Max |openvino - torch| over max |torch| on the measured inputs. f32 differs by reassociation
# only; bf16 keeps 8 mantissa bits through every layer; int8 weights lose ~1/255 per channel.
TOLERANCE = {"fp32": 1e-3, "bf16": 5e-2, "fp16": 2e-2, "int8": 1e-1}
# Reduced precisions are also allowed what torch's own forward in that precision differs from
# fp32 on the same inputs, times output_check.TORCH_REFERENCE_MARGIN: a deep convolutional net's bf16 logits move by
# 10-13% of their scale in torch itself (resnet-50, mobilenet-v2 with calibrated statistics),
# so a fixed 5% would fail OpenVINO for being as exact as bf16 allows.
REDUCED_REFERENCES = ("bf16", "fp16")
_converted: dict[str, bool] = {}  # cache keys converted or read by this worker (the IR itself is on disk)
_checks: dict[tuple, dict[str, Any]] = {}  # (cache key, device, precision) -> output agreement
_reference_attempts: set[tuple[str, str]] = set()  # (cache key, precision) whose torch reference was tried here


@functools.lru_cache(maxsize=1)
def _recipe_digest() -> str:
    """A digest of the code that shapes a conversion (the wrapper and its graph adaptations), so
    a cached IR from an older recipe (or older weight calibration) is never reused."""
    from models import calibration

    source = repr(REDUCED_REFERENCES) + recipe_source() + inspect.getsource(calibration)
    return hashlib.sha256(source.encode()).hexdigest()[:12]


def installation_identity() -> dict[str, Any]:
    """The part of every IR's key that is this installation's, not the model's: the tool versions
    and the recipe's digest. An entry recording other values is never read again here
    (`devicefit cache` calls it stale)."""
    import openvino as ov
    import torch
    import transformers

    from models.loading import WEIGHT_SEED

    return {"weight_seed": WEIGHT_SEED, "openvino": ov.get_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "recipe": _recipe_digest()}


def _property_text(value: Any) -> str:
    """A compiled model's property as text: element types by their short name ("f32", "bf16")."""
    return value.get_type_name() if hasattr(value, "get_type_name") else str(value)


def denormal_hints(device: str) -> dict[str, bool]:
    """Denormals kept on OpenVINO's CPU (its default; the same IEEE policy as the torch
    backend), set explicitly so the row says what ran. Other devices have no such property."""
    return {"CPU_DENORMALS_OPTIMIZATION": False} if device == "CPU" else {}


def openvino_device(config: BenchmarkConfig) -> str:
    return config.device.split(":", 1)[1]


def cache_dir() -> Path:
    from benchmark_runners.paths import data_dir

    return data_dir() / "cache" / "openvino"


def _decoder(wrapper, example: tuple):
    """OpenVINO's TorchScript decoder for the wrapper, traced without torch.jit's check_trace:
    that check runs the model twice more only to emit TracerWarnings, which the conversion
    ignores (the shapes are fixed per config), and was 3.3 of gpt2's 4.2 s of tracing. What
    the conversion produced is checked against torch's output instead (`_check_output`)."""
    from openvino.frontend.pytorch.ts_decoder import TorchScriptPythonDecoder

    return TorchScriptPythonDecoder(wrapper, example_input=example, trace_kwargs={"check_trace": False})


def _reduced_reference(reference: Path, precision: str) -> Path:
    return reference.with_name(reference.name.replace(".reference.npy", f".reference-{precision}.npy"))


@dataclass
class Converted:
    model: Any  # ov.Model with dynamic shapes
    key: str
    source: str  # "converted from torch" | "in-process cache" | "disk cache"
    seconds: float
    recipe: str
    adaptations: list[str]
    check_inputs: dict[str, Any]  # numpy, batch 1: the inputs the conversion traced
    weights_recipe: str  # how the torch model's weights were set (models.loading.build)
    reference: Path  # torch fp32's first output for them (.npy beside the IR)


class OpenVINOBackend(Backend):
    name = "openvino"
    kinds = {"openvino": "openvino:CPU"}
    device_pattern = r"openvino:(CPU|GPU(\.\d+)?|NPU)"
    device_help = "openvino:CPU, openvino:GPU, openvino:GPU.N or openvino:NPU"
    modes = ("inference", "generation")  # generation: openvino-genai's LLMPipeline (backends/openvino_genai.py)
    packages = ("openvino", "nncf", "openvino-genai")
    reload_per_batch = True  # shapes and the performance hint are compiled in, per batch
    input_device = "cpu"  # inputs are host tensors, handed to OpenVINO as numpy arrays
    fuses_post_ops = True  # the CPU plugin's post-ops: BatchNorm, activations and adds run inside the convolution or GEMM

    def mode_reason(self, mode: str) -> str:
        return "OpenVINO is an inference runtime: it has no backward pass or optimizer, so training cannot run"

    def declared_reason(self, precision: str, mode: str) -> str | None:
        """Generation (openvino-genai) runs fp32 and bf16 only: an fp16 or int8 request is never
        measured, so it is never predicted either."""
        if mode == "generation" and precision not in openvino_genai.PRECISION_HINTS:
            return openvino_genai.precision_reason(precision)
        return super().declared_reason(precision, mode)

    def device_reason(self, spec: ModelSpec, config: BenchmarkConfig) -> str | None:
        try:
            import openvino as ov
        except ImportError as exc:
            return f"the openvino package is not installed ({exc})"
        device = openvino_device(config)
        core = ov.Core()
        if device not in core.available_devices:
            return f"OpenVINO reports no {device} device (available: {', '.join(core.available_devices) or 'none'})"
        capabilities = list(core.get_property(device, "OPTIMIZATION_CAPABILITIES"))
        needed = CAPABILITY_NEEDED.get(config.precision)
        if needed and needed not in capabilities:
            return (f"OpenVINO's {device} plugin has no {needed} capability here (OPTIMIZATION_CAPABILITIES: "
                    f"{', '.join(capabilities)}), so INFERENCE_PRECISION_HINT={PRECISION_HINTS[config.precision]} would not run natively")
        if config.mode == "generation":
            if device != "CPU":
                return f"the generation scenario on OpenVINO is measured on its CPU plugin only, not {device}"
            return openvino_genai.unavailable_reason(spec, config)
        if config.precision == "int8":
            try:
                import nncf  # noqa: F401
            except ImportError as exc:
                return f"int8 needs NNCF weight compression, which is not installed ({exc})"
        return None

    def _convert(self, spec: ModelSpec, config: BenchmarkConfig) -> Converted:
        """The converted model of this (model, weight variant), traced at batch 1, with torch's
        output for the traced inputs kept beside it for the output check."""
        import numpy as np
        import openvino as ov
        import torch

        from models.inputs import input_signature
        from models.loading import weights_kind
        from models.tensors import make_inputs

        example = make_inputs(input_signature(spec, 1, config.seq_length, config.image_size, config.audio_seconds), "cpu")
        variant = "int8_asym_weights" if config.precision == "int8" else "fp32_weights"
        identity = {"model": spec.name, "config": spec.config, "path": str(spec.path) if spec.path else None, "variant": variant,
                    "weights": weights_kind(spec), "inputs": {k: list(v.shape) for k, v in example.items()}, **installation_identity()}
        key = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:16]
        recipe = ("int8 weights (NNCF compress_weights INT8_ASYM, per channel), activations f32" if config.precision == "int8"
                  else "weights fp32 in the IR; compute precision set at compile time")
        check_inputs = {k: v.numpy() for k, v in example.items()}
        xml = cache_dir() / f"{spec.name.replace('/', '_')}-{variant}-{key}.xml"
        meta, ref_file = xml.with_suffix(".json"), xml.with_suffix(".reference.npy")
        started = time.perf_counter()
        cached = read_json_object(meta, ("adaptations",)) if xml.exists() and ref_file.exists() else None
        if cached is not None:
            # Read back from the IR (weights memory-mapped) rather than kept in memory between
            # configs: a cached model object would count in every later row's peak RSS.
            model = ov.Core().read_model(xml)
            mark_used(meta)
            source = "in-process cache" if key in _converted else "disk cache"
            _converted[key] = True
            return Converted(model, key, source, time.perf_counter() - started, recipe, cached["adaptations"], check_inputs,
                             cached.get("weights_recipe", "unrecorded"), ref_file)

        from models.loading import build

        built = build(spec, torch.float32)
        wrapper = NamedInputs(built.model, list(example))
        with torch.no_grad(), warnings.catch_warnings():
            # Tracing turns transformers' Python shape checks into constants; the shapes are
            # fixed per config anyway (the model is reshaped to them before compiling).
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            # torch.jit.trace probes every attribute of every submodule (module_has_exports),
            # transformers' deprecated alias property included: one warning per model, not ours.
            warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
            reference = wrapper(*example.values()).float().numpy()
            model = ov.convert_model(_decoder(wrapper, tuple(example.values())))
            # Only the precision asked for: torch's fp16 on a CPU without fp16 arithmetic
            # emulates it (56 s for gpt2 at 512 tokens, against 16 s for the conversion).
            reduced = {p: torch_output_in(wrapper, example, p) for p in REDUCED_REFERENCES if p == config.precision}
        for port, name in zip(model.inputs, example):
            port.get_tensor().set_names({name})
        if config.precision == "int8":
            import nncf

            model = nncf.compress_weights(model, mode=nncf.CompressWeightsMode.INT8_ASYM)
        adaptations = wrapper.adaptations
        del wrapper
        what = f"{spec.name}'s OpenVINO IR ({variant})"
        # fp32 weights in the IR; INT8_ASYM keeps a byte per weight and fp32 scales
        require_free_space(xml.parent, weight_bytes(built.model, 1.1 if config.precision == "int8" else 4.0), what)
        with staging(xml.parent, what) as stage:
            ov.save_model(model, stage / xml.name, compress_to_fp16=False)  # the IR keeps fp32 weights
            np.save(stage / ref_file.name, reference)
            extra = {_reduced_reference(ref_file, p): output for p, output in reduced.items() if output is not None}
            for path, output in extra.items():
                np.save(stage / path.name, output)
            (stage / meta.name).write_text(json.dumps({"adaptations": adaptations, "identity": identity,
                                                       "weights_recipe": built.weights_recipe}, default=str))
            for done in (*extra, ref_file, xml.with_suffix(".bin"), xml, meta):  # the metadata last: it says the IR is whole
                (stage / done.name).replace(done)
        source = "converted from torch"
        _converted[key] = True
        return Converted(model, key, source, time.perf_counter() - started, recipe, adaptations, check_inputs,
                         built.weights_recipe, ref_file)

    def host_gemm_seconds(self, m: int, k: int, n: int, budget_s: float) -> list[float] | None:
        from benchmark_runners.backends.openvino_gemm import host_gemm_seconds

        hints = {"INFERENCE_PRECISION_HINT": PRECISION_HINTS["fp32"], "PERFORMANCE_HINT": "LATENCY", **denormal_hints("CPU")}
        return host_gemm_seconds(m, k, n, budget_s, hints)

    def cache_key(self, config: BenchmarkConfig) -> tuple | None:
        if config.mode == "generation":
            return ("genai", config.model)
        # fp32 and bf16 share one IR (fp32 weights, precision set at compile); int8 has its own
        return (config.model, config.precision == "int8", config.seq_length, config.image_size, config.audio_seconds)

    def fill_cache(self, spec: ModelSpec, configs: list[BenchmarkConfig]) -> None:
        """The IR and torch's references for these configs (one `cache_key`), or the GenAI export:
        converted here so that the configs' rows read them from the disk cache (their
        `conversion.source` says so, and their load time is the read and the compile)."""
        configs = [c for c in configs if self.unsupported_reason(spec, c) is None]
        if not configs:
            return
        if configs[0].mode == "generation":
            openvino_genai.export(spec)
            return
        # A reduced precision first: its conversion computes that reference in the same pass.
        configs.sort(key=lambda c: c.precision not in REDUCED_REFERENCES)
        converted = self._convert(spec, configs[0])
        for c in configs:
            self._ensure_reduced_reference(converted, spec, c.precision)
        converted.model = None

    def prepare(self, spec: ModelSpec, config: BenchmarkConfig) -> PreparedModel:
        """Convert (or reuse the converted model), check its output against torch in this
        precision, fix the input shapes, compile with explicit hints. Conversion and compile
        time are the row's load time, each also recorded apart. The generation scenario is
        openvino-genai's (backends/openvino_genai.py)."""
        if config.mode == "generation":
            return openvino_genai.prepare(spec, config)
        import openvino as ov

        from models.inputs import input_signature

        started = time.perf_counter()
        converted = self._convert(spec, config)
        self._ensure_reduced_reference(converted, spec, config.precision)
        device = openvino_device(config)
        sig = input_signature(spec, config.batch_size, config.seq_length, config.image_size, config.audio_seconds)
        shapes = {name: list(t.shape) for name, t in sig.inputs.items()}
        # A config of the shape the conversion traced (batch 1) is checked on its own compiled
        # model: a second compile only for the check cost 18 s over a make run on an AMD EPYC.
        checked_as_measured = shapes == {name: list(a.shape) for name, a in converted.check_inputs.items()}
        agreement = None if checked_as_measured else self._check_output(converted, device, config.precision)
        model = converted.model  # read or converted for this config alone: reshaped in place
        model.reshape(shapes)
        latency = config.batch_size == 1
        hints = {"INFERENCE_PRECISION_HINT": PRECISION_HINTS[config.precision], "PERFORMANCE_HINT": "LATENCY" if latency else "THROUGHPUT",
                 **denormal_hints(device)}
        threads = config.threads or (restricted_threads() if device == "CPU" else None)
        if threads:  # OpenVINO's CPU plugin honours a cpuset but not a CFS quota (hardware/cpu_budget.py)
            hints["INFERENCE_NUM_THREADS"] = threads
        compile_started = time.perf_counter()
        compiled = ov.Core().compile_model(model, device, hints)
        compile_s = time.perf_counter() - compile_started
        if checked_as_measured:
            agreement = self._check_output(converted, device, config.precision, compiled)
        del model
        converted.model = None  # the compiled model holds what it needs
        requests = 1 if latency else int(compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS"))
        effective = {name: _property_text(compiled.get_property(name)) for name in
                     ("INFERENCE_PRECISION_HINT", "PERFORMANCE_HINT", "NUM_STREAMS", "INFERENCE_NUM_THREADS", *denormal_hints(device))}
        backend_config = {
            "openvino_version": ov.get_version(), "device": device, "requested_hints": {k: str(v) for k, v in hints.items()},
            "effective": effective, "infer_requests": requests,
            "sample": "one synchronous request" if latency else f"one round of {requests} asynchronous requests, divided by {requests}",
            "conversion": {"source": converted.source, "seconds": round(converted.seconds, 4)},
            "compile_seconds": round(compile_s, 4), "weights": converted.recipe, "adaptations": converted.adaptations,
            "output_check": agreement,
        }
        recipe = (f"OpenVINO {device}: INFERENCE_PRECISION_HINT={effective['INFERENCE_PRECISION_HINT']}, "
                  f"PERFORMANCE_HINT={effective['PERFORMANCE_HINT']} ({requests} infer request{'s' if requests > 1 else ''}, "
                  f"{effective['NUM_STREAMS']} stream(s)); {converted.recipe}")
        denormals = (f"ieee: denormals kept (CPU_DENORMALS_OPTIMIZATION={effective['CPU_DENORMALS_OPTIMIZATION']}, "
                     "OpenVINO's default, set explicitly)" if "CPU_DENORMALS_OPTIMIZATION" in effective
                     else f"OpenVINO {device}: the device's default (no denormal property)")
        return PreparedModel(handle=compiled, device=config.device, precision=config.precision, mode=config.mode, recipe=recipe,
                             load_time_s=time.perf_counter() - started, backend_config=backend_config, state=requests,
                             weights_recipe=converted.weights_recipe, denormal_policy=denormals)

    @staticmethod
    def _ensure_reduced_reference(converted: Converted, spec: ModelSpec, precision: str) -> None:
        """torch's own output in a reduced precision, for a model converted (and cached) while
        another precision was asked for: the torch model is built again for it, once."""
        own = _reduced_reference(converted.reference, precision)
        if precision not in REDUCED_REFERENCES or own.exists() or (converted.key, precision) in _reference_attempts:
            return
        import numpy as np
        import torch

        from models.loading import build

        _reference_attempts.add((converted.key, precision))
        example = {name: torch.from_numpy(array) for name, array in converted.check_inputs.items()}
        output = torch_output_in(NamedInputs(build(spec, torch.float32).model, list(example)), example, precision)
        if output is not None:
            with staging(own.parent, f"{spec.name}'s {precision} reference output") as stage:
                np.save(stage / own.name, output)
                (stage / own.name).replace(own)

    def output(self, prepared: PreparedModel, inputs: dict[str, Any]) -> Any:
        if prepared.mode == "generation":  # the IR's logits over the agreement check's prompt
            return prepared.state["logits"]
        compiled = prepared.handle
        return compiled({name: tensor.numpy() for name, tensor in inputs.items()})[compiled.outputs[0]]

    def _check_output(self, converted: Converted, device: str, precision: str, measured: Any = None) -> dict[str, Any]:
        """OpenVINO in this precision against torch fp32 on the traced (batch 1) inputs; done once
        per converted model, precision and device, and raised as OutputMismatch beyond tolerance.
        `measured`: the config's own compiled model, where its shapes are the traced inputs'."""
        import numpy as np
        import openvino as ov

        key = (converted.key, device, precision)
        if key not in _checks:
            started = time.perf_counter()
            compiled = measured if measured is not None else ov.Core().compile_model(converted.model, device, {
                "INFERENCE_PRECISION_HINT": PRECISION_HINTS[precision], **denormal_hints(device)})
            # A request of its own, dropped after: `compiled(...)` would keep one (and its
            # tensors) on the measured model through the timed phase and its peak memory.
            request = compiled.create_infer_request()
            ours = np.array(request.infer(converted.check_inputs)[compiled.outputs[0]], copy=True)
            del request, compiled
            reference = np.load(converted.reference)
            scale = float(np.abs(reference).max()) or 1.0
            diff = float(np.abs(ours.astype(np.float64) - reference.astype(np.float64)).max()) if ours.shape == reference.shape else float("inf")
            _checks[key] = {"compared": "first output vs torch fp32, on the batch-1 inputs the conversion traced",
                            "compiled": ("the measured compile of the batch-1 config at the traced shape" if measured is not None
                                         else "a compile for the check alone, with the precision hint"),
                            "max_abs_diff": diff, "reference_max_abs": scale, "relative": diff / scale,
                            "shape": list(reference.shape), "openvino_shape": list(ours.shape), "seconds": round(time.perf_counter() - started, 4)}
            reference_check = check_output(reference)
            _checks[key]["reference_check"] = reference_check.to_json()
            own = _reduced_reference(converted.reference, precision)
            if precision in REDUCED_REFERENCES and own.exists():
                theirs = np.load(own)
                _checks[key]["torch_same_precision_relative"] = (
                    float(np.abs(theirs.astype(np.float64) - reference.astype(np.float64)).max()) / scale
                    if theirs.shape == reference.shape else None)
        if _checks[key]["reference_check"]["problem"]:
            # Agreement with a vanished or broken reference proves nothing about OpenVINO.
            raise InvalidOutput(f"torch's reference output for the OpenVINO check is not a real computation's: "
                                f"{_checks[key]['reference_check']['problem']}")
        torch_own = _checks[key].get("torch_same_precision_relative")
        tolerance, basis = agreement_tolerance(TOLERANCE[precision], precision, torch_own)
        result = {**_checks[key], "tolerance": tolerance, "tolerance_basis": basis}
        if not result["relative"] <= tolerance:
            raise OutputMismatch(f"OpenVINO output differs from torch: max |diff| {result['max_abs_diff']:.4g} = {result['relative']:.3g} "
                                 f"of the output scale {result['reference_max_abs']:.4g}, beyond the {precision} tolerance "
                                 f"{tolerance:.3g} ({basis}; shapes {result['openvino_shape']} vs {result['shape']})")
        return result

    def make_step(self, prepared: PreparedModel, inputs: dict[str, Any]) -> TimedStep:
        if prepared.mode == "generation":
            return openvino_genai.make_step(prepared, inputs)
        compiled, requests = prepared.handle, prepared.state  # state: infer requests in flight
        feed = {name: tensor.numpy() for name, tensor in inputs.items()}
        if requests == 1:
            request = compiled.create_infer_request()

            def latency_step(clock: IterationClock) -> None:
                request.infer(feed)

            # An infer request keeps its output tensors until its next inference.
            return TimedStep(latency_step, last_output=lambda: request.get_output_tensor(0).data.copy())
        import openvino as ov

        queue = ov.AsyncInferQueue(compiled, requests)

        def throughput_step(clock: IterationClock) -> None:
            for _ in range(requests):
                queue.start_async(feed)
            queue.wait_all()

        return TimedStep(throughput_step, amortize=requests, last_output=lambda: queue[0].get_output_tensor(0).data.copy())
