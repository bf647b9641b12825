"""What one forward pass asks of the hardware, operator by operator.

The forward pass runs on meta tensors (no weights, no compute) under a dispatch mode that sees
every aten operator the eager model would launch. Each one is recorded with its FLOPs (torch's
own formulas), the bytes it reads from weights, the bytes of activations it reads and writes,
and whether it is a zero-copy view. The peak of live activation memory is followed through
Python's own reference counting: a tensor is released on meta exactly when it would be in the
eager run.

Why per operator: a model's time is the sum of its kernels', and each kernel is either
compute-bound or bandwidth-bound on its own. MobileNet's 1x1 convolutions and ResNet's 3x3
convolutions are both "dense convolutions", yet they run at 30 and 200 GFLOP/s on the same
CPU because their bytes per FLOP differ tenfold. Summing FLOPs over the model hides that; a
per-operator roofline does not.
"""
from __future__ import annotations

import dataclasses
import functools
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from models.bounded_cache import BoundedCache
from models.catalog import ModelSpec
from models.derived_cache import disk_cached, integer, is_number, number
from models.inputs import InputSignature, input_signature

# Operator categories, each with its own achieved rate on a device.
LINEAR = 0  # matmul against a weight: the part int8 dynamic quantization replaces
MATMUL = 1  # matmul between activations (attention scores and values)
CONV = 2  # dense convolution (groups == 1)
GROUPED_CONV = 3  # grouped / depthwise convolution
OTHER = 4  # element-wise, normalization, softmax, pooling, gathers: bandwidth-bound
VIEW = 5  # no data moves: a dispatch and a new tensor header
CATEGORIES = ("linear", "matmul", "conv", "grouped_conv", "other", "view")

_MATMULS = {"mm", "addmm", "bmm", "baddbmm", "matmul", "linear"}
# Element-wise ops that evaluate an exponential (or erf/tanh) per element: on a CPU each element
# costs a polynomial, not a load, so a large map can make them compute-bound (EfficientNet's SiLU
# over every expanded map; GELU in transformer FFNs; sigmoid gates). ReLU, ReLU6 and hardswish
# are comparisons and multiply-adds: bandwidth-bound like any other element-wise op.
_TRANSCENDENTAL = {"silu", "gelu", "sigmoid", "tanh", "exp", "erf", "_softmax", "softmax", "_log_softmax",
                   "log_softmax", "_safe_softmax", "logsigmoid", "mish", "elu", "softplus", "log", "expm1"}
_ATTENTION = {"_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_efficient_attention",
              "_scaled_dot_product_flash_attention", "_scaled_dot_product_cudnn_attention", "scaled_dot_product_attention"}


