"""The least memory a configuration can run in, counted from its config before anything is built.

weights (as built, fp32: every backend builds the torch model in fp32 before converting it)
+ training state (gradients and two AdamW moments: the weights three more times)
+ peak live activations (from the meta-device trace of `models.op_profile`, halved for 16-bit
  precisions).

Nothing here is fitted, and the process itself (interpreter, libraries, allocator slack) is left
out, so a real run needs more: this is a floor. A configuration whose floor exceeds the memory a
device has free cannot run there, and the benchmark refuses it before allocating instead of
inviting the out-of-memory killer (issue 21). The calibrated estimate is the memory predictor's.
"""
from __future__ import annotations

from dataclasses import dataclass

from models.analysis import weight_bytes
from models.catalog import ModelSpec
from models.op_profile import op_profile, training_peak_activation_bytes

# Weights, gradients and two AdamW moments: 4 copies of the weights in training.
TRAINING_WEIGHT_COPIES = 4
HALF_PRECISIONS = ("fp16", "bf16")
GIB = 2**30


@dataclass(frozen=True)
class MemoryFloor:
    weights_bytes: float
    training_state_bytes: float
    activation_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.weights_bytes + self.training_state_bytes + self.activation_bytes

    def describe(self) -> str:
        parts = [f"weights {self.weights_bytes / GIB:.2f} GiB"]
        if self.training_state_bytes:
            parts.append(f"gradients and optimizer state {self.training_state_bytes / GIB:.2f} GiB")
        parts.append(f"peak activations {self.activation_bytes / GIB:.2f} GiB")
        return ", ".join(parts)


def memory_floor(spec: ModelSpec, batch_size: int, precision: str, mode: str, seq_length: int | None = None) -> MemoryFloor:
    """The floor for (model, batch, precision, mode) at `seq_length` (the model's default when None)."""
    scale = 0.5 if precision in HALF_PRECISIONS else 1.0
    built = float(weight_bytes(spec, "fp32"))
    if mode == "training":
        first, per_sample = training_peak_activation_bytes(spec, seq_length)
        state = (TRAINING_WEIGHT_COPIES - 1) * float(weight_bytes(spec, precision))
        return MemoryFloor(built, state, (first + per_sample * (batch_size - 1)) * scale)
    return MemoryFloor(built, 0.0, op_profile(spec, seq_length).peak_activations(batch_size) * scale)
