"""What a model takes as input, described declaratively from its config.

The same signature drives FLOP counting on the meta device (models.analysis) and the real
tensors the benchmark runner feeds (models.tensors), so the FLOPs reported for a row
are the FLOPs of exactly the inputs that row measured.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from models.bounded_cache import BoundedCache
from models.catalog import ModelSpec
from models.class_facts import class_facts
from models.limits import text_position_limit as _text_limit

DEFAULT_SEQ_LENGTH = 128
DEFAULT_IMAGE_SIZE = 224
DEFAULT_AUDIO_SECONDS = 5.0
WAVEFORM_SAMPLE_RATE = 16_000  # every raw-waveform model in transformers' audio zoo expects 16 kHz

TensorKind = Literal["token_ids", "mask", "float", "class_ids"]


@dataclass(frozen=True)
class TensorSpec:
    shape: tuple[int, ...]
    kind: TensorKind
    high: int | None = None  # exclusive upper bound of integer values (vocab size, class count)


@dataclass(frozen=True)
class InputSignature:
    modality: str  # text | text_seq2seq | image | audio_features | audio_waveform | image_text
    batch_size: int
    inputs: dict[str, TensorSpec]
    training_targets: dict[str, TensorSpec] = field(default_factory=dict)
    training_flags: dict[str, Any] = field(default_factory=dict)
    dims: dict[str, float] = field(default_factory=dict)  # seq_length, image_size, ... as measured

    def describe(self) -> dict[str, Any]:
        return {
            "modality": self.modality,
            "dims": dict(self.dims),
            "shapes": {k: list(v.shape) for k, v in self.inputs.items()},
        }


def model_class(spec: ModelSpec):
    import transformers

    try:
        return getattr(transformers, spec.architecture)
    except AttributeError as exc:
        raise ValueError(
            f"transformers {transformers.__version__} has no class {spec.architecture} (model {spec.name})"
        ) from exc


def _main_input(spec: ModelSpec) -> str:
    """The class's main input, from models/class_facts.py's cache: a process that only builds
    inputs (the measuring parent, the API) need not import the class's modeling module."""
    facts = class_facts(spec.architecture)
    if not facts.exists:
        from importlib.metadata import version

        raise ValueError(f"transformers {version('transformers')} has no class {spec.architecture} (model {spec.name})")
    return facts.main_input_name or "input_ids"


def _seq_length(requested: int | None, limit: int | None, what: str) -> int:
    if limit is not None and limit < 1:
        raise ValueError(f"{what} accepts no tokens (its position limit is {limit})")
    if requested is None:
        return min(DEFAULT_SEQ_LENGTH, limit) if limit else DEFAULT_SEQ_LENGTH
    if requested < 1:
        raise ValueError(f"sequence length must be a positive integer, got {requested}")
    if limit is not None and requested > limit:
        raise ValueError(f"{what} accepts at most {limit} tokens; sequence length {requested} is impossible")
    return requested


_built_configs: BoundedCache[dict[str, Any]] = BoundedCache(256)


def _fill(written: dict[str, Any], built: dict[str, Any]) -> dict[str, Any]:
    """`written` with what it leaves out taken from `built`, sub-configs (text_config) alike."""
    out = {**built, **written}
    for key, value in written.items():
        if isinstance(value, dict) and isinstance(built.get(key), dict):
            out[key] = _fill(value, built[key])
    return out


def config_as_built(spec: ModelSpec) -> dict[str, Any]:
    """The config a local model is built with: its config.json as written, and the defaults
    transformers fills in for what it leaves out (a BERT config without `vocab_size` builds a
    30,522-token embedding; the inputs must be ids inside it). Catalog configs ship complete."""
    if spec.source != "local":
        return spec.config

    def complete() -> dict[str, Any]:
        try:
            return _fill(spec.config, spec.build_config().to_dict())
        except Exception:  # noqa: BLE001 - a config transformers cannot build fails where it is built, saying why
            return spec.config

    return _built_configs.get(json.dumps([spec.architecture, spec.config], sort_keys=True, default=str), complete)


