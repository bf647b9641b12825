"""The physical baseline under the trees: a roofline per operator, with rates fitted per device.

Time of a forward pass = sum over its operators of max(FLOPs / rate, bytes / bandwidth), plus a
dispatch cost per kernel and per view. Rates are per operator category (matmul against weights,
matmul between activations, dense and grouped convolution) and per precision; a GEMM's rate
also rises with its M (rows) and K (reduction length) as rate * M/(M + m_half) * K/(K + k_half),
because small GEMMs leave vector units idle and short reductions give each loaded tile little
work (MobileNet's 1x1 convolutions over 16-32 channels). A depthwise convolution's K is its
window's area, counted no further than a 3x3's (GROUPED_CONV_MAX_K). Matmuls between
activations saturate at a K of their own (matmul_k_half): a fused attention's K is its key length (models.op_tracer), and
Whisper's encoder over 1,500 keys ran at about twice the rate per FLOP of 128-token attention on a
2-core AMD EPYC; with one rate for both, whisper-tiny held out was predicted 1.5x too slow. An
attention torch does not fuse (its math path: T5's learned bias in training) is two matmuls whose
K are the head size and the key length, against the same matmul_k_half. Training = forward x (1 + backward
factor; convolutions have their own), plus an autograd cost per kernel, plus the AdamW step
streaming 28 bytes per parameter (read weight, grad, two moments: 16; write weight and
moments: 12), plus, on a CPU, the pages its temporaries of the largest tensors fault in again
at every step (refaulted_bytes: bert-tiny's 15.6 MB embedding, two copies).

Two terms keep small element-wise work honest, where depthwise networks spend their time. An
operator's bandwidth rises as its bytes fall below the caches, as bandwidth * (1 + gain *
h/(h + bytes)): MobileNet's maps (a few MB at batch 1) are re-read from cache, not from DRAM, and
a DRAM rate charged for them over-predicted it 1.7x. And element-wise ops that evaluate an
exponential (SiLU, GELU, sigmoid, softmax: models.op_profile's transcendental elements) add
elements / rate to their time: EfficientNet's SiLU over every expanded map is what makes it 2.5x
slower than MobileNet at 1.3x the FLOPs, and the transformers' GELU informs the rate. Added, not
overlapped with the op's bytes in the max: as a max the term hides behind the bandwidth side at
its prior, where the fit has no gradient to move it, and on the Xeon's data the two forms gave
the same held-out error (14.1% latency MAPE against 13.9%).

On a backend that compiles the graph (OpenVINO: Backend.fuses_post_ops), the operators its
compiler runs inside another kernel or not at all (models.op_tracer's `fused`: BatchNorm,
activations and residual adds after a convolution or GEMM, zero pads before a convolution,
allocations) cost `fused_share` of their kernel and their memory pass, from a prior of 0.1 (a
folded BatchNorm and pad cost nothing, an activation a few instructions per element, a residual
add the read of its other input); their transcendental elements are still evaluated. The rows
inform the share weakly, since the grouped convolutions' rate and the GEMMs' K saturation trade
against it: fits on the 2-core EPYC's and the Xeon's rows kept 0.08-0.10. Charged in full, those
operators made MobileNet-v2 on OpenVINO 1.5x too slow even in a fit on its own rows, and 1.7x
held out (2-core AMD EPYC, make run 39). Eager torch launches each of them: no such parameter.

Each parameter has a prior derived from the device spec (its measured probe, or a published
datasheet): e.g. matmul against weights at 75% of the probed fp32 peak, int8 VNNI at 4x that;
convolutions and attention as ratios to that rate (1.0, 0.4 for grouped, 0.66 for attention).
The fit is least squares on log(predicted / measured), with a weak pull of every log-parameter
toward its prior, so a parameter no row informs (the grouped-convolution rate when no depthwise model was
measured) stays at its physical prior instead of drifting to an arbitrary value. The trees then
learn what this misses, in log ratio to it.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from models.analysis import PRECISION_BYTES
from models.op_profile import CONV, GROUPED_CONV, LINEAR, MATMUL, OTHER, VIEW

if TYPE_CHECKING:
    from devicefit.predict.features import ModelPoint
    from devicefit.predict.hardware_specs import DeviceSpec

# Element-size factor on activation and weight bytes relative to fp32, per precision. int8 is
# dynamic quantization: only the weights of linear layers shrink (x0.25); the rest stays fp32.
BYTES_FACTOR = {"fp32": 1.0, "fp16": 0.5, "bf16": 0.5, "int8": 1.0}
INT8_WEIGHT_FACTOR = 0.25
# Prior GEMM speed-up over the fp32 probe per precision: int8 VNNI/DP4A and fp16/bf16 units do
# 4x and 2x the multiply-adds per cycle of fp32 on the hardware devicefit measures. A device
# whose probe measured a bf16 or fp16 matmul gets that rate instead (DeviceSpec.bf16_gflops):
# tensor cores do far more than 2x, and a CPU without native bf16 less than 1x.
PRECISION_SPEEDUP = {"fp32": 1.0, "fp16": 2.0, "bf16": 2.0, "int8": 4.0}
# A depthwise convolution's kernel vectorizes across channels, not along its window: each tap
# of a 7x7 window is one more multiply-add per loaded vector, as each tap of a 3x3 is, so its
# rate per FLOP does not rise with the window's area the way a GEMM's does with its K. With the
# window's area as K, ConvNeXt's 7x7 depthwise layers (K 49 against MobileNet's 9) were
# predicted at 1.4x the rate the 3x3 and 5x5 nets informed, and convnext-tiny held out came out
# at 0.69-0.83x its measured latency in every run on three CPUs. Capped at the 3x3's K, held-out
# latency improved in 6 of 8 runs (2-core AMD EPYC, Zen 4 EPYC, Intel Xeon; docs/measurement-log.md).
GROUPED_CONV_MAX_K = 9.0
# AdamW's single-tensor path (torch.optim's default off CUDA) allocates two temporaries the size
# of each parameter tensor at every step (exp_avg_sq.sqrt() and its quotient), and backward a
# fresh gradient after zero_grad(set_to_none=True). glibc maps an allocation over its mmap
# threshold afresh and unmaps it on free, and trims the heap's top when more than its trim
# threshold is free there, so those pages are faulted in (and zeroed by the kernel) again at
# every step. Measured per training iteration on a 2-core AMD EPYC and an Intel Xeon (glibc
# 2.36, torch 2.13): bert-tiny's 15.6 MB word embedding took 7,600 minor faults (two copies),
# all-MiniLM's 47 MB one 34,500 (three: over 32 MiB, glibc's largest dynamic mmap threshold,
# the gradient is mapped too), resnet-18's 9.4 MB tensors almost none. An allocator setting
# (MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_) or a caching allocator moves these bounds.
REFAULT_FROM_BYTES = 12e6
REFAULT_MAPPED_BYTES = 32 * 2 ** 20
PRIOR_WEIGHT = 0.3  # pull of each log-parameter toward its prior, per unit of log error
OPTIMIZER_BYTES_PER_PARAMETER = 28


def refaulted_bytes(large_tensors: tuple[int, ...]) -> float:
    """Bytes a CPU training step faults in afresh for the optimizer (see REFAULT_FROM_BYTES), from
    the element counts of the model's large parameter tensors."""
    # training keeps fp32 master weights in every precision (autocast)
    sizes = [PRECISION_BYTES["fp32"] * elements for elements in large_tensors]
    return float(sum((3 if b >= REFAULT_MAPPED_BYTES else 2) * b for b in sizes if b >= REFAULT_FROM_BYTES))


