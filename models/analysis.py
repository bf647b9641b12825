"""Analytic facts from a config: exact parameter counts, FLOPs per sample, weight bytes.

Parameters are counted by instantiating on the meta device (exact, tied weights once);
FLOPs by running the forward pass on meta tensors under torch's FlopCounterMode, so they
follow the real graph (attention, convolutions, heads) rather than a 2*params rule.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from models.catalog import ModelSpec
from models.derived_cache import disk_cached, integer
from models.inputs import InputSignature, input_signature
from models.loading import local_forward, meta_model

PRECISION_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "int8": 1}
# Backward costs about twice the forward pass (Kaplan et al. 2020, sec. 2.1).
TRAINING_FLOPS_FACTOR = 3
# A parameter tensor this large (4 MiB in fp32) is recorded by size (ParameterBreakdown.large_tensors),
# a floor well under the sizes whose optimizer temporaries were measured faulting afresh (12 MB,
# devicefit.predict.operator_roofline.REFAULT_FROM_BYTES) that keeps the record short.
LARGE_TENSOR_ELEMENTS = 1 << 20


def is_linear_like(module) -> bool:
    """nn.Linear, or transformers' Conv1D (GPT-2's linear layer with a transposed weight),
    which the torch backend converts to nn.Linear before int8 quantization."""
    import torch.nn as nn

    return isinstance(module, nn.Linear) or type(module).__name__ == "Conv1D"


@dataclass(frozen=True)
class ParameterBreakdown:
    total: int
    linear: int  # in linear layers: what dynamic int8 quantization converts
    embedding: int
    other: int
    leaf_modules: int = 0  # modules run per forward pass; each costs dispatch overhead whatever its size
    gathered: int = 0  # of `embedding`, the decoder's tables no linear layer shares (gathered_embedding_params)
    # An encoder-decoder's encoder (parameters under an `encoder.` module; 0 for other models):
    # a decode step runs the rest (predict.generation.decoder_share), which is then read from the
    # cache with these counts instead of building the model on meta in every process (T5: 3 s).
    encoder: int = 0
    # The elements of each parameter tensor of at least LARGE_TENSOR_ELEMENTS, largest first (tied
    # tensors once): the allocations whose optimizer temporaries page-fault afresh at every
    # training step (devicefit.predict.operator_roofline's refault term).
    large_tensors: tuple[int, ...] = ()

    @property
    def linear_fraction(self) -> float:
        return self.linear / self.total if self.total else 0.0


def _spec_key(spec: ModelSpec) -> tuple:
    """What the counts depend on: the model and its config (two configs of one name, as a catalog
    entry edited in a long-lived process, are two models)."""
    return (spec.name, spec.source, str(spec.path), spec.architecture, repr(sorted(spec.config.items())) if spec.config else "")


_breakdowns: dict[tuple, ParameterBreakdown] = {}


def _count_parameters(spec: ModelSpec) -> ParameterBreakdown:
    import torch.nn as nn

    model = meta_model(spec)
    seen: set[int] = set()
    linear = embedding = leaves = 0
    for module in model.modules():
        leaves += not any(True for _ in module.children())
        for p in module.parameters(recurse=False):
            if id(p) in seen:
                continue
            seen.add(id(p))
            if is_linear_like(module):
                linear += p.numel()
            elif type(module).__name__ == "Embedding":
                embedding += p.numel()
    total = sum(p.numel() for p in model.parameters())
    shared = {id(p) for m in model.modules() if is_linear_like(m) for p in m.parameters(recurse=False)}
    encoder_decoder = bool(spec.config.get("is_encoder_decoder"))
    gathered = {id(p): p.numel() for name, m in model.named_modules() if isinstance(m, nn.Embedding)
                and not (encoder_decoder and ".encoder." in f".{name}.")
                for p in m.parameters(recurse=False) if id(p) not in shared}
    encoder = sum(p.numel() for name, p in model.named_parameters() if ".encoder." in f".{name}") if encoder_decoder else 0
    large = tuple(sorted((p.numel() for p in model.parameters() if p.numel() >= LARGE_TENSOR_ELEMENTS), reverse=True))
    return ParameterBreakdown(total, linear, embedding, total - linear - embedding, leaves, sum(gathered.values()), encoder, large)


def _integers(cls, document: Any):
    """A dataclass of integer fields (and tuples of integers) back from its JSON (derived_cache's
    decode): each field as its type says, a list only where the field is a tuple."""
    if not isinstance(document, dict) or set(document) != {f.name for f in fields(cls)}:
        raise ValueError(f"not a {cls.__name__}")
    tuples = {f.name for f in fields(cls) if str(f.type).startswith("tuple")}

    def decoded(name: str, v: Any) -> int | tuple[int, ...]:
        if name not in tuples:
            return integer(v)
        if not isinstance(v, list):
            raise ValueError(f"{name}: not a list of integers: {v!r}")
        return tuple(integer(x) for x in v)
    return cls(**{k: decoded(k, v) for k, v in document.items()})


def parameter_breakdown(spec: ModelSpec) -> ParameterBreakdown:
    key = _spec_key(spec)
    if key not in _breakdowns:
        _breakdowns[key] = disk_cached("parameters", asdict(spec), lambda: _count_parameters(spec), encode=asdict,
                                       decode=lambda d: _integers(ParameterBreakdown, d))
    return _breakdowns[key]


def parameter_count(spec: ModelSpec) -> int:
    return parameter_breakdown(spec).total


@dataclass(frozen=True)
class Experts:
    """A mixture of experts' routing: E experts per layer, k of them per token, and the
    parameters of every routed expert in every layer (shared experts are not routed)."""

    experts: int
    per_token: int
    params: int
    layers: int  # the layers that route to experts
    decoder_params: int  # of them, the decoder's (all of them in a decoder-only model)
    decoder_layers: int
    # Its experts run through transformers' experts interface (`use_experts_implementation`),
    # whose grouped_mm generate() swaps for batched_mm on every device but the CPU. A model with
    # an expert loop of its own (Switch, NLLB-MoE) decodes as it is everywhere.
    interface: bool


_experts: dict[tuple, Experts | None] = {}


def experts_of(spec: ModelSpec) -> Experts | None:
    """The model's routed experts, or None for a dense model."""
    from models.loading import is_mixture_of_experts

    config = spec.config
    if not is_mixture_of_experts(config):
        return None
    key = _spec_key(spec)
    if key not in _experts:  # on disk too: counting builds the model on meta (transformers' import, seconds)
        _experts[key] = disk_cached("experts", asdict(spec), lambda: _count_experts(spec), encode=asdict, decode=_experts_from)
    return _experts[key]