def input_signature(
    spec: ModelSpec,
    batch_size: int,
    seq_length: int | None = None,
    image_size: int | None = None,
    audio_seconds: float | None = None,
) -> InputSignature:
    """Valid inputs for `spec` at this batch size; raises ValueError for impossible sizes."""
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"batch size must be a positive integer, got {batch_size!r}")
    cfg = config_as_built(spec)
    main_input = _main_input(spec)
    is_classifier = spec.architecture.endswith("ForImageClassification")
    b = batch_size

    if main_input == "input_ids" and "vision_config" in cfg and "text_config" in cfg:
        text, vision = cfg["text_config"], cfg["vision_config"]
        s = _seq_length(seq_length, _text_limit(text), f"{spec.name}'s text encoder")
        size = image_size or vision.get("image_size", DEFAULT_IMAGE_SIZE)
        return InputSignature(
            "image_text", b,
            {"input_ids": TensorSpec((b, s), "token_ids", text.get("vocab_size")),
             "attention_mask": TensorSpec((b, s), "mask"),
             "pixel_values": TensorSpec((b, vision.get("num_channels", 3), size, size), "float")},
            training_flags={"return_loss": True},
            dims={"seq_length": s, "image_size": size},
        )
    if main_input == "input_ids":
        vocab = cfg.get("vocab_size")
        if cfg.get("is_encoder_decoder"):
            s = _seq_length(seq_length, _text_limit(cfg), spec.name)
            return InputSignature(
                "text_seq2seq", b,
                {"input_ids": TensorSpec((b, s), "token_ids", vocab),
                 "attention_mask": TensorSpec((b, s), "mask"),
                 "decoder_input_ids": TensorSpec((b, s), "token_ids", vocab)},
                training_targets={"labels": TensorSpec((b, s), "token_ids", vocab)},
                dims={"seq_length": s, "decoder_length": s},
            )
        s = _seq_length(seq_length, _text_limit(cfg), spec.name)
        lm_head = spec.architecture.endswith(("ForCausalLM", "LMHeadModel"))
        return InputSignature(
            "text", b,
            {"input_ids": TensorSpec((b, s), "token_ids", vocab),
             "attention_mask": TensorSpec((b, s), "mask")},
            training_targets={"labels": TensorSpec((b, s), "token_ids", vocab)} if lm_head else {},
            dims={"seq_length": s},
        )
    if main_input == "pixel_values":
        size = image_size or cfg.get("image_size") or spec.inputs.get("image_size", DEFAULT_IMAGE_SIZE)
        targets = {"labels": TensorSpec((b,), "class_ids", cfg.get("num_labels", 2))} if is_classifier else {}
        return InputSignature(
            "image", b,
            {"pixel_values": TensorSpec((b, cfg.get("num_channels", 3), size, size), "float")},
            training_targets=targets,
            dims={"image_size": size},
        )
    if main_input == "input_features":
        frames = 2 * cfg.get("max_source_positions", 1500)  # the encoder's fixed 30-s window
        dec_limit = cfg.get("max_target_positions")
        s = _seq_length(seq_length, dec_limit, f"{spec.name}'s decoder")
        vocab = cfg.get("vocab_size")
        return InputSignature(
            "audio_features", b,
            {"input_features": TensorSpec((b, cfg.get("num_mel_bins", 80), frames), "float"),
             "decoder_input_ids": TensorSpec((b, s), "token_ids", vocab)},
            training_targets={"labels": TensorSpec((b, s), "token_ids", vocab)},
            dims={"audio_frames": frames, "audio_seconds": frames / 100, "decoder_length": s},
        )
    if main_input == "input_values":
        seconds = audio_seconds or spec.inputs.get("audio_seconds", DEFAULT_AUDIO_SECONDS)
        if seconds <= 0:
            raise ValueError(f"audio length must be positive, got {seconds} s")
        samples = int(round(seconds * WAVEFORM_SAMPLE_RATE))
        return InputSignature(
            "audio_waveform", b,
            {"input_values": TensorSpec((b, samples), "float")},
            dims={"audio_seconds": seconds, "audio_samples": samples},
        )
    raise ValueError(f"{spec.name}: no input builder for main input '{main_input}' of {spec.architecture}")
