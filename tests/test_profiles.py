"""What the quick profile measures per partition."""
from devicefit.profiles import QUICK, Selection, partition_configs


def test_quick_measures_two_text_models_again_at_a_long_sequence():
    configs = partition_configs("gpt2", "cpu", Selection(), cpu_isa=[])
    long = [c for c in configs if c.seq_length == QUICK.long_sequence_length]
    assert sorted((c.precision, c.batch_size) for c in long) == [("fp32", 1), ("fp32", 4), ("int8", 1), ("int8", 4)]
    assert len({c.key() for c in configs}) == len(configs)  # the long rows are distinct configs
    assert not any(c.seq_length for c in partition_configs("bert-tiny", "cpu", Selection(), cpu_isa=[]) if c.mode == "inference")
    # An explicit batch-size selection measures exactly what it names.
    assert not any(c.seq_length for c in partition_configs("gpt2", "cpu", Selection(batch_sizes=(2,)), cpu_isa=[]))


def test_quick_covers_every_family_with_two_models_per_vision_regime():
    from models.classifier import classify_spec
    from models.resolve import resolve_model

    families = {classify_spec(resolve_model(m)).family for m in QUICK.models}
    assert families == {"embedding", "text_generation", "vision", "audio", "multimodal"}
    assert {"resnet-18", "resnet-50", "mobilenet-v2", "efficientnet-b0"} <= set(QUICK.models)


def test_quick_measures_gpt2_and_t5_in_the_generation_scenario_where_the_backend_generates():
    generation = [c for c in partition_configs("gpt2", "cpu", Selection(), cpu_isa=[]) if c.mode == "generation"]
    assert [(c.precision, c.batch_size, c.seq_length, c.new_tokens) for c in generation] == [("fp32", 1, None, None)]
    assert any(c.mode == "generation" for c in partition_configs("t5-small", "cpu", Selection(), cpu_isa=[]))
    assert not any(c.mode == "generation" for c in partition_configs("bert-tiny", "cpu", Selection(), cpu_isa=[]))
    # OpenVINO generates through openvino-genai (decoder-only; t5-small's row is skipped, saying why)
    assert [c.backend for c in partition_configs("gpt2", "openvino", Selection()) if c.mode == "generation"] == ["openvino"]
    assert not any(c.mode == "generation" for c in partition_configs("gpt2", "cpu", Selection(generation_mode=False), cpu_isa=[]))
    # True: every model that generates, never one that cannot.
    assert any(c.mode == "generation" for c in partition_configs("whisper-tiny", "cpu", Selection(generation_mode=True), cpu_isa=[]))
    assert not any(c.mode == "generation" for c in partition_configs("resnet-18", "cpu", Selection(generation_mode=True), cpu_isa=[]))


def test_a_generation_request_gets_the_generation_policy_and_the_rest_the_profile_policy():
    """The quick profile times forward passes under a 1.5 s cap and generation requests under 2 s
    (a gpt2 request takes 2.7 s on a 2-core EPYC: under 1.5 s it would stop at one)."""
    configs = partition_configs("gpt2", "cpu", Selection(), cpu_isa=[])
    assert {c.policy for c in configs if c.mode == "generation"} == {QUICK.generation_policy}
    assert {c.policy for c in configs if c.mode != "generation"} == {QUICK.policy}
    assert QUICK.generation_policy.max_time_s > QUICK.policy.max_time_s