def _count_experts(spec: ModelSpec) -> Experts:
    config = spec.config
    experts = next(int(config[k]) for k in ("num_local_experts", "num_experts", "n_routed_experts") if config.get(k))
    per_token = int(config.get("num_experts_per_tok") or config.get("top_k") or experts)
    model = meta_model(spec)
    routed = [(f".{name}", p.numel()) for name, p in model.named_parameters() if ".experts." in f".{name}"]
    decoder = [(name, n) for name, n in routed if not config.get("is_encoder_decoder") or ".encoder." not in name]
    # transformers' experts interface marks its experts modules (integrations/moe.py)
    interface = any(hasattr(m, "_is_expert_parallel") and hasattr(m, "is_concatenated") for m in model.modules())
    return Experts(experts, per_token, sum(n for _, n in routed), len({n.split(".experts.")[0] for n, _ in routed}),
                   sum(n for _, n in decoder), len({n.split(".experts.")[0] for n, _ in decoder}), interface)


def _experts_from(document: Any) -> Experts:
    """An Experts back from its JSON (derived_cache's decode): integers, and a bool for `interface`,
    that a count could have given (an edited `experts: 0` would divide by zero downstream)."""
    if not isinstance(document, dict) or set(document) != {f.name for f in fields(Experts)} or not isinstance(document["interface"], bool):
        raise ValueError("not an Experts")
    moe = Experts(**{k: v if k == "interface" else integer(v) for k, v in document.items()})
    if not (1 <= moe.per_token <= moe.experts and moe.decoder_params <= moe.params and moe.decoder_layers <= moe.layers):
        raise ValueError(f"not the routing of a mixture of experts: {moe}")
    return moe


