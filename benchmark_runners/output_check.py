"""Is a measured model's output a real computation's? Checked on every measured row.

A model whose output is not finite, is all zeros, or has lost its scale to underflow times
something no deployed model runs: NaNs and infinities take slow paths on some CPUs, zeros can
be skipped, and denormal operands cost several times a normal one on CPUs without
flush-to-zero. Such a row fails (reason code `invalid_output`) with the figures, instead of
entering the store as a timing.

"Lost its scale" has a precise threshold: an output whose largest magnitude is below the square
root of the dtype's smallest normal number has come through more than half of the exponent
range on the way down, so products inside the network were at or below the denormal range.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

# A denormal-dominated output: more than this share of its non-zero elements are denormal.
MAX_DENORMAL_SHARE = 0.01
# An agreement check's tolerance for a reduced precision widens to this multiple of torch's own
# deviation in that precision, where torch itself moves its output further than the fixed one.
TORCH_REFERENCE_MARGIN = 1.5
_CHUNK = 1 << 16  # 64K values: a chunk, its magnitudes and its mask stay in a core's L2


@dataclass(frozen=True)
class OutputCheck:
    dtype: str
    elements: int
    finite: bool
    max_abs: float
    zero_share: float
    denormal_share: float  # of the non-zero elements
    problem: str | None  # None: a real output

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _as_float_array(output: Any):
    import numpy as np

    if hasattr(output, "detach"):  # a torch tensor: numpy has no bf16, compare in fp32
        dtype = str(output.dtype).removeprefix("torch.")
        tensor = output.detach().to("cpu")
        return tensor.float().numpy() if tensor.is_floating_point() else tensor.numpy(), dtype
    array = np.asarray(output)
    return array, str(array.dtype)


def smallest_normal(dtype: str) -> float:
    """The dtype's smallest positive normal number (float32's when the dtype is not a float)."""
    import numpy as np

    if dtype == "bfloat16":
        return float(np.finfo(np.float32).tiny)  # bf16 keeps fp32's exponent range
    try:
        return float(np.finfo(np.dtype(dtype)).tiny)
    except (TypeError, ValueError):
        return float(np.finfo(np.float32).tiny)


def _scan(values, tiny: float) -> tuple[int, float, int, int]:
    """(non-finite count, largest finite magnitude, non-zero finite count, denormal count) of a
    flat array, a cache-sized chunk at a time into reused buffers. Why chunks: a causal LM's
    logits at batch 4 x 512 tokens are 103M values, and whole-array temporaries (the magnitudes,
    three masks) cost 1.7 s per fresh worker in page faults alone; gpt2's OpenVINO partition
    spent 8.8 of its 45 s in this check (py-spy, the Zen 4 EPYC, 2026-11-27)."""
    import numpy as np

    n = int(values.size)
    size = min(n, _CHUNK)
    # Integers' magnitudes in float64: abs() of a signed type's most negative value wraps to itself.
    magnitudes = np.empty(size, dtype=values.dtype if values.dtype.kind == "f" else np.float64)
    mask = np.empty(size, dtype=bool)
    floating = values.dtype.kind == "f"
    nonfinite, max_abs, nonzero, denormal = 0, 0.0, 0, 0
    for start in range(0, n, _CHUNK):
        chunk = values[start:start + _CHUNK]
        a = np.abs(chunk, out=magnitudes[:chunk.size], dtype=magnitudes.dtype)
        top = a.max()  # NaN when the chunk has one, inf when it has one
        if not np.isfinite(top):
            finite = np.isfinite(a)
            nonfinite += int(chunk.size - np.count_nonzero(finite))
            a = a[finite]
            if not a.size:
                continue
            top = a.max()
        max_abs = max(max_abs, float(top))
        zeros_here = int(a.size - np.count_nonzero(a))
        nonzero += a.size - zeros_here
        if floating:  # magnitudes are >= 0 here, so below the smallest normal and non-zero is denormal
            denormal += int(np.count_nonzero(np.less(a, tiny, out=mask[:a.size]))) - zeros_here
    return nonfinite, max_abs, nonzero, denormal


def check_output(output: Any) -> OutputCheck:
    """The figures of `output` (a torch tensor or an array) and, when it is not a real
    computation's, the problem in words with the figure."""
    values, dtype = _as_float_array(output)  # at most one float32 copy: a causal LM's logits are large
    values = values.ravel()
    n = int(values.size)
    tiny = smallest_normal(dtype)
    nonfinite, max_abs, nonzero, denormal = _scan(values, tiny) if n else (0, 0.0, 0, 0)
    finite = nonfinite == 0
    zero_share = 1.0 - nonzero / n if n else 1.0
    denormal_share = denormal / nonzero if nonzero else 0.0
    problem = None
    if n == 0:
        problem = "the output is empty"
    elif not finite:
        problem = f"{nonfinite} of {n} output values are NaN or infinite"
    elif max_abs == 0:
        problem = f"all {n} output values are exactly zero (the activations vanished)"
    elif denormal_share > MAX_DENORMAL_SHARE:
        problem = f"{denormal_share:.0%} of the non-zero output values are denormal ({dtype} normals start at {tiny:.3g})"
    elif max_abs < math.sqrt(tiny):
        problem = (f"the output's largest magnitude is {max_abs:.3g}, below sqrt of {dtype}'s smallest normal "
                   f"({math.sqrt(tiny):.3g}): the activations vanished through the denormal range")
    return OutputCheck(dtype, n, finite, max_abs, zero_share, denormal_share, problem)


def agreement_tolerance(fixed: float, precision: str, torch_own: float | None) -> tuple[float, str]:
    """The tolerance of an agreement check against torch fp32, and its basis in words: `fixed`,
    or TORCH_REFERENCE_MARGIN x torch's own deviation in `precision` where that is larger. A
    deviation that is not finite (torch's own reduced-precision forward overflowed) widens
    nothing: as a tolerance it would pass any output."""
    if torch_own is None:
        return fixed, f"fixed {precision} tolerance"
    if not math.isfinite(torch_own):
        return fixed, f"fixed {precision} tolerance (torch's own {precision} deviation is {torch_own:g}, which bounds nothing)"
    return (max(fixed, TORCH_REFERENCE_MARGIN * torch_own),
            f"max({fixed:g}, {TORCH_REFERENCE_MARGIN:g} x torch's own {precision} deviation {torch_own:.3g})")
