"""Size limits on a model config that devicefit will build, trace or analyse.

Why: analysing a model builds it on the meta device and traces a forward pass, which costs CPU
in proportion to its layers and operators (a crafted config of 400 layers, hidden size 8192 and
a 1e6-token vocabulary cost 9 s of CPU per API request). A config.json is user input, so its
sizes are capped here, in one place, before anything is built. The limits sit well above every
released model devicefit knows of (Llama 3.1 405B: 126 layers, hidden 16384, FFN 53248, vocab
128256; Gemma: vocab 256000; Qwen2 MoE: 64 experts), so a real model is never refused.

A key is checked wherever it appears in the config, nested sub-configs (`text_config`,
`vision_config`, `encoder`, ...) included. A list value (`hidden_sizes`, `depths`) is checked
element by element, and `depths` also by its sum (the layers it adds up to).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from models.errors import DevicefitError

#: The largest config.json read at all (bytes); released configs are a few kB.
MAX_CONFIG_BYTES = 1 << 20
#: Deepest nesting of dicts/lists accepted in a config.
MAX_CONFIG_DEPTH = 16


@dataclass(frozen=True)
class Limit:
    what: str
    maximum: int
    keys: tuple[str, ...]


LIMITS: tuple[Limit, ...] = (
    Limit("layers", 160, ("num_hidden_layers", "n_layer", "num_layers", "num_decoder_layers", "encoder_layers",
                          "decoder_layers", "depths", "num_block_repeats")),
    Limit("hidden size", 32_768, ("hidden_size", "n_embd", "d_model", "dim", "hidden_sizes", "embedding_size",
                                  "projection_dim", "d_kv", "head_dim")),
    Limit("feed-forward size", 131_072, ("intermediate_size", "n_inner", "d_ff", "ffn_dim", "encoder_ffn_dim",
                                         "decoder_ffn_dim", "hidden_dim", "moe_intermediate_size")),
    # type_vocab_size is an embedding table too (BERT: 2 token types): 1e9 of them built a
    # 32-billion-parameter model while vocab_size of that size was refused.
    Limit("vocabulary size", 524_288, ("vocab_size", "type_vocab_size")),
    Limit("attention heads", 512, ("num_attention_heads", "n_head", "num_heads", "num_key_value_heads",
                                   "encoder_attention_heads", "decoder_attention_heads")),
    Limit("positions", 1_048_576, ("max_position_embeddings", "n_positions", "n_ctx", "max_source_positions",
                                   "max_target_positions", "max_2d_position_embeddings")),
    Limit("experts", 1_024, ("num_experts", "num_local_experts", "n_routed_experts")),
    Limit("image size", 4_096, ("image_size",)),
    Limit("channels", 4_096, ("num_channels", "num_mel_bins")),
    Limit("labels", 1_048_576, ("num_labels",)),
)
_BY_KEY = {key: limit for limit in LIMITS for key in limit.keys}


class ConfigLimitError(DevicefitError, ValueError):
    """A config value over (or not comparable with) one of the LIMITS; names the key and limit."""
    http_status = 422

    def __init__(self, message: str, key: str, value: Any, limit: int | None):
        super().__init__(message)
        self.key, self.value, self.limit = key, value, limit


def _whole(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def check_config_limits(config: dict[str, Any], model: str) -> None:
    """Raises ConfigLimitError for the first size over its limit (or a size that is not a whole
    number), naming `model`, the key, its value and the limit."""

    def check(key: str, path: str, value: Any) -> None:
        limit = _BY_KEY[key]
        values = value if isinstance(value, list) else [value]
        numbers = []
        for v in values:
            n = _whole(v)
            if n is None or n < 0:
                raise ConfigLimitError(f"{model}: config {path} must be a non-negative whole number (or a list of them), "
                                       f"got {v!r}", path, v, None)
            numbers.append(n)
        total = sum(numbers) if key == "depths" else max(numbers, default=0)
        if total > limit.maximum:
            raise ConfigLimitError(f"{model}: config {path} = {total} exceeds the limit of {limit.maximum} {limit.what} "
                                   f"devicefit analyses (models/limits.py)", path, total, limit.maximum)

    def walk(node: Any, path: str, depth: int) -> None:
        if depth > MAX_CONFIG_DEPTH:
            raise ConfigLimitError(f"{model}: config nests deeper than {MAX_CONFIG_DEPTH} levels at {path or 'the top'}",
                                   path, None, MAX_CONFIG_DEPTH)
        if isinstance(node, dict):
            for key, value in node.items():
                where = f"{path}.{key}" if path else str(key)
                if key in _BY_KEY and value is not None:
                    check(key, where, value)
                elif isinstance(value, (dict, list)):
                    walk(value, where, depth + 1)
        elif isinstance(node, list):
            for i, value in enumerate(node):
                if isinstance(value, (dict, list)):
                    walk(value, f"{path}[{i}]", depth + 1)

    walk(config, "", 0)


def text_position_limit(cfg: dict[str, Any]) -> int | None:
    """How many tokens a text config's positions hold (None: it does not say)."""
    for key in ("max_position_embeddings", "n_positions"):
        if isinstance(cfg.get(key), int):
            # RoBERTa-style position ids start after the padding index.
            offset = (cfg.get("pad_token_id") or 0) + 1 if cfg.get("model_type") in ("roberta", "xlm-roberta", "camembert") else 0
            return cfg[key] - offset
    return None


def position_problem(config: dict[str, Any]) -> str | None:
    """Why a text model of this config takes no tokens at all (a position limit below 1:
    `max_position_embeddings: 0`, or RoBERTa's 2 with padding index 1), or None. Such a config
    builds, then every trace failed inside torch ("The expanded size of the tensor (128) must
    match the existing size (0)") as a traceback of predict, analyze and the API."""
    for where, cfg in (("", config), ("text_config.", config.get("text_config"))):
        limit = text_position_limit(cfg) if isinstance(cfg, dict) else None
        if limit is not None and limit < 1:
            key = next(k for k in ("max_position_embeddings", "n_positions") if isinstance(cfg.get(k), int))
            return f"config {where}{key} = {cfg[key]} leaves the model no token positions ({limit})"
    return None
