"""Distributed training configuration from memory arithmetic.

Model states, per the ZeRO paper (Rajbhandari et al., 2020, section 3.1): Adam keeps 16 bytes
per parameter Ψ whichever precision is used, split differently:
  - mixed precision (fp16/bf16 compute): weights 2Ψ, gradients 2Ψ, optimizer 12Ψ (fp32 master
    weights, momentum and variance);
  - fp32: weights 4Ψ, gradients 4Ψ, optimizer 8Ψ (momentum and variance).
With an 8-bit optimizer (bitsandbytes) momentum and variance take 1 byte each: mixed 6Ψ, fp32 2Ψ.
Data-parallel degree N divides, once, what a strategy shards:
  DDP nothing; ZeRO-1 the optimizer; ZeRO-2 optimizer and gradients; ZeRO-3 / FSDP FULL_SHARD
  everything (plus one gathered layer). CPU offload (ZeRO-Offload) moves the optimizer to host
  memory.

Activations per transformer layer, per Korthikanti et al. (2022), eq. 1, for 16-bit activations
and no tensor/sequence parallelism: s·b·h·(34 + 5·a·s/h) bytes (s sequence, b micro-batch,
h hidden, a heads); fp32 doubles it. Full activation checkpointing keeps 2·s·b·h per layer (the
layer input) plus one layer's activations while it is recomputed. The output layer adds the
logits, kept in fp32 for the loss: 4·s·b·v. Models that are not transformer stacks (no
hidden/heads/layers in their config) use the training activations traced on the meta device
(`models.op_profile`), which are fp32.

Every figure is per GPU unless named total; total = per GPU x GPU count, nothing divided twice.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from benchmark_runners.records import MAX_ASKED_BATCH_SIZE
from devicefit.errors import DevicefitError
from devicefit.select.config import finite, shown
from models.catalog import ModelSpec

MAX_GPU_COUNT = 1024  # a data-parallel group the planner answers for; the API's GpuCount uses it too

GB = 1e9
CUDA_CONTEXT_GB = 0.5  # CUDA context, cuBLAS/cuDNN workspaces: held on every GPU before any tensor
ADAM_BYTES = {  # per parameter: (weights, gradients, optimizer states)
    ("mixed", False): (2, 2, 12),
    ("fp32", False): (4, 4, 8),
    ("mixed", True): (2, 2, 6),  # 8-bit Adam: fp32 master 4 + two 1-byte moments
    ("fp32", True): (4, 4, 2),
}
# Cheapest first: ZeRO-1/2 communicate as much as DDP (ZeRO paper, section 7); ZeRO-3 1.5x.
STRATEGIES = (("DDP", 0), ("DeepSpeed ZeRO-1", 1), ("DeepSpeed ZeRO-2", 2), ("FSDP", 3))
EQUIVALENTS = {0: "torch DistributedDataParallel", 1: "ZeRO stage 1 (optimizer states sharded)",
               2: "ZeRO stage 2 = FSDP SHARD_GRAD_OP", 3: "ZeRO stage 3 = FSDP FULL_SHARD"}


class DistributedConfigError(DevicefitError, ValueError):
    """A request that cannot describe a training run (no GPUs, batch 0, ...)."""


@dataclass(frozen=True)
class TransformerShape:
    layers: int
    hidden: int
    heads: int
    vocab: int
    largest_layer_parameters: int


def transformer_shape(spec: ModelSpec, parameters: int) -> TransformerShape | None:
    """Layers, hidden size, heads and vocabulary from the config; None when the model is not a
    transformer stack. Encoder-decoders count encoder and decoder layers."""
    cfg = spec.build_config()
    text = getattr(cfg, "text_config", None) if not hasattr(cfg, "num_hidden_layers") else None
    cfg = text or cfg
    try:
        layers, hidden, heads = int(cfg.num_hidden_layers), int(cfg.hidden_size), int(cfg.num_attention_heads)
    except (AttributeError, TypeError):
        return None
    layers += int(getattr(cfg, "num_decoder_layers", 0) or 0) if getattr(cfg, "is_encoder_decoder", False) else 0
    vocab = int(getattr(cfg, "vocab_size", 0) or 0)
    return TransformerShape(layers, hidden, heads, vocab, min(parameters, largest_layer_parameters(spec, hidden)))


def largest_layer_parameters(spec: ModelSpec, hidden: int) -> int:
    """Parameters of the model's largest repeated block (the largest element of any ModuleList
    on the meta device: a decoder layer, a Mixtral layer with all its experts), which FSDP
    gathers whole; ~12h^2 (4h^2 attention, 8h^2 MLP at 4x width) when no block can be found."""
    import torch

    from models.loading import meta_model

    try:
        model = meta_model(spec)
    except Exception:  # noqa: BLE001 - the estimate stands without the exact figure
        return 12 * hidden * hidden
    sizes = [sum(p.numel() for p in block.parameters()) for m in model.modules() if isinstance(m, torch.nn.ModuleList)
             for block in m]
    return max(sizes) if sizes else 12 * hidden * hidden


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes on each GPU, by component."""

    parameters: float
    gradients: float
    optimizer: float
    activations: float
    gathered_layer: float
    cuda_context: float

    @property
    def per_gpu(self) -> float:
        return self.parameters + self.gradients + self.optimizer + self.activations + self.gathered_layer + self.cuda_context