def _compute_precision(precision: str) -> str:
    """The dtype non-linear GEMMs run in: dynamic int8 quantizes only the linear layers."""
    return "fp32" if precision == "int8" else precision


def parameter_priors(spec: "DeviceSpec", precisions: set[str], modes: set[str], has: set[int | str]) -> dict[str, float]:
    """The parameters a group's rows can inform, each with its physical prior (GFLOP/s, GB/s, ms).
    `has`: the operator categories in the rows, and "transcendental" when any evaluates exp."""
    peak, bw = spec.peak_gflops, spec.bandwidth_gbs
    priors: dict[str, float] = {"bandwidth_gbs": 0.5 * bw, "other_bandwidth_gbs": 0.5 * bw,
                                "kernel_ms": 0.01, "view_ms": 0.001, "gemm_m_half": 16.0,
                                "gemm_k_half": 16.0,
                                # an operator moving far less than cache_half_mb runs from cache
                                "cache_bandwidth_gain": 3.0, "cache_half_mb": 1.0}
    for p in precisions:
        measured = spec.half_rates().get(p)  # a probed half-precision matmul, where there is one
        priors[f"linear_gflops_{p}"] = 0.75 * (measured or peak * PRECISION_SPEEDUP[p])
    # Other GEMM-class kernels as ratios to the linear rate: they share the GEMM machinery, so a
    # model family held out (the only dense-conv net) still gets the rate its neighbours measured.
    if MATMUL in has:
        priors["matmul_to_linear"] = 0.66
        # Matmuls between activations reduce over a head (64) or a key length (a fused
        # attention): blocks too short to amortize a tile's loads and the softmax around it.
        priors["matmul_k_half"] = 128.0
    if CONV in has:
        priors["conv_to_linear"] = 1.0
    if GROUPED_CONV in has:
        priors["grouped_conv_to_linear"] = 0.4
    if CONV in has:
        priors["conv_activation_traffic"] = 2.0  # layout reorders around each convolution
    if GROUPED_CONV in has:
        # Depthwise kernels reuse nothing across channels: each output re-reads its window.
        priors["grouped_conv_activation_traffic"] = 2.0
    if "transcendental" in has:
        # Elements per second of exp/erf/tanh: about one element per cycle per core, where the
        # peak counts 32 (AVX2) or 64 (AVX-512) flops per cycle per core.
        priors["transcendental_gelems"] = peak / 64
    if "fused" in has:
        priors["fused_share"] = 0.1  # of a fused op's kernel and memory pass: most of it disappears into its producer
    if "int8" in precisions:
        priors["quantize_ms"] = 0.01  # per linear layer: quantize the activation on the fly
    if "training" in modes:
        priors.update({"backward_factor": 2.0, "autograd_kernel_ms": 0.03, "optimizer_bandwidth_gbs": 0.25 * bw})
        if spec.kind == "cpu":
            # Pages faulted in and zeroed by the kernel (refaulted_bytes): a trap and a 4 KiB
            # clear each, about 2 us, where a GPU's caching allocator keeps its blocks.
            priors["refault_gbs"] = 2.0
        if CONV in has or GROUPED_CONV in has:
            # A convolution's backward is two convolutions (input and weight gradients) whose
            # kernels differ from the forward's; a matmul's is two matmuls of the same kind.
            priors["conv_backward_factor"] = 2.0
    return priors


