"""Hardware selection: hard constraints first, then candidates scored against each other.

A candidate is dropped, with the reason kept, when it is not available, not compatible (the
measured compatibility matrix says the family fails there, or nothing can predict it), does not
fit in the device's memory, or misses a latency bound. The rest are scored relative to the best
remaining candidate on each criterion by `scoring.score_candidates` (spec 002's configurable
weights, scaled by the family's importances, times the hardware's preference factors). Every answer lists `all_scores` and explains
itself with the numbers.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmark_runners import registry
from benchmark_runners.generation import request_shape
from benchmark_runners.records import MAX_ASKED_BATCH_SIZE
from devicefit.errors import DevicefitError
from devicefit.predict.api import HardwareModelPredictor
from devicefit.select.config import SelectionConfig, load_config
from devicefit.select.scoring import score_candidates
from models.analysis import parameter_count
from models.classifier import classify_spec
from models.resolve import resolve_model

# A generation task is answered on the generation scenario's figures (TTFT, TPOT, decode
# tokens/s), as its users judge it, never on one forward pass.
TASK_MODES = {"classification": "inference", "generation": "generation", "embedding": "inference",
              "speech_recognition": "inference", "fine_tuning": "training", "training": "training"}
TASK_FAMILIES = {"classification": ("vision", "embedding", "audio", "multimodal"), "generation": ("text_generation",),
                 "embedding": ("embedding",), "speech_recognition": ("audio",), "fine_tuning": None, "training": None}
MB = 2**20


class SelectionError(DevicefitError, ValueError):
    """A request the selector cannot answer (unknown task, no candidate left, bad batch size)."""


class CompatibilityMatrixError(DevicefitError, RuntimeError):
    """The published compatibility matrix is unreadable or breaks its contract (a damaged file)."""
    http_status = 503


def read_compatibility_matrix(path: Path) -> dict[str, Any] | None:
    """The published matrix, None when there is none; a damaged one is refused naming the file,
    never read as a matrix that says nothing (every answer would then claim none was published)."""
    from devicefit.contracts import ContractError, validate

    if not path.exists():
        return None
    try:
        document = json.loads(path.read_text())
        validate(path.name, document)
    except (OSError, ValueError, RecursionError) as exc:  # not JSON, not UTF-8, nested past the decoder, or ContractError
        reason = str(exc) if isinstance(exc, ContractError) else f"unreadable: {exc}"
        raise CompatibilityMatrixError(f"published compatibility matrix {path} is {reason}: "
                                       "materialize the pipeline again (`make run`)") from None
    return document


# Why a candidate is out, by kind: the first two say the hardware cannot run the model at all
# (it is not in `compatible_hardware`); the last two say this request's constraints rule it out.
EXCLUSION_LABELS = {"unavailable": "not available here", "incompatible": "incompatible",
                    "does_not_fit": "does not fit", "too_slow": "misses the latency bound"}
INCOMPATIBLE_EXCLUSIONS = ("unavailable", "incompatible")


@dataclass(frozen=True)
class Exclusion:
    kind: str  # a key of EXCLUSION_LABELS
    reason: str

    def __post_init__(self):
        if self.kind not in EXCLUSION_LABELS:
            raise ValueError(f"unknown exclusion kind {self.kind!r}")

    def __str__(self) -> str:
        return f"{EXCLUSION_LABELS[self.kind]}: {self.reason}"


def _exclude(entry: dict[str, Any], kind: str, reason: str) -> None:
    """Marks a candidate excluded: `exclusion` typed (kind, reason), `excluded` in words."""
    exclusion = Exclusion(kind, reason)
    entry["exclusion"] = asdict(exclusion)
    entry["excluded"] = str(exclusion)


def device_memory_bytes(kind: str, inventory: dict[str, Any], spec) -> tuple[float | None, str]:
    """Memory a workload can use on `kind`: the inventory's device when present (this machine's,
    or the fleet's registered one), else the published reference's, labelled."""
    devices = inventory.get("platforms", {}).get(kind, {}).get("devices") or []
    if devices and devices[0].get("memory_total_bytes"):
        where = f"registered device {devices[0]['device_id']}" if devices[0].get("device_id") else "here"
        return float(devices[0]["memory_total_bytes"]), f"{devices[0].get('name', kind)} {where}"
    registered = registry.kind(kind) if kind in registry.kind_names() else None
    host = registered.shares_device_of if registered else None
    if registered and not host and registered.software_runs_on and devices and devices[0].get("software"):
        host = registered.software_runs_on  # WebGPU on SwiftShader: a software adapter, in the host's RAM
    if host and host != kind:  # OpenVINO's CPU plugin holds its model in the CPU's RAM: the CPU's memory bounds it
        memory, source = device_memory_bytes(host, inventory, None)
        if memory is not None:
            return memory, f"{source} (the {host} {kind} runs on)"
    if spec is not None and spec.memory_gb:
        return spec.memory_gb * 1e9, f"{spec.name} ({spec.source})"
    if kind != "cpu":
        # Nothing says what this kind's device holds (a browser's WebGPU or WebNN adapter): the
        # model reaches it through the host's memory, so that bounds it from above. Unbounded, a
        # 70B model was recommended for the browser.
        memory, source = device_memory_bytes("cpu", inventory, None)
        if memory is not None:
            return memory, f"{source} (an upper bound: {kind}'s own memory is unknown, and its model loads through the host's)"
    return None, "no memory figure"


def _too_slow(p: dict[str, Any], max_latency_ms: float | None, max_tpot_ms: float | None,
              max_ttft_ms: float | None) -> str | None:
    """Why a candidate misses a latency bound (a figure the bound needs but nothing predicts
    misses it too: a bound is a promise), or None."""
    for bound, key, what in ((max_tpot_ms, "tpot_ms", "TPOT"), (max_ttft_ms, "ttft_ms", "TTFT"),
                             (max_latency_ms, "latency", "latency" if "tpot_ms" not in p else "request latency")):
        if bound is None:
            continue
        if p.get(key) is None:
            return f"no {what} prediction to hold to the {bound:g} ms bound"
        if p[key] > bound:
            return f"{what} {p[key]:.1f} ms predicted > {bound:g} ms"
    return None


def check_task(task_type: str, family: str) -> None:
    """SelectionError for a task type spec 002 does not name, or one a model of `family` does not
    do (speech recognition on an embedding model): the CLI's `select --task` and the API's
    /hardware/select refuse both alike."""
    if task_type not in TASK_MODES:
        raise SelectionError(f"unknown task_type '{task_type}'; known: {', '.join(TASK_MODES)}")
    families = TASK_FAMILIES[task_type]
    if families is not None and family not in families:
        raise SelectionError(f"task '{task_type}' does not apply to a {family} model (it applies to {', '.join(families)})")


class HardwareSelector:
    def __init__(self, database_path: str | Path | None = None, benchmark_dir: str | Path | None = None,
                 config_path: str | Path | None = None, inventory: dict[str, Any] | None = None, record: bool = True,
                 compatibility: dict[str, Any] | None = None):
        """`compatibility`: the matrix (family -> kind -> entry) when the caller has it (the
        pipeline hands over its stored table); else the published compatibility_matrix.json."""
        self.config: SelectionConfig = load_config(config_path)
        if inventory is None:
            from benchmark_runners.hardware import detect_hardware

            inventory = detect_hardware().to_json()
        # The predictor answers cold on the same inventory: detecting again where none is cached
        # probed the CPU and started a browser in the selection map's tracing helper, beside the
        # results run (and its Chromium, outliving the helper, failed the run's cleanup).
        self.inventory = inventory
        self.predictor = HardwareModelPredictor(database_path=database_path, benchmark_dir=benchmark_dir, config=self.config,
                                                record=record, inventory=inventory)
        matrix_path = self.predictor.paths.outputs / "compatibility_matrix.json"
        self.compatibility = read_compatibility_matrix(matrix_path) if compatibility is None else compatibility

    @property
    def compatibility_matrix(self) -> dict[str, Any] | None:
        """The published compatibility matrix this selector reads (spec 002's debugging name)."""
        return self.compatibility

    def availability(self, kind: str) -> tuple[bool, str | None]:
        """Whether `kind` can be chosen without the caller declaring it: this host has a device
        of it (its detection), or the fleet does (a registered device, as the published
        compatibility matrix lists them: a GPU box's CUDA device counts although this host has
        no GPU). The reason names both when neither has one."""
        platform = self.inventory.get("platforms", {}).get(kind, {})
        if platform.get("available"):
            return True, None
        families = (self.compatibility or {}).get("model_families", {}).values()
        registered = sorted({d for f in families for d in (f.get("hardware_compatibility", {}).get(kind) or {}).get("registered_devices") or []})
        if registered:
            return True, f"registered in the fleet: {', '.join(registered)}"
        here = platform.get("reason") or "not detected"
        return False, f"{here}; no registered device of it in the fleet" if self.compatibility else here

    def family_compatibility(self, family: str, kind: str) -> tuple[bool, str]:
        entry = ((self.compatibility or {}).get("model_families", {}).get(family, {})
                 .get("hardware_compatibility", {}).get(kind))
        if entry and entry.get("source") == "measured" and not entry.get("compatible"):
            return False, f"every {family} measurement on {kind} failed" + (f": {entry['reasons'][0]}" if entry.get("reasons") else "")
        return True, (entry or {}).get("source", "no compatibility matrix published")

    def select_hardware(self, model_family: str | None = None, model_name: str = "", batch_size: int = 1,
                        sequence_length: int | None = None, mode: str = "inference", precision: str = "fp32",
                        available_hardware: list[str] | None = None, task_type: str | None = None, distributed: bool = False,
                        gpu_count: int = 1, max_latency_ms: float | None = None, new_tokens: int | None = None,
                        max_tpot_ms: float | None = None, max_ttft_ms: float | None = None) -> dict[str, Any]:
        """Spec 000's /hardware/select response, plus `all_scores` (spec 002) and the constraints.

        Mode `generation` (or task `generation`) selects on the generation scenario's figures:
        `sequence_length` is the prompt (the context), `new_tokens` the tokens generated, and
        `max_tpot_ms` / `max_ttft_ms` bound the time per output token and to the first token
        (`max_latency_ms` then bounds the whole request)."""
        if not 1 <= batch_size <= MAX_ASKED_BATCH_SIZE:
            raise SelectionError(f"batch_size must be a positive integer up to {MAX_ASKED_BATCH_SIZE}, got {batch_size}")
        if task_type is not None:
            if task_type not in TASK_MODES:
                raise SelectionError(f"unknown task_type '{task_type}'; known: {', '.join(TASK_MODES)}")
            mode = TASK_MODES[task_type]
        if mode not in self.config.selection_criteria:
            raise SelectionError(f"selection runs on {' or '.join(self.config.selection_criteria)} figures; mode '{mode}' has no criteria")
        for name, bound in (("max_latency_ms", max_latency_ms), ("max_tpot_ms", max_tpot_ms), ("max_ttft_ms", max_ttft_ms)):
            if bound is not None and not (isinstance(bound, (int, float)) and math.isfinite(bound) and bound > 0):
                raise SelectionError(f"{name} must be a positive number of milliseconds, got {bound!r}")
        generation_only = [n for n, v in (("new_tokens", new_tokens), ("max_tpot_ms", max_tpot_ms), ("max_ttft_ms", max_ttft_ms))
                           if v is not None]
        if generation_only and mode != "generation":
            raise SelectionError(f"{', '.join(generation_only)}: apply to mode generation (the generation scenario), "
                                 f"not to mode {mode}")
        spec = resolve_model(model_name)
        family = model_family or classify_spec(spec).family or "unknown"
        parameters = parameter_count(spec)
        unknown = [k for k in (available_hardware or []) if k not in registry.kind_names()]
        if unknown:
            raise SelectionError(f"unknown hardware {', '.join(unknown)}; known: {', '.join(registry.kind_names())}")
        declared = available_hardware is not None
        # A kind named twice is one candidate (else it would be its own fallback).
        candidates = list(dict.fromkeys(available_hardware)) if declared else list(registry.kind_names())
        generation = mode == "generation"
        if generation:
            try:
                perf = self.predictor.predict_generation_performance(spec, model_family, candidates, candidates, batch_size,
                                                                     sequence_length, precision, new_tokens)
            except ValueError as exc:
                raise SelectionError(f"mode generation: {exc}") from None
        else:
            perf = self.predictor.predict_performance(model_name, family, candidates, batch_size, sequence_length, mode, precision)
        specs = self.predictor.predictor.specs
        scores: dict[str, dict[str, Any]] = {}
        for kind in candidates:
            p = perf["predictions"][kind]
            entry: dict[str, Any] = {"predictions": {"latency": p["latency"], "throughput": p["throughput"], "memory_mb": p["memory_usage"],
                                                     "source": p["source"], "latency_interval": p["latency_interval"]},
                                     "excluded": None}
            if generation:
                entry["predictions"].update({k: p.get(k) for k in ("tpot_ms", "ttft_ms", "kv_cache_mb", "tpot_source", "ttft_source")})
            scores[kind] = entry
            available, where = self.availability(kind)
            if not declared and not available:
                _exclude(entry, "unavailable", where)
                continue
            if where:
                entry["available_as"] = where
            compatible, evidence = self.family_compatibility(family, kind)
            entry["compatibility"] = evidence
            if not compatible:
                _exclude(entry, "incompatible", evidence)
                continue
            if (p.get("tpot_ms") if generation else p["latency"]) is None:
                _exclude(entry, "incompatible", p["detail"])
                continue
            capacity, capacity_source = device_memory_bytes(kind, self.inventory, specs.get(kind))
            entry["device_memory_gb"], entry["device_memory_source"] = (None if capacity is None else capacity / 1e9), capacity_source
            if p["memory_usage"] is None:  # generation: a TPOT can come from a published spec the forward chain lacks
                _exclude(entry, "incompatible", f"no memory prediction: {p.get('memory_detail') or p['detail']}")
                continue
            need = p["memory_usage"] * MB
            if distributed and mode == "training" and kind in ("cuda", "rocm") and capacity is not None:
                from devicefit.select.distributed import plan_distributed_training

                plan = plan_distributed_training(spec, gpu_count, batch_size, capacity / 1e9, sequence_length)
                entry["distributed"] = plan.to_response()
                need = plan.estimate.per_gpu if plan.fits else float("inf")
            entry["memory_needed_gb"] = need / 1e9
            if capacity is not None and need > capacity:
                _exclude(entry, "does_not_fit", f"needs {need / 1e9:.1f} GB of {capacity / 1e9:.1f} GB ({capacity_source})")
                continue
            slow = _too_slow(p, max_latency_ms, max_tpot_ms, max_ttft_ms)
            if slow:
                _exclude(entry, "too_slow", slow)
                continue
        feasible = [k for k in candidates if scores[k]["excluded"] is None]
        compatible = [k for k in candidates if (scores[k].get("exclusion") or {}).get("kind") not in INCOMPATIBLE_EXCLUSIONS]
        if not feasible:
            reasons = "; ".join(f"{k}: {scores[k]['excluded']}" for k in candidates)
            raise SelectionError(f"no hardware satisfies the constraints for {spec.name} (batch {batch_size}, {precision}, {mode}): {reasons}")
        for kind, scored in score_candidates(self.config, {k: scores[k]["predictions"] for k in feasible}, mode, family).items():
            scores[kind].update(scored)
        ranked = sorted(feasible, key=lambda k: -scores[k]["score"])
        primary = ranked[0]
        return {
            "model_family": family, "model_name": spec.name, "model_size": parameters,
            "model_size_category": self.config.size_category(parameters), "batch_size": batch_size,
            "sequence_length": perf["sequence_length"], "precision": precision, "mode": mode,
            **({"new_tokens": request_shape(spec, sequence_length, new_tokens).new_tokens} if generation else {}),
            "primary_recommendation": primary, "fallback_options": ranked[1:], "compatible_hardware": compatible,
            "explanation": self._explain(ranked, candidates, scores),
            "prediction_source": scores[primary]["predictions"]["source"],
            "all_scores": scores, "config_source": self.config.source, "predictor_version": perf["predictor_version"],
        }

    @staticmethod
    def _explain(ranked: list[str], candidates: list[str], scores: dict[str, dict[str, Any]]) -> str:
        def figures(k: str) -> str:
            s = scores[k]
            p = s["predictions"]
            memory = f"fits {s['memory_needed_gb']:.1f} of {s['device_memory_gb']:.1f} GB" if s.get("device_memory_gb") else \
                f"needs {s['memory_needed_gb']:.1f} GB"
            if "tpot_ms" in p:
                ttft = "TTFT unknown" if p["ttft_ms"] is None else f"TTFT {p['ttft_ms']:.1f} ms ({p['ttft_source']})"
                speed = f"TPOT {p['tpot_ms']:.2f} ms ({p['tpot_source']}), {ttft}, {p['throughput']:.1f} tokens/s"
            else:
                speed = f"{p['latency']:.1f} ms predicted ({p['source']}), {p['throughput']:.1f} samples/s"
            return f"{k}: {speed}, {memory}, score {s['score']:.2f}"

        parts = [figures(ranked[0])]
        parts += [f"vs {figures(k)}" for k in ranked[1:3]]
        excluded = [f"{k} excluded ({scores[k]['excluded']})" for k in candidates if scores[k]["excluded"]]
        return "; ".join(parts + excluded)

    def select_hardware_for_task(self, model_family: str | None, model_name: str, task_type: str, batch_size: int = 1,
                                 **kwargs) -> dict[str, Any]:
        """Spec 002's task types: the task fixes the mode (fine_tuning and training train)."""
        check_task(task_type, model_family or classify_spec(resolve_model(model_name)).family)
        result = self.select_hardware(model_family, model_name, batch_size, task_type=task_type, **kwargs)
        result["task_type"] = task_type
        return result

    def select_hardware_batch(self, models: list[dict[str, Any]], batch_size: int = 1, mode: str = "inference",
                              **kwargs) -> dict[str, Any]:
        """Spec 000's /hardware/batch response: per model, primary, fallbacks and explanation (or the error)."""
        out: dict[str, Any] = {}
        for m in models:
            try:
                r = self.select_hardware(m.get("family"), m["name"], batch_size, mode=mode, **kwargs)
                out[m["name"]] = {"primary": r["primary_recommendation"], "fallbacks": r["fallback_options"],
                                  "explanation": r["explanation"]}
            except (SelectionError, ValueError, LookupError) as exc:
                out[m["name"]] = {"primary": None, "fallbacks": [], "explanation": str(exc)}
        return out
