"""Hardware-aware classification (spec 003): the family classifier's verdict joined with the
selector's recommendation, resource requirements from measured or predicted peaks, and what
this system can run.

Requirements are figures, not rules: minimum memory is the peak at batch 1, recommended memory
the upper end of the peak's interval at the recommended batch size (measured peaks carry no
interval and are used as they are), disk space the fp32 weight bytes a checkpoint holds, CPU
cores the physical cores the measurements ran on. The resource pool's idle timeout comes from
measured load times (`recommended_timeout`).
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import statistics
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmark_runners import registry
from devicefit import store
from devicefit.errors import DevicefitError
from devicefit.predict.api import MB
from devicefit.predict.memory_model import memory_target
from devicefit.results_io import write_json_atomic
from devicefit.select.memory_search import measured_configs, on_device
from devicefit.select.selector import TASK_MODES, HardwareSelector, SelectionError
from devicefit.testgen.naming import template_file, template_for_family
from models.analysis import parameter_count, weight_bytes
from models.catalog import UnknownModelError, catalog_names
from models.classifier import classify, classify_spec
from models.resolve import resolve_model

log = logging.getLogger("devicefit.select")

# Hugging Face pipeline tasks -> the selector's task types.
HF_TASKS = {"fill-mask": "embedding", "feature-extraction": "embedding", "sentence-similarity": "embedding",
            "text-classification": "classification", "image-classification": "classification",
            "zero-shot-image-classification": "classification", "text-generation": "generation",
            "text2text-generation": "generation", "translation": "generation", "summarization": "generation",
            "automatic-speech-recognition": "speech_recognition", "audio-classification": "classification"}
#: The most of its time a resource pool may spend re-loading models its idle timeout freed.
RELOAD_SHARE = 0.01
OVERRIDE_EVIDENCE = "the caller's verdict (hw_compat_override)"
OVERRIDE_KEYS = {"compatible", "memory_usage"}


def cpu_cores_of(cpu: dict[str, Any]) -> tuple[int | None, str]:
    """The cores a model on this machine's CPU gets, and what they are: the physical cores, or
    where a cpuset or cgroup CPU quota restricts the process (hardware/cpu_budget.py) the
    threads its budget allows, which is what the measurements ran with."""
    threads = (cpu.get("cpu_budget") or {}).get("threads")
    if cpu.get("usable_cpus") is not None and threads:
        return threads, "the cores this process may use of this machine's CPU (its cpuset or cgroup CPU quota)"
    return cpu.get("physical_cores"), "physical cores of this machine's CPU"


class ClassifierInputError(DevicefitError, ValueError):
    """An argument of the classifier that cannot be used as given (the message says why)."""


class ModelList(list):
    """Model names, and the asked ones left out with the reason (`excluded`): one unknown name
    costs only its own answer, not the whole list's."""

    def __init__(self, names: list[str], excluded: dict[str, str]):
        super().__init__(names)
        self.excluded = excluded


class CallerCompatibility(HardwareSelector):
    """The selector with the caller's compatibility verdicts in place of the measured matrix's
    for the kinds they name: the same predictor, inventory, configuration and constraints, so a
    verdict changes which kinds are candidates and nothing else."""

    def __init__(self, selector: HardwareSelector, verdicts: dict[str, bool]):
        vars(self).update(vars(selector))
        self.verdicts = verdicts

    def family_compatibility(self, family: str, kind: str) -> tuple[bool, str]:
        if kind in self.verdicts:
            return self.verdicts[kind], OVERRIDE_EVIDENCE
        return super().family_compatibility(family, kind)


