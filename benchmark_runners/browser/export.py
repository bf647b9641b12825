"""Catalog models as ONNX files for onnxruntime-web, from the same torch module the torch backend
measures (the same seeded weights: models.loading.build), with torch's fp32 output kept beside.

The export is torch.onnx.export's TorchScript exporter through the wrapper the OpenVINO backend
traces too (backends.traced_wrapper: inputs by name, no key/value cache, the first output),
opset 17, the batch axis dynamic so one file serves every batch size of a config's shape. int8
is onnxruntime's dynamic quantization of that file (weights int8 per channel, activations
quantized at run time) and fp16 its float16 conversion (weights and arithmetic in fp16, inputs
and output kept fp32), where the Python package onnxruntime is installed. Files are cached under
<data>/cache/onnx by everything that shapes them, written whole or not at all
(benchmark_runners.cache_files).
"""
from __future__ import annotations

import hashlib
import inspect
import json
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark_runners.cache_files import mark_used, read_json_object, require_free_space, staging, weight_bytes

OPSET = 17
# The operators int8 quantizes: the matrix products, as the torch backend's dynamic int8 does (its
# Linear layers). Quantizing mobilenet-v2's convolutions too moved its output by 28% of its scale.
INT8_OPS = ("MatMul", "Gemm")
ONNX_FILE_LIMIT_BYTES = 2**31 - 2**20  # protobuf's 2 GiB, less room for the graph itself


@dataclass
class Exported:
    onnx: Path
    reference: Path  # torch's fp32 output for `example` (.npy)
    example: dict[str, Any]  # the batch-1 inputs (numpy) the reference was computed on
    source: str  # "exported from torch" | "disk cache"
    seconds: float
    weights_recipe: str
    adaptations: list[str]
    recipe: str
    # fp16: max |torch in fp16 - torch in fp32| over max |torch fp32| on the same inputs (None where
    # torch cannot run fp16 here), what the agreement check's tolerance allows for beside its own.
    torch_own_deviation: float | None = None


def cache_dir() -> Path:
    from benchmark_runners.paths import data_dir

    return data_dir() / "cache" / "onnx"


def too_large_for_one_file(name: str, fp32_bytes: int) -> str | None:
    """Why the model cannot be one ONNX file (None: it can). A protobuf holds under 2 GiB: past
    it torch's exporter writes each weight to a file of its own beside the graph, which the page
    (one file, fetched whole) cannot load, and onnxruntime-web's wasm32 heap could not hold anyway."""
    if fp32_bytes < ONNX_FILE_LIMIT_BYTES:
        return None
    return (f"{name}'s fp32 weights are {fp32_bytes / 2**30:.1f} GiB, past the 2 GiB one ONNX file holds (protobuf's limit); "
            f"the browser backend loads one file, so models this large are not exported")


def conversion_unavailable(precision: str) -> str | None:
    """Why this precision's file cannot be made here (None: it can). fp32 is torch's own export;
    int8 and fp16 are conversions of it by tools of the Python package onnxruntime."""
    tool = {"int8": ("onnxruntime.quantization", "quantization tools"), "fp16": ("onnxruntime.transformers.float16", "float16 converter")}
    if precision not in tool:
        return None
    module, what = tool[precision]
    try:
        __import__(module)
    except ImportError as exc:
        return f"{precision} needs onnxruntime's {what} (the Python package onnxruntime), not installed ({exc})"
    return None


def installation_identity() -> dict[str, Any]:
    """The part of every entry's key that is this installation's, not the model's: the tool
    versions (onnxruntime's too: its tools make the int8 and fp16 files) and a digest of the
    export's own code. An entry recording other values is never read again here (`devicefit
    cache` calls it stale)."""
    from importlib.metadata import PackageNotFoundError, version

    import torch
    import transformers

    from benchmark_runners.backends.traced_wrapper import NamedInputs
    from models.loading import WEIGHT_SEED

    try:
        onnxruntime: str | None = version("onnxruntime")
    except PackageNotFoundError:
        onnxruntime = None
    recipe = hashlib.sha256(inspect.getsource(NamedInputs).encode() + inspect.getsource(export).encode()).hexdigest()[:12]
    return {"weight_seed": WEIGHT_SEED, "opset": OPSET, "torch": torch.__version__, "transformers": transformers.__version__,
            "onnxruntime": onnxruntime, "recipe": recipe}


