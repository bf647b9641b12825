"""The spec 001 Python API: HardwareModelPredictor, the prediction matrix JSON, and
`train_prediction_models` (the guide's "custom prediction models": the pipeline's own training,
callable from Python)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmark_runners import registry
from devicefit import store
from devicefit.errors import DevicefitError
from devicefit.paths import DataPaths
from devicefit.predict import artifacts, served
from devicefit.predict.artifacts import PredictorUnavailable
from devicefit.predict.features import model_point, prefill_point
from devicefit.predict.matrix import MB, prediction_matrix
from devicefit.predict.predictor import PerformancePredictor, Prediction, Request
from devicefit.predict.training import ARTIFACT_FORMAT, InsufficientData
from devicefit.select.config import SelectionConfig, load_config
from devicefit.select.scoring import score_candidates
from models.resolve import resolve_model


def gpu_kinds() -> tuple[str, ...]:
    """Kinds whose devices hold a torch model in their own memory (cuda, rocm): what a
    distributed training plan's per-GPU memory describes."""
    return tuple(k.name for k in registry.kinds().values() if k.torch_device and not k.host_memory and not k.shares_device_of)


class PredictorSourceError(DevicefitError, ValueError):
    """A file given as training data or as a predictor that is not one devicefit can use."""


def train_prediction_models(db_path: str | Path | None = None, output_dir: str | Path | None = None) -> dict[str, Any]:
    """Trains the latency, throughput and memory predictors on every ok measurement of the
    DuckDB store at `db_path` (default: the data directory's), validates them on held-out
    models and publishes the artifact with `artifacts.save`. Returns the artifact, which
    `HardwareModelPredictor.prediction_models` accepts.

    The steps are the pipeline's `predictors` asset's (devicefit.predict.publish): each
    measured device's spec from the store's probes, the fleet's registered devices or this
    host's for kinds never measured, `training.train`, `artifacts.save`.

    `output_dir`: where the artifact is published, as `<output_dir>/predictors/current.json`
    beside its versioned file (the layout every reader of predictors expects); default the
    store's own data directory, which makes it the predictor everything there serves. The
    version is recorded in the store either way.

    Why only a DuckDB store: training scores every row against the probe of the device that
    measured it, and those probes live in the store's hardware table; a Parquet or CSV export
    of the rows lacks them. Too few measured models raise InsufficientData with the count
    and what was skipped."""
    from benchmark_runners.hardware import detect_hardware
    from devicefit.predict.publish import train_and_publish

    source = DataPaths.of_database(db_path) if db_path else DataPaths.default()
    database = source.database
    if not database.is_file():
        raise InsufficientData(f"no measurements to train on: there is no benchmark store at {database} "
                               "(measure first: `devicefit run`, or `make run`)")
    if not store.is_duckdb_file(database):
        raise PredictorSourceError(f"{database} is not a DuckDB store: devicefit trains from its DuckDB store of "
                                   "measurements and the probes of the devices that took them (a Parquet or CSV export "
                                   "carries no probes); pass the store, e.g. data/devicefit.duckdb")
    target = DataPaths(Path(output_dir).expanduser().resolve(), database) if output_dir else source
    return train_and_publish(source, detect_hardware(probe=False).to_json(), publish_to=target)


def _published(artifact: dict[str, Any], path: Path) -> PerformancePredictor:
    """The predictor of a published artifact of the right format; one that is damaged (a field
    missing or of another type, a booster LightGBM cannot parse) is PredictorUnavailable naming
    the file, as an unreadable one is, not an error of every request."""
    try:
        return PerformancePredictor(artifact)
    except Exception as exc:  # noqa: BLE001 - whatever is damaged in it, the artifact cannot be served
        raise PredictorUnavailable(f"published predictor {path} is damaged ({type(exc).__name__}: {exc}): "
                                   "retrain with `make run`") from None


