"""The REST API of spec 000, served from what the pipeline publishes.

It reads the published predictor (`data/predictors/current.json`), the compatibility matrix and
the hardware inventory cache, and rebuilds its selector when a newer predictor is published. It
never opens DuckDB, so it keeps answering while a benchmark run writes. Every error is JSON
`{"status": "error", "message": ...}`: 404 for an unknown model (with close catalog matches),
400 for a request the selector cannot satisfy, 413 for an oversized body, 422 for a malformed
one or one out of the model's range (a sequence longer than the model takes, a registered
model over the size limits), 503 for what needs a published snapshot before one exists (before
any predictor is published, predictions answer cold: devicefit.predict.cold_start), 500 for
anything unexpected. Every route is served at its path and again under /api (spec 000's browser example
posts to /api/hardware/select); where a hardware kind is asked for, a torch device string of it
(`cuda:0`) is taken too.

Models are named, never located: a `model_name` is a catalog name, a Hugging Face id of a
catalog model or a model the operator registered (models.registry); a path on the server is
an unknown name like any other. Nothing global changes while a request runs: every import,
every registered model's check and every catalog model's trace happens at start-up (the
lifespan), and traces that a request still needs (an unusual sequence length) run off the event
loop under per-model locks (models.op_profile).
"""
from __future__ import annotations

import contextlib
import logging
from importlib import metadata
from pathlib import Path
from typing import Any, Optional

from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import TypeAdapter, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from devicefit.api import schemas as s
from devicefit.api.state import ServiceState, Settings
from devicefit.benchmark_snapshot import SnapshotError, snapshot_path
from devicefit.errors import DevicefitError
from devicefit.landing_schema import describe

log = logging.getLogger("devicefit.api")
MAX_BODY_BYTES = 64 * 1024


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


class ModelInputError(DevicefitError, ValueError):
    """A request valid by the schema that the named model cannot take (422)."""
    http_status = 422


def _model_input(spec, sequence_length: int | None) -> None:
    """422 for a sequence length the model cannot take (longer than its position table), naming
    the model's limit; the same rule the predictor's input signature applies."""
    from models.inputs import input_signature

    try:
        input_signature(spec, 1, sequence_length)
    except ValueError as exc:
        raise ModelInputError(f"sequence_length: {exc}") from None


def _generation_input(spec, prompt: int | None, new_tokens: int | None) -> int | None:
    """422 for a model that does not generate, or a request longer than its positions; else the
    sequence length its prefill is traced at."""
    from benchmark_runners.generation import generation_reason, request_shape

    reason = generation_reason(spec)
    if reason:
        raise ModelInputError(f"mode generation: {reason}")
    try:
        return request_shape(spec, prompt, new_tokens).signature_seq_length
    except ValueError as exc:
        raise ModelInputError(f"sequence_length/new_tokens: {exc}") from None


def _task_input(spec, family: str | None, task_type: str) -> None:
    """422 for a task the model does not do (speech recognition on an embedding model): the
    check the CLI's `select --task` makes (selector.check_task), which select_hardware,
    answering in the task's mode alone, does not."""
    from devicefit.select.selector import SelectionError, check_task
    from models.classifier import classify_spec

    try:
        check_task(task_type, family or classify_spec(spec).family)
    except SelectionError as exc:
        raise ModelInputError(f"task_type: {exc}") from None


def _kinds(devices: list[str] | None) -> list[str] | None:
    """The kinds asked for, in order and once each: torch device strings (cuda:0) name their
    kinds, and the selector, the map and the analysis choose among kinds."""
    from benchmark_runners.registry import kind_of_device

    return list(dict.fromkeys(map(kind_of_device, devices))) if devices else None


def _measured_model_name(lookup, name: str, registered: list[str]) -> str:
    """The snapshot's, catalog's or registry's spelling of `name` (any case, a catalog model's
    Hugging Face id, or an alias, looked up last as ModelNames.resolve does); an unknown name is
    a 404 naming close matches. Never treated as a path on the server."""
    from models.aliases import alias_names
    from models.catalog import UnknownModelError, catalog_model, close_names

    query = name.strip()
    others = {**alias_names(), **{model.lower(): model for model in [*registered, *(r["model"] for r in lookup.rows)]}}
    spec = catalog_model(query)
    if spec is not None:
        return spec.name
    if query.lower() in others:
        return others[query.lower()]
    raise UnknownModelError(name[:200], close_names(query, others),
                            known_as="not measured, not a catalog model and not a model registered on this server")


