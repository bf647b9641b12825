"""Building models offline: random weights from a config, or real weights from a local dir."""
from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from models.bounded_cache import BoundedCache
from models.catalog import WEIGHT_FILES, InvalidModelError, ModelSpec
from models.errors import DevicefitError
from models.inputs import model_class

if TYPE_CHECKING:
    import torch


def meta_model(spec: ModelSpec):
    """The model on the meta device: shapes without memory, for counting, FLOPs and activation
    memory. A mixture of experts runs its experts at their expected load (EXPECTED_LOAD): the
    routing is data-dependent, which meta tensors cannot follow."""
    import torch

    config = spec.build_config()
    if is_mixture_of_experts(spec.config):
        _register_expected_load()
        config._experts_implementation = EXPECTED_LOAD
    try:
        with torch.device("meta"):
            return model_class(spec)(config)
    except Exception as exc:
        if spec.source != "local":
            raise  # a catalog config that does not build is devicefit's bug: its traceback
        raise unbuildable(spec, exc) from exc


def unbuildable(spec: ModelSpec, exc: Exception) -> InvalidModelError:
    """A local config whose values transformers' class cannot be built from (zero attention
    heads: ZeroDivisionError; a hidden size of 0), said as the config's fault: the config object
    accepted them, the model's constructor did not."""
    return InvalidModelError(spec.path or Path(spec.name), f"transformers cannot build {spec.architecture} from this config: "
                                                           f"{type(exc).__name__}: {exc}"[:400])


_PROJECT = Path(__file__).resolve().parents[1]
_OWN_PACKAGES = tuple(str(_PROJECT / name) + "/" for name in ("models", "devicefit", "benchmark_runners"))


def _raised_by_devicefit(exc: BaseException) -> bool:
    """Whether the innermost frame of `exc`'s traceback is this project's code (the tracer's or
    the FLOP counter's dispatch, say), not transformers' or torch's."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and tb.tb_frame.f_code.co_filename.startswith(_OWN_PACKAGES)


@contextlib.contextmanager
def local_forward(spec: ModelSpec) -> Iterator[None]:
    """Around a meta-device forward pass: a local config that builds but cannot run on the
    inputs it describes (0 input channels, an image smaller than its patch, d_kv 0) raised
    torch's own error ("Calculated padded input size per channel: (7 x 7). Kernel size: (32 x
    32)...") as a traceback of predict, analyze and a 500 of the API; it is the config's fault,
    said as an InvalidModelError naming the directory. A catalog model's failure stays a bug."""
    try:
        yield
    except DevicefitError:
        raise
    except Exception as exc:
        if spec.source != "local" or isinstance(exc, MemoryError) or _raised_by_devicefit(exc):
            raise  # our tracer's or counter's own bug, or the machine's memory: not the config's fault
        raise InvalidModelError(spec.path or Path(spec.name), f"transformers cannot run {spec.architecture} on the inputs this "
                                                           f"config describes: {type(exc).__name__}: {exc}"[:400]) from exc


EXPECTED_LOAD = "devicefit_expected_load"


