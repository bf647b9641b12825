"""Sweep profiles: which configs a (model, hardware) partition measures.

`quick` is what `make run` materializes: 12 catalog models across all five families, batch
sizes 1/4/16, the precisions this hardware runs natively, inference, plus training for four
small models, and two text models again at 512 tokens; and the same models through OpenVINO
on the same CPU (f32 and bf16 hints). A config whose one call would outlast its timing cap's
overrun (predicted from its smaller batches) is left to the predictors: benchmark_runners.call_budget.
Six of the models are vision models, two of each operator regime (dense convolutions,
depthwise convolutions, attention), so that leave-one-model-out validation always leaves a
neighbour of the held-out model in training.
`full` is the nightly sweep: every catalog model but the config-only ones (7B-70B language
models, ViT-L, Whisper large: measured when named), more batch sizes, every precision, and the
default (tighter) timing caps.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from benchmark_runners import registry
from benchmark_runners.hardware.inventory import FINGERPRINT
from benchmark_runners.harness import TimingPolicy
from benchmark_runners.records import PRECISIONS, BenchmarkConfig
from models.catalog import catalog_names, swept_catalog_names
from models.classifier import classify_spec
from models.resolve import resolve_model

_FINGERPRINT = re.compile(FINGERPRINT)


@dataclass(frozen=True)
class SweepProfile:
    name: str
    models: tuple[str, ...]
    batch_sizes: tuple[int, ...]
    precisions: dict[str, tuple[str, ...]]  # per hardware kind
    training_models: tuple[str, ...]
    training_batch_sizes: tuple[int, ...]
    policy: TimingPolicy = field(default_factory=TimingPolicy)
    # Generation configs' policy, where it differs (None: `policy`): a request is seconds long
    # on a CPU, and its decode steps are what TPOT's median and p90 come from.
    generation_policy: TimingPolicy | None = None
    seq_length: int | None = None
    # Text models also measured at a long sequence: attention grows with its square, and at
    # 128 tokens it hides behind per-kernel overhead, so its cost is not identifiable.
    long_sequence_models: tuple[str, ...] = ()
    long_sequence_length: int = 512
    long_sequence_batch_sizes: tuple[int, ...] = (1, 4)
    # Kinds measured on a subset of the models and batch sizes (the browser kinds: WebGPU on
    # SwiftShader is ~100x slower than torch on the same CPU). A model named on the command line
    # is measured on every kind.
    kind_models: dict[str, tuple[str, ...]] = field(default_factory=dict)
    kind_batch_sizes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    # Models also measured in the generation scenario (fp32, the scenario's default prompt and
    # new tokens) on the kinds whose backend generates: what calibrates the decode efficiency
    # that predicts TPOT for the models too large to measure (devicefit/predict/generation.py).
    generation_models: tuple[str, ...] = ()
    generation_batch_sizes: tuple[int, ...] = (1,)

    def measures(self, kind: str, model: str) -> bool:
        return kind not in self.kind_models or model in self.kind_models[kind]

    def precisions_for(self, kind: str, cpu_isa: list[str] | None = None) -> tuple[str, ...]:
        """The precisions this profile lists for a kind; a kind it does not name (a plugin's)
        gets every precision its backend declares."""
        precisions = self.precisions.get(kind) or registry.backend_of_kind(kind).precisions
        if kind == "cpu" and "bf16" in precisions and self.name == "quick" and "amx_bf16" not in (cpu_isa or []):
            # Without AMX, bf16 on CPU runs through conversions and is slower than fp32;
            # quick keeps to native fast paths, full measures it anyway.
            precisions = tuple(p for p in precisions if p != "bf16")
        return precisions


QUICK = SweepProfile(
    name="quick",
    models=("bert-tiny", "all-MiniLM-L6-v2", "gpt2", "t5-small", "mobilenet-v2", "efficientnet-b0", "resnet-18",
            "resnet-50", "convnext-tiny", "vit-base-patch16-224", "whisper-tiny", "clip-vit-base-patch32"),
    batch_sizes=(1, 4, 16),
    # OpenVINO: f32 and bf16 compile hints on the same CPU as torch (its int8 is in the full sweep).
    precisions={"cpu": ("fp32", "bf16", "int8"), "cuda": ("fp32", "fp16", "bf16"), "mps": ("fp32", "fp16"),
                "openvino": ("fp32", "bf16"), "wasm": ("fp32", "int8"), "webgpu": ("fp32",), "webnn": ("fp32",)},
    training_models=("bert-tiny", "all-MiniLM-L6-v2", "mobilenet-v2", "resnet-18"),
    training_batch_sizes=(1, 4, 16),
    # Caps, not targets: configs that converge stop earlier. Replayed over the 200 configs a
    # Xeon recorded under 8 s / 3 s caps (benchmarks/stopping_replay.py, the warm-up cap
    # counting the cold call), a 2 s cap kept 88% of p50s inside the recorded 95% CI (median
    # shift 0.0%, 90th percentile 2.2%) for 47% of the timed work (8.7 of 18.5 min). Slow
    # iterations (batch 16 of the larger models) stop at 1.5x the cap, or at the cap once three
    # agree within 3%: on the AMD VM's 160 quick rows that cut 9.0 to 8.3 min, p90 shift 0.2%.
    # The cap is now 1.5 s, for make run's 12 minutes: replayed over the EPYC's 136 rows of
    # 2026-11-26 the timed work goes from 7.8 to 7.0 min (p50 shift p90 0.4%, worst 1.4%), over
    # the Xeon's 400 rows from 16.1 to 14.6 min (p90 1.26% -> 2.18%, inside the recorded CI 85%
    # -> 84%). A 1.0 s cap saves about 66 s more of a make run (replayed over two EPYC Zen 4
    # runs) but cost held-out latency 0.3-0.5 points, 1.1-1.4 on the Xeon's OpenVINO: not taken.
    # A config whose one call would take longer than the overrun (1.5 x 1.5 s) is timed once, a
    # cold call and one sample: it is predicted from its smaller batches instead
    # (benchmark_runners.call_budget), about 120 s of a 14-minute make run on the 2-core EPYC.
    policy=TimingPolicy(max_time_s=1.5, warmup_max_time_s=1.0, cap_overrun=1.5, cap_agreement=0.03, call_budget_s=1.5 * 1.5),
    # Generation keeps the 2 s cap: two requests of 256 + 64 tokens fill it for gpt2 on the Xeon
    # (TPOT from 126 decode steps), where 1.5 s would stop gpt2 on the EPYC (2.7 s a request)
    # at one; about 15 s for both models.
    generation_policy=TimingPolicy(max_time_s=2.0, warmup_max_time_s=1.0, cap_overrun=1.5, cap_agreement=0.03),
    long_sequence_models=("all-MiniLM-L6-v2", "gpt2"),
    generation_models=("gpt2", "t5-small"),
    # The browser (onnxruntime-web in headless Chromium), batches 1 and 4, within make run's
    # 12 minutes: one text and two vision models on wasm, bert-tiny on WebGPU (on a software
    # adapter mobilenet-v2 alone took 29 s), the two smallest on WebNN. On the Xeon's make run of
    # 2026-11-25 one model per modality on wasm and two on WebGPU took 236 s of its 928 s of
    # measuring; whisper-tiny (77 s) and CLIP (52 s) were most of it. The full profile measures
    # every model on wasm.
    kind_models={"wasm": ("bert-tiny", "mobilenet-v2", "resnet-18"),
                 "webgpu": ("bert-tiny",), "webnn": ("bert-tiny", "mobilenet-v2")},
    kind_batch_sizes={"wasm": (1, 4), "webgpu": (1, 4), "webnn": (1, 4)},
)
FULL = SweepProfile(
    name="full",
    models=tuple(swept_catalog_names()),  # config-only models (7B-70B, ...) are measured when named
    batch_sizes=(1, 4, 16, 64),
    precisions={"cpu": ("fp32", "bf16", "int8"), "cuda": ("fp32", "fp16", "bf16", "int8"), "mps": ("fp32", "fp16", "bf16"),
                "openvino": ("fp32", "bf16", "fp16", "int8"), "wasm": ("fp32", "int8"), "webgpu": ("fp32", "fp16"),
                "webnn": ("fp32", "fp16")},
    training_models=("bert-tiny", "all-MiniLM-L6-v2", "distilbert-base-uncased", "bert-base-uncased", "gpt2",
                     "t5-small", "mobilenet-v2", "resnet-50", "vit-base-patch16-224", "whisper-tiny"),
    training_batch_sizes=(1, 4, 16),
    generation_models=("gpt2", "gpt2-medium", "qwen2.5-0.5b", "t5-small", "whisper-tiny"),
    generation_batch_sizes=(1, 4),
    kind_models={"webgpu": ("bert-tiny", "all-MiniLM-L6-v2", "mobilenet-v2", "efficientnet-b0", "resnet-18", "whisper-tiny"),
                 "webnn": ("bert-tiny", "all-MiniLM-L6-v2", "mobilenet-v2", "efficientnet-b0", "resnet-18", "whisper-tiny")},
    kind_batch_sizes={"wasm": (1, 4, 16), "webgpu": (1, 4), "webnn": (1, 4)},
)
PROFILES = {p.name: p for p in (QUICK, FULL)}
# `devicefit benchmark --timing`: "precise" is the harness's default policy (until the median's
# 95% CI is within 2%, at most 10 s of timed iterations), "quick" is make run's.
TIMINGS = ("precise", "quick")


def timing_policy(timing: str, mode: str, ci_target: float | None = None, max_time_s: float | None = None) -> TimingPolicy:
    """The timing policy a named timing gives a config of `mode`, with the caller's own CI target
    and cap (when given) over it. ValueError names an unknown timing or an invalid value."""
    if timing not in TIMINGS:
        raise ValueError(f"--timing must be one of {', '.join(TIMINGS)}, got {timing!r}")
    base = TimingPolicy()
    if timing == "quick":  # the batch sizes were named: each is measured (no call budget)
        base = replace((QUICK.generation_policy if mode == "generation" else None) or QUICK.policy, call_budget_s=None)
    given = {k: v for k, v in (("ci_target", ci_target), ("max_time_s", max_time_s)) if v is not None}
    return replace(base, **given)  # __post_init__ checks the values


def is_device_id(value: str) -> bool:
    """A device id's shape: "<kind>-<hex fingerprint>" and an optional "+<profile>"."""
    from devicefit.fleet.constraints import BadProfile, ConstraintProfile

    fingerprint, _, slug = str(value).partition("+")
    if not _FINGERPRINT.fullmatch(fingerprint):
        return False
    try:
        ConstraintProfile.parse_slug(slug)
    except BadProfile:
        return False
    return True


@dataclass(frozen=True)
class Selection:
    """Spec 004's selection options: --model, --hardware, --category, --all, --limit,
    --batch-sizes, --precision, --training-mode. Empty means "as the profile says"."""

    profile: str = "quick"
    models: tuple[str, ...] = ()
    hardware: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    all_models: bool = False
    limit: int | None = None
    batch_sizes: tuple[int, ...] = ()
    precisions: tuple[str, ...] = ()
    training_mode: bool | None = None  # None: the profile's training models; True: train every model; False: none
    # None: the profile's generation models; True: every model that generates; False: none
    generation_mode: bool | None = None

    def __post_init__(self):
        if self.profile not in PROFILES:
            raise ValueError(f"unknown profile '{self.profile}' (known: {', '.join(PROFILES)})")
        bad = [p for p in self.precisions if p not in PRECISIONS]
        if bad:
            raise ValueError(f"unknown precision(s) {', '.join(bad)} (known: {', '.join(PRECISIONS)})")
        measurable = registry.measurable_kinds()
        bad_hw = [h for h in self.hardware if h not in measurable and not is_device_id(h)]
        if bad_hw:
            raise ValueError(f"unknown hardware {', '.join(bad_hw)} (a measurable kind: {', '.join(measurable)}; "
                             f"or a device id, as `devicefit devices list` shows them)")
        if any(b < 1 for b in self.batch_sizes):
            raise ValueError("batch sizes must be positive integers")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"limit must be positive, got {self.limit}")

    @property
    def sweep_profile(self) -> SweepProfile:
        return PROFILES[self.profile]

    def model_names(self) -> list[str]:
        from models.catalog import FAMILIES

        bad = [c for c in self.categories if c not in FAMILIES]
        if bad:
            raise ValueError(f"unknown category {', '.join(bad)} (families: {', '.join(FAMILIES)})")
        if self.models:
            names = list(dict.fromkeys(partition_model_name(m) for m in self.models))  # bert-tiny,BERT-TINY: one partition
        elif self.all_models:
            names = catalog_names()  # config-only ones too: the memory guard skips what does not fit, saying so
        elif self.categories:
            names = swept_catalog_names()
        else:
            names = list(self.sweep_profile.models)
        if self.categories:
            names = [n for n in names if classify_spec(resolve_model(n)).family in self.categories]
        return names[: self.limit] if self.limit else names

    def device_ids(self, inventory: dict, elsewhere: bool = False) -> list[str]:
        """The devices of this host to measure, from a detection's JSON: each --hardware entry
        that is a kind names this host's first device of it as it is (a kind not here is left
        out, as `make run` leaves out CUDA on a CPU host); a device id names that device, with
        its constraint profile (refused by name when it is not on this host, or cannot honour
        the profile). No --hardware: every measurable kind's first device. `elsewhere` (a broker
        dispatches runs to other hosts' workers): a device id not on this host is taken as it is."""
        from devicefit.fleet.devices import DeviceUnavailable
        from devicefit.fleet.partitions import local_device_ids, resolve_local

        def named(device: str) -> list[str]:
            try:
                return [resolve_local(device, inventory).device_id]
            except DeviceUnavailable:
                if elsewhere:
                    return [device]
                raise

        if not self.hardware:
            return local_device_ids(inventory)
        ids: list[str] = []
        for h in self.hardware:
            for d in (local_device_ids(inventory, [h]) if h in registry.measurable_kinds() else named(h)):
                if d not in ids:
                    ids.append(d)
        return ids

    def partition_keys(self, inventory: dict, elsewhere: bool = False) -> list[str]:
        """Multi-partition keys "<device id>|<model>" (Dagster orders dimensions by name)."""
        from devicefit.fleet.partitions import partition_key, split_device_id

        profile = self.sweep_profile
        named = bool(self.models)  # a model the user named is measured on every kind
        return [partition_key(d, name) for d in self.device_ids(inventory, elsewhere) for name in self.model_names()
                if named or profile.measures(split_device_id(d)[0].split("-", 1)[0], name)]