def export(spec, config) -> Exported:
    """The ONNX file for this model and config shape (batch dynamic) at the config's precision."""
    import numpy as np
    import torch

    from benchmark_runners.backends.traced_wrapper import NamedInputs, torch_output_in
    from models.inputs import input_signature
    from models.loading import build, weights_kind
    from models.tensors import make_inputs

    example = make_inputs(input_signature(spec, 1, config.seq_length, config.image_size, config.audio_seconds), "cpu")
    identity = {"model": spec.name, "config": spec.config, "path": str(spec.path) if spec.path else None, "weights": weights_kind(spec),
                "inputs": {k: list(v.shape)[1:] for k, v in example.items()}, **installation_identity()}
    key = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:16]
    base = cache_dir() / f"{spec.name.replace('/', '_')}-{key}"
    # Named by appending, never with_suffix: a name with a dot ('qwen2.5-0.5b') would lose its key from the last dot on
    fp32, reference, meta = (base.with_name(base.name + suffix) for suffix in (".onnx", ".reference.npy", ".json"))
    started = time.perf_counter()
    example_np = {k: v.numpy() for k, v in example.items()}
    wrapper = None  # the traced torch module, where this call exported it (the fp16 reference reuses it)
    cached = read_json_object(meta, ("weights_recipe", "adaptations")) if fp32.exists() and reference.exists() else None
    if cached is not None:
        source, weights_recipe, adaptations = "disk cache", cached["weights_recipe"], cached["adaptations"]
        mark_used(meta)
    else:
        built = build(spec, torch.float32)
        wrapper = NamedInputs(built.model, list(example))
        names = list(example)
        what = f"{spec.name}'s fp32 ONNX export"
        size = weight_bytes(built.model)
        if (reason := too_large_for_one_file(spec.name, size)) is not None:
            raise ValueError(reason)
        require_free_space(fp32.parent, size, what)
        with staging(fp32.parent, what) as stage:
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # tracer warnings: shapes other than batch are fixed per file
                output = wrapper(*example.values()).float().numpy()
                torch.onnx.export(wrapper, tuple(example.values()), str(stage / fp32.name), input_names=names, output_names=["output"],
                                  opset_version=OPSET, dynamo=False,
                                  dynamic_axes={**{n: {0: "batch"} for n in names}, "output": {0: "batch"}})
            np.save(stage / reference.name, output)
            source, weights_recipe, adaptations = "exported from torch", built.weights_recipe, wrapper.adaptations
            (stage / meta.name).write_text(json.dumps({"identity": identity, "weights_recipe": weights_recipe, "adaptations": adaptations},
                                                      default=str))
            for done in (fp32, reference, meta):  # the metadata last: its presence says the export is whole
                (stage / done.name).replace(done)
        del built
    onnx_file, recipe = fp32, "fp32 ONNX (torch.onnx.export, TorchScript exporter, opset 17, batch dynamic)"
    if config.precision == "int8":
        onnx_file = base.with_name(base.name + "-int8-dynamic-matmul.onnx")
        if not onnx_file.exists():
            from onnxruntime.quantization import QuantType, quantize_dynamic

            what = f"{spec.name}'s int8 ONNX quantization"
            require_free_space(onnx_file.parent, fp32.stat().st_size // 3, what)  # int8 weights, fp32 biases and graph
            with staging(onnx_file.parent, what) as stage:
                quantize_dynamic(str(fp32), str(stage / onnx_file.name), weight_type=QuantType.QInt8, per_channel=True,
                                 op_types_to_quantize=list(INT8_OPS))
                (stage / onnx_file.name).replace(onnx_file)
        recipe = ("int8 ONNX: onnxruntime quantize_dynamic of the fp32 export, MatMul/Gemm only (weights int8 per channel, activations "
                  "quantized at run time; convolutions stay fp32, as torch's dynamic int8 of Linear layers)")
    elif config.precision == "fp16":
        onnx_file, own = base.with_name(base.name + "-fp16.onnx"), base.with_name(base.name + "-fp16.json")
        if not (onnx_file.exists() and read_json_object(own, ("torch_own_deviation",)) is not None):
            import onnx
            from onnxruntime.transformers.float16 import convert_float_to_float16

            what = f"{spec.name}'s fp16 ONNX conversion"
            require_free_space(onnx_file.parent, fp32.stat().st_size // 2, what)
            with staging(onnx_file.parent, what) as stage:
                onnx.save(convert_float_to_float16(onnx.load(str(fp32)), keep_io_types=True), str(stage / onnx_file.name))
                reused = wrapper if wrapper is not None else NamedInputs(build(spec, torch.float32).model, list(example))
                half = torch_output_in(reused, example, "fp16")
                reference_np = np.load(reference)
                deviation = (float(np.abs(half - reference_np).max()) / (float(np.abs(reference_np).max()) or 1.0)
                             if half is not None and half.shape == reference_np.shape else None)
                (stage / own.name).write_text(json.dumps({"torch_own_deviation": deviation}))
                for done in (onnx_file, own):
                    (stage / done.name).replace(done)
        torch_own = read_json_object(own, ("torch_own_deviation",))["torch_own_deviation"]
        recipe = ("fp16 ONNX: onnxruntime's convert_float_to_float16 of the fp32 export (weights and arithmetic fp16, inputs and "
                  "output kept fp32 with casts at the edges; the operators on its default block list stay fp32)")
    return Exported(onnx_file, reference, example_np, source, time.perf_counter() - started, weights_recipe, adaptations, recipe,
                    torch_own if config.precision == "fp16" else None)
