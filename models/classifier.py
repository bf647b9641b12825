"""Model family classifier: weighs evidence from the config (model_type, structure,
architectures), the tasks and the name, and says which evidence decided it.

Config evidence outweighs names: a checkpoint called "bert-finetuned-whisper-style" with a
Whisper config is audio. Names are only a weak tie-breaker for models given by name alone.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from models.catalog import FAMILIES, InvalidModelError, ModelSpec, UnknownModelError
from models.resolve import resolve_model

# Weight of each kind of evidence. Subfamily is taken from the first kind in SUBFAMILY_ORDER
# that offers one for the winning family.
WEIGHTS = {"model_type": 3.0, "structure": 2.5, "architecture": 2.0, "task": 1.0, "name": 0.5}
SUBFAMILY_ORDER = ("architecture", "structure", "task", "model_type", "name")
# Confidence is agreement (winner's share of all evidence) times strength: evidence weighing
# less than one model_type match cannot give full confidence, so a name alone stays low.
FULL_CONFIDENCE_WEIGHT = WEIGHTS["model_type"]

_MODEL_TYPES: dict[str, tuple[str, str | None]] = {}
for _types, _fam, _sub in [
    ("bert roberta distilbert albert electra deberta deberta-v2 mpnet xlm-roberta camembert "
     "ernie modernbert nomic_bert", "embedding", "text_encoder"),
    ("gpt2 gpt_neo gpt_neox gptj llama mistral mixtral qwen2 qwen3 qwen2_moe phi phi3 falcon "
     "opt bloom gemma gemma2 gemma3_text starcoder2 olmo", "text_generation", "causal_lm"),
    ("t5 mt5 umt5 bart mbart pegasus marian led longt5", "text_generation", "seq2seq"),
    ("vit deit beit convnext convnextv2 resnet mobilenet_v2 mobilenet_v1 efficientnet swin "
     "regnet dinov2 levit poolformer", "vision", "image_classifier"),
    ("detr yolos conditional_detr deformable_detr rt_detr", "vision", "object_detection"),
    ("segformer mask2former upernet", "vision", "segmentation"),
    ("whisper speech_to_text moonshine", "audio", "speech_recognition"),
    ("wav2vec2 hubert wavlm data2vec-audio unispeech", "audio", "speech_encoder"),
    ("musicgen bark encodec", "audio", "audio_generation"),
    ("clip siglip siglip2 blip align owlvit chinese_clip", "multimodal", "vision_language"),
    ("llava llava_next blip-2 idefics idefics2 paligemma qwen2_vl qwen2_5_vl mllama",
     "multimodal", "vision_language_generation"),
    ("clap", "multimodal", "audio_language"),
    ("xclip", "multimodal", "video_language"),
]:
    for _t in _types.split():
        _MODEL_TYPES[_t] = (_fam, _sub)

# (architecture-name suffix, family, subfamily); None family means "says nothing about family".
_ARCH_SUFFIXES: list[tuple[str, str | None, str | None]] = [
    ("ForCausalLM", "text_generation", "causal_lm"),
    ("LMHeadModel", "text_generation", "causal_lm"),
    ("ForMaskedLM", "embedding", "masked_lm"),
    ("ForSequenceClassification", "embedding", "text_classifier"),
    ("ForTokenClassification", "embedding", "token_classifier"),
    ("ForQuestionAnswering", "embedding", "question_answering"),
    ("ForImageClassification", "vision", "image_classifier"),
    ("ForObjectDetection", "vision", "object_detection"),
    ("ForSemanticSegmentation", "vision", "segmentation"),
    ("ForCTC", "audio", "speech_recognition"),
    ("ForSpeechSeq2Seq", "audio", "speech_recognition"),
    ("ForAudioClassification", "audio", "audio_classifier"),
]

_TASKS: dict[str, tuple[str, str | None]] = {
    "fill-mask": ("embedding", "masked_lm"),
    "sentence-similarity": ("embedding", "sentence_embedding"),
    "text-classification": ("embedding", "text_classifier"),
    "token-classification": ("embedding", "token_classifier"),
    "text-generation": ("text_generation", "causal_lm"),
    "text2text-generation": ("text_generation", "seq2seq"),
    "translation": ("text_generation", "seq2seq"),
    "summarization": ("text_generation", "seq2seq"),
    "image-classification": ("vision", "image_classifier"),
    "object-detection": ("vision", "object_detection"),
    "image-segmentation": ("vision", "segmentation"),
    "automatic-speech-recognition": ("audio", "speech_recognition"),
    "audio-classification": ("audio", "audio_classifier"),
    "text-to-speech": ("audio", "audio_generation"),
    "text-to-audio": ("audio", "audio_generation"),
    "zero-shot-image-classification": ("multimodal", "vision_language"),
    "image-to-text": ("multimodal", "vision_language_generation"),
    "image-text-to-text": ("multimodal", "vision_language_generation"),
    "visual-question-answering": ("multimodal", "vision_language_generation"),
}
# "feature-extraction" is deliberately absent: text, vision, audio and CLIP models all offer it.

_NAME_PATTERNS: list[tuple[str, str]] = [
    (r"llava|clip|blip|siglip|idefics|paligemma|-vl\b|vision-language", "multimodal"),
    (r"whisper|wav2vec|hubert|wavlm|speech|audio|musicgen", "audio"),
    (r"\bvit\b|vit-|resnet|convnext|mobilenet|efficientnet|yolo|detr|swin|deit|dino", "vision"),
    (r"minilm|sentence|bert|roberta|e5-|bge-|gte-|mpnet|electra", "embedding"),
    (r"gpt|llama|mistral|qwen|phi-?\d|falcon|opt-|bloom|gemma|t5|bart", "text_generation"),
]


@dataclass(frozen=True)
class Evidence:
    source: str  # model_type | structure | architecture | task | name
    observation: str
    family: str
    subfamily: str | None
    weight: float


@dataclass(frozen=True)
class Classification:
    model_name: str | None
    family: str | None
    subfamily: str | None
    confidence: float
    evidence: tuple[Evidence, ...]
    scores: dict[str, float]

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["evidence"] = [asdict(e) for e in self.evidence]
        return out


def _structure_evidence(config: dict[str, Any]) -> list[Evidence]:
    w = WEIGHTS["structure"]
    keys = set(config)
    if "vision_config" in keys and "text_config" in keys:
        generative = any(k in keys for k in ("image_token_index", "image_token_id", "projector_hidden_act"))
        sub = "vision_language_generation" if generative else "vision_language"
        return [Evidence("structure", "config has vision_config and text_config", "multimodal", sub, w)]
    if "audio_config" in keys and "text_config" in keys:
        return [Evidence("structure", "config has audio_config and text_config", "multimodal", "audio_language", w)]
    if "num_mel_bins" in keys:
        sub = "speech_recognition" if config.get("is_encoder_decoder") else "speech_encoder"
        return [Evidence("structure", "config takes mel-spectrogram features (num_mel_bins)", "audio", sub, w)]
    if "conv_dim" in keys and "feat_extract_norm" in keys:
        return [Evidence("structure", "config has a raw-waveform convolutional feature encoder", "audio", "speech_encoder", w)]
    if "num_channels" in keys and ("image_size" in keys or "hidden_sizes" in keys or "patch_size" in keys):
        return [Evidence("structure", "config takes images (num_channels, image_size/patch_size)", "vision", None, w)]
    if config.get("is_encoder_decoder") and "vocab_size" in keys:
        return [Evidence("structure", "text encoder-decoder (is_encoder_decoder, vocab_size)", "text_generation", "seq2seq", w)]
    return []


def _architecture_evidence(architectures: list[str]) -> list[Evidence]:
    out = []
    for arch in architectures:
        for suffix, fam, sub in _ARCH_SUFFIXES:
            if arch.endswith(suffix) and fam:
                out.append(Evidence("architecture", f"architecture {arch} ends with {suffix}", fam, sub, WEIGHTS["architecture"]))
                break
    return out


def classify(
    model_name: str | None = None,
    config: dict[str, Any] | None = None,
    model_class: str | None = None,
    tasks: list[str] | tuple[str, ...] | None = None,
) -> Classification:
    """Classify from whatever is known; each piece becomes weighted evidence."""
    config = config or {}
    evidence: list[Evidence] = []
    model_type = str(config.get("model_type", "")).lower()
    if model_type in _MODEL_TYPES:
        fam, sub = _MODEL_TYPES[model_type]
        evidence.append(Evidence("model_type", f"model_type '{model_type}'", fam, sub, WEIGHTS["model_type"]))
    evidence += _structure_evidence(config)
    architectures = list(config.get("architectures") or [])
    if model_class and model_class not in architectures:
        architectures.append(model_class)
    evidence += _architecture_evidence(architectures)
    task_list = list(tasks or ())
    for task in task_list:
        if task in _TASKS:
            fam, sub = _TASKS[task]
            evidence.append(Evidence("task", f"task '{task}'", fam, sub, WEIGHTS["task"] / max(1, len(task_list)) * 1.5))
    if model_name:
        lowered = model_name.lower()
        for pattern, fam in _NAME_PATTERNS:
            match = re.search(pattern, lowered)
            if match:
                evidence.append(Evidence("name", f"name contains '{match.group(0).strip('-')}'", fam, None, WEIGHTS["name"]))
                break

    scores = {fam: 0.0 for fam in FAMILIES}
    for e in evidence:
        scores[e.family] += e.weight
    total = sum(scores.values())
    if total == 0:
        return Classification(model_name, None, None, 0.0, (), scores)
    family = max(FAMILIES, key=lambda f: scores[f])
    subfamily = None
    for source in SUBFAMILY_ORDER:
        subs = [e.subfamily for e in evidence if e.source == source and e.family == family and e.subfamily]
        if subs:
            subfamily = subs[0]
            break
    return Classification(
        model_name=model_name,
        family=family,
        subfamily=subfamily,
        confidence=round(scores[family] / total * min(1.0, scores[family] / FULL_CONFIDENCE_WEIGHT), 3),
        evidence=tuple(evidence),
        scores={k: round(v, 3) for k, v in scores.items()},
    )


def classify_spec(spec: ModelSpec) -> Classification:
    return classify(spec.name, spec.config, spec.architecture, list(spec.tasks))


def classify_model(
    model_name: str,
    model_class: str | None = None,
    tasks: list[str] | None = None,
) -> Classification:
    """Classify a catalog model or local directory by its config; an unknown name is
    classified from the name, class and tasks alone (and says so through low confidence)."""
    try:
        spec = resolve_model(model_name)
    except InvalidModelError:
        raise  # a directory that is there but unusable: say why, do not guess from its name
    except UnknownModelError:
        return classify(model_name, None, model_class, tasks)
    merged_tasks = list(dict.fromkeys([*(tasks or []), *spec.tasks]))
    result = classify(spec.name, spec.config, model_class or spec.architecture, merged_tasks)
    return result
