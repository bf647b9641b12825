"""The held-out TTFT check: each generation row's TTFT against what is served for it (the
forward pass at its prompt's length scaled to the prefill), predicted in the leave-one-model-out
folds of the forward-pass validation (training.held_out_predictions answers the requests built
here; training.validate reports the result)."""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from devicefit.predict.features import ModelPoint, model_point, prefill_point
from devicefit.predict.hardware_specs import row_device
from models.catalog import UnknownModelError
from models.recorded import resolve_recorded_model

if TYPE_CHECKING:
    from devicefit.predict.training_rows import TrainingData


@dataclass(frozen=True)
class ExtraRequest:
    """A forward pass outside the training rows, predicted by the fold that holds `group` out
    (a generation row's prefill: the forward pass at its prompt's length)."""
    group: str
    point: ModelPoint
    batch: int
    precision: str
    device: str
    backend: str
    # What the forward pass's answer is scaled to, by the fold's own roofline (a generation
    # request's prefill: PerformancePredictor.prefill_factor); None: the forward pass itself.
    scaled_to: ModelPoint | None = None


def ttft_requests(rows: list[dict[str, Any]], data: "TrainingData", categories: dict[str, list[str]]
                  ) -> tuple[list[ExtraRequest], list[dict[str, Any]]]:
    """The generation rows whose TTFT the leave-one-model-out folds can check: the device has a
    spec and the forward pass at the prompt's length is inside the trained domain (else the
    served answer is a fallback, not the predictor). A model with forward-pass rows is answered
    by the fold that holds it out; one without, by a fit on every row. Contended rows are left
    out. Returns the requests and, for each, what was measured."""
    from benchmark_runners.generation import request_shape

    specs = data.specs
    requests, measured = [], []
    for r in rows:
        if r.get("mode") != "generation" or r.get("status") != "ok" or not r.get("ttft_ms") or r.get("contended"):
            continue
        device = row_device(r)
        try:
            spec = resolve_recorded_model(r)
            shape = request_shape(spec, r.get("prompt_tokens"), r.get("new_tokens"))
            point = model_point(spec, shape.signature_seq_length)
        except (UnknownModelError, ValueError, FileNotFoundError):
            continue
        if (device not in specs or r["backend"] not in categories["backend"]
                or r["precision"] not in categories["precision"] or r["device_kind"] not in categories["device_kind"]
                or point.family not in categories["family"]):
            continue
        requests.append(ExtraRequest(point.name, point, r["batch_size"], r["precision"], device, r["backend"],
                                     prefill_point(spec, shape.signature_seq_length)))
        measured.append({"model": point.name, "held_out": "its fold" if point.name in data.models else "never trained on", "device": device, "backend": r["backend"], "precision": r["precision"],
                         "batch_size": r["batch_size"], "prompt_tokens": shape.prompt_tokens, "ttft_ms": float(r["ttft_ms"]),
                         "encoder_decoder": bool(spec.config.get("is_encoder_decoder") or "num_mel_bins" in spec.config)})
    return requests, measured


def ttft_validation(measured: list[dict[str, Any]], predicted: np.ndarray,
                    held_out_step_ms: dict[str, dict[str, float]] | None = None) -> dict[str, Any] | None:
    """MAPE of the served TTFT (the forward pass at the prompt's length, scaled to the prefill
    by the fold's own roofline, plus generate()'s per-step cost from the host line fitted
    without the model: `held_out_step_ms`, model -> device|backend -> ms, from
    decode_calibration.calibrate_generation) on held-out models: overall, for decoder-only models and per
    model; encoder-decoders (whose prefill differs most from the forward pass: the decoder over
    its start token against the prompt's length) are also counted apart. A row whose device has
    no line fitted without its model gets none (as served, it would get the static one)."""
    steps = held_out_step_ms or {}
    rows = []
    for m, p in zip(measured, predicted):
        if np.isnan(p):
            continue
        step = (steps.get(m["model"]) or {}).get(f"{m['device']}|{m['backend']}")
        rows.append({**m, "ttft_predicted_ms": float(p) + (step or 0.0), "generate_step_ms": step})
    if not rows:
        return None

    def mape(subset: list[dict[str, Any]]) -> float | None:
        return statistics.mean(abs(r["ttft_predicted_ms"] - r["ttft_ms"]) / r["ttft_ms"] for r in subset) if subset else None

    decoder_only = [r for r in rows if not r["encoder_decoder"]]
    return {"method": "leave one model out: each generation row's TTFT against the forward pass at its prompt's length, "
                      "scaled to the prefill by the fold's roofline, predicted by the fold that held its model out (a model with no forward-pass rows: by the fit on every row, which never saw it), "
                      "plus generate()'s per-step cost from the host line fitted on the other models' generation rows",
            "mape": mape(rows), "rows": len(rows), "decoder_only_mape": mape(decoder_only), "decoder_only_rows": len(decoder_only),
            "per_model": {m: {"mape": mape(sub), "rows": len(sub)} for m in sorted({r["model"] for r in rows})
                          for sub in [[r for r in rows if r["model"] == m]]},
            "held_out_rows": rows}