class HardwareModelPredictor:
    """Predictions from the published predictor artifact (data/predictors/current.json).
    `database_path` and `benchmark_dir` locate the data directory; `config_path` (spec 002's
    selection configuration, over the shipped defaults) sets the weights and hardware preferences
    `predict_optimal_hardware` ranks by, the same scoring the selector applies after its
    constraints. A bad configuration is refused here, naming the field. Before any predictor
    is published it answers cold (devicefit.predict.cold_start): every answer `static_rule`,
    with the reason, on `inventory` where the caller has one (else this host's, detected: where
    no inventory is cached, that probes the CPU and starts a browser)."""

    def __init__(self, database_path: str | Path | None = None, benchmark_dir: str | Path | None = None,
                 config_path: str | Path | None = None, record: bool = True, config: SelectionConfig | None = None,
                 inventory: dict[str, Any] | None = None):
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

            self.predictor = PerformancePredictor(cold_artifact(inventory if inventory is not None else detect_hardware().to_json()))
        else:
            self.predictor = _published(artifact, artifacts.predictors_dir(self.paths) / artifacts.CURRENT)
        self.record = record  # served predictions are kept, to be checked against later measurements

    @property
    def prediction_models(self) -> dict[str, Any]:
        """The predictor artifact this instance answers from (trained, or the cold start's)."""
        return self.predictor.artifact

    @prediction_models.setter
    def prediction_models(self, artifact: dict[str, Any] | str | Path) -> None:
        """Answer from another artifact from now on: one `train_prediction_models` returned, or
        the path of a published predictor file. One of another format is refused, as
        `artifacts.load_current` refuses it, rather than misread."""
        if isinstance(artifact, (str, Path)):
            try:
                artifact = json.loads(Path(artifact).read_text())
            except (OSError, ValueError, RecursionError) as exc:  # not JSON, not UTF-8, or nested past the decoder
                raise PredictorSourceError(f"cannot read the predictor {artifact}: {exc}") from None
        found = artifact.get("format") if isinstance(artifact, dict) else None
        if found != ARTIFACT_FORMAT:
            raise PredictorUnavailable(f"not a predictor artifact this version reads: format {found!r}, expected {ARTIFACT_FORMAT!r}")
        self.predictor = PerformancePredictor(artifact)

    def train_prediction_models(self, output_dir: str | Path | None = None) -> dict[str, Any]:
        """Trains on this instance's store (module-level `train_prediction_models`), publishes
        the artifact (in this data directory unless `output_dir` is given) and answers from it."""
        artifact = train_prediction_models(self.paths.database, output_dir or self.paths.root)
        self.prediction_models = artifact
        return artifact

    def _predict(self, requests: list[Request], origin: str) -> list[Prediction]:
        preds = self.predictor.predict(requests)
        if self.record:
            served.record(self.paths, self.predictor, origin, requests, preds)
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
        """Spec 000's /performance/predict response: latency in ms, memory in MB, each with source.
        A torch device string (`cuda:0`, what `get_optimal_device` returns) is answered for its
        kind (`cuda`: the kind's device in the artifact) and keyed as it was asked, so
        `predictions[device]` finds it."""
        hardware = [hardware] if isinstance(hardware, str) else list(hardware)
        kinds = [registry.kind_of_device(hw) for hw in hardware]
        spec = resolve_model(model_name)
        if mode == "generation":
            return self.predict_generation_performance(spec, model_family, hardware, kinds, batch_size, sequence_length, precision)
        preds = self._predict(self._requests(model_name, kinds, [batch_size], [precision], mode, sequence_length), "api")
        point = model_point(spec, sequence_length)
        return {
            "model_name": spec.name, "model_family": model_family or point.family, "batch_size": batch_size,
            # the length the model is answered at; null for one without a token sequence (vision,
            # audio), which a requested length does not change
            "sequence_length": point.seq_length or None, "mode": mode, "precision": precision,
            "predictions": {hw: self._entry(p) for hw, p in zip(hardware, preds)},
            "predictor_version": self.predictor.version(),
        }

    def predict_generation_performance(self, spec, model_family: str | None, hardware: list[str], kinds: list[str], batch_size: int,
                            prompt: int | None, precision: str, new_tokens: int | None = None) -> dict[str, Any]:
        """The generation scenario per device (devicefit/predict/generation.py): TTFT from the
        forward-pass chain at the prompt's length, TPOT from the decode roofline calibrated on
        measured generation rows, the KV cache from the config. `latency` is the whole request
        (TTFT + (N - 1) x TPOT), `throughput` decode tokens/s, `memory_usage` the forward pass's
        memory at the prompt, scaled to the prefill's by the device's memory model, plus the whole
        KV cache."""
        from benchmark_runners.generation import generation_reason, request_shape
        from devicefit.predict.generation import predict_generation, ttft_answer
        from devicefit.predict.hardware_specs import published_spec

        reason = generation_reason(spec)
        if reason:
            raise ValueError(reason)
        shape = request_shape(spec, prompt, new_tokens)
        point = model_point(spec, shape.signature_seq_length)
        prefill = prefill_point(spec, shape.signature_seq_length)
        forward = self._predict([Request(point, batch_size, precision, "inference", k) for k in kinds], "api")
        calibration = self.predictor.artifact.get("generation") or {}
        predictions = {}
        for hw, kind, pred in zip(hardware, kinds, forward):
            device = self.predictor.specs.get(self.predictor.device_of(kind)) or self.predictor.specs.get(kind) or published_spec(kind)
            backend = Request(point, batch_size, precision, "inference", kind).backend
            refused = registry.backends()[backend].kind_reason(kind, precision, "generation")  # torch's int8: CPU only
            if refused:
                predictions[hw] = {"throughput": None, "latency": None, "memory_usage": None, "source": "unavailable",
                                   "detail": f"{kind}: {refused}", "interval_level": None, "throughput_interval": None,
                                   "latency_interval": None, "memory_interval": None}
                continue
            entry = predict_generation(spec, kind, backend, device, batch_size, precision, prompt, new_tokens,
                                       ttft_answer(pred, self.predictor.prefill_factor(Request(point, batch_size, precision, "inference", kind),
                                                                                       prefill)),
                                       calibration, self.predictor.device_of(kind))
            memory_factor = self.predictor.prefill_memory_factor(Request(point, batch_size, precision, "inference", kind), prefill)
            ratio, basis = memory_factor or (1.0, None)
            transient = entry.get("decode_transient_mb") or 0.0
            memory = None if pred.memory_bytes is None else pred.memory_bytes * ratio / MB + entry["kv_cache_mb"] + transient
            memory_detail = (f"the forward pass's memory at the prompt's length (its source: {pred.source}) x {ratio:.3f}, the "
                             f"prefill's peak over that pass's by {basis} (the prefill holds the last position's logits only), "
                             "plus the whole KV cache" if basis else
                             f"the forward pass's memory at the prompt's length (its source: {pred.source}; not scaled to the "
                             "prefill: no memory fit on the device, so every position's logits are counted) plus the whole KV cache")
            if transient:
                memory_detail += (f", plus {transient:.0f} MiB of one layer's expert copies that generate()'s batched_mm holds "
                                  "in a decode step (batch x experts per token; the allocator keeps the prefill's blocks beside them)")
            predictions[hw] = {**entry, "latency": entry.get("request_ms"), "throughput": entry.get("decode_tokens_per_s"),
                               "interval_level": None, "throughput_interval": None, "latency_interval": None, "memory_interval": None,
                               "memory_usage": memory, "source": entry["tpot_source"], "detail": entry["tpot_detail"],
                               "memory_detail": memory_detail}
        return {"model_name": spec.name, "model_family": model_family or point.family, "batch_size": batch_size,
                "sequence_length": shape.prompt_tokens, "mode": "generation", "precision": precision,
                "predictions": predictions, "predictor_version": self.predictor.version()}

    def predict_optimal_hardware(self, model_name: str, model_family: str | None = None, batch_size: int = 1,
                                 sequence_length: int | None = None, mode: str = "inference", precision: str = "fp32",
                                 available_hardware: list[str] | None = None, distributed: bool = False, gpu_count: int = 1,
                                 is_distributed: bool | None = None) -> dict[str, Any]:
        """Ranks the given hardware by the configuration's weighted score of the predictions
        (latency, throughput, memory, trust in the prediction's source, hardware preferences);
        hardware with no prediction is listed apart. No availability or memory constraint is
        applied here: that is `HardwareSelector.select_hardware`. Torch device strings in
        `available_hardware` count as their kinds.

        `distributed` (spec 001 spells it `is_distributed`) with `gpu_count`, for training:
        each GPU kind gets the plan of devicefit.select.distributed (the planner the selector's
        `distributed` uses) for `gpu_count` of its devices at their memory; a kind where even
        the fully sharded plan does not fit leaves the ranking with the planner's reason, as it
        does in the selector. Only GPU kinds are ranked then: the question is where to spread
        training over `gpu_count` GPUs, and a CPU has none to spread over (the others are listed
        in `not_distributed`)."""
        if is_distributed is not None:
            if distributed and not is_distributed:
                raise ValueError("distributed=True and is_distributed=False contradict each other; is_distributed is "
                                 "spec 001's name for distributed: pass one")
            distributed = is_distributed
        if mode == "generation":
            raise ValueError("mode generation: rank hardware on TPOT and TTFT with HardwareSelector.select_hardware(mode="
                             "'generation') (devicefit select --mode generation); predict_generation_performance gives the figures")
        hardware = list(dict.fromkeys(registry.kind_of_device(hw) for hw in available_hardware or registry.kind_names()))
        result = self.predict_performance(model_name, model_family, hardware, batch_size, sequence_length, mode, precision)
        preds = result["predictions"]
        predictable = {hw: {"latency": p["latency"], "throughput": p["throughput"], "memory_mb": p["memory_usage"], "source": p["source"]}
                       for hw, p in preds.items() if p["latency"] is not None}
        plans, unfit = self._distributed_plans(model_name, predictable, mode, batch_size, gpu_count, sequence_length) \
            if distributed else ({}, {})
        not_distributed = {hw: "not a GPU kind: nothing to distribute training over" for hw in predictable
                           if distributed and hw not in plans}
        for hw in [*unfit, *not_distributed]:
            del predictable[hw]
        if not predictable:
            out = {**unfit, **not_distributed}
            raise ValueError(f"no hardware among {', '.join(hardware)} has a prediction for {model_name}"
                             + (f" that can take it: {'; '.join(f'{k}: {v}' for k, v in out.items())}" if out else ""))
        scores = score_candidates(self.config, predictable, mode, result["model_family"])
        ranked = sorted(predictable, key=lambda hw: (-scores[hw]["score"], predictable[hw]["latency"]))

        def figures(hw: str) -> str:
            return f"{hw}: {preds[hw]['latency']:.1f} ms predicted ({preds[hw]['source']}), score {scores[hw]['score']:.2f}"

        explanation = "; vs ".join(figures(hw) for hw in ranked[:2])
        return {**{k: result[k] for k in ("model_name", "model_family", "batch_size", "sequence_length", "mode", "precision")},
                "primary_recommendation": ranked[0], "fallback_options": ranked[1:],
                "unpredictable": {hw: p["detail"] for hw, p in preds.items() if p["latency"] is None},
                "explanation": explanation, "prediction_source": preds[ranked[0]]["source"], "all_predictions": preds,
                "scores": scores, "config_source": self.config.source,
                **({"distributed": True, "gpu_count": gpu_count, "distributed_training": plans, "does_not_fit": unfit,
                       "not_distributed": not_distributed}
                   if distributed else {})}

    def _distributed_plans(self, model_name: str, kinds: dict[str, Any], mode: str, batch_size: int, gpu_count: int,
                           sequence_length: int | None) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
        """(plan per GPU kind, reason per GPU kind the plan cannot fit). A GPU kind is one whose
        devices hold models in their own memory (not the host's): the kinds the planner's
        per-GPU memory arithmetic describes. Memory per device: the predictor's device figure."""
        from devicefit.select.distributed import DistributedConfigError, plan_distributed_training

        if mode != "training":
            raise DistributedConfigError(f"distributed plans training; this request is mode={mode!r} (use mode='training')")
        gpus = [k for k in kinds if k in gpu_kinds()]
        if not gpus:
            raise DistributedConfigError(f"distributed training needs a GPU kind ({', '.join(gpu_kinds())}) with a prediction "
                                         f"among {', '.join(kinds) or 'none'}")
        spec = resolve_model(model_name)
        plans, unfit = {}, {}
        for kind in gpus:
            device = self.predictor.specs.get(kind)
            plan = plan_distributed_training(spec, gpu_count, batch_size, device.memory_gb if device else None, sequence_length)
            plans[kind] = {**plan.to_response(), "device_memory_source": device.source if device and device.memory_gb else
                           "no memory figure for this kind: planned without a memory bound"}
            if not plan.fits:
                unfit[kind] = plan.notes[-1]
        return plans, unfit

    def create_hardware_prediction_matrix(self, models: list[dict] | None = None, batch_sizes: list[int] | None = None,
                                          hardware_platforms: list[str] | None = None, precision: str | list[str] | None = None,
                                          mode: str = "inference") -> dict[str, Any]:
        on = (lambda reqs, preds: served.record(self.paths, self.predictor, "matrix", reqs, preds)) if self.record else None
        return prediction_matrix(self.predictor, models, batch_sizes, hardware_platforms, precision, mode, on)


    def visualize_matrix(self, matrix: dict[str, Any], output_dir: str | Path) -> list[str]:
        """Hardware comparison, batch-size scaling and precision/memory figures as HTML files."""
        from devicefit.predict.figures import write_matrix_figures

        return write_matrix_figures(matrix, output_dir)