@dataclass(frozen=True)
class OperatorRoofline:
    """Fitted parameters of one (hardware kind, backend), and how well they fit."""

    kind: str
    backend: str
    values: dict[str, float]
    priors: dict[str, float]
    rows: int
    rms_log_error: float
    peak_gflops: float  # the spec it was fitted against: what a transfer to another device scales from
    bandwidth_gbs: float
    transferred_from: str | None = None  # the device whose fit this is, scaled (None: fitted on this device's rows)
    # The spec's probed half-precision matmul rates ({"bf16": GFLOP/s, ...}; only those measured).
    half_gflops: dict[str, float] | None = None
    # A transferred fit's half precisions whose GEMM rate the fp32 peaks carried, for want of a
    # probed rate on one side: a prediction in them says so (transfer_roofline).
    half_by_fp32: tuple[str, ...] = ()
    # A transferred fit's half precisions whose GEMM rate the two hosts' measured speed-ups over
    # fp32 carried (devicefit.predict.host_half_rates), with the figures they come from.
    half_by_hosts: dict[str, str] | None = None
    # A fit of the device's own rows: how many rows it had in each precision (None: a transferred
    # fit, or one stored before this was recorded).
    precision_rows: dict[str, int] | None = None
    # Half precisions none of its rows were in, whose GEMM rate is its fitted fp32 rate times its
    # own probe's matmul speed-up (host_half_rates.with_probed_half), with the figures: never stored.
    half_by_probe: dict[str, str] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "backend": self.backend, "values": self.values, "priors": self.priors, "rows": self.rows,
                "rms_log_error": self.rms_log_error, "peak_gflops": self.peak_gflops, "bandwidth_gbs": self.bandwidth_gbs,
                "transferred_from": self.transferred_from, "half_gflops": self.half_gflops, "half_by_fp32": list(self.half_by_fp32),
                "half_by_hosts": self.half_by_hosts, "precision_rows": self.precision_rows}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "OperatorRoofline":
        return cls(d["kind"], d["backend"], d["values"], d["priors"], d["rows"], d["rms_log_error"], d["peak_gflops"],
                   d["bandwidth_gbs"], d.get("transferred_from"), d.get("half_gflops"), tuple(d.get("half_by_fp32") or ()),
                   d.get("half_by_hosts"), d.get("precision_rows"))

    def basis(self, device: str, precision: str) -> str:
        """Where this fit's time for `precision` on `device` comes from, in words: fitted on the
        device's rows, or another device's fit carried by the probes' peaks, and then whether a
        half-precision rate rode on the fp32 peaks (OpenVINO's bf16 is 3.4x its fp32 on a Xeon
        with AMX and 1.85x on a Zen 4 EPYC, so such a transfer was 33-40% off there)."""
        probe = f" ({self.half_by_probe[precision]})" if precision in (self.half_by_probe or {}) else ""
        if self.transferred_from is None:
            return f"per-operator roofline fitted on {device}{probe}"
        text = (f"per-operator roofline fitted on {self.transferred_from}, carried to {device} (no row of its own on "
                f"{self.backend}) by the two devices' probed peaks{probe}")
        if precision in (self.half_by_hosts or {}):
            text += (f"; its {precision} GEMM rate by the fp32 peaks times the two hosts' {precision} speed-ups over fp32 as torch "
                     f"measured them ({self.half_by_hosts[precision]})")
        if precision in self.half_by_fp32:
            text += (f"; its {precision} GEMM rate by the fp32 peaks, for one of the two probes measured no {precision} matmul "
                     f"(CPUs with and without native {precision} differ about 2x there; `devicefit detect --refresh` on that machine measures it)")
        return text

    def covers(self, precision: str, mode: str) -> bool:
        return f"linear_gflops_{precision}" in self.values and (mode == "inference" or "backward_factor" in self.values)

    def time_ms(self, point: "ModelPoint", batch: int, precision: str, mode: str) -> float:
        return operator_time_ms(point, batch, precision, mode, self.values)


