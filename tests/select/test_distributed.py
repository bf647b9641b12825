"""Distributed training plans: the memory arithmetic against hand computations."""
import json

import pytest

from devicefit.select.distributed import GB, DistributedConfigError, plan_distributed_training
from models.catalog import ModelSpec
from models.resolve import resolve_model

GPT2_PARAMS = 124_439_808


def test_gpt2_on_8_gpus_of_16_gb_matches_the_hand_computation():
    plan = plan_distributed_training(resolve_model("gpt2"), gpu_count=8, batch_size=16, max_memory_gb=16, sequence_length=1024)
    # Micro-batch 16: 12 layers x 1024*16*768*(34 + 5*12*1024/768) = 17.21 GB of activations plus
    # 4*1024*16*50257 = 3.29 GB of fp32 logits: over 16 GB under any sharding. Micro-batch 8 with
    # 2 accumulation steps: activations 8.60 + 1.65 GB, model states 16 x 124.4M = 1.99 GB.
    sbh = 1024 * 8 * 768
    activations = 12 * sbh * (34 + 5 * 12 * 1024 / 768) + 4 * 1024 * 8 * 50257
    assert plan.fits and plan.distributed_strategy == "DDP"
    assert (plan.micro_batch_size, plan.gradient_accumulation_steps) == (8, 2)
    r = plan.to_response()
    m = r["estimated_memory"]
    assert m["parameters_gb"] == pytest.approx(2 * GPT2_PARAMS / GB)
    assert m["gradients_gb"] == pytest.approx(2 * GPT2_PARAMS / GB)
    assert m["optimizer_gb"] == pytest.approx(12 * GPT2_PARAMS / GB)
    assert m["activations_gb"] == pytest.approx(activations / GB)
    assert m["per_gpu_gb"] == pytest.approx((16 * GPT2_PARAMS + activations) / GB + 0.5)
    assert m["total_gb"] == pytest.approx(8 * m["per_gpu_gb"])  # per GPU x GPUs: never divided twice
    assert r["global_batch_size"] == 128 and r["per_gpu_batch_size"] == 16
    assert sum(m[k] for k in ("parameters_gb", "gradients_gb", "optimizer_gb", "activations_gb", "gathered_layer_gb",
                              "cuda_context_gb")) == pytest.approx(m["per_gpu_gb"])


def llama_7b() -> ModelSpec:
    config = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
              "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32000, "max_position_embeddings": 4096}
    return ModelSpec(name="llama-7b-class", architecture="LlamaForCausalLM", config=config, tasks=("text-generation",))


def test_a_7b_model_is_sharded_and_fits_the_cap():
    plan = plan_distributed_training(llama_7b(), gpu_count=8, batch_size=4, max_memory_gb=16, sequence_length=2048)
    assert 6.7e9 < plan.parameters < 6.8e9
    assert plan.fits and plan.zero_stage == 3 and plan.distributed_strategy == "FSDP"
    m = plan.to_response()["estimated_memory"]
    assert m["per_gpu_gb"] <= 16
    # Fully sharded: weights and gradients divided by 8 once; the optimizer offloaded to the host.
    assert m["parameters_gb"] == pytest.approx(2 * plan.parameters / 8 / GB)
    assert m["gradients_gb"] == pytest.approx(2 * plan.parameters / 8 / GB)
    assert plan.activation_checkpointing and plan.cpu_offload and m["optimizer_gb"] == 0


def test_more_memory_needs_less_machinery():
    roomy = plan_distributed_training(llama_7b(), gpu_count=8, batch_size=4, max_memory_gb=80, sequence_length=2048)
    tight = plan_distributed_training(llama_7b(), gpu_count=8, batch_size=4, max_memory_gb=16, sequence_length=2048)
    assert roomy.fits and roomy.zero_stage >= 1 and not roomy.cpu_offload
    assert roomy.estimate.per_gpu <= 80 * GB and tight.estimate.per_gpu <= 16 * GB
    assert (roomy.cpu_offload, roomy.eight_bit_optimizer) <= (tight.cpu_offload, tight.eight_bit_optimizer)


def test_what_cannot_fit_says_so():
    plan = plan_distributed_training(llama_7b(), gpu_count=1, batch_size=1, max_memory_gb=8, sequence_length=2048)
    assert not plan.fits and "does not fit" in plan.notes[-1]


