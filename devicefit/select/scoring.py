"""Candidates scored against each other with spec 002's configurable weights.

Shared by the selector (after its hard constraints) and `HardwareModelPredictor.
predict_optimal_hardware` (which has none), so both rank hardware the same way under the same
configuration. Each criterion is relative to the best candidate (best latency / this latency,
this throughput / best throughput, best memory / this memory), so a score says "how close to the
best option", never an absolute constant; the weighted mean is multiplied by the geometric mean
of the hardware's cost, availability and power factors.
"""
from __future__ import annotations

from typing import Any

from devicefit.select.config import SelectionConfig

# How far a prediction can be trusted, by the fallback link that produced it.
SOURCE_CONFIDENCE = {"trained_predictor": 1.0, "roofline_calibrated": 0.75, "static_rule": 0.5}


def score_candidates(config: SelectionConfig, predictions: dict[str, dict[str, Any]], mode: str,
                     family: str) -> dict[str, dict[str, Any]]:
    """`predictions`: per hardware kind, `latency` (ms), `throughput`, `memory_mb` and `source`.
    Returns per kind its `score`, `relative_scores`, the `weights` used, `preference` and
    `preference_factors`. A criterion some candidate has no figure for (a memory prediction
    can be absent) is left out for all of them, and so is absent from `weights`."""
    if not predictions:
        return {}
    pred = predictions.values()
    best = {"latency": min(p["latency"] for p in pred), "throughput": max(p["throughput"] for p in pred)}
    memory_known = all(p.get("memory_mb") for p in pred)
    if memory_known:
        best["memory"] = min(p["memory_mb"] for p in pred)
    weights = config.weights(mode, family)
    out: dict[str, dict[str, Any]] = {}
    for kind, p in predictions.items():
        components = {
            "latency_weight": best["latency"] / p["latency"], "throughput_weight": p["throughput"] / best["throughput"],
            "compatibility_weight": SOURCE_CONFIDENCE.get(p["source"], 0.0),
            # Convergence per step does not depend on the hardware at equal precision.
            "convergence_weight": 1.0,
        }
        if memory_known:
            components["memory_weight"] = best["memory"] / p["memory_mb"]
        used = {w: v for w, v in weights.items() if w in components}
        base = sum(used[w] * components[w] for w in used) / sum(used.values())
        preference, factors = config.preference(kind)
        out[kind] = {"score": base * preference, "relative_scores": {w.removesuffix("_weight"): components[w] for w in used},
                     "weights": used, "preference": preference, "preference_factors": factors}
    return out
