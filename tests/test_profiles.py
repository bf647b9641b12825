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