def partition_model_name(model: str) -> str:
    """The name a partition key carries for `model` (what the user typed): its model's name, which
    a partition resolves again by name alone. A local directory is not a name: its directory's
    name would measure whatever else that name means (a directory called bert-tiny measured the
    catalog's bert-tiny) or nothing, so it must be registered (`devicefit models add`) first."""
    from models.resolve import model_by_name

    spec = resolve_model(model)  # UnknownModelError names close matches
    named = model_by_name(spec.name)
    if named is None or named.source != spec.source or named.path != spec.path:
        if spec.path is not None and spec.path.is_file():  # a bare config file: the registry takes directories
            raise ValueError(f"--model {model}: a config file is measured by the pipeline under a registered name; put it "
                             "in a directory as config.json and register that (`devicefit models add DIR [--name NAME]`), "
                             "then --model NAME")
        raise ValueError(f"--model {model}: a local model directory is measured by the pipeline under a registered name; "
                         f"register it first (`devicefit models add {model} [--name NAME]`), then --model NAME")
    return spec.name


def _generates(model: str) -> bool:
    from benchmark_runners.generation import generation_reason
    from models.resolve import resolve_model

    try:
        return generation_reason(resolve_model(model)) is None
    except Exception:  # an unknown or broken model: its inference configs report why
        return False


