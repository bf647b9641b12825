"""What the measuring parent needs to know of a transformers class, without importing it.

Resolving a model directory checks that its `architectures` name a model class, and building a
config's inputs reads the class's `main_input_name`. Either one imports the class: transformers'
modeling module for its family, and with it torch, about 3.5 s on a 2-core AMD EPYC. In
`devicefit benchmark` that import ran in the parent while the early worker ran the same one
on the other core, and the worker's measurement waited for both: 6.4 s from the worker's start
to its first config, against 2.6 s of measuring for bert-base at batch 1. Whether the class
generates and the names its forward takes are asked the same way (the selection map, `devicefit
run`, the API, a generation prefill's trace key). These facts are a
pure function of the class name and the transformers version, so they are kept in the derived
cache (models/derived_cache.py, whose key includes the transformers version) and the import
happens once per class and version, not once per process.
"""
from __future__ import annotations

import inspect
import re
import threading
from dataclasses import asdict, dataclass

from models.bounded_cache import BoundedCache
from models.derived_cache import disk_cached

# transformers resolves its classes lazily on first attribute access, and two threads resolving
# at once can see a half-initialized module ("module 'transformers' has no attribute ...").
TRANSFORMERS_LOCK = threading.RLock()
# A Python identifier of sane length: a class, input or model-type name from a config file.
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,199}")
# In front of the disk: input_signature asks for every prediction. The code identity of the
# disk entry is fixed for the process's life, so an answer read once stays true in it.
_memo: BoundedCache["ClassFacts"] = BoundedCache(1024)
MAX_PARAMETERS = 200  # a forward() takes a few dozen


@dataclass(frozen=True)
class ClassFacts:
    exists: bool  # transformers has a class of this name
    is_model: bool  # ...and it is a model class: a PreTrainedModel with a forward pass of its own
    main_input_name: str | None  # the model's main input ("input_ids", "pixel_values", ...)
    # ...and generate() drives it (a language-model head: decoder-only, encoder-decoder, Whisper).
    # The selection map asks it of each family's representatives, `make run` of each model it
    # selects and the API of each generation request: importing each class for it cost the
    # selection map about 6 s of modeling-module imports (T5's alone 3 s) on a 2-core AMD EPYC.
    can_generate: bool = False
    # The names its forward() takes: whether a generation prefill passes logits_to_keep (part of
    # the cached trace's key) is then known without importing the class.
    forward_parameters: tuple[str, ...] = ()


def _decode(document) -> ClassFacts:
    # An entry written before can_generate was a fact has no such key: KeyError, taken again.
    exists, is_model, main, generates, parameters = (document["exists"], document["is_model"], document["main_input_name"],
                                                     document["can_generate"], document["forward_parameters"])
    if not all(isinstance(v, bool) for v in (exists, is_model, generates)) or (is_model and not exists) or (generates and not is_model):
        raise ValueError(f"not a class-facts entry: {document!r}"[:200])
    if not isinstance(parameters, list) or len(parameters) > MAX_PARAMETERS:
        raise ValueError(f"not a list of forward parameters: {parameters!r}"[:200])
    for name in [main, *parameters] if main is not None else parameters:
        if not (isinstance(name, str) and IDENTIFIER.fullmatch(name)):
            raise ValueError(f"not an input name: {name!r}"[:200])
    return ClassFacts(exists, is_model, main, generates, tuple(parameters))


def _inspect(architecture: str) -> ClassFacts:
    import torch
    import transformers
    from transformers import PreTrainedModel

    with TRANSFORMERS_LOCK:
        cls = getattr(transformers, architecture, None)
    if not isinstance(cls, type):
        return ClassFacts(False, False, None)
    main = getattr(cls, "main_input_name", "input_ids")
    # PreTrainedModel and each family's abstract base (BertPreTrainedModel) are PreTrainedModels
    # without a forward pass: built, they fail at their first call (torch's _forward_unimplemented).
    is_model = issubclass(cls, PreTrainedModel) and cls.forward is not torch.nn.Module.forward
    can = getattr(cls, "can_generate", None)
    generates = bool(is_model and callable(can) and can())
    parameters = tuple(inspect.signature(cls.forward).parameters) if is_model else ()
    if len(parameters) > MAX_PARAMETERS or not all(IDENTIFIER.fullmatch(p) for p in parameters):
        raise ValueError(f"{architecture}.forward takes parameters that are not names: {parameters!r}"[:200])
    return ClassFacts(True, is_model, main if isinstance(main, str) and IDENTIFIER.fullmatch(main) else None, generates, parameters)


def class_facts(architecture: str) -> ClassFacts:
    """Whether transformers has `architecture` as a class and as a model class, its main input
    name, whether it generates and its forward's parameter names: read from the derived cache,
    else taken by importing the class once. A name that is not an identifier is never looked up
    (ValueError)."""
    if not isinstance(architecture, str) or not IDENTIFIER.fullmatch(architecture):
        raise ValueError(f"not a class name: {architecture!r}"[:200])
    return _memo.get(architecture, lambda: disk_cached("class_facts", {"architecture": architecture},
                                                       lambda: _inspect(architecture), asdict, _decode))
