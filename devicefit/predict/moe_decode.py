"""What a decode step of a mixture of experts reads and holds, as generate() runs it: on a GPU
transformers swaps the experts' grouped_mm for batched_mm in the decode stage, which copies the
expert of every (token, expert) pair (benchmarks/datasets/h200-cuda/README.md); on a CPU each
expert hit is read once. Dense models read every weight, as before."""
from __future__ import annotations

from benchmark_runners import registry
from models.analysis import PRECISION_BYTES, Experts, expert_copy_bytes, experts_of, gathered_embedding_params, parameter_count, weight_bytes
from models.catalog import ModelSpec


def embedding_bytes(precision: str) -> int:
    """An embedding table's bytes per parameter: int8 is torch's dynamic quantization, which
    leaves embeddings in fp32 (models.analysis.weight_bytes)."""
    return 4 if precision == "int8" else PRECISION_BYTES[precision]


def decodes_batched_experts(moe: Experts | None, kind: str) -> bool:
    """Whether generate() decodes this mixture of experts on this kind with `batched_mm`:
    transformers (5.17 and 5.24: `GenerationMixin._optimize_model_for_decode`) swaps the
    `grouped_mm` of its experts interface for it in the decode stage on every torch device but
    the CPU. A model whose experts loop on their own (`Experts.interface` False) is not swapped."""
    known = registry.kinds().get(kind)
    return bool(moe and moe.interface and known and known.torch_device and known.torch_device != "cpu")


def expert_bytes_read(moe: Experts, batch: int, expert_bytes: float, batched: bool) -> float:
    """Bytes of expert weights one decode step moves, of `expert_bytes` for every routed expert.
    `batched` (generate() on a GPU): batched_mm gathers the whole expert of each (token, expert)
    pair, reading and writing it, then its bmm reads the copy, 3 x batch x k experts a layer
    (benchmarks/datasets/h200-cuda/README.md: Mixtral's first four layers moved 8.4 GB a step at
    batch 1 and 33.8 GB at batch 4, 2.7 and 8.3 ms of the H200's time). Otherwise (the CPU's
    grouped_mm or the per-expert loop) each expert hit is read once: E x (1 - (1 - k/E)^batch)
    of them under uniform routing (2.0 at batch 1, 5.5 at batch 4 of Mixtral's 8; the H200's
    router hit 2.0 and 5.3)."""
    per_expert = expert_bytes / moe.experts
    if batched:
        return 3.0 * batch * moe.per_token * per_expert
    return moe.experts * (1 - (1 - moe.per_token / moe.experts) ** batch) * per_expert


def batched_experts_bytes(spec: ModelSpec, batch: int, precision: str, kind: str) -> float:
    """The largest transient a decode step holds on a kind where generate() runs batched_mm: one
    layer's gathered copies of the expert of every (token, expert) pair, batch x k experts (the
    H200's reserved peak grew by about that: 12.1, 12.8, 14.7, 18.1 and 25.1 GiB at batch 1, 2,
    4, 8 and 16 for Mixtral's first four layers, 0.33 GiB an expert). 0 for a dense model or
    where the experts are not batched."""
    return expert_copy_bytes(spec, batch, precision) if decodes_batched_experts(experts_of(spec), kind) else 0.0


def experts_text(spec: ModelSpec, batch: int, kind: str) -> str:
    """How the decode roofline counted a mixture's experts, for the answer's detail ("" if dense)."""
    moe = experts_of(spec)
    if moe is None or not moe.decoder_layers:
        return ""
    if decodes_batched_experts(moe, kind):
        return (f" (the experts as generate()'s batched_mm moves them on {kind}: a copy of the expert of each of the "
                f"{batch} x {moe.per_token} (token, expert) pairs a layer: read, written, and read again)")
    hit = moe.experts * (1 - (1 - moe.per_token / moe.experts) ** batch)
    return (f" (of the {moe.experts} experts a layer, the {hit:.1f} that a batch of {batch} at {moe.per_token} experts a token "
            "hits on average, each read once)")


def expert_rows(moe: Experts, batch: int, batched: bool) -> float:
    """Rows each expert's matrix product multiplies in a decode step, where a dense layer's
    multiply `batch`: with batched_mm, one (each (token, expert) pair its own product); otherwise
    the batch's batch x k pairs over the experts they hit (1.46 at batch 4 of a top-2 of 8, 4.04
    at batch 16). A CPU's GEMMs of few rows run far from their roofline (the AMD EPYC decoded
    batch 4 at 2.4x batch 1's ratio), so the experts' part of a step is costed at the ratio of
    this many rows, not of the batch (`devicefit.predict.generation`)."""
    if batched:
        return 1.0
    return batch * moe.per_token / (moe.experts * (1 - (1 - moe.per_token / moe.experts) ** batch))


def decode_expert_part(spec: ModelSpec, batch: int, precision: str, kind: str) -> tuple[float, float]:
    """(bytes of routed decoder experts one decode step reads, the rows each of their products
    multiplies: `expert_rows`); (0, batch) for a dense model."""
    moe = experts_of(spec)
    if moe is None or not moe.decoder_layers:
        return 0.0, float(batch)
    batched = decodes_batched_experts(moe, kind)
    experts = float(weight_bytes(spec, precision)) * moe.decoder_params / max(parameter_count(spec), 1)
    return expert_bytes_read(moe, batch, experts, batched), expert_rows(moe, batch, batched)


def decode_weight_bytes(spec: ModelSpec, batch: int, precision: str, kind: str, share: float) -> float:
    """Weight bytes one decode step reads on `kind`: the decoder's `share` of the weights less the
    embedding tables it gathers a row from (`gathered_embedding_params`: 131 MB of a 4-layer
    Mixtral's 0.71 GB in fp32), with a mixture's decoder experts counted as `expert_bytes_read`
    says (an encoder-decoder's encoder ran once, in the prefill)."""
    weights = float(weight_bytes(spec, precision)) * share - gathered_embedding_params(spec) * embedding_bytes(precision)
    moe = experts_of(spec)
    if moe is None or not moe.decoder_layers:
        return weights
    experts = float(weight_bytes(spec, precision)) * moe.decoder_params / max(parameter_count(spec), 1)
    return max(weights - experts, 0.0) + decode_expert_part(spec, batch, precision, kind)[0]
