"""Building models offline: random weights from a config, or real weights from a local dir."""
from __future__ import annotations

from typing import TYPE_CHECKING

from models.catalog import ModelSpec
from models.inputs import model_class

if TYPE_CHECKING:
    import torch


def meta_model(spec: ModelSpec):
    """The model on the meta device: shapes without memory, for counting and FLOPs."""
    import torch

    with torch.device("meta"):
        return model_class(spec)(spec.build_config())


WEIGHT_SEED = 20240607


def build_model(spec: ModelSpec, dtype: "torch.dtype | None" = None):
    """The model in eval mode on CPU. Timings do not depend on weight values, so catalog
    models get random initialisation; a local directory with weights loads them. The random
    initialisation is seeded (WEIGHT_SEED, without touching the global generator), so every
    build of a model has the same weights and two backends' outputs can be compared."""
    import torch

    dtype = dtype or torch.float32
    cls = model_class(spec)
    if spec.source == "local" and spec.has_weights:
        model = cls.from_pretrained(str(spec.path), local_files_only=True, dtype=dtype)
    else:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(WEIGHT_SEED)
            model = cls(spec.build_config()).to(dtype)
    return model.eval()


def weights_kind(spec: ModelSpec) -> str:
    return "pretrained" if spec.source == "local" and spec.has_weights else "random"
