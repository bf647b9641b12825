"""What the quick profile measures per partition."""
from dataclasses import replace

import pytest

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


def test_a_named_timing_gives_the_policy_of_what_it_names():
    """`devicefit benchmark --timing quick` times as make run does, generation requests by the
    quick profile's own cap; precise is the harness's default; a CI target or cap the user gives
    overrides either, and a bad name or value is refused with what was wrong."""
    from benchmark_runners.harness import TimingPolicy
    from devicefit.profiles import QUICK, timing_policy

    assert timing_policy("precise", "inference") == TimingPolicy()
    # the batch sizes were named: none is left to the predictors by the quick profile's call budget
    assert timing_policy("quick", "inference") == replace(QUICK.policy, call_budget_s=None)
    assert timing_policy("quick", "training") == replace(QUICK.policy, call_budget_s=None)
    assert timing_policy("quick", "generation") == QUICK.generation_policy != QUICK.policy
    tight = timing_policy("quick", "inference", ci_target=0.01, max_time_s=4.0)
    assert (tight.ci_target, tight.max_time_s, tight.warmup_max_time_s) == (0.01, 4.0, QUICK.policy.warmup_max_time_s)
    with pytest.raises(ValueError, match="--timing must be one of precise, quick, got 'fast'"):
        timing_policy("fast", "inference")
    with pytest.raises(ValueError, match="ci_target must be in"):
        timing_policy("quick", "inference", ci_target=2.0)
