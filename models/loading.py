"""Building models offline: random weights from a config, or real weights from a local dir."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from models.bounded_cache import BoundedCache
from models.catalog import ModelSpec
from models.inputs import model_class

if TYPE_CHECKING:
    import torch


def meta_model(spec: ModelSpec):
    """The model on the meta device: shapes without memory, for counting and FLOPs. A mixture of
    experts runs its experts as batched matrix products over each token's top-k experts
    (transformers' "batched_mm"): the FLOPs a token really costs, with shapes known on meta
    (the default grouped_mm needs bf16 operands and data-dependent group offsets)."""
    import torch

    config = spec.build_config()
    if is_mixture_of_experts(spec.config):
        config._experts_implementation = "batched_mm"
    with torch.device("meta"):
        return model_class(spec)(config)


def is_mixture_of_experts(config: dict) -> bool:
    return any(config.get(k) for k in ("num_local_experts", "num_experts", "n_routed_experts"))


_has_batchnorm: BoundedCache[bool] = BoundedCache(256)  # per model config, like the trace caches


def has_batchnorm(spec: ModelSpec) -> bool:
    """Whether a build of `spec` recalibrates anything (traced on the meta device, once per config)."""
    import json

    from models.calibration import batchnorm_layers

    key = json.dumps([spec.name, spec.architecture, spec.config], sort_keys=True, default=str)
    return _has_batchnorm.get(key, lambda: bool(batchnorm_layers(meta_model(spec))))


WEIGHT_SEED = 20240607


@dataclass
class BuiltModel:
    model: Any  # torch.nn.Module, eval mode, on CPU
    weights_recipe: str  # how its weights (and BatchNorm statistics) were set, for the row


def build(spec: ModelSpec, dtype: "torch.dtype | None" = None) -> BuiltModel:
    """The model in eval mode on CPU. A local directory with weights loads them; a catalog
    model gets seeded random weights (WEIGHT_SEED, without touching the global generator), so
    every build has the same weights and two backends' outputs can be compared. Random weights
    are not timing-neutral (vanishing activations underflow into denormals), so their BatchNorm
    statistics are recalibrated before any cast (models.calibration)."""
    import torch

    from models.calibration import recalibrate_batchnorm

    dtype = dtype or torch.float32
    cls = model_class(spec)
    if spec.source == "local" and spec.has_weights:
        model = cls.from_pretrained(str(spec.path), local_files_only=True, dtype=dtype)
        return BuiltModel(model.eval(), f"pretrained weights from {spec.path}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(WEIGHT_SEED)
        model = cls(spec.build_config())
    recipe = f"random init (transformers' _init_weights, seed {WEIGHT_SEED})"
    calibrated = recalibrate_batchnorm(model, spec)
    if calibrated:
        recipe += f"; {calibrated}"
    return BuiltModel(model.to(dtype).eval(), recipe)


def build_model(spec: ModelSpec, dtype: "torch.dtype | None" = None):
    """`build(spec, dtype).model`, for callers that do not record how the weights were set."""
    return build(spec, dtype).model


def weights_kind(spec: ModelSpec) -> str:
    return "pretrained" if spec.source == "local" and spec.has_weights else "random"