def _problem(error: dict[str, Any]) -> str:
    """One validation error in words: the field, and for a body that is not JSON where and why;
    a body that is not a JSON object at all because it was not sent as JSON says so."""
    where = ".".join(str(p) for p in error["loc"] if p != "body") or "body"
    if error.get("type") == "json_invalid":
        return f"body is not valid JSON at character {error['loc'][-1]}: {(error.get('ctx') or {}).get('error', error['msg'])}"
    if error["loc"] == ("body",) and isinstance(error.get("input"), (bytes, str)):
        return "body: expected a JSON object sent with Content-Type: application/json"
    return f"{where}: {error['msg']}"


def _unparseable_body(exc: StarletteHTTPException) -> str | None:
    """FastAPI's 400 "There was an error parsing the body" for JSON the decoder cannot take
    (nested past the recursion limit, not UTF-8, an integer of thousands of digits), said as
    the 422 of any other malformed body, with the reason."""
    cause = exc.__cause__
    if exc.status_code != 400 or cause is None or exc.detail != "There was an error parsing the body":
        return None
    if isinstance(cause, RecursionError):
        reason = "nested too deeply"
    elif isinstance(cause, UnicodeDecodeError):
        reason = f"not UTF-8 ({cause.reason} at byte {cause.start})"
    else:
        reason = str(cause)[:200] or type(cause).__name__
    return f"invalid request: body is not JSON this server can read: {reason}"


_BENCHMARK_ROWS = TypeAdapter(list[s.BenchmarkRow])


def _served_rows(rows: list[dict[str, Any]], path: Path) -> list[dict[str, Any]]:
    """The snapshot rows a /benchmarks answer serves, checked as the answer declares them: a row
    the snapshot's contract admits but the answer cannot hold (a field missing, input_dims not an
    object, a byte count past an integer) is the snapshot's damage, 503 naming the file, not a 500."""
    try:
        _BENCHMARK_ROWS.validate_python(rows)
    except ValidationError as exc:
        raise SnapshotError(f"benchmark snapshot {path} is damaged: {describe(exc, 'results')}") from None
    return rows


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse(status_code=status, content={"status": "error", "message": message})


