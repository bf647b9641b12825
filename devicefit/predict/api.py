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
from models.resolve import resolve_model


class HardwareModelPredictor:
    """Predictions from the published predictor artifact (data/predictors/current.json).
    `database_path` and `benchmark_dir` locate the data directory; `config_path` is accepted for
    the spec's signature and reserved for selection settings."""

    def __init__(self, database_path: str | Path | None = None, benchmark_dir: str | Path | None = None,
                 config_path: str | Path | None = None, record: bool = True):
        if benchmark_dir:
            self.paths = DataPaths(Path(benchmark_dir).resolve())
        elif database_path:
            self.paths = DataPaths(Path(database_path).resolve().parent)
        else:
            self.paths = DataPaths.default()
        self.config_path = config_path
        artifact = artifacts.load_current(self.paths)
        if artifact is None:
            raise PredictorUnavailable(f"no trained predictor in {artifacts.predictors_dir(self.paths)}: "
                                       "materialize the pipeline (`make run`) first")
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
        """Ranks the given hardware by predicted latency; hardware with no prediction is listed apart."""
        hardware = list(available_hardware or registry.kind_names())
        result = self.predict_performance(model_name, model_family, hardware, batch_size, sequence_length, mode, precision)
        ranked = sorted((hw for hw, p in result["predictions"].items() if p["latency"] is not None),
                        key=lambda hw: result["predictions"][hw]["latency"])
        if not ranked:
            raise ValueError(f"no hardware among {', '.join(hardware)} has a prediction for {model_name}")
        best = result["predictions"][ranked[0]]
        explanation = f"{ranked[0]}: {best['latency']:.1f} ms predicted ({best['source']})"
        if len(ranked) > 1:
            nxt = result["predictions"][ranked[1]]
            explanation += f" vs {ranked[1]} {nxt['latency']:.1f} ms ({nxt['source']})"
        return {**{k: result[k] for k in ("model_name", "model_family", "batch_size", "sequence_length", "mode", "precision")},
                "primary_recommendation": ranked[0], "fallback_options": ranked[1:],
                "unpredictable": {hw: p["detail"] for hw, p in result["predictions"].items() if p["latency"] is None},
                "explanation": explanation, "prediction_source": best["source"], "all_predictions": result["predictions"]}

    def create_hardware_prediction_matrix(self, models: list[dict] | None = None, batch_sizes: list[int] | None = None,
                                          hardware_platforms: list[str] | None = None, precision: str | list[str] | None = None,
                                          mode: str = "inference") -> dict[str, Any]:
        on = (lambda reqs, preds: served.record(self.paths, self.predictor.version(), "matrix", reqs, preds)) if self.record else None
        return prediction_matrix(self.predictor, models, batch_sizes, hardware_platforms, precision, mode, on)


    def visualize_matrix(self, matrix: dict[str, Any], output_dir: str | Path) -> list[str]:
        """Hardware comparison, batch-size scaling and precision/memory figures as HTML files."""
        from devicefit.predict.figures import write_matrix_figures

        return write_matrix_figures(matrix, output_dir)