def partition_configs(model: str, kind: str, selection: Selection, cpu_isa: list[str] | None = None) -> list[BenchmarkConfig]:
    """Every config one (model, hardware) partition measures under `selection`."""
    profile = selection.sweep_profile
    device, backend = registry.partition_device(kind), registry.backend_of_kind(kind).name
    precisions = selection.precisions or profile.precisions_for(kind, cpu_isa)
    sizes = selection.batch_sizes or profile.kind_batch_sizes.get(kind) or profile.batch_sizes
    # Batch sizes the user named are each measured: the profile's call budget skips none of them.
    policy = replace(profile.policy, call_budget_s=None) if selection.batch_sizes else profile.policy
    configs = [BenchmarkConfig(model=model, device=device, backend=backend, precision=p, batch_size=b,
                               seq_length=profile.seq_length, policy=policy)
               for p in precisions for b in sizes]
    if model in profile.long_sequence_models and not selection.batch_sizes and kind not in profile.kind_models:
        configs += [replace(c, seq_length=profile.long_sequence_length, batch_size=b)
                    for c in configs if c.batch_size == sizes[0] for b in profile.long_sequence_batch_sizes]
    train = selection.training_mode if selection.training_mode is not None else model in profile.training_models
    train = train and kind not in registry.inference_only_kinds()
    if train:
        train_sizes = selection.batch_sizes or profile.training_batch_sizes
        configs += [replace(configs[0], mode="training", precision="fp32", batch_size=b) for b in train_sizes]
    generate = selection.generation_mode if selection.generation_mode is not None else model in profile.generation_models
    if generate and "generation" in registry.backend_of_kind(kind).modes and kind not in profile.kind_models and _generates(model):
        configs += [replace(configs[0], mode="generation", precision="fp32", batch_size=b, seq_length=None,
                            policy=profile.generation_policy or policy)
                    for b in selection.batch_sizes or profile.generation_batch_sizes]
    return configs