def create_app(settings: Settings | None = None) -> FastAPI:
    from benchmark_runners.registry import kind_of_device
    from devicefit.select.selector import TASK_MODES
    from models.catalog import InvalidModelError, UnknownModelError

    settings = settings or Settings()
    state = ServiceState(settings)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI):
        await run_in_threadpool(state.start)
        yield

    try:
        version = metadata.version("devicefit")
    except metadata.PackageNotFoundError:
        version = "unknown"
    app = FastAPI(title="devicefit", version=version, debug=settings.debug, lifespan=lifespan,
                  description="Which hardware, backend, precision and batch size should this model run on, and how fast and how "
                              "big will it be there? Answers from measurements and validated predictors, each labelled.")
    app.state.service = state

    app.add_middleware(BodySizeLimit, limit=MAX_BODY_BYTES)
    router = APIRouter()  # served at / and again under /api (spec 000's browser example posts to /api/...)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException):
        # Starlette's own errors (unknown route, wrong method, unparseable body) in the spec's shape.
        unparseable = _unparseable_body(exc)
        return _error(422, unparseable) if unparseable else _error(exc.status_code, str(exc.detail))

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError):
        return _error(422, f"invalid request: {'; '.join(map(_problem, exc.errors()))}")

    @app.exception_handler(DevicefitError)
    async def devicefit_error(_: Request, exc: DevicefitError):
        # Every error devicefit raises on purpose, answered with its own status and message.
        if exc.http_status >= 500:
            log.error("%s: %s", type(exc).__name__, exc)
        return _error(exc.http_status, exc.public_message())

    @app.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception):
        log.exception("unexpected error")
        return _error(500, f"internal error: {type(exc).__name__}" + (f": {exc}" if settings.debug else ""))

    @router.get("/health", response_model=s.HealthResponse)
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
        except DevicefitError as exc:  # no usable predictor, config or compatibility matrix: said, not a 500
            components["hardware_selection"] = components["hardware_prediction"] = False
            predictor_version = str(exc)
        artifacts = {"predictor": predictor_version,
                     **{name: (paths.outputs / f"{name}.json").exists() for name in ("compatibility_matrix", "selection_map")},
                     "benchmark_snapshot": snapshot_path(paths).exists()}
        return {"status": "healthy" if all(components.values()) else "degraded", "version": version,
                "available_components": components, "database_connected": paths.database.exists(), "artifacts": artifacts}

    @router.get("/models", response_model=list[s.CatalogModel])
    def models() -> list[dict[str, Any]]:
        """The catalog and the models registered on this server: family (classified), exact
        parameter count, published count, tasks."""
        from models.analysis import parameter_count
        from models.catalog import load_catalog
        from models.classifier import classify_spec

        served = [(m, "catalog") for m in load_catalog().values()] + [(m, "registered") for m in state.names().registered.values()]
        return [{"name": m.name, "hf_id": m.hf_id if source == "catalog" else None, "family": classify_spec(m).family,
                 "parameters": parameter_count(m), "published_parameters": m.published_parameters, "tasks": list(m.tasks),
                 "source": source} for m, source in served]

    @router.get("/predictors", response_model=list[s.PredictorVersion])
    def predictors() -> list[dict[str, Any]]:
        """Published predictor versions, newest first, with held-out error against the bars."""
        from devicefit.predict.artifacts import version_summaries

        return version_summaries(settings.paths())

    @router.get("/benchmarks", response_model=s.BenchmarksResponse)
    async def benchmarks(request: Request, model: Optional[str] = Query(None, max_length=512), hardware: Optional[s.Hardware] = None,
                   precision: Optional[s.Precision] = None, batch_size: Optional[int] = Query(None, ge=1, le=s.MAX_BATCH_SIZE),
                   mode: Optional[s.Mode] = None, backend: Optional[s.Backend] = None,
                   limit: int = Query(100, ge=1, le=1000)) -> dict[str, Any]:
        """Measured configurations from the pipeline's published snapshot (never DuckDB itself), medians over runs.
        A filter given twice is refused: a scalar query parameter keeps only its last value, so
        `batch_size=1&batch_size=4` answered batch 4 alone."""
        repeated = [(name, n) for name in dict.fromkeys(request.query_params.keys()) if (n := len(request.query_params.getlist(name))) > 1]
        if repeated:
            raise RequestValidationError([{"type": "value_error", "loc": ("query", name), "msg": f"given {n} times; give it once"}
                                          for name, n in repeated])
        lookup = state.snapshot().current()
        if model is not None:
            model = _measured_model_name(lookup, model, state.names().names())
        kind = kind_of_device(hardware) if hardware else None  # "cuda:0" asks for the kind's rows
        rows = lookup.query(model, kind, precision, batch_size, mode, backend)
        return {"generated_at": lookup.document["generated_at"], "model": model, "total": len(rows),
                "results": _served_rows(rows[:limit], snapshot_path(settings.paths()))}

    @router.get("/hardware/detect", response_model=s.DetectResponse)
    def detect() -> dict[str, Any]:
        from benchmark_runners.hardware import detect_hardware

        platforms = detect_hardware(probe=False).to_json()["platforms"]
        return {"hardware": {k: bool(p.get("available")) for k, p in platforms.items()},
                "reasons": {k: p.get("reason") for k, p in platforms.items()}}

    # The hot endpoints run on the event loop: their work (~0.3 ms) costs less than the hop to the
    # thread pool, except when a trace is still needed (answer_async then hops). The heavier ones
    # (batch, map, analysis, distributed) stay sync.
    @router.post("/hardware/select", response_model=s.SelectResponse)
    async def select(req: s.SelectRequest) -> dict[str, Any]:
        spec = state.names().resolve(req.model_name)
        if req.task_type:
            _task_input(spec, req.model_family, req.task_type)
        mode = TASK_MODES.get(req.task_type, req.mode) if req.task_type else req.mode
        traced = _generation_input(spec, req.sequence_length, req.new_tokens) if mode == "generation" else req.sequence_length
        if mode != "generation":
            _model_input(spec, req.sequence_length)
        available = _kinds(req.available_hardware)
        return await state.answer_async("select", req, spec, traced, mode, lambda selector: selector.select_hardware(
            req.model_family, spec.name, req.batch_size, req.sequence_length, req.mode, req.precision,
            available, req.task_type, req.distributed, req.gpu_count, req.max_latency_ms, req.new_tokens, req.max_tpot_ms,
            req.max_ttft_ms))

    @router.post("/hardware/batch", response_model=s.BatchResponse)
    def batch(req: s.BatchRequest) -> dict[str, Any]:
        names, out, resolved = state.names(), {}, []
        for m in req.models:
            try:
                resolved.append((m.name, {"name": names.resolve(m.name).name, "family": m.family}))
            except UnknownModelError as exc:
                why = f"model cannot be analysed: {exc.reason}" if isinstance(exc, InvalidModelError) else str(exc)
                out[m.name] = {"primary": None, "fallbacks": [], "explanation": why}
        selector = state.selector() if resolved else None
        for asked, r in resolved:
            # Each entry answered with its own family: keyed by the resolved name, two spellings of one
            # model ("bert-tiny" as vision, "BERT-TINY" as embedding) both got the last one's answer.
            out[asked] = selector.select_hardware_batch([r], req.batch_size, req.mode)[r["name"]]
        return out

    @router.post("/hardware/map", response_model=s.MapResponse)
    def hardware_map(req: s.MapRequest) -> dict[str, Any]:
        from devicefit.select.selection_map import selection_map

        return selection_map(state.selector(), req.model_families, req.batch_sizes, _kinds(req.hardware_platforms))

    @router.post("/performance/predict", response_model=s.PredictResponse)
    async def predict(req: s.PredictRequest) -> dict[str, Any]:
        spec = state.names().resolve(req.model_name)
        hardware = [req.hardware] if isinstance(req.hardware, str) else list(dict.fromkeys(req.hardware))
        if req.mode == "generation":
            from benchmark_runners import registry

            prompt = _generation_input(spec, req.sequence_length, req.new_tokens)
            return await state.answer_async("predict", req, spec, prompt, "generation",
                                            lambda selector: selector.predictor.predict_generation_performance(
                                                spec, req.model_family, hardware, [registry.kind_of_device(h) for h in hardware],
                                                req.batch_size, req.sequence_length, req.precision, req.new_tokens))
        if req.new_tokens is not None:
            raise ModelInputError("new_tokens: applies to mode generation")
        _model_input(spec, req.sequence_length)
        return await state.answer_async("predict", req, spec, req.sequence_length, req.mode,
                                        lambda selector: selector.predictor.predict_performance(
                                            spec.name, req.model_family, hardware, req.batch_size, req.sequence_length, req.mode,
                                            req.precision))

    @router.post("/training/distributed", response_model=s.DistributedResponse)
    def distributed(req: s.DistributedRequest) -> dict[str, Any]:
        from devicefit.select.distributed import plan_distributed_training

        spec = state.names().resolve(req.model_name)
        _model_input(spec, req.sequence_length)
        response = plan_distributed_training(spec, req.gpu_count, req.batch_size, req.max_memory_gb,
                                             req.sequence_length, req.mixed_precision).to_response()
        if req.model_family:
            response["model_family"] = req.model_family
        return response

    @router.post("/analysis/model", response_model=s.AnalysisResponse)
    def analysis(req: s.AnalysisRequest) -> dict[str, Any]:
        from devicefit.select.analysis import analyze_model

        spec = state.names().resolve(req.model_name)
        return analyze_model(state.selector(), spec.name, req.model_family, req.batch_sizes, _kinds(req.hardware_platforms),
                             state.snapshot().current_or_none())

    # One router, mounted twice: the same endpoint functions (and cache) answer both paths; the
    # /api ones are left out of the OpenAPI document, which would otherwise list every route twice.
    app.include_router(router)
    app.include_router(router, prefix="/api", include_in_schema=False)
    return app
