"""The spec 001 Python API: HardwareModelPredictor and the prediction matrix JSON."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmark_runners import registry
from devicefit.paths import DataPaths
from devicefit.predict import artifacts, served
from devicefit.predict.artifacts import PredictorUnavailable
from devicefit.predict.features import model_point
from devicefit.predict.matrix import MB, prediction_matrix
from devicefit.predict.predictor import PerformancePredictor, Prediction, Request
from devicefit.select.config import SelectionConfig, load_config
from devicefit.select.scoring import score_candidates
from models.resolve import resolve_model


class HardwareModelPredictor:
    """Predictions from the published predictor artifact (data/predictors/current.json).
    `database_path` and `benchmark_dir` locate the data directory; `config_path` (spec 002's
    selection configuration, over the shipped defaults) sets the weights and hardware preferences
    `predict_optimal_hardware` ranks by, the same scoring the selector applies after its
    constraints. A bad configuration is refused here, naming the field. Before any predictor
    is published it answers cold (devicefit.predict.cold_start): every answer `static_rule`,
    with the reason."""

    def __init__(self, database_path: str | Path | None = None, benchmark_dir: str | Path | None = None,
                 config_path: str | Path | None = None, record: bool = True, config: SelectionConfig | None = None):
        if benchmark_dir:
            self.paths = DataPaths(Path(benchmark_dir).resolve())
        elif database_path:
            self.paths = DataPaths.of_database(database_path)
        else:
            self.paths = DataPaths.default()
        self.config = config or load_config(config_path)
        artifact = artifacts.load_current(self.paths)
        if artifact is None:  # cold start: the roofline on this host's probe and published datasheets, labelled
            from benchmark_runners.hardware import detect_hardware
            from devicefit.predict.cold_start import cold_artifact

            artifact = cold_artifact(detect_hardware().to_json())
        self.predictor = PerformancePredictor(artifact)
        self.record = record  # served predictions are kept, to be checked against later measurements

    def _predict(self, requests: list[Request], origin: str) -> list[Prediction]:
        preds = self.predictor.predict(requests)
        if self.record:
            served.record(self.paths, self.predictor.version(), origin, requests, preds)
        return preds

    def _requests(self, model_name: str, hardware: list[str], batch_sizes: list[int], precisions: list[str], mode: str,
                  sequence_length: int | None) -> list[Request]:
        point = model_point(resolve_model(model_name), sequence_length)
        return [Request(point, b, p, mode, hw) for hw in hardware for b in batch_sizes for p in precisions]

    @staticmethod
    def _entry(pred: Prediction) -> dict[str, Any]:
        return {
            "throughput": pred.throughput, "latency": pred.latency_ms,
            "memory_usage": None if pred.memory_bytes is None else pred.memory_bytes / MB,
            "source": pred.source, "detail": pred.detail, "interval_level": pred.interval_level,
            "throughput_interval": pred.throughput_interval, "latency_interval": pred.latency_interval,
            "memory_interval": None if pred.memory_interval is None else [x / MB for x in pred.memory_interval],
        }

    def predict_performance(self, model_name: str, model_family: str | None = None, hardware: str | list[str] = "cpu",
                            batch_size: int = 1, sequence_length: int | None = None, mode: str = "inference",
                            precision: str = "fp32") -> dict[str, Any]:
        """Spec 000's /performance/predict response: latency in ms, memory in MB, each with source."""
        hardware = [hardware] if isinstance(hardware, str) else list(hardware)
        spec = resolve_model(model_name)
        preds = self._predict(self._requests(model_name, hardware, [batch_size], [precision], mode, sequence_length), "api")
        point = model_point(spec, sequence_length)
        return {
            "model_name": spec.name, "model_family": model_family or point.family, "batch_size": batch_size,
            "sequence_length": point.seq_length or sequence_length, "mode": mode, "precision": precision,
            "predictions": {hw: self._entry(p) for hw, p in zip(hardware, preds)},
            "predictor_version": self.predictor.version(),
        }

    def predict_optimal_hardware(self, model_name: str, model_family: str | None = None, batch_size: int = 1,
                                 sequence_length: int | None = None, mode: str = "inference", precision: str = "fp32",
                                 available_hardware: list[str] | None = None) -> dict[str, Any]:
        """Ranks the given hardware by the configuration's weighted score of the predictions
        (latency, throughput, memory, trust in the prediction's source, hardware preferences);
        hardware with no prediction is listed apart. No availability or memory constraint is
        applied here: that is `HardwareSelector.select_hardware`."""
        hardware = list(available_hardware or registry.kind_names())
        result = self.predict_performance(model_name, model_family, hardware, batch_size, sequence_length, mode, precision)
        preds = result["predictions"]
        predictable = {hw: {"latency": p["latency"], "throughput": p["throughput"], "memory_mb": p["memory_usage"], "source": p["source"]}
                       for hw, p in preds.items() if p["latency"] is not None}
        if not predictable:
            raise ValueError(f"no hardware among {', '.join(hardware)} has a prediction for {model_name}")
        scores = score_candidates(self.config, predictable, mode, result["model_family"])
        ranked = sorted(predictable, key=lambda hw: (-scores[hw]["score"], predictable[hw]["latency"]))

        def figures(hw: str) -> str:
            return f"{hw}: {preds[hw]['latency']:.1f} ms predicted ({preds[hw]['source']}), score {scores[hw]['score']:.2f}"

        explanation = "; vs ".join(figures(hw) for hw in ranked[:2])
        return {**{k: result[k] for k in ("model_name", "model_family", "batch_size", "sequence_length", "mode", "precision")},
                "primary_recommendation": ranked[0], "fallback_options": ranked[1:],
                "unpredictable": {hw: p["detail"] for hw, p in preds.items() if p["latency"] is None},
                "explanation": explanation, "prediction_source": preds[ranked[0]]["source"], "all_predictions": preds,
                "scores": scores, "config_source": self.config.source}

    def create_hardware_prediction_matrix(self, models: list[dict] | None = None, batch_sizes: list[int] | None = None,
                                          hardware_platforms: list[str] | None = None, precision: str | list[str] | None = None,
                                          mode: str = "inference") -> dict[str, Any]:
        on = (lambda reqs, preds: served.record(self.paths, self.predictor.version(), "matrix", reqs, preds)) if self.record else None
        return prediction_matrix(self.predictor, models, batch_sizes, hardware_platforms, precision, mode, on)


    def visualize_matrix(self, matrix: dict[str, Any], output_dir: str | Path) -> list[str]:
        """Hardware comparison, batch-size scaling and precision/memory figures as HTML files."""
        from devicefit.predict.figures import write_matrix_figures

        return write_matrix_figures(matrix, output_dir)