@dataclass
class DistributedPlan:
    model_name: str
    model_family: str
    parameters: int
    gpu_count: int
    batch_size: int  # per GPU, as requested
    sequence_length: int
    max_memory_gb: float | None
    mixed_precision: bool
    distributed_strategy: str = ""
    zero_stage: int = 0
    micro_batch_size: int = 0
    gradient_accumulation_steps: int = 1
    activation_checkpointing: bool = False
    cpu_offload: bool = False
    eight_bit_optimizer: bool = False
    fits: bool = False
    estimate: MemoryEstimate | None = None
    activation_method: str = ""
    notes: list[str] = field(default_factory=list)

    def to_response(self) -> dict[str, Any]:
        """Spec 000's /training/distributed response, plus how it was decided."""
        e = self.estimate
        memory = None
        if e is not None:
            memory = {
                "parameters_gb": e.parameters / GB, "gradients_gb": e.gradients / GB, "optimizer_gb": e.optimizer / GB,
                "activations_gb": e.activations / GB, "gathered_layer_gb": e.gathered_layer / GB,
                "cuda_context_gb": e.cuda_context / GB, "per_gpu_gb": e.per_gpu / GB, "total_gb": e.per_gpu * self.gpu_count / GB,
                "basis": "per GPU; total = per_gpu_gb x gpu_count",
            }
        return {
            "model_family": self.model_family, "model_name": self.model_name, "parameters": self.parameters,
            "distributed_strategy": self.distributed_strategy, "zero_stage": self.zero_stage,
            "equivalent": EQUIVALENTS.get(self.zero_stage), "gpu_count": self.gpu_count,
            "per_gpu_batch_size": self.batch_size, "micro_batch_size": self.micro_batch_size,
            "global_batch_size": self.batch_size * self.gpu_count, "sequence_length": self.sequence_length,
            "mixed_precision": self.mixed_precision, "gradient_accumulation_steps": self.gradient_accumulation_steps,
            "activation_checkpointing": self.activation_checkpointing,
            # The API guide's name for the same switch (its example tests config["gradient_checkpointing"]);
            # Hugging Face calls it gradient checkpointing too.
            "gradient_checkpointing": self.activation_checkpointing, "cpu_offload": self.cpu_offload,
            "eight_bit_optimizer": self.eight_bit_optimizer, "max_memory_gb": self.max_memory_gb, "fits": self.fits,
            "estimated_memory": memory, "activation_method": self.activation_method, "notes": self.notes,
        }


def activation_bytes(spec: ModelSpec, shape: TransformerShape | None, micro_batch: int, seq: int, mixed: bool,
                     checkpointing: bool) -> tuple[float, str]:
    if shape is None:
        from models.op_profile import training_peak_activation_bytes

        first, per_sample = training_peak_activation_bytes(spec)
        traced = (first + per_sample * (micro_batch - 1)) * (0.5 if mixed else 1.0)
        return traced, "traced on the meta device (not a transformer stack)"
    s, b, h, a, L = seq, micro_batch, shape.hidden, shape.heads, shape.layers
    scale = 1.0 if mixed else 2.0
    per_layer = s * b * h * (34 + 5 * a * s / h) * scale
    logits = 4.0 * s * b * shape.vocab
    if checkpointing:
        return L * 2 * s * b * h * scale + per_layer + logits, "Korthikanti et al. 2022, full checkpointing: 2sbh per layer + one layer"
    return L * per_layer + logits, "Korthikanti et al. 2022: sbh(34 + 5as/h) per layer + 4sbv logits"


def estimate(spec: ModelSpec, parameters: int, shape: TransformerShape | None, gpus: int, micro_batch: int, seq: int,
             mixed: bool, stage: int, checkpointing: bool, offload: bool, eight_bit: bool) -> tuple[MemoryEstimate, str]:
    w, g, o = (parameters * x for x in ADAM_BYTES[("mixed" if mixed else "fp32", eight_bit)])
    if stage >= 1:
        o /= gpus
    if stage >= 2:
        g /= gpus
    gathered = 0.0
    if stage >= 3:
        w /= gpus
        if shape is not None:  # ZeRO-3 gathers one layer's full weights at a time
            gathered = shape.largest_layer_parameters * (2 if mixed else 4)
    if offload:
        o = 0.0
    act, method = activation_bytes(spec, shape, micro_batch, seq, mixed, checkpointing)
    return MemoryEstimate(w, g, o, act, gathered, CUDA_CONTEXT_GB * GB), method


