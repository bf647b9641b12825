"""Hardware-aware classification (spec 003): the family classifier's verdict joined with the
selector's recommendation, resource requirements from measured or predicted peaks, and what
this system can run.

Requirements are figures, not rules: minimum memory is the peak at batch 1, recommended memory
the upper end of the peak's interval at the recommended batch size (measured peaks carry no
interval and are used as they are), disk space the fp32 weight bytes a checkpoint holds, CPU
cores the physical cores the measurements ran on.
"""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmark_runners import registry
from devicefit.predict.api import MB
from devicefit.select.memory_search import measured_configs
from devicefit.select.selector import TASK_MODES, HardwareSelector, SelectionError
from devicefit.testgen.naming import template_file, template_for_family
from models.analysis import parameter_count, weight_bytes
from models.catalog import catalog_names
from models.classifier import classify, classify_spec
from models.resolve import resolve_model

# Hugging Face pipeline tasks -> the selector's task types.
HF_TASKS = {"fill-mask": "embedding", "feature-extraction": "embedding", "sentence-similarity": "embedding",
            "text-classification": "classification", "image-classification": "classification",
            "zero-shot-image-classification": "classification", "text-generation": "generation",
            "text2text-generation": "generation", "translation": "generation", "summarization": "generation",
            "automatic-speech-recognition": "speech_recognition", "audio-classification": "classification"}


