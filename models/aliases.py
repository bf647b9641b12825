"""Short names users type for catalog models: the guides' own (`--model bert`, `vit-base`,
`llama-7b`), family names that stand for the catalog's usual representative, and the last part
of a catalog model's Hugging Face id (`Llama-2-7b-hf`), matched in any case.

An alias is looked up after catalog names, Hugging Face ids and the operator's registered
names (an operator who registers a model called "bert" gets theirs), and every answer names
the model it resolved to, so an alias never hides which model answered. One table, here."""
from __future__ import annotations

from functools import lru_cache

from models.catalog import ModelSpec, load_catalog

# alias -> catalog name. A family name picks the model the guides mean by it: their
# `--model bert` is bert-base-uncased, their `llama-7b` is Llama-2-7B.
ALIASES: dict[str, str] = {
    "bert": "bert-base-uncased", "bert-base": "bert-base-uncased", "bert-tiny-uncased": "bert-tiny",
    "distilbert": "distilbert-base-uncased", "roberta": "roberta-base", "minilm": "all-MiniLM-L6-v2",
    "all-minilm": "all-MiniLM-L6-v2", "gpt-2": "gpt2", "gpt2-small": "gpt2", "t5": "t5-small",
    "vit": "vit-base-patch16-224", "vit-base": "vit-base-patch16-224", "vit-b-16": "vit-base-patch16-224",
    "vit-large": "vit-large-patch16-224", "vit-l-16": "vit-large-patch16-224",
    "resnet": "resnet-50", "resnet18": "resnet-18", "resnet50": "resnet-50", "mobilenet": "mobilenet-v2",
    "mobilenetv2": "mobilenet-v2", "efficientnet": "efficientnet-b0", "convnext": "convnext-tiny",
    "clip": "clip-vit-base-patch32", "clip-base": "clip-vit-base-patch32", "clip-large": "clip-vit-large-patch14",
    "clip-vit-l-14": "clip-vit-large-patch14", "whisper": "whisper-tiny", "whisper-large": "whisper-large-v3",
    "wav2vec2": "wav2vec2-base", "qwen2.5": "qwen2.5-0.5b", "qwen": "qwen2.5-0.5b",
    "llama": "llama-2-7b", "llama-7b": "llama-2-7b", "llama-13b": "llama-2-13b", "llama-70b": "llama-2-70b",
    "llama2-7b": "llama-2-7b", "llama2-13b": "llama-2-13b", "llama2-70b": "llama-2-70b",
    "llama3-8b": "llama-3-8b", "llama3-70b": "llama-3-70b", "llama-3.0-8b": "llama-3-8b",
    "mistral": "mistral-7b", "mistral-7b-v0.1": "mistral-7b", "mixtral": "mixtral-8x7b",
    "phi-3": "phi-3-mini", "phi3-mini": "phi-3-mini", "phi3": "phi-3-mini", "gemma": "gemma-2b",
    "falcon": "falcon-7b", "flan-t5": "flan-t5-xl", "t5-xl": "flan-t5-xl",
}


@lru_cache(maxsize=1)
def _table() -> dict[str, str]:
    """Lower-case alias -> catalog name: the table above, then each catalog Hugging Face id's
    last part where no other catalog model shares it."""
    catalog = load_catalog()
    by_tail: dict[str, list[str]] = {}
    for spec in catalog.values():
        if spec.hf_id:
            by_tail.setdefault(spec.hf_id.rsplit("/", 1)[-1].lower(), []).append(spec.name)
    names_lower = {name.lower() for name in catalog}
    table = {tail: names[0] for tail, names in by_tail.items() if len(names) == 1 and tail not in names_lower}
    table.update({alias.lower(): name for alias, name in ALIASES.items()})
    missing = sorted({name for name in table.values() if name not in catalog})
    if missing:
        raise ValueError(f"models/aliases.py names models the catalog lacks: {', '.join(missing)}")
    return table


def alias_model(name: str) -> ModelSpec | None:
    """The catalog model an alias stands for, if `name` is one."""
    target = _table().get(name.strip().lower())
    return load_catalog()[target] if target else None


def alias_names() -> dict[str, str]:
    """Lower-case alias -> catalog name (for close-match suggestions and `devicefit models`)."""
    return dict(_table())
