import pytest

from models.analysis import flop_count_per_sample, flops_per_sample, gathered_embedding_params, model_facts, parameter_breakdown, weight_bytes
from models.inputs import input_signature
from models.resolve import resolve_model


def test_flops_follow_the_graph_and_scale_with_sequence_length():
    gpt2 = resolve_model("gpt2")
    f64, f128 = flops_per_sample(gpt2, 64), flops_per_sample(gpt2, 128)
    params = parameter_breakdown(gpt2)
    # At least 2 FLOPs per non-embedding parameter per token (the matmuls), plus attention.
    assert f128 >= 2 * (params.total - params.embedding) * 128
    assert 1.9 < f128 / f64 < 2.2  # linear terms dominate; attention adds a little


def test_vision_flops_match_the_published_figure():
    # ViT-B/16 at 224px: 17.6 GMACs (Dosovitskiy et al. 2021) = 35.1 GFLOPs
    assert abs(flops_per_sample(resolve_model("vit-base-patch16-224")) - 35.1e9) / 35.1e9 < 0.02


def test_linear_flop_share_exposes_convolution_models():
    assert flop_count_per_sample(resolve_model("resnet-50")).linear_fraction < 0.05
    assert flop_count_per_sample(resolve_model("bert-base-uncased")).linear_fraction > 0.9
    assert flop_count_per_sample(resolve_model("gpt2")).linear_fraction > 0.9  # Conv1D counts as linear


def test_weight_bytes_per_precision():
    spec = resolve_model("bert-base-uncased")
    b = parameter_breakdown(spec)
    assert weight_bytes(spec, "fp32") == 4 * b.total
    assert weight_bytes(spec, "fp16") == weight_bytes(spec, "bf16") == 2 * b.total
    assert weight_bytes(spec, "int8") == b.linear + 4 * (b.total - b.linear)
    with pytest.raises(ValueError, match="unknown precision 'fp4'"):
        weight_bytes(spec, "fp4")


def test_model_facts_bundle():
    facts = model_facts(resolve_model("whisper-tiny"))
    assert facts.training_flops_per_sample == 3 * facts.forward_flops_per_sample
    assert facts.input["shapes"]["input_features"] == [1, 80, 3000]


def test_batch_size_zero_is_rejected():
    with pytest.raises(ValueError, match="batch size must be a positive integer, got 0"):
        input_signature(resolve_model("bert-tiny"), 0)


def test_sequence_longer_than_the_model_allows_is_rejected():
    with pytest.raises(ValueError, match="at most 512 tokens"):
        input_signature(resolve_model("bert-base-uncased"), 1, seq_length=1024)


def test_default_sequence_is_capped_at_the_model_limit():
    sig = input_signature(resolve_model("clip-vit-base-patch32"), 2)
    assert sig.inputs["input_ids"].shape == (2, 77)
    assert sig.inputs["pixel_values"].shape == (2, 3, 224, 224)


def test_every_modality_has_valid_inputs(tiny_models):
    for modality, directory in tiny_models.items():
        sig = input_signature(resolve_model(str(directory)), 3)
        assert sig.batch_size == 3
        for t in sig.inputs.values():
            assert t.shape[0] == 3
            if t.kind == "token_ids":
                assert t.high == 1000


def test_a_decode_step_gathers_rows_of_untied_embedding_tables_and_reads_a_tied_one_whole():
    """A 4-layer Mixtral config (untied): its 32000 x 1024 `embed_tokens` is only gathered, its
    `lm_head` read. GPT-2 ties `wte` to its head, so only `wpe` (1024 x 768) is gathered;
    Qwen2.5-0.5B ties its one table; T5's decoder gathers its 32 x 8 relative-position bias, and
    its encoder's tables (run in the prefill) are not the decoder's."""
    assert gathered_embedding_params(resolve_model("benchmarks/configs/mixtral-small-4layers.json")) == 32000 * 1024
    assert gathered_embedding_params(resolve_model("gpt2")) == 1024 * 768
    assert gathered_embedding_params(resolve_model("qwen2.5-0.5b")) == 0
    assert gathered_embedding_params(resolve_model("t5-small")) == 32 * 8