def operator_time_ms(point: "ModelPoint", batch: int, precision: str, mode: str, v: dict[str, float]) -> float:
    return float(OperatorSamples([(point, batch, precision, mode)]).times_ms(v)[0])


class OperatorSamples:
    """(model point, batch, precision, mode) samples with their operators packed into flat
    arrays, so the roofline of all of them is one vectorized evaluation. The fit evaluates it
    a few thousand times (a numerical Jacobian per step); per sample in Python that was 25 s
    of `make run`'s predictor training, most of it in leave-one-model-out refits. Only each
    sample's distinct operators are packed, with their counts, and `times_ms` also takes K
    parameter vectors at once (each value an array of K), so that a Jacobian's parameters + 1
    evaluations are one call: training on a make run's rows went from 7.7 to 3.0 s (2-core
    AMD EPYC, derived cache warm)."""

    def __init__(self, samples: list[tuple["ModelPoint", int, str, str]]):
        profiles = [point.profile for point, *_ in samples]
        self.n = len(samples)
        self.precisions = [precision for _, _, precision, _ in samples]
        # Each sample's distinct operators, counted (OpProfile.distinct_operators): the same sums
        # over a tenth of the elements.
        distinct = [prof.distinct_operators for prof in profiles]
        self.seg = np.concatenate([np.full(len(first), i) for i, (first, _) in enumerate(distinct)])
        self.multiplicity = np.concatenate([counts for _, counts in distinct])
        lengths = np.array([len(first) for first, _ in distinct])
        self._filled = np.flatnonzero(lengths)  # samples with operators, and where each one's start
        self._starts = (np.cumsum(lengths) - lengths)[self._filled]
        batch = np.array([b for _, b, _, _ in samples], dtype=float)
        op_batch = batch[self.seg]

        def packed(field: str) -> np.ndarray:
            return np.concatenate([getattr(prof, field)[first] for prof, (first, _) in zip(profiles, distinct)])

        self.cat = packed("category")
        self.flops = packed("flops") * op_batch
        self.weight = packed("weight_bytes")
        self.act = packed("activation_bytes") * op_batch
        self.rows = packed("output_rows") * op_batch
        # A grouped (depthwise) convolution's K stops at a 3x3 window's (GROUPED_CONV_MAX_K).
        inner = packed("inner_dimension")
        self.inner = np.where(self.cat == GROUPED_CONV, np.minimum(inner, GROUPED_CONV_MAX_K), inner)
        self.special = packed("transcendental_elements") * op_batch
        self.fused = packed("fused") > 0
        precision = np.array(self.precisions)
        self.int8 = precision == "int8"
        self.training = np.array([mode == "training" for *_, mode in samples])
        self.params = np.array([point.params for point, *_ in samples], dtype=float)
        self.refaulted = np.array([refaulted_bytes(point.large_parameter_tensors) for point, *_ in samples])
        self.bytes_scale = np.array([BYTES_FACTOR[p] for p in self.precisions])[self.seg]
        self.int8_linear = (self.cat == LINEAR) & self.int8[self.seg]
        self.is_conv = (self.cat == CONV) | (self.cat == GROUPED_CONV)
        self.kernels = self._count(self.cat != VIEW)
        self.fused_kernels = self._count(self.fused & (self.cat != VIEW))
        self.views = self._count(self.cat == VIEW)
        self.linears = self._count(self.cat == LINEAR)
        # What does not depend on the parameters, computed once: the fit evaluates times_ms
        # some 500 times per fit (a numerical Jacobian per step), and these were a third of it.
        self.masks = {c: self.cat == c for c in (LINEAR, MATMUL, CONV, GROUPED_CONV, OTHER)}
        self.unique_precisions = sorted(set(self.precisions))
        self.precision_of_op = np.array([self.unique_precisions.index(p) for p in self.precisions], dtype=int)[self.seg]
        self.rows_known, self.inner_known = self.rows > 0, self.inner > 0
        self.weight_moved = self.weight * np.where(self.int8_linear, INT8_WEIGHT_FACTOR, self.bytes_scale)
        self.act_moved = self.act * self.bytes_scale

    def _count(self, mask: np.ndarray) -> np.ndarray:
        return np.bincount(self.seg, weights=mask * self.multiplicity, minlength=self.n)

    def _sum(self, per_op: np.ndarray) -> np.ndarray:
        """Per-sample sums of (K, operators) into (K, samples); a sample's operators are contiguous."""
        out = np.zeros((per_op.shape[0], self.n))
        if len(self._filled):
            out[:, self._filled] = np.add.reduceat(per_op, self._starts, axis=1)
        return out

    def times_ms(self, v: dict[str, Any]) -> np.ndarray:
        """Predicted ms per sample under parameters `v` (see the module docstring): shape
        (samples,) for float values, (K, samples) where the values are arrays of K."""
        k = max(np.size(x) for x in v.values())
        total = self._times_ms({name: np.reshape(np.asarray(x, dtype=float), (-1, 1)) for name, x in v.items()}, k)
        return total if any(np.ndim(x) for x in v.values()) else total[0]

    def _times_ms(self, v: dict[str, np.ndarray], k: int) -> np.ndarray:
        """times_ms on (K, 1) values, broadcast against the operators: (K, samples)."""
        masks, precision = self.masks, self.precision_of_op

        def by_precision(values: list[np.ndarray]) -> np.ndarray:  # (K, operators): each operator's own precision's value
            return np.concatenate([np.broadcast_to(x, (k, 1)) for x in values], axis=1)[:, precision]

        linear = by_precision([v[f"linear_gflops_{p}"] for p in self.unique_precisions])
        # Dynamic int8 runs the GEMMs other than linear layers in fp32.
        gemm = by_precision([v.get(f"linear_gflops_{_compute_precision(p)}", v[f"linear_gflops_{p}"])
                             for p in self.unique_precisions])
        rate = np.select(
            [masks[LINEAR], masks[MATMUL], masks[CONV], masks[GROUPED_CONV]],
            [linear, gemm * v.get("matmul_to_linear", 1.0), gemm * v.get("conv_to_linear", 1.0),
             gemm * v.get("grouped_conv_to_linear", 1.0)], default=np.inf)
        k_half = np.where(masks[MATMUL], v.get("matmul_k_half", v.get("gemm_k_half", 0.0)), v.get("gemm_k_half", 0.0))
        saturation = np.where(self.rows_known, self.rows / (self.rows + v["gemm_m_half"]), 1.0) \
            * np.where(self.inner_known, self.inner / (self.inner + k_half), 1.0)
        weight = self.weight_moved
        act = self.act_moved * np.select(
            [masks[CONV], masks[GROUPED_CONV]],
            [v.get("conv_activation_traffic", 1.0), v.get("grouped_conv_activation_traffic", 1.0)], 1.0)
        bandwidth = np.where(masks[OTHER], v["other_bandwidth_gbs"], v["bandwidth_gbs"])
        if "cache_bandwidth_gain" in v:
            moved = weight + act
            bandwidth = bandwidth * (1 + v["cache_bandwidth_gain"] * v["cache_half_mb"] * 1e6 / (v["cache_half_mb"] * 1e6 + moved))
        memory = (weight + act) / (bandwidth * 1e9)
        kernels = self.kernels
        if "fused_share" in v:  # a graph compiler's fused operators: a share of their pass and launch
            memory = np.where(self.fused, memory * v["fused_share"], memory)
            kernels = kernels - self.fused_kernels * (1 - v["fused_share"])
        per_op = np.maximum(self.flops / (rate * saturation * 1e9), memory) * 1e3
        if "transcendental_gelems" in v:
            per_op = per_op + self.special / (v["transcendental_gelems"] * 1e9) * 1e3
        per_op = per_op * self.multiplicity
        conv_time = self._sum(per_op * self.is_conv) if "conv_backward_factor" in v else np.zeros((k, self.n))
        total = self._sum(per_op) - conv_time + kernels * v["kernel_ms"] + self.views * v["view_ms"]
        total = total + np.where(self.int8, self.linears * v.get("quantize_ms", 0.0), 0.0)
        if self.training.any():
            trained = total * (1 + v["backward_factor"]) + conv_time * (1 + v.get("conv_backward_factor", 0.0)) \
                + self.kernels * v["autograd_kernel_ms"] \
                + OPTIMIZER_BYTES_PER_PARAMETER * self.params / (v["optimizer_bandwidth_gbs"] * 1e9) * 1e3
            if "refault_gbs" in v:
                trained = trained + self.refaulted / (v["refault_gbs"] * 1e9) * 1e3
            total = np.where(self.training, trained, total + conv_time)
        else:
            total = total + conv_time
        return np.maximum(total, 1e-6)