class HardwareAwareModelClassifier:
    def __init__(self, selector: HardwareSelector | None = None, benchmark_dir: str | Path | None = None,
                 config_path: str | Path | None = None):
        self.selector = selector or HardwareSelector(benchmark_dir=benchmark_dir, config_path=config_path, record=False)
        self._measured: dict[tuple[str, str, str], dict] = {}  # one read of the store per (model, kind, mode)

    def _measured_configs(self, model: str, kind: str, mode: str) -> dict:
        key = (model, kind, mode)
        if key not in self._measured:
            self._measured[key] = measured_configs(self.selector.predictor.paths.database, model, kind, mode)
        return self._measured[key]

    def _peak_mb(self, model: str, kind: str, batch: int, mode: str) -> tuple[float, float, str]:
        """(peak MB, upper bound MB, basis) at one batch size: measured when it was, else predicted."""
        row = self._measured_configs(model, kind, mode).get((batch, "fp32"))
        if row is not None:
            return row["peak_rss_bytes"] / MB, row["peak_rss_bytes"] / MB, "measured"
        p = self.selector.predictor.predict_performance(model, None, kind, batch, None, mode, "fp32")["predictions"][kind]
        if p["memory_usage"] is None:
            raise SelectionError(f"no measurement and no prediction of {model} on {kind}: {p['detail']}")
        upper = p["memory_interval"][1] if p["memory_interval"] else p["memory_usage"]
        return p["memory_usage"], upper, f"predicted ({p['source']})"

    def resource_requirements(self, model: str, hardware: str, mode: str = "inference") -> dict[str, Any]:
        spec = resolve_model(model)
        batch = self.selector.config.batch_size_thresholds["medium"] if mode == "inference" else 1
        low, _, low_basis = self._peak_mb(spec.name, hardware, 1, mode)
        peak, upper, basis = self._peak_mb(spec.name, hardware, batch, mode)
        cpu = (self.selector.inventory.get("platforms", {}).get("cpu", {}).get("devices") or [{}])[0]
        return {"min_memory_mb": round(low), "recommended_memory_mb": round(max(upper, low)), "batch_size": batch,
                "cpu_cores": cpu.get("physical_cores"), "disk_space_mb": round(weight_bytes(spec, "fp32") / MB),
                "basis": {"min_memory_mb": f"peak at batch 1, {low_basis}",
                          "recommended_memory_mb": f"peak at batch {batch} ({peak:.0f} MB), upper interval bound, {basis}",
                          "disk_space_mb": "fp32 weight bytes", "cpu_cores": "physical cores of this machine's CPU"}}

    def hardware_profile(self, family: str) -> dict[str, dict[str, Any]]:
        """Per kind: compatible with the family (measured, declared or no backend) and available here."""
        profile = {}
        for kind in registry.kind_names():
            compatible, evidence = self.selector.family_compatibility(family, kind)
            platform = self.selector.inventory.get("platforms", {}).get(kind, {})
            has_prediction = kind in self.selector.predictor.predictor.specs
            profile[kind] = {"compatible": compatible and has_prediction, "evidence": evidence if has_prediction else
                             "no backend measures it and no spec predicts it", "system_available": bool(platform.get("available")),
                             "system_reason": platform.get("reason")}
        return profile

    def classify_model(self, model_name: str, model_class: str | None = None, tasks: list[str] | None = None,
                       batch_size: int = 1) -> dict[str, Any]:
        spec = resolve_model(model_name)
        verdict = classify(spec.name, spec.config, model_class or spec.architecture, tasks or list(spec.tasks))
        family = verdict.family or "unknown"
        selection = self.selector.select_hardware(family, spec.name, batch_size)
        hardware = selection["primary_recommendation"]
        return {
            "model_name": spec.name, "family": family, "subfamily": verdict.subfamily, "confidence": verdict.confidence,
            "evidence": [asdict(e) for e in verdict.evidence], "parameters": parameter_count(spec),
            "recommended_hardware": hardware, "fallback_hardware": selection["fallback_options"],
            "selection_explanation": selection["explanation"],
            "recommended_template": template_for_family(family), "template_available": template_file(template_for_family(family)).exists(),
            "resource_requirements": self.resource_requirements(spec.name, hardware),
            "hardware_profile": self.hardware_profile(family),
        }

    def get_optimal_resource_pool_config(self, models: list[str]) -> dict[str, Any]:
        """Memory to hold every model at once on each one's recommended hardware, and whether
        that forces a low-memory mode on this machine."""
        per_model = {m: self.classify_model(m) for m in models}
        total_mb = sum(c["resource_requirements"]["recommended_memory_mb"] for c in per_model.values())
        max_mb = max(c["resource_requirements"]["recommended_memory_mb"] for c in per_model.values())
        cpu = (self.selector.inventory.get("platforms", {}).get("cpu", {}).get("devices") or [{}])[0]
        available_mb = (cpu.get("memory_available_bytes") or cpu.get("memory_total_bytes") or 0) / MB
        hardware = [c["recommended_hardware"] for c in per_model.values()]
        preferred = max(set(hardware), key=hardware.count)
        return {
            "models": {m: {k: c[k] for k in ("family", "recommended_hardware", "resource_requirements")} for m, c in per_model.items()},
            "resource_requirements": {"max_memory_mb": max_mb, "total_memory_mb": total_mb, "system_available_mb": round(available_mb)},
            "resource_pool_config": {"low_memory_mode": bool(available_mb) and total_mb > available_mb,
                                     "reason": f"all models together need {total_mb} MB of {available_mb:.0f} MB available"},
            "hardware_recommendations": {"preferred_hardware": preferred,
                                         "torch_device": registry.torch_device(preferred) or preferred},
        }

    def recommend_model_for_task(self, task: str, hardware_constraints: list[str] | None = None, limit: int = 5) -> dict[str, Any]:
        """Catalog models that serve the task, ranked by predicted latency on the allowed hardware."""
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
            except SelectionError:
                continue
            best = r["all_scores"][r["primary_recommendation"]]["predictions"]
            verdict = classify_spec(spec)
            ranked.append({"model_name": name, "family": verdict.family, "subfamily": verdict.subfamily,
                           "confidence": verdict.confidence, "recommended_hardware": r["primary_recommendation"],
                           "predicted_latency_ms": best["latency"], "prediction_source": best["source"],
                           "resource_requirements": self.resource_requirements(name, r["primary_recommendation"], r["mode"])})
        ranked.sort(key=lambda m: m["predicted_latency_ms"])
        return {"task": task, "hardware_constraints": hardware_constraints or [], "recommendations": ranked[:limit]}

    def get_compatible_models_for_hardware(self, models: list[str], hardware: str) -> list[str]:
        """The models whose family is compatible with `hardware` and that can be predicted there."""
        if hardware not in registry.kind_names():
            raise SelectionError(f"unknown hardware {hardware}; known: {', '.join(registry.kind_names())}")
        out = []
        for m in models:
            family = classify_spec(resolve_model(m)).family or "unknown"
            if self.hardware_profile(family)[hardware]["compatible"]:
                out.append(m)
        return out
