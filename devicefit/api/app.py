"""The REST API of spec 000, served from what the pipeline publishes.

It reads the published predictor (`data/predictors/current.json`), the compatibility matrix and
the hardware inventory cache, and rebuilds its selector when a newer predictor is published. It
never opens DuckDB, so it keeps answering while a benchmark run writes. Every error is JSON
`{"status": "error", "message": ...}`: 404 for an unknown model (with close catalog matches),
400 for a request the selector cannot satisfy, 413 for an oversized body, 422 for a malformed
one, 503 while no predictor has been published, 500 for anything unexpected.
"""
from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Literal, Optional

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from devicefit.api import schemas as s
from devicefit.benchmark_snapshot import SnapshotError, SnapshotReader, snapshot_path
from devicefit.paths import DataPaths

log = logging.getLogger("devicefit.api")
MAX_BODY_BYTES = 64 * 1024


@dataclass
class Settings:
    benchmark_dir: Path | None = None
    config_path: Path | None = None
    debug: bool = False
    #: Answers of /hardware/select and /performance/predict kept per published predictor (LRU);
    #: 0 turns the cache off. The answer to a request is a pure function of the predictor version.
    response_cache_size: int = 4096

    def paths(self) -> DataPaths:
        return DataPaths(self.benchmark_dir.resolve()) if self.benchmark_dir else DataPaths.default()


