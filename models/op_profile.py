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
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from models.bounded_cache import BoundedCache
from models.catalog import ModelSpec
from models.derived_cache import disk_cached, integer, is_number, number
from models.inputs import InputSignature, input_signature
from models.op_tracer import (  # noqa: F401  (the categories, re-exported: the profile's arrays are coded in them)
    CATEGORIES,
    CONV,
    GROUPED_CONV,
    LINEAR,
    MATMUL,
    OTHER,
    VIEW,
    fused_attention_mode,
    storage_key,
    tracer_class,
)


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
    inner_dimension: np.ndarray  # a GEMM's K (a fused attention's: its key length; a convolution's: input channels per group x kernel area)
    transcendental_elements: np.ndarray  # elements a _TRANSCENDENTAL op evaluates (0 for others); scales with the batch
    # 1.0 where a graph compiler runs the op inside another kernel or not at all: a post-op of a GEMM or
    # convolution, a zero pad feeding a convolution, an empty allocation (models.op_tracer)
    fused: np.ndarray
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
                                   self.inner_dimension, self.transcendental_elements, self.fused])
        _, first, counts = np.unique(demands, axis=0, return_index=True, return_counts=True)
        order = np.argsort(first)  # in trace order: sums add in a stable order
        return first[order], counts[order].astype(float)

    def to_json(self) -> dict[str, Any]:
        return {"operators": self.counts(), "peak_activation_bytes_batch1": self.peak_activation_bytes[0],
                "peak_activation_bytes_per_extra_sample": self.peak_activation_bytes[1]}


@dataclass(frozen=True)
class Trace:
    rows: list  # TRACE_FIGURES figures per operator (see `_profile_of`)
    peak: float  # of live activation bytes


TRACE_FIGURES = 8  # category, FLOPs, weight bytes, activation bytes, M, K, transcendental elements, fused


def _decode_trace(document: Any) -> Trace:
    rows = document["rows"]
    if not isinstance(rows, list) or not rows or any(not isinstance(r, list) or len(r) != TRACE_FIGURES or not all(map(is_number, r))
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

    from models.loading import local_forward, meta_model

    model = meta_model(spec)
    model.train(training)
    model.config.pad_token_id = None  # see analysis.forward_flops: meta tensors hold no token values
    inputs = {name: torch.zeros(t.shape, dtype=torch.float32 if t.kind == "float" else torch.long, device="meta")
              for name, t in signature.inputs.items() if t.kind != "mask"}
    weights = {storage_key(p) for p in model.parameters()} | {storage_key(b) for b in model.buffers()}
    tracer = tracer_class()(weights)
    with fused_attention_mode(), tracer, torch.set_grad_enabled(training), local_forward(spec):
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
    """The per-operator arrays and the batch-1 peak of one trace (its rows: TRACE_FIGURES per op)."""
    rows = np.array(trace.rows, dtype=np.float64).reshape(-1, TRACE_FIGURES)
    return OpProfile(
        category=rows[:, 0].astype(np.int8), flops=rows[:, 1], weight_bytes=rows[:, 2], activation_bytes=rows[:, 3],
        output_rows=rows[:, 4], inner_dimension=rows[:, 5], transcendental_elements=rows[:, 6], fused=rows[:, 7],
        peak_batch1_bytes=float(trace.peak), per_sample_peak=per_sample_peak)


_prefill_peaks: BoundedCache[tuple[float, float]] = BoundedCache(TRACE_CACHE_SIZE)


def _prefill_request(spec: ModelSpec, prompt_tokens: int | None):
    """(signature at a batch, extra forward arguments) of a generation request's prefill as
    generate() runs it: the prompt, the logits of its last position only where the model takes
    logits_to_keep, and an encoder-decoder's decoder over its start token alone."""
    import dataclasses

    from models.class_facts import class_facts
    from models.inputs import TensorSpec

    # A cached fact: the class's modeling module is imported only where a trace must be taken.
    extra = {"logits_to_keep": 1} if "logits_to_keep" in class_facts(spec.architecture).forward_parameters else {}

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
    prompt (TRACE_PROMPT_TOKENS) is traced. Torch is imported only to trace: a cached count is
    read without it (a generation prediction's first second, in a process that has not)."""

    def compute() -> int:
        import torch

        from models.class_facts import class_facts
        from models.loading import local_forward, meta_model

        model = meta_model(spec)
        model.eval()
        model.config.pad_token_id = None  # see _trace
        signature = input_signature(spec, 1, TRACE_PROMPT_TOKENS)
        token = torch.zeros((1, 1), dtype=torch.long, device="meta")
        inputs = {name: token if name == "decoder_input_ids" else
                  torch.zeros(t.shape, dtype=torch.float32 if t.kind == "float" else torch.long, device="meta")
                  for name, t in signature.inputs.items() if t.kind != "mask"}
        cache_name = "past_key_values" if "past_key_values" in class_facts(spec.architecture).forward_parameters else "cache"
        with local_forward(spec), fused_attention_mode(), torch.no_grad():
            prefill = model(**inputs, use_cache=True)
        if "decoder_input_ids" in inputs:
            step = {"decoder_input_ids": token, "encoder_outputs": (prefill.encoder_last_hidden_state,)}
        else:
            step = {"input_ids": token}
        tracer = tracer_class()({storage_key(p) for p in model.parameters()} | {storage_key(b) for b in model.buffers()})
        with local_forward(spec), fused_attention_mode(), tracer, torch.no_grad():
            model(**step, **{cache_name: prefill.past_key_values}, use_cache=True)
        return sum(1 for row in tracer.rows if row[0] != VIEW)

    return _decode_ops.get(("decode",) + trace_key(spec, TRACE_PROMPT_TOKENS),
                           lambda: disk_cached("decode_ops", {"spec": dataclasses.asdict(spec), "prompt": TRACE_PROMPT_TOKENS},
                                               compute, encode=int, decode=integer))