@dataclass(frozen=True)
class OpProfile:
    """Per-operator demands of one forward pass, with batch-scaling built in.

    Arrays are per operator at batch 1; `activation_bytes` and `flops` scale with the batch,
    `weight_bytes` do not. `peak_activation_bytes` is (at batch 1, extra per added sample); the
    extra per sample takes a second trace at batch 2, run only when a batch above 1 asks for it
    (a batch-1 figure, such as the catalog's or a selection cell's, needs one trace, not two)."""

    category: np.ndarray  # int8 codes, see CATEGORIES
    flops: np.ndarray
    weight_bytes: np.ndarray
    activation_bytes: np.ndarray
    output_rows: np.ndarray  # a GEMM's M (or a convolution's output pixels); scales with the batch
    inner_dimension: np.ndarray  # a GEMM's K (or a convolution's input channels per group x kernel area)
    transcendental_elements: np.ndarray  # elements a _TRANSCENDENTAL op evaluates (0 for others); scales with the batch
    peak_batch1_bytes: float
    per_sample_peak: Callable[[], float] = field(repr=False, compare=False)  # cached by the caller

    @property
    def peak_activation_bytes(self) -> tuple[float, float]:
        return self.peak_batch1_bytes, self.per_sample_peak()

    def peak_activations(self, batch: int) -> float:
        if batch == 1:
            return self.peak_batch1_bytes
        return self.peak_batch1_bytes + self.per_sample_peak() * (batch - 1)

    def at_batch(self, batch: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.flops * batch, self.weight_bytes, self.activation_bytes * batch

    def counts(self) -> dict[str, int]:
        return {name: int((self.category == i).sum()) for i, name in enumerate(CATEGORIES)}

    @functools.cached_property
    def distinct_operators(self) -> tuple[np.ndarray, np.ndarray]:
        """(the index of each distinct operator, how many operators share its demands): a
        network repeats its layers, so the 4,920 operators of make run's twelve models are 466
        distinct ones, and a sum over operators is a sum over these times their counts."""
        demands = np.column_stack([self.category, self.flops, self.weight_bytes, self.activation_bytes, self.output_rows,
                                   self.inner_dimension, self.transcendental_elements])
        _, first, counts = np.unique(demands, axis=0, return_index=True, return_counts=True)
        order = np.argsort(first)  # in trace order: sums add in a stable order
        return first[order], counts[order].astype(float)

    def to_json(self) -> dict[str, Any]:
        return {"operators": self.counts(), "peak_activation_bytes_batch1": self.peak_activation_bytes[0],
                "peak_activation_bytes_per_extra_sample": self.peak_activation_bytes[1]}


def _inner_dimension(name: str, category: int, args) -> float:
    """The GEMM's K: the reduction length each output sums over (in_features; head size; input
    channels per group x kernel area). A short K gives each loaded tile little work."""
    if category == LINEAR or (category == MATMUL and name not in _ATTENTION):
        a = args[1] if name in ("addmm", "baddbmm") else args[0]
        return float(a.shape[-1])
    if category == MATMUL:
        return float(args[0].shape[-1])
    if category in (CONV, GROUPED_CONV):
        w = args[1]
        area = 1
        for d in w.shape[2:]:
            area *= d
        return float(w.shape[1] * area)
    return 0.0


def _output_rows(category: int, tensors_out) -> float:
    """The GEMM's M: output rows (tokens x batch, or output pixels x batch for a convolution).
    Small M leaves vector units idle, so achieved rate grows with it."""
    if not tensors_out or category not in (LINEAR, MATMUL, CONV, GROUPED_CONV):
        return 0.0
    out = tensors_out[0]
    channels = out.shape[1] if category in (CONV, GROUPED_CONV) and out.dim() > 1 else out.shape[-1]
    return float(out.nelement() / max(channels, 1))


def _storage_key(t) -> int:
    return t.untyped_storage()._cdata


def _tracer_class():
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten
    from torch.utils.flop_counter import flop_registry

    class OperatorTracer(TorchDispatchMode):
        def __init__(self, weight_storages: set[int]):
            super().__init__()
            self.weights = weight_storages
            self.rows: list[tuple[int, float, float, float, float, float, float]] = []
            self.live: dict[int, list[int]] = {}  # storage -> [tensor objects alive, bytes]
            self.live_bytes = 0
            self.peak = 0

        def _release(self, key: int) -> None:
            entry = self.live.get(key)
            if entry is None:
                return
            entry[0] -= 1
            if entry[0] <= 0:
                self.live_bytes -= entry[1]
                del self.live[key]

        def _category(self, name: str, args, tensors_in) -> int:
            if name in _MATMULS:
                return LINEAR if any(_storage_key(t) in self.weights for t in tensors_in) else MATMUL
            if name in _ATTENTION:
                return MATMUL
            if name == "convolution":
                groups = args[8] if len(args) > 8 else 1
                return GROUPED_CONV if groups > 1 else CONV
            return OTHER

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            tensors_in = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
            tensors_out = [a for a in tree_flatten(out)[0] if isinstance(a, torch.Tensor)]
            packet = func._overloadpacket
            name = packet.__name__
            in_keys = {_storage_key(t) for t in tensors_in}
            is_view = bool(tensors_out) and all(_storage_key(t) in in_keys for t in tensors_out)
            written = 0
            for t in tensors_out:
                key = _storage_key(t)
                if key in self.live:
                    self.live[key][0] += 1
                elif key not in in_keys and key not in self.weights:
                    nbytes = t.untyped_storage().nbytes()
                    written += t.nelement() * t.element_size()
                    self.live[key] = [1, nbytes]
                    self.live_bytes += nbytes
                else:
                    continue
                weakref.finalize(t, self._release, key)
            self.peak = max(self.peak, self.live_bytes)
            if is_view:
                self.rows.append((VIEW, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0))
                return out
            if name in _ATTENTION:
                q, k, v = args[:3]
                flops = 2.0 * q.nelement() / q.shape[-1] * k.shape[-2] * (q.shape[-1] + v.shape[-1])
            elif packet in flop_registry:
                flops = float(flop_registry[packet](*args, **kwargs, out_val=out))
            else:
                flops = 0.0
            weight = 0.0
            activation = float(written)
            for t in tensors_in:
                nbytes = t.nelement() * t.element_size()
                if _storage_key(t) in self.weights:
                    # A gather reads the rows it returns, not the whole table.
                    weight += written if name == "embedding" else nbytes
                else:
                    activation += nbytes
            category = self._category(name, args, tensors_in)
            special = float(sum(t.nelement() for t in tensors_out)) if name in _TRANSCENDENTAL else 0.0
            self.rows.append((category, flops, weight, activation, _output_rows(category, tensors_out),
                              _inner_dimension(name, category, args), special))
            return out

    return OperatorTracer


def _fused_attention(original, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                     enable_gqa=False):
    """scaled_dot_product_attention as the eager CPU (and GPU) run executes it: one fused
    kernel that never materializes the score matrix. On meta, torch would otherwise pick the
    math fallback (bmm, softmax, bmm), whose memory and operator count are not what runs."""
    import torch

    if attn_mask is not None and attn_mask.requires_grad and torch.is_grad_enabled():
        # The fused CPU kernel cannot differentiate a learned bias (T5): torch runs the math path.
        return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                        scale=scale, enable_gqa=enable_gqa)
    if enable_gqa and key.shape[-3] != query.shape[-3]:
        repeat = query.shape[-3] // key.shape[-3]
        key, value = key.repeat_interleave(repeat, -3), value.repeat_interleave(repeat, -3)
    out, _ = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale)
    return out


