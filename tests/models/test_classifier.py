import pytest

from models.classifier import classify, classify_model


@pytest.mark.parametrize("name,family,subfamily", [
    ("bert-base-uncased", "embedding", "masked_lm"),
    ("all-MiniLM-L6-v2", "embedding", "sentence_embedding"),
    ("gpt2", "text_generation", "causal_lm"),
    ("qwen2.5-0.5b", "text_generation", "causal_lm"),
    ("t5-small", "text_generation", "seq2seq"),
    ("vit-base-patch16-224", "vision", "image_classifier"),
    ("resnet-50", "vision", "image_classifier"),
    ("whisper-tiny", "audio", "speech_recognition"),
    ("wav2vec2-base", "audio", "speech_encoder"),
    ("clip-vit-base-patch32", "multimodal", "vision_language"),
])
def test_catalog_models_classify_from_their_configs(name, family, subfamily):
    result = classify_model(name)
    assert (result.family, result.subfamily) == (family, subfamily)
    assert result.confidence >= 0.9
    assert any(e.source == "model_type" for e in result.evidence)


def test_llava_config_is_multimodal_generation_even_though_it_contains_a_llama():
    config = {"model_type": "llava", "architectures": ["LlavaForConditionalGeneration"],
              "vision_config": {"model_type": "clip_vision_model"}, "text_config": {"model_type": "llama"},
              "image_token_index": 32000}
    result = classify("llava-hf/llava-1.5-7b-hf", config)
    assert result.family == "multimodal"
    assert result.subfamily == "vision_language_generation"


def test_config_evidence_outweighs_a_misleading_name():
    config = {"model_type": "whisper", "architectures": ["WhisperForConditionalGeneration"],
              "num_mel_bins": 80, "is_encoder_decoder": True}
    result = classify("bert-style-finetune", config)
    assert result.family == "audio"
    assert result.scores["embedding"] > 0  # the name was heard, and outvoted


def test_name_alone_gives_a_family_with_low_confidence():
    result = classify("my-whisper-finetune")
    assert result.family == "audio"
    assert result.confidence < 0.5
    assert [e.source for e in result.evidence] == ["name"]


def test_no_evidence_gives_no_family():
    result = classify("zzqx")
    assert result.family is None
    assert result.confidence == 0.0


def test_tasks_are_evidence():
    result = classify("some-model", tasks=["automatic-speech-recognition"])
    assert result.family == "audio"


def test_real_weights_local_model_classifies_as_embedding(minilm_dir):
    result = classify_model(str(minilm_dir))
    assert result.family == "embedding"
    assert result.subfamily == "sentence_embedding"