def plan_distributed_training(spec: ModelSpec, gpu_count: int, batch_size: int, max_memory_gb: float | None = None,
                              sequence_length: int | None = None, mixed_precision: bool = True) -> DistributedPlan:
    """The cheapest configuration whose per-GPU memory fits `max_memory_gb`: strategies from DDP
    to FSDP first, then gradient accumulation (smaller micro-batches, same global batch), then
    activation checkpointing, CPU offload of the optimizer, and an 8-bit optimizer."""
    from models.analysis import parameter_count
    from models.classifier import classify_spec
    from models.inputs import input_signature

    if gpu_count < 1:
        raise DistributedConfigError(f"gpu_count must be at least 1, got {gpu_count}")
    if gpu_count > MAX_GPU_COUNT:
        raise DistributedConfigError(f"gpu_count must be at most {MAX_GPU_COUNT} (the API's bound), got {gpu_count}")
    if batch_size < 1:
        raise DistributedConfigError(f"batch_size must be at least 1, got {batch_size}")
    if batch_size > MAX_ASKED_BATCH_SIZE:
        raise DistributedConfigError(f"batch_size must be at most {MAX_ASKED_BATCH_SIZE} per GPU (the API's bound), got {batch_size}")
    if max_memory_gb is not None and not ((cap := finite(max_memory_gb)) is not None and cap <= 4096):
        # NaN "did not fit" anything and was printed as JSON's invalid NaN; 4096 GB is the API's bound
        raise DistributedConfigError(f"max_memory_gb must be a finite number of GB up to 4096 (the API's bound), "
                                     f"got {shown(max_memory_gb)}")
    if max_memory_gb is not None and max_memory_gb <= CUDA_CONTEXT_GB:
        raise DistributedConfigError(f"max_memory_gb {max_memory_gb} leaves nothing after the {CUDA_CONTEXT_GB} GB CUDA context")
    parameters = parameter_count(spec)
    shape = transformer_shape(spec, parameters)
    seq = input_signature(spec, 1, sequence_length).dims.get("seq_length") or 0
    plan = DistributedPlan(spec.name, classify_spec(spec).family or "unknown", parameters, gpu_count, batch_size, int(seq),
                           max_memory_gb, mixed_precision)
    cap = max_memory_gb * GB if max_memory_gb is not None else float("inf")
    micro_batches = [d for d in range(batch_size, 0, -1) if batch_size % d == 0]
    ladder = [(False, False, False), (True, False, False), (True, True, False), (True, True, True)]  # ckpt, offload, 8-bit
    strategies = STRATEGIES if gpu_count > 1 else (("single GPU", 0),)  # sharding over one GPU shards nothing
    # Within a rung of the ladder, a full micro-batch under any strategy beats accumulation.
    candidates = [(name, stage, micro, ckpt, offload, eight_bit) for ckpt, offload, eight_bit in ladder
                  for micro in micro_batches for name, stage in strategies]
    for name, stage, micro, ckpt, offload, eight_bit in candidates:
        est, method = estimate(spec, parameters, shape, gpu_count, micro, seq, mixed_precision, stage, ckpt, offload, eight_bit)
        if est.per_gpu <= cap:
            plan.distributed_strategy, plan.zero_stage = name, stage
            plan.micro_batch_size, plan.gradient_accumulation_steps = micro, batch_size // micro
            plan.activation_checkpointing, plan.cpu_offload, plan.eight_bit_optimizer = ckpt, offload, eight_bit
            plan.fits, plan.estimate, plan.activation_method = True, est, method
            break
    if not plan.fits:
        stage = 3 if gpu_count > 1 else 0
        est, method = estimate(spec, parameters, shape, gpu_count, 1, seq, mixed_precision, stage, True, True, True)
        plan.distributed_strategy, plan.zero_stage = ("FSDP" if gpu_count > 1 else "single GPU"), stage
        plan.micro_batch_size, plan.gradient_accumulation_steps = 1, batch_size
        plan.activation_checkpointing = plan.cpu_offload = plan.eight_bit_optimizer = True
        plan.estimate, plan.activation_method = est, method
        plan.notes.append(f"does not fit: even fully sharded over {gpu_count} GPUs with micro-batch 1, checkpointing, CPU offload "
                          f"and an 8-bit optimizer each GPU needs {est.per_gpu / GB:.1f} GB > {max_memory_gb} GB; "
                          "add GPUs, shorten the sequence, or use tensor/pipeline parallelism")
    w, g, o = ADAM_BYTES[("mixed" if mixed_precision else "fp32", plan.eight_bit_optimizer)]
    plan.notes.insert(0, f"{'mixed-precision' if mixed_precision else 'fp32'} Adam{' (8-bit moments)' if plan.eight_bit_optimizer else ''}: "
                         f"{w} (weights) + {g} (gradients) + {o} (optimizer) = {w + g + o} bytes/parameter before sharding "
                         "(ZeRO paper: 16 for Adam in mixed precision or fp32)")
    return plan