def routed_expert_bytes(spec: ModelSpec, precision: str) -> float:
    """Bytes of one routed expert of one layer at `precision`; 0 for a dense model (or a mixture
    whose experts are not named `experts`, which nothing here can count)."""
    moe = experts_of(spec)
    if moe is None or not moe.layers:
        return 0.0
    return float(weight_bytes(spec, precision)) * moe.params / max(parameter_count(spec), 1) / (moe.experts * moe.layers)


def expert_copy_bytes(spec: ModelSpec, batch: int, precision: str) -> float:
    """One layer's copies of the expert of every (token, expert) pair, batch x k experts: what
    transformers' batched_mm holds in a decode step, for a model on its experts interface
    (`Experts.interface`); 0 otherwise. Whether generate() batches on a device is the caller's."""
    moe = experts_of(spec)
    return batch * moe.per_token * routed_expert_bytes(spec, precision) if moe and moe.interface else 0.0


def gathered_embedding_params(spec: ModelSpec) -> int:
    """Parameters of the decoder's embedding tables that a decode step gathers rows from rather
    than reads: token and position embeddings not tied to a linear layer (an untied table, as
    Llama's, Mistral's and Mixtral's `embed_tokens`, or GPT-2's `wpe`). A step reads `batch` rows
    of them, not the table; a table tied to the output head (GPT-2's `wte`, Qwen2.5-0.5B's, T5's
    `shared`) is read whole by the head and is not counted here. An encoder-decoder's encoder
    tables are left out: its encoder ran in the prefill. Counted in `parameter_breakdown`'s walk."""
    return parameter_breakdown(spec).gathered


def active_parameter_count(spec: ModelSpec) -> int:
    """Parameters one token uses. A mixture of experts holds every expert in memory (the total
    counts for memory) but routes each token through `num_experts_per_tok` of them, so its
    expert parameters count k/E times: Mixtral-8x7B, 46.7B in total, 12.9B active. Any other
    model: the total."""
    total = parameter_count(spec)
    moe = experts_of(spec)
    return total if moe is None else total - round(moe.params * (1 - moe.per_token / moe.experts))


def weight_bytes(spec: ModelSpec, precision: str) -> int:
    """Bytes of weights at `precision`. int8 means torch dynamic quantization: nn.Linear
    weights become int8 and everything else stays fp32, which this counts as such."""
    if precision not in PRECISION_BYTES:
        raise ValueError(f"unknown precision '{precision}'; known: {', '.join(PRECISION_BYTES)}")
    b = parameter_breakdown(spec)
    if precision == "int8":
        return b.linear + 4 * (b.total - b.linear)
    return PRECISION_BYTES[precision] * b.total


@dataclass(frozen=True)
class FlopCount:
    total: int
    linear: int  # inside linear layers (nn.Linear, Conv1D): the part int8 dynamic quantization speeds up
    dense_conv: int = 0  # convolutions with groups == 1
    grouped_conv: int = 0  # grouped / depthwise convolutions, which run far below a device's peak

    @property
    def linear_fraction(self) -> float:
        return self.linear / self.total if self.total else 0.0

    @property
    def dense_conv_fraction(self) -> float:
        return self.dense_conv / self.total if self.total else 0.0

    @property
    def grouped_conv_fraction(self) -> float:
        return self.grouped_conv / self.total if self.total else 0.0