def _fused_attention_mode():
    """A torch function mode that routes scaled_dot_product_attention to `_fused_attention`.

    Why a mode and not a patched `F.scaled_dot_product_attention`: torch keeps function modes per
    thread, so a trace on one thread never changes what another thread (an API request, a
    benchmark) calls, and nothing global is left behind if a trace fails. Every other function
    passes through untouched. While `__torch_function__` runs, torch disables the mode, so the
    calls it makes (the original function, the fused kernel) are not intercepted again."""
    import torch
    from torch.overrides import TorchFunctionMode

    sdpa = torch._C._nn.scaled_dot_product_attention  # the builtin itself, whatever F's attribute holds now

    class FusedAttention(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is sdpa:
                return _fused_attention(func, *args, **kwargs)
            return func(*args, **kwargs)

    return FusedAttention()


@dataclass(frozen=True)
class Trace:
    rows: list  # 7 figures per operator (see `_profile_of`)
    peak: float  # of live activation bytes


def _decode_trace(document: Any) -> Trace:
    rows = document["rows"]
    if not isinstance(rows, list) or not rows or any(not isinstance(r, list) or len(r) != 7 or not all(map(is_number, r))
                                                     or r[0] not in range(len(CATEGORIES)) for r in rows):
        raise ValueError("not a trace's rows")
    return Trace(rows, number(document["peak"]))


def _trace(spec: ModelSpec, signature: InputSignature, training: bool = False, extra: dict | None = None) -> Trace:
    """One forward pass on meta (`_run_trace`), read from the disk cache where this model,
    input signature, mode and code were traced before, by any process."""
    identity = {"spec": dataclasses.asdict(spec), "inputs": dataclasses.asdict(signature), "training": training, "extra": extra}
    return disk_cached("trace", identity, lambda: _run_trace(spec, signature, training, extra),
                       encode=lambda t: {"rows": t.rows, "peak": t.peak}, decode=_decode_trace)


def _run_trace(spec: ModelSpec, signature: InputSignature, training: bool, extra: dict | None) -> Trace:
    """One forward pass on meta. With `training`, autograd records the graph, so the tensors
    it saves for the backward pass stay alive exactly as they would in a training step.
    `extra`: further keyword arguments of the forward (generation's prefill: logits_to_keep)."""
    import torch

    from models.loading import meta_model

    model = meta_model(spec)
    model.train(training)
    model.config.pad_token_id = None  # see analysis.forward_flops: meta tensors hold no token values
    inputs = {name: torch.zeros(t.shape, dtype=torch.float32 if t.kind == "float" else torch.long, device="meta")
              for name, t in signature.inputs.items() if t.kind != "mask"}
    weights = {_storage_key(p) for p in model.parameters()} | {_storage_key(b) for b in model.buffers()}
    tracer = _tracer_class()(weights)
    with _fused_attention_mode(), tracer, torch.set_grad_enabled(training):
        out = model(**inputs, **(extra or {}))
    del out
    return Trace([list(r) for r in tracer.rows], float(tracer.peak))


# Bounded: each (model, sequence length) is a trace, and sequence lengths come from requests.
TRACE_CACHE_SIZE = 256
_profiles: BoundedCache[OpProfile] = BoundedCache(TRACE_CACHE_SIZE)
_training_peaks: BoundedCache[tuple[float, float]] = BoundedCache(TRACE_CACHE_SIZE)
_per_sample_peaks: BoundedCache[float] = BoundedCache(TRACE_CACHE_SIZE)


def forget_in_process() -> None:
    """Drop this process's memos of forward and training traces (not the disk cache): what a
    fresh process would hold, for a test that must see where its traces come from."""
    for memo in (_profiles, _training_peaks, _per_sample_peaks):
        memo.clear()


def trace_key(spec: ModelSpec, seq_length: int | None) -> tuple:
    """What a trace depends on: the model (name, source, path, config) and the sequence length."""
    return (spec.name, spec.source, str(spec.path), seq_length, repr(sorted(spec.config.items())) if spec.config else "")


def training_peak_activation_bytes(spec: ModelSpec, seq_length: int | None = None) -> tuple[float, float]:
    """Peak live activations of a training forward pass, saved tensors included: (batch 1,
    extra per added sample). Traced only when a training figure is asked for."""
    def compute() -> tuple[float, float]:
        one = _trace(spec, input_signature(spec, 1, seq_length), training=True).peak
        two = _trace(spec, input_signature(spec, 2, seq_length), training=True).peak
        return (float(one), float(max(two - one, 0)))

    return _training_peaks.get(trace_key(spec, seq_length), compute)


def op_profile(spec: ModelSpec, seq_length: int | None = None) -> OpProfile:
    """Traced at batch 1 for the per-operator figures; the per-sample growth of peak activation
    memory comes from a second trace at batch 2 (some buffers, such as masks, do not grow),
    taken the first time a batch above 1 asks for it."""
    key = trace_key(spec, seq_length)

    def per_sample_peak() -> float:
        def compute() -> float:
            two = _trace(spec, input_signature(spec, 2, seq_length)).peak
            return float(max(two - op_profile(spec, seq_length).peak_batch1_bytes, 0))

        return _per_sample_peaks.get(key, compute)

    return _profiles.get(key, lambda: _profile_of(_trace(spec, input_signature(spec, 1, seq_length)), per_sample_peak))


def _profile_of(trace, per_sample_peak: Callable[[], float]) -> OpProfile:
    """The per-operator arrays and the batch-1 peak of one trace (its rows: 7 figures per op)."""
    rows = np.array(trace.rows, dtype=np.float64).reshape(-1, 7)
    return OpProfile(
        category=rows[:, 0].astype(np.int8), flops=rows[:, 1], weight_bytes=rows[:, 2], activation_bytes=rows[:, 3],
        output_rows=rows[:, 4], inner_dimension=rows[:, 5], transcendental_elements=rows[:, 6],
        peak_batch1_bytes=float(trace.peak), per_sample_peak=per_sample_peak)


_prefill_peaks: BoundedCache[tuple[float, float]] = BoundedCache(TRACE_CACHE_SIZE)


def _prefill_request(spec: ModelSpec, prompt_tokens: int | None):
    """(signature at a batch, extra forward arguments) of a generation request's prefill as
    generate() runs it: the prompt, the logits of its last position only where the model takes
    logits_to_keep, and an encoder-decoder's decoder over its start token alone."""
    import dataclasses
    import inspect

    from models.inputs import TensorSpec, model_class

    accepts = set(inspect.signature(model_class(spec).forward).parameters)
    extra = {"logits_to_keep": 1} if "logits_to_keep" in accepts else {}

    def signature(batch: int) -> InputSignature:
        sig = input_signature(spec, batch, prompt_tokens)
        inputs = {k: (TensorSpec((batch, 1), v.kind, v.high) if k == "decoder_input_ids" else v) for k, v in sig.inputs.items()}
        return dataclasses.replace(sig, inputs=inputs)

    return signature, extra


def prefill_peak_activation_bytes(spec: ModelSpec, prompt_tokens: int | None) -> tuple[float, float]:
    """Peak live activations of a generation request's prefill, as generate() runs it: (batch 1,
    extra per added sample). The forward over the prompt keeps the logits of its last position
    only where the model supports it (logits_to_keep=1, what generate() passes); an
    encoder-decoder's decoder runs its start token. The cache is on, as generate() runs it, so
    the peak holds the prompt's keys and values too: the caller, who counts the cache from the
    config (generation.kv_cache), takes them out. Later decode steps run one position and need
    far less."""
    signature, extra = _prefill_request(spec, prompt_tokens)

    def compute() -> tuple[float, float]:
        one = prefill_profile(spec, prompt_tokens).peak_batch1_bytes
        two = _trace(spec, signature(2), extra=extra).peak
        return (float(one), float(max(two - one, 0)))

    return _prefill_peaks.get(("prefill",) + trace_key(spec, prompt_tokens), compute)


_prefill_profiles: BoundedCache[OpProfile] = BoundedCache(TRACE_CACHE_SIZE)


def prefill_profile(spec: ModelSpec, prompt_tokens: int | None) -> OpProfile:
    """The operators of a generation request's prefill (`_prefill_request`), traced at batch 1.

    Why beside the forward pass's profile: the served TTFT is the forward-pass predictor at the
    prompt's length, and that pass is not the prefill: it computes the logits of every position
    (gpt2's head over 256 positions is a third of the pass) and an encoder-decoder's decoder
    runs over as many positions as the prompt, where a prefill runs its start token. The two
    profiles' roofline times give the factor between them (predict/generation.prefill_factor)."""
    signature, extra = _prefill_request(spec, prompt_tokens)

    return _prefill_profiles.get(("prefill-profile",) + trace_key(spec, prompt_tokens),
                                 lambda: _profile_of(_trace(spec, signature(1), extra=extra),
                                                     lambda: prefill_peak_activation_bytes(spec, prompt_tokens)[1]))


def is_traced(spec: ModelSpec, seq_length: int | None = None, training: bool = False) -> bool:
    """Whether the figures for `spec` at `seq_length` are already cached (inference profile, and
    the training peak with `training`): the caller may then answer without a trace's cost."""
    key = trace_key(spec, seq_length)
    return key in _profiles and (not training or key in _training_peaks)


_decode_ops: BoundedCache[int] = BoundedCache(TRACE_CACHE_SIZE)
TRACE_PROMPT_TOKENS = 8


def decode_step_ops(spec: ModelSpec) -> int:
    """Kernels one decode step of generate() launches (views excluded): the prefill runs on meta
    with the cache on, then one more token is traced with that cache, as generate()'s second step
    runs it; an encoder-decoder's step gets the encoder's output and runs its decoder only.

    Why count them: on an accelerator driven by an eager host loop, a small model's decode step
    is bound by the host dispatching kernels, not by the device reading weights (gpt2 on an
    H200: 4.7 ms a token, 235 kernels, against a 0.1 ms bandwidth roofline), so the step's time
    grows with its kernel count. The count does not depend on the context length, so a short
    prompt (TRACE_PROMPT_TOKENS) is traced."""
    import inspect

    import torch

    from models.inputs import model_class
    from models.loading import meta_model

    def compute() -> int:
        model = meta_model(spec)
        model.eval()
        model.config.pad_token_id = None  # see _trace
        signature = input_signature(spec, 1, TRACE_PROMPT_TOKENS)
        token = torch.zeros((1, 1), dtype=torch.long, device="meta")
        inputs = {name: token if name == "decoder_input_ids" else
                  torch.zeros(t.shape, dtype=torch.float32 if t.kind == "float" else torch.long, device="meta")
                  for name, t in signature.inputs.items() if t.kind != "mask"}
        cache_name = "past_key_values" if "past_key_values" in inspect.signature(model_class(spec).forward).parameters else "cache"
        with _fused_attention_mode(), torch.no_grad():
            prefill = model(**inputs, use_cache=True)
        if "decoder_input_ids" in inputs:
            step = {"decoder_input_ids": token, "encoder_outputs": (prefill.encoder_last_hidden_state,)}
        else:
            step = {"input_ids": token}
        tracer = _tracer_class()({_storage_key(p) for p in model.parameters()} | {_storage_key(b) for b in model.buffers()})
        with _fused_attention_mode(), tracer, torch.no_grad():
            model(**step, **{cache_name: prefill.past_key_values}, use_cache=True)
        return sum(1 for row in tracer.rows if row[0] != VIEW)

    return _decode_ops.get(("decode",) + trace_key(spec, TRACE_PROMPT_TOKENS),
                           lambda: disk_cached("decode_ops", {"spec": dataclasses.asdict(spec), "prompt": TRACE_PROMPT_TOKENS},
                                               compute, encode=int, decode=integer))
