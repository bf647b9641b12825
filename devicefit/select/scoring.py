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
    """`predictions`: per hardware kind, `latency` (ms), `throughput`, `memory_mb` and `source`;
    in the generation scenario also `tpot_ms` and `ttft_ms`. Returns per kind its `score`,
    `relative_scores`, the `weights` used, `preference` and `preference_factors`. A criterion
    some candidate has no figure for (a memory prediction can be absent) is left out for all of
    them, and so is absent from `weights`."""
    if not predictions:
        return {}
    pred = predictions.values()
    lower_is_better = {"latency_weight": "latency", "memory_weight": "memory_mb", "tpot_weight": "tpot_ms", "ttft_weight": "ttft_ms"}
    best = {w: min(p[f] for p in pred) for w, f in lower_is_better.items() if all(p.get(f) for p in pred)}
    best_throughput = max(p["throughput"] for p in pred)
    weights = config.weights(mode, family)
    out: dict[str, dict[str, Any]] = {}
    for kind, p in predictions.items():
        components = {
            "throughput_weight": p["throughput"] / best_throughput,
            "compatibility_weight": SOURCE_CONFIDENCE.get(p["source"], 0.0),
            # Convergence per step does not depend on the hardware at equal precision.
            "convergence_weight": 1.0,
        }
        components.update({w: b / p[lower_is_better[w]] for w, b in best.items()})
        used = {w: v for w, v in weights.items() if w in components}
        base = sum(used[w] * components[w] for w in used) / sum(used.values())
        preference, factors = config.preference(kind)
        out[kind] = {"score": base * preference, "relative_scores": {w.removesuffix("_weight"): components[w] for w in used},
                     "weights": used, "preference": preference, "preference_factors": factors}
    return out