def _overrides(hw_compat_override: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """The caller's per-kind verdicts, checked: known kinds, `compatible` a bool, and
    `memory_usage.peak` (MB) a positive number where given."""
    if not hw_compat_override:
        return {}
    if not isinstance(hw_compat_override, dict):
        raise ClassifierInputError("hw_compat_override must map hardware kinds to {'compatible': bool, 'memory_usage': {'peak': MB}}")
    for kind, entry in hw_compat_override.items():
        if kind not in registry.kind_names():
            raise ClassifierInputError(f"hw_compat_override: unknown hardware {kind!r}; known: {', '.join(registry.kind_names())}")
        if not isinstance(entry, dict) or not isinstance(entry.get("compatible"), bool) or set(entry) - OVERRIDE_KEYS:
            raise ClassifierInputError(f"hw_compat_override[{kind!r}] must be {{'compatible': bool}}, optionally with "
                                       f"'memory_usage': {{'peak': MB}}; got {entry!r}")
        peak = (entry.get("memory_usage") or {}).get("peak")
        if "memory_usage" in entry and (not isinstance(peak, (int, float)) or isinstance(peak, bool) or peak <= 0):
            raise ClassifierInputError(f"hw_compat_override[{kind!r}]['memory_usage'] must be {{'peak': MB > 0}}; got {entry['memory_usage']!r}")
    return hw_compat_override


def _methods(spec, model_class: str | None, methods: list[str]) -> dict[str, Any]:
    """Which of `methods` the model's transformers class offers (`generate` only where the
    class can generate). They are checked, not weighed into the family: the classifier already
    weighs the architecture a class's methods come from, and counting them again would count
    the same evidence twice."""
    import transformers

    if isinstance(methods, str) or not all(isinstance(m, str) and m for m in methods):
        raise ClassifierInputError(f"methods must be a list of method names, got {methods!r}")
    name = model_class or spec.architecture
    cls = getattr(transformers, name, None)
    if cls is None:
        return {"model_class": name, "available": {m: None for m in methods},
                "reason": f"transformers {transformers.__version__} has no class {name}: the methods cannot be checked"}
    can_generate = getattr(cls, "can_generate", lambda: False)
    return {"model_class": name, "available": {m: callable(getattr(cls, m, None)) and (m != "generate" or bool(can_generate()))
                                               for m in methods}}


class ClassificationStore:
    """Classifications kept in a JSON file (spec 003's model database, `model_db_path`), so a
    repeated request skips the selection, the store reads and the predictions behind it. An
    entry is used only while everything it was computed from is unchanged: the request, the
    model's config, the predictor version, the store file, the compatibility matrix, the
    selection configuration and the hardware inventory (`stamp`); otherwise it is recomputed.
    A change of devicefit's own code is not tracked: classify with `force_refresh` after an
    upgrade. Concurrent writers are not merged (last one wins): it is a cache, not a record."""

    def __init__(self, path: str | Path, refresh: bool):
        self.path = Path(path).expanduser()
        self.entries: dict[str, Any] = {}
        if self.path.is_file() and not refresh:
            try:
                self.entries = json.loads(self.path.read_text()).get("classifications", {})
            except (OSError, ValueError, AttributeError) as exc:
                raise ClassifierInputError(f"model_db_path {self.path} is not a classification file this version wrote: {exc}") from None

    @staticmethod
    def stamp(selector: HardwareSelector, spec) -> str:
        database = selector.predictor.paths.database
        state = [selector.predictor.predictor.version(), [database.stat().st_mtime_ns, database.stat().st_size] if database.exists() else None,
                 selector.compatibility, repr(selector.config), selector.inventory, spec.architecture, spec.config]
        return hashlib.sha256(json.dumps(state, sort_keys=True, default=str).encode()).hexdigest()

    def get(self, key: str, stamp: str) -> dict[str, Any] | None:
        entry = self.entries.get(key)
        return entry["classification"] if entry and entry.get("stamp") == stamp else None

    def put(self, key: str, stamp: str, classification: dict[str, Any]) -> dict[str, Any]:
        self.entries[key] = {"stamp": stamp, "classification": json.loads(json.dumps(classification))}
        write_json_atomic(self.path, {"classifications": self.entries})
        return self.entries[key]["classification"]


class HardwareAwareModelClassifier:
    """`hardware_cache_path`: the hardware detection cache this classifier's selector detects
    through (re-detected when `force_refresh`); `model_db_path`: a JSON file keeping its
    classifications (ClassificationStore; `force_refresh` recomputes them)."""

    def __init__(self, selector: HardwareSelector | None = None, benchmark_dir: str | Path | None = None,
                 config_path: str | Path | None = None, hardware_cache_path: str | Path | None = None,
                 model_db_path: str | Path | None = None, force_refresh: bool = False):
        if selector is not None and hardware_cache_path is not None:
            raise ClassifierInputError("hardware_cache_path sets how a new selector detects hardware; the selector given has its inventory")
        if selector is None:
            inventory = None
            if hardware_cache_path is not None or force_refresh:
                from benchmark_runners.hardware import detect_hardware

                cache = Path(hardware_cache_path).expanduser() if hardware_cache_path is not None else None
                inventory = detect_hardware(refresh=force_refresh, cache_path=cache).to_json()
            selector = HardwareSelector(benchmark_dir=benchmark_dir, config_path=config_path, record=False, inventory=inventory)
        self.selector = selector
        self.classifications = ClassificationStore(model_db_path, force_refresh) if model_db_path is not None else None
        self._measured: dict[tuple[str, str, str], dict] = {}  # one read of the store per (model, kind, mode)
        self._rows: list[dict[str, Any]] | None = None

    def _device(self, kind: str) -> str:
        """The device the predictor answers `kind` for: measured figures are that one's too."""
        return self.selector.predictor.predictor.device_of(kind)

    def _measured_configs(self, model: str, kind: str, mode: str) -> dict:
        key = (model, kind, mode)
        if key not in self._measured:
            self._measured[key] = measured_configs(self.selector.predictor.paths.database, model, kind, mode, self._device(kind))
        return self._measured[key]

    def _peak_mb(self, spec, kind: str, batch: int, mode: str) -> tuple[float, float, str]:
        """(peak MB, upper bound MB, basis) at one batch size: measured when it was, else predicted."""
        model = spec.name
        row = self._measured_configs(model, kind, mode).get((batch, "fp32"))
        if row is not None and memory_target(row) is not None:  # else its peak is predicted, as for an unmeasured config
            peak = memory_target(row) / MB
            return peak, peak, "measured"
        # A local model is predicted by its path: its name is a directory's, which nothing resolves.
        reference = str(spec.path) if spec.source == "local" and spec.path else model
        p = self.selector.predictor.predict_performance(reference, None, kind, batch, None, mode, "fp32")["predictions"][kind]
        if p["memory_usage"] is None:
            raise SelectionError(f"no measurement and no prediction of {model} on {kind}: {p['detail']}")
        upper = p["memory_interval"][1] if p["memory_interval"] else p["memory_usage"]
        return p["memory_usage"], upper, f"predicted ({p['source']})"

    def resource_requirements(self, model: str, hardware: str, mode: str = "inference",
                              peak_mb: float | None = None) -> dict[str, Any]:
        """`peak_mb`: the caller's own peak on `hardware` (hw_compat_override's
        memory_usage.peak), which replaces the measured or predicted one."""
        spec = resolve_model(model)
        if mode == "generation":
            return self._generation_requirements(spec, model, hardware)
        batch = self.selector.config.batch_size_thresholds["medium"] if mode == "inference" else 1
        cpu = (self.selector.inventory.get("platforms", {}).get("cpu", {}).get("devices") or [{}])[0]
        cores, cores_basis = cpu_cores_of(cpu)
        common = {"cpu_cores": cores, "disk_space_mb": round(weight_bytes(spec, "fp32") / MB)}
        basis = {"disk_space_mb": "fp32 weight bytes", "cpu_cores": cores_basis}
        if peak_mb is not None:
            return {"min_memory_mb": round(peak_mb), "recommended_memory_mb": round(peak_mb), "batch_size": batch, **common,
                    "basis": {"min_memory_mb": f"peak on {hardware}, {OVERRIDE_EVIDENCE}",
                              "recommended_memory_mb": f"peak on {hardware}, {OVERRIDE_EVIDENCE}", **basis}}
        low, _, low_basis = self._peak_mb(spec, hardware, 1, mode)
        peak, upper, peak_basis = self._peak_mb(spec, hardware, batch, mode)
        return {"min_memory_mb": round(low), "recommended_memory_mb": round(max(upper, low)), "batch_size": batch, **common,
                "basis": {"min_memory_mb": f"peak at batch 1, {low_basis}",
                          "recommended_memory_mb": f"peak at batch {batch} ({peak:.0f} MB), upper interval bound, {peak_basis}", **basis}}

    def _generation_requirements(self, spec, model: str, hardware: str) -> dict[str, Any]:
        """A generating model's memory: the forward pass at its prompt (measured or predicted) plus
        the KV cache of the default request (256 prompt + 64 new tokens), and for a mixture of
        experts on a GPU one layer's batched_mm expert copies, at batch 1 and at the
        configuration's medium batch size."""
        from devicefit.predict.generation import batched_experts_bytes, cache_for

        def extra(batch: int) -> float:
            return (cache_for(spec, batch, "fp32", None, None).total_bytes + batched_experts_bytes(spec, batch, "fp32", hardware)) / MB

        out = self.resource_requirements(model, hardware, "inference")
        low = out["min_memory_mb"] + extra(1)
        batch = self.selector.config.batch_size_thresholds["medium"]
        high = out["recommended_memory_mb"] + extra(batch)
        out.update(min_memory_mb=round(low), recommended_memory_mb=round(max(high, low)))
        copies = "; plus one layer's expert copies a GPU decode step holds (batch x experts per token)" \
            if batched_experts_bytes(spec, 1, "fp32", hardware) else ""
        for key in ("min_memory_mb", "recommended_memory_mb"):
            out["basis"][key] += "; plus the KV cache of a 256 + 64-token request (config arithmetic)" + copies
        return out

    def hardware_profile(self, family: str, overrides: dict[str, dict[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
        """Per kind: compatible with the family (measured, declared or no backend; the caller's
        verdict where `overrides` has one) and available here."""
        profile = {}
        for kind in registry.kind_names():
            compatible, evidence = self.selector.family_compatibility(family, kind)
            platform = self.selector.inventory.get("platforms", {}).get(kind, {})
            has_prediction = kind in self.selector.predictor.predictor.specs
            if kind in (overrides or {}):
                compatible, evidence = overrides[kind]["compatible"], OVERRIDE_EVIDENCE + ("" if has_prediction else "; nothing predicts it")
            else:
                compatible, evidence = compatible and has_prediction, evidence if has_prediction else \
                    "no backend measures it and no spec predicts it"
            profile[kind] = {"compatible": compatible, "evidence": evidence, "system_available": bool(platform.get("available")),
                             "system_reason": platform.get("reason")}
        return profile

    def classify_model(self, model_name: str, model_class: str | None = None, tasks: list[str] | None = None,
                       batch_size: int = 1, methods: list[str] | None = None,
                       hw_compat_override: dict[str, Any] | None = None) -> dict[str, Any]:
        """Family, recommended hardware and requirements. `methods`: the model methods the
        caller will use, checked against its class (`_methods`). `hw_compat_override`: per kind,
        `compatible` replaces the measured verdict for this call (in the selection and the
        profile) and `memory_usage.peak` (MB) the peak the requirements use on that kind."""
        spec = resolve_model(model_name)
        overrides = _overrides(hw_compat_override)
        key = json.dumps([spec.name, model_class, tasks, batch_size, methods, overrides], sort_keys=True)
        stamp = ClassificationStore.stamp(self.selector, spec) if self.classifications else ""
        cached = self.classifications.get(key, stamp) if self.classifications else None
        if cached is not None:
            return cached
        verdict = classify(spec.name, spec.config, model_class or spec.architecture, tasks or list(spec.tasks))
        family = verdict.family or "unknown"
        selector = CallerCompatibility(self.selector, {k: v["compatible"] for k, v in overrides.items()}) if overrides else self.selector
        # By the name the caller gave: a local model directory is found by its path, not its name.
        selection = selector.select_hardware(family, model_name, batch_size)
        hardware = selection["primary_recommendation"]
        peak = (overrides.get(hardware, {}).get("memory_usage") or {}).get("peak")
        result = {
            "model_name": spec.name, "family": family, "subfamily": verdict.subfamily, "confidence": verdict.confidence,
            "evidence": [asdict(e) for e in verdict.evidence], "parameters": parameter_count(spec),
            "recommended_hardware": hardware, "fallback_hardware": selection["fallback_options"],
            "selection_explanation": selection["explanation"],
            "recommended_template": template_for_family(family), "template_available": template_file(template_for_family(family)).exists(),
            "resource_requirements": self.resource_requirements(model_name, hardware, peak_mb=peak),
            "hardware_profile": self.hardware_profile(family, overrides),
            **({"torch_device": registry.torch_device(hardware)} if registry.torch_device(hardware) else {}),
            **({"methods": _methods(spec, model_class, methods)} if methods is not None else {}),
            **({"hw_compat_override": overrides} if overrides else {}),
        }
        return self.classifications.put(key, stamp, result) if self.classifications else result

    def _load_seconds(self, model: str, kind: str) -> tuple[float | None, str]:
        """Seconds to load `model` on `kind` in fp32: the median of its measured load times;
        else its fp32 weight bytes at the median seconds per weight byte of the models measured
        on `kind` (loading is dominated by materialising the weights); else None."""
        own = [r["load_time_s"] for r in self._measured_configs(model, kind, "inference").values()
               if r["precision"] == "fp32" and r.get("load_time_s")]
        if own:
            return statistics.median(own), f"median of {len(own)} measured load(s) of {model} on {kind}"
        if self._rows is None:
            database = self.selector.predictor.paths.database
            self._rows = store.read_ok_measurements(database) if database.exists() else []
        by_model: dict[str, list[float]] = {}
        for r in on_device(self._rows, kind, self._device(kind)):
            if r["precision"] == "fp32" and r.get("load_time_s"):
                by_model.setdefault(r["model"], []).append(r["load_time_s"])
        rates = {}
        for name, seconds in by_model.items():
            try:
                rates[name] = statistics.median(seconds) / weight_bytes(resolve_model(name), "fp32")
            except UnknownModelError:
                continue  # a model no longer resolvable says nothing about this one's weights
        if not rates:
            return None, f"no load time of {model} or of any model measured on {kind}"
        rate = statistics.median(rates.values())
        return rate * weight_bytes(resolve_model(model), "fp32"), \
            f"{model}'s fp32 weights at the median load rate of {len(rates)} model(s) measured on {kind}"

    def recommended_timeout(self, placements: dict[str, str]) -> tuple[int | None, str]:
        """The resource pool's idle timeout in minutes for models placed as `placements` says
        (model -> kind). A model freed after T idle minutes is re-loaded at most once per T, so
        re-loading takes at most load time / T of the pool's time; T = load / RELOAD_SHARE keeps
        that at most 1% for the slowest-loading model, rounded up to a whole minute. None when a
        model's load time is neither measured nor derivable from measurements on its kind."""
        loads = {}
        for model, kind in placements.items():
            seconds, basis = self._load_seconds(model, kind)
            if seconds is None:
                return None, f"no timeout: {basis}"
            loads[model] = (seconds, basis)
        slowest = max(loads, key=lambda m: loads[m][0])
        seconds, basis = loads[slowest]
        minutes = max(1, math.ceil(seconds / RELOAD_SHARE / 60))
        return minutes, (f"{slowest} loads slowest, {seconds:.2f} s ({basis}); freeing idle models after {minutes} min keeps "
                         f"re-loading under {RELOAD_SHARE:.0%} of the pool's time")

    def get_optimal_resource_pool_config(self, models: list[str]) -> dict[str, Any]:
        """Memory to hold every model at once on each one's recommended hardware, whether that
        forces a low-memory mode on this machine, and the idle timeout (`recommended_timeout`)."""
        per_model = {m: self.classify_model(m) for m in models}
        # One model named twice (gpt2, GPT2, openai-community/gpt2) is one model in the pool: it
        # was counted once per spelling in the total, and the total decided low-memory mode.
        spellings: dict[str, list[str]] = {}
        for m, c in per_model.items():
            spellings.setdefault(c["model_name"], []).append(m)
        twice = {name: given for name, given in spellings.items() if len(given) > 1}
        if twice:
            raise SelectionError("a model is named more than once: " + "; ".join(
                f"{', '.join(given)} are all {name}" for name, given in twice.items()))
        total_mb = sum(c["resource_requirements"]["recommended_memory_mb"] for c in per_model.values())
        max_mb = max(c["resource_requirements"]["recommended_memory_mb"] for c in per_model.values())
        cpu = (self.selector.inventory.get("platforms", {}).get("cpu", {}).get("devices") or [{}])[0]
        available_mb = (cpu.get("memory_available_bytes") or cpu.get("memory_total_bytes") or 0) / MB
        hardware = [c["recommended_hardware"] for c in per_model.values()]
        preferred = max(set(hardware), key=hardware.count)
        timeout, timeout_basis = self.recommended_timeout({c["model_name"]: c["recommended_hardware"] for c in per_model.values()})
        return {
            "models": {m: {k: c[k] for k in ("family", "recommended_hardware", "resource_requirements")} for m, c in per_model.items()},
            "resource_requirements": {"max_memory_mb": max_mb, "total_memory_mb": total_mb, "system_available_mb": round(available_mb)},
            "resource_pool_config": {"low_memory_mode": bool(available_mb) and total_mb > available_mb,
                                     "reason": f"all models together need {total_mb} MB of {available_mb:.0f} MB available",
                                     "recommended_timeout_mins": timeout, "timeout_basis": timeout_basis},
            "hardware_recommendations": {"preferred_hardware": preferred,
                                         "torch_device": registry.torch_device(preferred) or preferred},
        }

    def recommend_model_for_task(self, task: str, hardware_constraints: list[str] | None = None, limit: int = 5) -> dict[str, Any]:
        """Catalog models that serve the task, ranked by predicted latency on the allowed hardware:
        at most `limit` of them, a positive integer (a negative one sliced the last models off,
        zero answered none)."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise SelectionError(f"limit must be a positive integer (at most this many models), got {limit!r}")
        task_type = HF_TASKS.get(task, task)
        if task_type not in TASK_MODES:
            raise SelectionError(f"unknown task '{task}'; known: {', '.join(sorted(set(HF_TASKS) | set(TASK_MODES)))}")
        hardware = hardware_constraints or None
        ranked = []
        for name in catalog_names():
            spec = resolve_model(name)
            if task in HF_TASKS and task not in spec.tasks:
                continue  # a Hugging Face task must be one the model serves; task types go by family
            try:
                r = self.selector.select_hardware_for_task(None, name, task_type, 1, available_hardware=hardware)
                best = r["all_scores"][r["primary_recommendation"]]["predictions"]
                resources = self.resource_requirements(name, r["primary_recommendation"], r["mode"])
            except (SelectionError, ValueError) as exc:
                log.info("recommend %s: %s left out: %s", task, name, exc)
                continue
            verdict = classify_spec(spec)
            entry = {"model_name": name, "family": verdict.family, "subfamily": verdict.subfamily,
                     "confidence": verdict.confidence, "recommended_hardware": r["primary_recommendation"],
                     # generation: the whole default request (TTFT + (N - 1) x TPOT), TPOT beside it
                     "predicted_latency_ms": best["latency"], "prediction_source": best["source"], "mode": r["mode"],
                     "resource_requirements": resources}
            if r["mode"] == "generation":
                entry.update(predicted_tpot_ms=best["tpot_ms"], predicted_ttft_ms=best["ttft_ms"])
            ranked.append(entry)
        # Ranked by latency (a generation request's when the task generates); a candidate whose
        # TTFT nothing predicts has no request latency and is ranked on TPOT after the others.
        ranked.sort(key=lambda m: (m["predicted_latency_ms"] is None, m["predicted_latency_ms"] or m.get("predicted_tpot_ms") or 0))
        return {"task": task, "hardware_constraints": hardware_constraints or [], "recommendations": ranked[:limit]}

    def get_compatible_models_for_hardware(self, models: list[str], hardware: str) -> ModelList:
        """The models whose family is compatible with `hardware` and that can be predicted there.
        A name that resolves to no model is left out, logged, and listed in `.excluded`."""
        if hardware not in registry.kind_names():
            raise SelectionError(f"unknown hardware {hardware}; known: {', '.join(registry.kind_names())}")
        out, excluded = [], {}
        for m in models:
            try:
                family = classify_spec(resolve_model(m)).family or "unknown"
            except UnknownModelError as exc:
                excluded[m] = str(exc)
                log.warning("left out of the %s compatibility list: %s", hardware, exc)
                continue
            if self.hardware_profile(family)[hardware]["compatible"]:
                out.append(m)
        return ModelList(out, excluded)


def get_hardware_aware_model_classification(model_name: str, model_class: str | None = None, tasks: list[str] | None = None,
                                            methods: list[str] | None = None, hw_compat_override: dict[str, Any] | None = None,
                                            **classifier_options: Any) -> dict[str, Any]:
    """Spec 003's one-call form: `HardwareAwareModelClassifier(**classifier_options)
    .classify_model(...)`, for a caller that classifies once (a new classifier detects hardware
    and loads the predictor each time; keep one classifier for many models)."""
    return HardwareAwareModelClassifier(**classifier_options).classify_model(
        model_name, model_class, tasks, methods=methods, hw_compat_override=hw_compat_override)