def _expected_load_experts_forward(self, hidden_states, top_k_index, top_k_weights):
    """Each of the E experts runs on ceil(T * k / E) of the T tokens, as uniform routing of each
    token to k experts loads them: the FLOPs of the real pass (T x k expert evaluations) and
    activations of the sizes it allocates, without the per-token weight copies transformers'
    batched_mm makes (a (T*k, 2I, H) gather: 120 GB for Mixtral at 128 tokens), and without the
    bf16 operands and data-dependent offsets grouped_mm needs."""
    import torch

    tokens, top_k = hidden_states.size(0), top_k_index.size(-1)
    load = max(1, -(-tokens * top_k // self.num_experts))
    out = torch.zeros_like(hidden_states)
    x = hidden_states[:load]
    for e in range(self.num_experts):
        up_weight = self.gate_up_proj[e] if getattr(self, "has_gate", True) else self.up_proj[e]
        h = x @ up_weight if getattr(self, "is_transposed", False) else torch.nn.functional.linear(x, up_weight)
        if not getattr(self, "has_gate", True):
            h = self.act_fn(h)
        elif hasattr(self, "_apply_gate"):
            h = self._apply_gate(h)
        else:
            gate, up = h.chunk(2, dim=-1)
            h = self.act_fn(gate) * up
        h = h @ self.down_proj[e] if getattr(self, "is_transposed", False) else torch.nn.functional.linear(h, self.down_proj[e])
        out[:load] += h
    return out


def _register_expected_load() -> None:
    from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS

    if EXPECTED_LOAD not in ALL_EXPERTS_FUNCTIONS:
        ALL_EXPERTS_FUNCTIONS.register(EXPECTED_LOAD, _expected_load_experts_forward)


def is_mixture_of_experts(config: dict) -> bool:
    return any(config.get(k) for k in ("num_local_experts", "num_experts", "n_routed_experts"))


_has_batchnorm: BoundedCache[bool] = BoundedCache(256)  # per model config, like the trace caches


def has_batchnorm(spec: ModelSpec) -> bool:
    """Whether a build of `spec` recalibrates anything (traced on the meta device, once per config)."""
    import json

    from models.calibration import batchnorm_layers

    key = json.dumps([spec.name, spec.architecture, spec.config], sort_keys=True, default=str)
    return _has_batchnorm.get(key, lambda: bool(batchnorm_layers(meta_model(spec))))


WEIGHT_SEED = 20240607


@dataclass
class BuiltModel:
    model: Any  # torch.nn.Module, eval mode, on CPU
    weights_recipe: str  # how its weights (and BatchNorm statistics) were set, for the row


def build(spec: ModelSpec, dtype: "torch.dtype | None" = None) -> BuiltModel:
    """The model in eval mode on CPU. A local directory with weights loads them; a catalog
    model gets seeded random weights (WEIGHT_SEED, without touching the global generator), so
    every build has the same weights and two backends' outputs can be compared. Random weights
    are not timing-neutral (vanishing activations underflow into denormals), so their BatchNorm
    statistics are recalibrated before any cast (models.calibration)."""
    import torch

    from models.calibration import recalibrate_batchnorm

    dtype = dtype or torch.float32
    cls = model_class(spec)
    if spec.source == "local" and spec.has_weights:
        check_weight_files(spec.path)
        model = cls.from_pretrained(str(spec.path), local_files_only=True, dtype=dtype, use_safetensors=True)
        return BuiltModel(model.eval(), f"pretrained weights from {spec.path}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(WEIGHT_SEED)
        model = cls(spec.build_config())
    recipe = f"random init (transformers' _init_weights, seed {WEIGHT_SEED})"
    calibrated = recalibrate_batchnorm(model, spec)
    if calibrated:
        recipe += f"; {calibrated}"
    return BuiltModel(model.to(dtype).eval(), recipe)


SAFETENSORS_FILE, SAFETENSORS_INDEX = "model.safetensors", "model.safetensors.index.json"


def check_weight_files(directory: Path) -> None:
    """Refuses weights devicefit will not load, before transformers opens any: pickle files
    (pytorch_model.bin and its shards; unpickling a file runs what it says) without a safetensors
    copy, and a safetensors index whose shards are not .safetensors files in `directory` itself
    (transformers opens any path the index names: '../../etc/passwd', as a pickle)."""
    if (directory / SAFETENSORS_FILE).is_file():
        return  # what transformers loads first, and only it
    index = directory / SAFETENSORS_INDEX
    if not index.is_file():
        pickles = [name for name in WEIGHT_FILES if name.startswith("pytorch_model") and (directory / name).is_file()]
        raise InvalidModelError(directory, f"its weights are {' and '.join(pickles) or 'not model.safetensors'}: pickle, which "
                                           "devicefit never unpickles; save them as model.safetensors (or remove them to "
                                           "measure random weights)")
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError) as exc:
        raise InvalidModelError(directory, f"{SAFETENSORS_INDEX} is not a readable JSON object: {exc}"[:300]) from None
    if not isinstance(weight_map, dict) or not weight_map:
        raise InvalidModelError(directory, f"{SAFETENSORS_INDEX} has no 'weight_map' object of tensor -> shard file")
    for shard in set(weight_map.values()):
        if not (isinstance(shard, str) and shard.endswith(".safetensors") and Path(shard).name == shard
                and shard not in (".", "..") and (directory / shard).is_file()):
            raise InvalidModelError(directory, f"{SAFETENSORS_INDEX} names shard {shard!r}"[:200] + ", not a .safetensors "
                                               "file in the model directory")


def build_model(spec: ModelSpec, dtype: "torch.dtype | None" = None):
    """`build(spec, dtype).model`, for callers that do not record how the weights were set."""
    return build(spec, dtype).model


def weights_kind(spec: ModelSpec) -> str:
    return "pretrained" if spec.source == "local" and spec.has_weights else "random"