@dataclass
class ServiceState:
    """The selector over the currently published predictor, rebuilt when a newer one appears."""

    settings: Settings
    _selector: Any = None
    _stamp: float | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _snapshot: SnapshotReader | None = None
    _answers: OrderedDict = field(default_factory=OrderedDict)

    def answer(self, endpoint: str, request: Any, compute: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
        """`compute(selector)` for this request, or the answer already given to an identical
        request under the same published predictor. Repeats are not logged again as served
        predictions: the first answer was."""
        selector = self.selector()
        size = self.settings.response_cache_size
        if size <= 0:
            return compute(selector)
        key = (id(selector), endpoint, request.model_dump_json())
        with self._lock:
            if key in self._answers:
                self._answers.move_to_end(key)
                return self._answers[key]
        value = compute(selector)
        with self._lock:
            self._answers[key] = value
            while len(self._answers) > size:
                self._answers.popitem(last=False)
        return value

    def snapshot(self) -> SnapshotReader:
        if self._snapshot is None:
            self._snapshot = SnapshotReader(snapshot_path(self.settings.paths()))
        return self._snapshot

    def artifact_path(self) -> Path:
        from devicefit.predict.artifacts import CURRENT, predictors_dir

        return predictors_dir(self.settings.paths()) / CURRENT

    def selector(self):
        from devicefit.predict.api import PredictorUnavailable
        from devicefit.select.selector import HardwareSelector

        path = self.artifact_path()
        stamp = path.stat().st_mtime if path.exists() else None
        if stamp is None:
            raise PredictorUnavailable(f"no trained predictor in {path.parent}: materialize the pipeline (`make run`) first")
        with self._lock:
            if self._selector is None or stamp != self._stamp:
                from benchmark_runners.hardware import detect_hardware

                self._selector = HardwareSelector(benchmark_dir=self.settings.paths().root, config_path=self.settings.config_path,
                                                  inventory=detect_hardware(probe=False).to_json())
                self._stamp = stamp
                self._answers.clear()
                log.info("loaded predictor %s", self._selector.predictor.predictor.version())
            return self._selector


class BodySizeLimit:
    """Refuses a body over `limit` bytes with 413: by its Content-Length before reading anything,
    and while streaming for a chunked body that declares none. Plain ASGI, because Starlette's
    BaseHTTPMiddleware costs more per request than the selection itself."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.limit:
            return await _error(413, f"request body of {int(declared)} bytes exceeds the {self.limit} byte limit")(scope, receive, send)
        received = 0

        async def counting_receive():
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.limit:  # FastAPI passes an HTTPException from body reading through
                raise StarletteHTTPException(413, f"request body exceeds the {self.limit} byte limit")
            return message

        await self.app(scope, counting_receive, send)


def _measured_model_name(lookup, name: str) -> str:
    """The snapshot's or catalog's spelling of `name` (any case, or a catalog model's Hugging Face
    id); an unknown name is a 404 naming close matches. Never treated as a path on the server."""
    import difflib

    from models.catalog import UnknownModelError, load_catalog

    known = {r["model"].lower(): r["model"] for r in lookup.rows}
    for spec in load_catalog().values():
        known.setdefault(spec.name.lower(), spec.name)
        if spec.hf_id:
            known.setdefault(spec.hf_id.lower(), spec.name)
    if name.strip().lower() in known:
        return known[name.strip().lower()]
    close = difflib.get_close_matches(name.strip().lower(), list(known), n=3, cutoff=0.5)
    raise UnknownModelError(name, list(dict.fromkeys(known[c] for c in close)))


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse(status_code=status, content={"status": "error", "message": message})


def create_app(settings: Settings | None = None) -> FastAPI:
    from devicefit.predict.api import PredictorUnavailable
    from devicefit.select.config import SelectionConfigError
    from devicefit.select.distributed import DistributedConfigError
    from devicefit.select.selector import SelectionError
    from models.catalog import UnknownModelError

    settings = settings or Settings()
    state = ServiceState(settings)
    try:
        version = metadata.version("devicefit")
    except metadata.PackageNotFoundError:
        version = "unknown"
    app = FastAPI(title="devicefit", version=version, debug=settings.debug,
                  description="Which hardware, backend, precision and batch size should this model run on, and how fast and how "
                              "big will it be there? Answers from measurements and validated predictors, each labelled.")
    app.state.service = state

    app.add_middleware(BodySizeLimit, limit=MAX_BODY_BYTES)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException):
        # Starlette's own errors (unknown route, wrong method, unparseable body) in the spec's shape.
        return _error(exc.status_code, str(exc.detail))

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError):
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'] if p != 'body') or 'body'}: {e['msg']}" for e in exc.errors())
        return _error(422, f"invalid request: {problems}")

    @app.exception_handler(UnknownModelError)
    async def unknown_model(_: Request, exc: UnknownModelError):
        return _error(404, str(exc))

    for kind in (SelectionError, DistributedConfigError, SelectionConfigError):
        app.add_exception_handler(kind, lambda _r, exc: _error(400, str(exc)))

    @app.exception_handler(PredictorUnavailable)
    async def unavailable(_: Request, exc: PredictorUnavailable):
        return _error(503, str(exc))

    @app.exception_handler(SnapshotError)
    async def no_snapshot(_: Request, exc: SnapshotError):
        return _error(503, str(exc))

    @app.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception):
        log.exception("unexpected error")
        return _error(500, f"internal error: {type(exc).__name__}" + (f": {exc}" if settings.debug else ""))

    @app.get("/health", response_model=s.HealthResponse)
    def health() -> dict[str, Any]:
        paths = settings.paths()
        components = {"fastapi": True}
        try:
            import duckdb  # noqa: F401

            components["duckdb"] = True
        except ImportError:
            components["duckdb"] = False
        predictor_version = None
        try:
            predictor_version = state.selector().predictor.predictor.version()
            components["hardware_selection"] = components["hardware_prediction"] = True
        except (PredictorUnavailable, SelectionConfigError) as exc:
            components["hardware_selection"] = components["hardware_prediction"] = False
            predictor_version = str(exc)
        artifacts = {"predictor": predictor_version,
                     **{name: (paths.outputs / f"{name}.json").exists() for name in ("compatibility_matrix", "selection_map")},
                     "benchmark_snapshot": snapshot_path(paths).exists()}
        return {"status": "healthy" if all(components.values()) else "degraded", "version": version,
                "available_components": components, "database_connected": paths.database.exists(), "artifacts": artifacts}

    @app.get("/models", response_model=list[s.CatalogModel])
    def models() -> list[dict[str, Any]]:
        """The catalog: family (classified), exact parameter count, published count, tasks."""
        from models.analysis import parameter_count
        from models.catalog import load_catalog
        from models.classifier import classify_spec

        return [{"name": m.name, "hf_id": m.hf_id, "family": classify_spec(m).family, "parameters": parameter_count(m),
                 "published_parameters": m.published_parameters, "tasks": list(m.tasks)} for m in load_catalog().values()]

    @app.get("/predictors", response_model=list[s.PredictorVersion])
    def predictors() -> list[dict[str, Any]]:
        """Published predictor versions, newest first, with held-out error against the bars."""
        from devicefit.predict.artifacts import version_summaries

        return version_summaries(settings.paths())

    @app.get("/benchmarks", response_model=s.BenchmarksResponse)
    async def benchmarks(model: Optional[str] = Query(None, max_length=512), hardware: Optional[s.Kind] = None,
                   precision: Optional[s.Precision] = None, batch_size: Optional[int] = Query(None, ge=1, le=s.MAX_BATCH_SIZE),
                   mode: Optional[s.Mode] = None, backend: Optional[Literal["torch", "openvino"]] = None,
                   limit: int = Query(100, ge=1, le=1000)) -> dict[str, Any]:
        """Measured configurations from the pipeline's published snapshot (never DuckDB itself), medians over runs."""
        lookup = state.snapshot().current()
        if model is not None:
            model = _measured_model_name(lookup, model)
        rows = lookup.query(model, hardware, precision, batch_size, mode, backend)
        return {"generated_at": lookup.document["generated_at"], "total": len(rows), "results": rows[:limit]}

    @app.get("/hardware/detect", response_model=s.DetectResponse)
    def detect() -> dict[str, Any]:
        from benchmark_runners.hardware import detect_hardware

        platforms = detect_hardware(probe=False).to_json()["platforms"]
        return {"hardware": {k: bool(p.get("available")) for k, p in platforms.items()},
                "reasons": {k: p.get("reason") for k, p in platforms.items()}}

    # The three hot endpoints run on the event loop: their work (~0.3 ms) costs less than the hop
    # to the thread pool. The heavier ones (batch, map, analysis, distributed) stay sync.
    @app.post("/hardware/select", response_model=s.SelectResponse)
    async def select(req: s.SelectRequest) -> dict[str, Any]:
        return state.answer("select", req, lambda selector: selector.select_hardware(
            req.model_family, req.model_name, req.batch_size, req.sequence_length, req.mode, req.precision,
            req.available_hardware, req.task_type, req.distributed, req.gpu_count, req.max_latency_ms))

    @app.post("/hardware/batch", response_model=s.BatchResponse)
    def batch(req: s.BatchRequest) -> dict[str, Any]:
        return state.selector().select_hardware_batch([m.model_dump() for m in req.models], req.batch_size, req.mode)

    @app.post("/hardware/map", response_model=s.MapResponse)
    def hardware_map(req: s.MapRequest) -> dict[str, Any]:
        from devicefit.select.selection_map import selection_map

        return selection_map(state.selector(), req.model_families, req.batch_sizes, req.hardware_platforms)

    @app.post("/performance/predict", response_model=s.PredictResponse)
    async def predict(req: s.PredictRequest) -> dict[str, Any]:
        hardware = [req.hardware] if isinstance(req.hardware, str) else list(dict.fromkeys(req.hardware))
        return state.answer("predict", req, lambda selector: selector.predictor.predict_performance(
            req.model_name, req.model_family, hardware, req.batch_size, req.sequence_length, req.mode, req.precision))

    @app.post("/training/distributed", response_model=s.DistributedResponse)
    def distributed(req: s.DistributedRequest) -> dict[str, Any]:
        from devicefit.select.distributed import plan_distributed_training
        from models.catalog import resolve_model

        response = plan_distributed_training(resolve_model(req.model_name), req.gpu_count, req.batch_size, req.max_memory_gb,
                                             req.sequence_length, req.mixed_precision).to_response()
        if req.model_family:
            response["model_family"] = req.model_family
        return response

    @app.post("/analysis/model", response_model=s.AnalysisResponse)
    def analysis(req: s.AnalysisRequest) -> dict[str, Any]:
        from devicefit.select.analysis import analyze_model

        return analyze_model(state.selector(), req.model_name, req.model_family, req.batch_sizes, req.hardware_platforms,
                             state.snapshot().current_or_none())

    return app