@pytest.mark.parametrize("kwargs, message", [({"gpu_count": 0, "batch_size": 1}, "gpu_count"),
                                             ({"gpu_count": 2, "batch_size": 0}, "batch_size"),
                                             ({"gpu_count": 2, "batch_size": 1, "max_memory_gb": 0.1}, "max_memory_gb"),
                                             ({"gpu_count": 5000, "batch_size": 1}, "gpu_count must be at most 1024"),
                                             ({"gpu_count": 2, "batch_size": 10**9}, "batch_size must be at most 4096"),
                                             # NaN "did not fit" and both came out as JSON's invalid NaN / Infinity (fault hunt)
                                             ({"gpu_count": 8, "batch_size": 1, "max_memory_gb": float("nan")}, "max_memory_gb must be a finite"),
                                             ({"gpu_count": 8, "batch_size": 1, "max_memory_gb": float("inf")}, "max_memory_gb must be a finite"),
                                             ({"gpu_count": 8, "batch_size": 1, "max_memory_gb": 5000.0}, "up to 4096"),
                                             ({"gpu_count": 8, "batch_size": 1, "max_memory_gb": 10 ** 400}, "got an integer of 1329 bits")])
def test_bad_requests_are_refused(kwargs, message):
    with pytest.raises(DistributedConfigError, match=message):
        plan_distributed_training(resolve_model("gpt2"), **kwargs)


def test_non_transformer_models_use_traced_activations():
    plan = plan_distributed_training(resolve_model("resnet-50"), gpu_count=2, batch_size=32, max_memory_gb=16)
    assert plan.fits and "traced" in plan.activation_method and plan.estimate.activations > 0


def test_distributed_cli(tmp_path):
    from typer.testing import CliRunner

    from devicefit.cli import app

    out = CliRunner().invoke(app, ["distributed", "--model", "gpt2", "--gpu-count", "8", "--batch-size", "16",
                                   "--max-memory-gb", "16", "--seq-length", "1024", "--json"])
    assert out.exit_code == 0, out.output
    r = json.loads(out.output)
    assert {"model_family", "model_name", "distributed_strategy", "gpu_count", "per_gpu_batch_size", "global_batch_size",
            "mixed_precision", "gradient_accumulation_steps", "estimated_memory"} <= set(r)
    assert r["model_family"] == "text_generation" and r["gradient_accumulation_steps"] == 2
    out = CliRunner().invoke(app, ["distributed", "--model", "gpt2", "--gpu-count", "0"])
    assert out.exit_code == 2 and "gpu_count" in out.output


def test_llama_2_7b_on_4_gpus_of_16_gb_at_batch_8_needs_memory_optimizations():
    """The seed selector's own case, from the catalog's shipped Llama-2-7B config
    (P = 6,738,415,616; h = 4096, L = 32, a = 32 heads, V = 32000, s = 128, b = 8):
    - DDP keeps 16 bytes/parameter of mixed-precision Adam on every GPU: 16 P = 107.8 GB > 16 GB;
      even ZeRO-3 sharding over 4 GPUs leaves 16 P / 4 = 27.0 GB. So the plan needs FSDP
      (ZeRO-3) and the optimizer's 12 P = 80.9 GB offloaded to the host (ZeRO-Offload).
    - Per GPU then: weights 2P/4 = 3.369 GB, gradients 2P/4 = 3.369 GB, optimizer 0;
      activations with full checkpointing: 2sbh per layer x L = 2*128*8*4096*32 = 268,435,456
      bytes, one layer recomputed sbh(34 + 5as/h) = 4,194,304 x 39 = 163,577,856, fp32 logits
      4sbV = 131,072,000: 563,085,312 bytes; one gathered layer in bf16: 2 x (4h^2 + 3h x 11008 +
      2h) = 2 x 202,383,360 = 404,766,720 bytes; CUDA context 0.5 GB.
    - Sum: 3.369 + 3.369 + 0.563 + 0.405 + 0.5 = 8.206 GB <= 16 GB."""
    P = 6_738_415_616
    plan = plan_distributed_training(resolve_model("llama-2-7b"), gpu_count=4, batch_size=8, max_memory_gb=16, sequence_length=128)
    r = plan.to_response()
    m = r["estimated_memory"]
    assert plan.fits and r["distributed_strategy"] == "FSDP" and r["zero_stage"] == 3
    assert r["cpu_offload"] and r["activation_checkpointing"]  # the optimizations it needed, named
    assert m["parameters_gb"] == pytest.approx(2 * P / 4 / GB) and m["gradients_gb"] == pytest.approx(2 * P / 4 / GB)
    assert m["optimizer_gb"] == 0
    assert m["activations_gb"] == pytest.approx((268_435_456 + 163_577_856 + 131_072_000) / GB)
    assert m["gathered_layer_gb"] == pytest.approx(404_766_720 / GB)
    assert m["per_gpu_gb"] == pytest.approx(8.206267648) and m["per_gpu_gb"] <= 16
    assert sum(m[k] for k in ("parameters_gb", "gradients_gb", "optimizer_gb", "activations_gb", "gathered_layer_gb",
                              "cuda_context_gb")) == pytest.approx(m["per_gpu_gb"])
    assert m["total_gb"] == pytest.approx(4 * m["per_gpu_gb"])