def forward_flops(spec: ModelSpec, signature: InputSignature) -> FlopCount:
    """FLOPs of one forward pass over the whole batch of `signature` (2 per multiply-add)."""
    return disk_cached("flops", {"spec": asdict(spec), "inputs": asdict(signature)}, lambda: _count_flops(spec, signature),
                       encode=asdict, decode=lambda d: _integers(FlopCount, d))


def _count_flops(spec: ModelSpec, signature: InputSignature) -> FlopCount:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    model = meta_model(spec).eval()
    # transformers' "padding without a mask?" warning reads token values, which meta tensors
    # do not have; it is skipped when no pad token is configured, and it costs no FLOPs.
    model.config.pad_token_id = None
    inputs: dict[str, Any] = {}
    for name, t in signature.inputs.items():
        if t.kind == "mask":
            # All-ones masks are skipped by transformers' attention, and a meta tensor cannot
            # answer its data-dependent "is it all ones?" check; FLOPs are the same without.
            continue
        dtype = torch.float32 if t.kind == "float" else torch.long
        inputs[name] = torch.zeros(t.shape, dtype=dtype, device="meta")
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad(), local_forward(spec):
        model(**inputs)
    # Counts are per module path; a leaf linear layer's count holds only its own matmul.
    root = type(model).__name__
    kinds: dict[str, str] = {}
    for name, m in model.named_modules():
        if is_linear_like(m):
            kinds[f"{root}.{name}"] = "linear"
        elif isinstance(m, (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)):
            kinds[f"{root}.{name}"] = "grouped_conv" if m.groups > 1 else "dense_conv"
    sums = {"linear": 0, "dense_conv": 0, "grouped_conv": 0}
    for path, ops in counter.get_flop_counts().items():
        if path in kinds:
            sums[kinds[path]] += sum(ops.values())
    return FlopCount(int(counter.get_total_flops()), int(sums["linear"]), int(sums["dense_conv"]), int(sums["grouped_conv"]))


_flops: dict[tuple, FlopCount] = {}


def flop_count_per_sample(spec: ModelSpec, seq_length: int | None = None, image_size: int | None = None,
                          audio_seconds: float | None = None) -> FlopCount:
    """Forward FLOPs for one sample (batch 1); batched cost scales linearly."""
    key = (*_spec_key(spec), seq_length, image_size, audio_seconds)
    if key not in _flops:
        _flops[key] = forward_flops(spec, input_signature(spec, 1, seq_length, image_size, audio_seconds))
    return _flops[key]


def flops_per_sample(spec: ModelSpec, seq_length: int | None = None, image_size: int | None = None,
                     audio_seconds: float | None = None) -> int:
    return flop_count_per_sample(spec, seq_length, image_size, audio_seconds).total


@dataclass(frozen=True)
class ModelFacts:
    name: str
    parameters: int
    linear_parameters: int
    embedding_parameters: int
    forward_flops_per_sample: int
    linear_flops_fraction: float
    training_flops_per_sample: int
    weight_bytes: dict[str, int]
    input: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def model_facts(spec: ModelSpec, seq_length: int | None = None, image_size: int | None = None,
                audio_seconds: float | None = None) -> ModelFacts:
    b = parameter_breakdown(spec)
    flops = flop_count_per_sample(spec, seq_length, image_size, audio_seconds)
    fwd = flops.total
    return ModelFacts(
        name=spec.name,
        parameters=b.total,
        linear_parameters=b.linear,
        embedding_parameters=b.embedding,
        forward_flops_per_sample=fwd,
        linear_flops_fraction=round(flops.linear_fraction, 4),
        training_flops_per_sample=TRAINING_FLOPS_FACTOR * fwd,
        weight_bytes={p: weight_bytes(spec, p) for p in PRECISION_BYTES},
        input=input_signature(spec, 1, seq_length, image_size, audio_seconds).describe(),
    )
