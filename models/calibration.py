"""Realistic activations for randomly initialised models.

A catalog model built from its config has random weights, and timings are not neutral to them:
transformers' `_init_weights` draws some models' BatchNorm scales (gamma) from N(0, 0.02) like
any other weight (EfficientNet's), and BatchNorm's running statistics start at mean 0,
variance 1 whatever the convolutions before them produce. In eval mode nothing renormalises,
so each stage shrinks the activations: EfficientNet-b0's logits come out exactly 0 and MobileNet-v2's
near 1e-22. On the way the values pass through the denormal range, where some CPUs (Intel's,
without flush-to-zero) run several times slower, so the same config measured 2x apart by CPU
vendor for a reason no deployed model has.

The fix is what a trained network has by construction: BatchNorm layers whose running
statistics match the activations they see. `recalibrate_batchnorm` resets each BatchNorm layer
to PyTorch's own initialisation (gamma 1, beta 0, as torchvision's models start) and runs a few
seeded random batches through the model with only the BatchNorm layers in training mode
(cumulative averages, no gradients, dropout off), data-free. Afterwards every normalised
activation is O(1) and the outputs are finite, non-zero and far from the denormal range
(`benchmark_runners.output_check` checks every measured row). Models without BatchNorm
(transformers use LayerNorm, which normalises per sample in eval mode too) need nothing.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from models.catalog import ModelSpec
from models.inputs import input_signature
from models.tensors import SEED, make_inputs

if TYPE_CHECKING:
    import torch

CALIBRATION_BATCHES = 2
CALIBRATION_BATCH_SIZE = 8
# Seeds of the calibration batches: distinct from the timed inputs' SEED.
CALIBRATION_SEEDS = tuple(SEED + 1 + i for i in range(CALIBRATION_BATCHES))


def batchnorm_layers(model: "torch.nn.Module") -> list["torch.nn.Module"]:
    import torch

    return [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]


def recalibrate_batchnorm(model: "torch.nn.Module", spec: ModelSpec) -> str | None:
    """Data-free BatchNorm recalibration on seeded random inputs of the model's modality, at
    its default input dims. Returns what was done, in words for the row, or None when the model
    has no BatchNorm layer. The model is left in eval mode."""
    import torch

    layers = batchnorm_layers(model)
    if not layers:
        return None
    saved = [(bn, bn.momentum) for bn in layers]
    model.eval()
    for bn in layers:
        bn.reset_parameters()  # gamma 1, beta 0, running mean 0 and variance 1
        bn.momentum = None  # a cumulative average over the calibration batches
        bn.train()
    sig = input_signature(spec, CALIBRATION_BATCH_SIZE, None, None, None)
    try:
        with torch.no_grad():
            for seed in CALIBRATION_SEEDS:
                model(**make_inputs(sig, "cpu", torch.float32, seed=seed))
    finally:
        for bn, momentum in saved:
            bn.momentum = momentum
        model.eval()
    return (f"{len(layers)} BatchNorm layers reset to gamma 1, beta 0 and their running statistics recalibrated "
            f"data-free on {CALIBRATION_BATCHES} seeded random batches of {CALIBRATION_BATCH_SIZE} ({sig.modality}, {_dims(sig.dims)})")


def _dims(dims: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:g}" for k, v in dims.items()) or "default dims"