def fit_operator_roofline(kind: str, backend: str, samples: list[tuple["ModelPoint", int, str, str, float]],
                          spec: "DeviceSpec") -> OperatorRoofline:
    """Least squares on log error over (point, batch, precision, mode, measured ms) samples."""
    from scipy.optimize import least_squares

    has: set[int | str] = {int(c) for s in samples for c in np.unique(s[0].profile.category)}
    if any(s[0].profile.transcendental_elements.any() for s in samples):
        has.add("transcendental")
    if fuses_post_ops(backend) and any(s[0].profile.fused.any() for s in samples):
        has.add("fused")
    priors = parameter_priors(spec, {s[2] for s in samples}, {s[3] for s in samples}, has)
    names = sorted(priors)
    x0 = np.log([priors[n] for n in names])
    measured = np.log([s[4] for s in samples])
    packed = OperatorSamples([s[:4] for s in samples])

    def residuals(x: np.ndarray) -> np.ndarray:
        predicted = np.log(packed.times_ms(dict(zip(names, np.exp(x)))))
        return np.concatenate([predicted - measured, PRIOR_WEIGHT * (x - x0)])

    def jacobian(x: np.ndarray) -> np.ndarray:
        """scipy's own 2-point forward differences (the same steps), with the unperturbed point
        and every perturbed one evaluated in one vectorized call; the prior's rows are exact.
        One call per parameter was 90% of the predictors' training."""
        step = _forward_steps(x)
        points = np.vstack([x, x + np.diag(step)])  # (1 + parameters, parameters), log space
        predicted = np.log(packed.times_ms({n: np.exp(points[:, i]) for i, n in enumerate(names)}))
        data = ((predicted[1:] - predicted[0]) / step[:, None]).T  # (rows, parameters)
        return np.vstack([data, PRIOR_WEIGHT * np.eye(len(x))])

    x = least_squares(residuals, x0, jac=jacobian, method="trf").x
    r = residuals(x)[: len(samples)]
    return OperatorRoofline(kind, backend, {n: float(math.exp(val)) for n, val in zip(names, x)}, priors, len(samples),
                            float(np.sqrt(np.mean(r ** 2))), spec.peak_gflops, spec.bandwidth_gbs, half_gflops=spec.half_rates() or None,
                            precision_rows=dict(Counter(s[2] for s in samples)))


