"""Real tensors for a model's input signature (models.inputs): token ids inside the vocab,
normalised pixel values, log-mel features, waveforms, class ids. Seeded, so two runs of the
same config feed the same values. The timed inputs use SEED; BatchNorm recalibration
(models.calibration) draws its batches from other seeds, so the model is never tuned to the
very inputs it is timed on."""
from __future__ import annotations

from typing import Any

from models.inputs import InputSignature, TensorSpec

SEED = 1234


def _tensor(t: TensorSpec, device: str, float_dtype, gen):
    import torch

    if t.kind == "token_ids":
        if not t.high:
            raise ValueError("token ids need a vocabulary size")
        return torch.randint(0, t.high, t.shape, generator=gen, dtype=torch.long).to(device)
    if t.kind == "class_ids":
        return torch.randint(0, max(1, t.high or 1), t.shape, generator=gen, dtype=torch.long).to(device)
    if t.kind == "mask":
        return torch.ones(t.shape, dtype=torch.long, device=device)
    return torch.randn(t.shape, generator=gen, dtype=torch.float32).to(device=device, dtype=float_dtype)


def make_inputs(sig: InputSignature, device: str, float_dtype=None, with_targets: bool = False,
                seed: int = SEED) -> dict[str, Any]:
    import torch

    float_dtype = float_dtype or torch.float32
    gen = torch.Generator().manual_seed(seed)
    tensors = {name: _tensor(t, device, float_dtype, gen) for name, t in sig.inputs.items()}
    if with_targets:
        tensors.update({name: _tensor(t, device, float_dtype, gen) for name, t in sig.training_targets.items()})
        tensors.update(sig.training_flags)
    return tensors