def fuses_post_ops(backend: str) -> bool:
    """Whether the registry's backend of that name compiles the graph (Backend.fuses_post_ops);
    False for a name no backend here has (rows another machine measured with a plugin). A
    registry that cannot load raises its own error: not a quiet eager fit."""
    from benchmark_runners import registry

    known = registry.backends().get(backend)
    return bool(known is not None and known.fuses_post_ops)


def _forward_steps(x: np.ndarray) -> np.ndarray:
    """The steps of scipy.optimize's "2-point" differences: sqrt(machine epsilon) relative to
    max(1, |x|), signed like x, rounded to what x + step represents."""
    step = np.sqrt(np.finfo(float).eps) * np.where(x >= 0, 1.0, -1.0) * np.maximum(1.0, np.abs(x))
    return (x + step) - x


def transfer_roofline(fit: OperatorRoofline, spec: "DeviceSpec", source: str = "",
                      host_factors: dict[str, tuple[float, str]] | None = None) -> OperatorRoofline:
    """A device's fit carried to another device of the same kind that no row measured: every
    rate (GFLOP/s, and transcendental elements/s) scaled by the ratio of the two devices' probed
    compute peaks, every bandwidth by the ratio of their probed bandwidths; per-kernel costs,
    rate ratios, saturation points, the cache terms and the page-fault rate (a kernel's trap and
    page clear, not a stream the probe measures) kept. The efficiency a backend reaches is assumed to carry over, which is what
    leave-one-device-out validation measures.

    A bf16 or fp16 GEMM rate is scaled by the ratio of the two devices' probed matmuls in that
    precision where both probes measured one: the fp32 ratio says nothing about whether either
    CPU has native bf16 (AMX: tens of times an AVX2 CPU's emulated rate at similar fp32 peaks).
    Where either probe lacks the figure (OpenVINO's devices, a probe from before probes measured
    it), `host_factors` (devicefit.predict.host_half_rates.transfer_factors: the target host's
    speed-up over fp32 over the source host's, as torch measured them) times the fp32 ratio
    stands in; where neither is known, the fp32 ratio alone, which can be that far off."""
    compute, memory = spec.peak_gflops / fit.peak_gflops, spec.bandwidth_gbs / fit.bandwidth_gbs
    ours, theirs = fit.half_gflops or {}, spec.half_rates()
    probed = {p: theirs[p] / ours[p] for p in theirs if p in ours}
    by_hosts = {p: basis for p, (_, basis) in (host_factors or {}).items() if p not in probed and f"linear_gflops_{p}" in fit.values}
    half = {**{p: compute * host_factors[p][0] for p in by_hosts}, **probed}

    def scaled(name: str, value: float) -> float:
        if name.startswith("linear_gflops_"):
            return value * half.get(name.removeprefix("linear_gflops_"), compute)
        if name == "transcendental_gelems":
            return value * compute
        if name.endswith("bandwidth_gbs"):
            return value * memory
        return value

    by_fp32 = tuple(sorted(p for n in fit.values if n.startswith("linear_gflops_")
                           for p in [n.removeprefix("linear_gflops_")] if p in ("bf16", "fp16") and p not in half))
    return OperatorRoofline(fit.kind, fit.backend, {n: scaled(n, v) for n, v in fit.values.items()},
                            {n: scaled(n, v) for n, v in fit.priors.items()}, 0, fit.rms_log_error, spec.peak_gflops,
                            spec.bandwidth_gbs, source or f"{fit.kind} fit ({fit.peak_gflops:g} GFLOP/s, {fit.bandwidth_gbs:g} GB/s)",
                            spec.half_rates() or None, by_fp32, by_hosts or None)
