"""Serving the REST API, and generating tests for a model."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import typer

from benchmark_runners import registry
from devicefit.cli.common import MODEL, app, console, data_paths, err, fail, registry_help, styled

PANEL = "Serve and generate"


def _check_served_models(root: Optional[Path], model_dirs: list[Path]) -> None:
    """Refuses a bad --model-dir (or an unreadable registry) before binding, not on the first request."""
    from models.registry import ModelNames

    _, warnings = ModelNames.load(root or data_paths().root, model_dirs)
    for line in warnings:
        err.print(styled(("warning:", "yellow"), f" {line}"))


@app.command(rich_help_panel=PANEL)
def serve(
    host: str = typer.Option(os.environ.get("DEVICEFIT_HOST", "127.0.0.1"), "--host", help="Address to bind (default 127.0.0.1: this machine only)."),
    port: int = typer.Option(8000, "--port", min=1, max=65535, help="Port to listen on."),
    database: Optional[Path] = typer.Option(os.environ.get("BENCHMARK_DB_PATH"), "--database", help="DuckDB file: the store itself, its directory holding predictors and outputs (env BENCHMARK_DB_PATH)."),
    benchmark_dir: Optional[Path] = typer.Option(os.environ.get("BENCHMARK_DIR"), "--benchmark-dir", help="Data directory (env BENCHMARK_DIR; default data/)."),
    config: Optional[Path] = typer.Option(os.environ.get("CONFIG_PATH"), "--config", help="Selection config JSON (env CONFIG_PATH)."),
    reload: bool = typer.Option(False, "--reload", help="Restart on code changes (development)."),
    workers: int = typer.Option(1, "--workers", help="Worker processes."),
    debug: bool = typer.Option(os.environ.get("DEBUG", "0") == "1", "--debug", help="Debug logging and error details (env DEBUG=1)."),
    # envvar, not int(os.environ[...]) here: a bad value is then this option's usage error, not a
    # traceback of every command at import
    cache_size: int = typer.Option(4096, "--cache-size", envvar="API_CACHE_SIZE", min=0, show_envvar=False,
                                   help="Select/predict answers kept per published predictor (env API_CACHE_SIZE; 0 = off)."),
    model_dir: Optional[list[Path]] = typer.Option(None, "--model-dir", help="A local model directory the API may analyse, "
                                                   "under its directory's name (repeatable); beside those of `devicefit models add`."),
    warm_up: bool = typer.Option(True, "--warm-up/--no-warm-up", help="Trace every model at start-up, so no request pays for it."),
) -> None:
    """Serve spec 000's REST API from the published artifacts (OpenAPI docs at /docs)."""
    import uvicorn

    from devicefit.select.config import load_config

    if workers < 1:
        fail(f"--workers must be at least 1, got {workers}")
    paths = data_paths(benchmark_dir, database) if benchmark_dir or database else None
    root = paths.root if paths else None
    if config is not None:
        load_config(config)  # refuse a bad config before binding, not on the first request
    # Workers and --reload import the app by name, so settings travel as environment variables.
    if root is not None:
        os.environ["DEVICEFIT_DATA_DIR"] = str(root)
        os.environ.pop("BENCHMARK_DIR", None)  # the data directory travels as DEVICEFIT_DATA_DIR
        if paths.database_file is not None:
            os.environ["BENCHMARK_DB_PATH"] = str(paths.database_file)
        else:
            os.environ.pop("BENCHMARK_DB_PATH", None)
    if config is not None:
        os.environ["CONFIG_PATH"] = str(Path(config).resolve())
    os.environ["DEBUG"] = "1" if debug else "0"
    os.environ["API_CACHE_SIZE"] = str(cache_size)
    _check_served_models(root, model_dir or [])
    from devicefit.api.state import encode_model_dirs

    os.environ["DEVICEFIT_MODEL_DIRS"] = encode_model_dirs([Path(d).resolve() for d in model_dir or []])
    os.environ["DEVICEFIT_WARM_UP"] = "1" if warm_up else "0"
    import copy

    from uvicorn.config import LOGGING_CONFIG

    # The app's own log (start-up time, registry warnings, unexpected errors) beside uvicorn's.
    log_config = copy.deepcopy(LOGGING_CONFIG)
    log_config["loggers"]["devicefit"] = {"handlers": ["default"], "level": "DEBUG" if debug else "INFO", "propagate": False}
    uvicorn.run("devicefit.api.main:app", host=host, port=port, reload=reload, workers=None if reload else workers,
                log_level="debug" if debug else "info", log_config=log_config)


@app.command("generate-tests", rich_help_panel=PANEL)
def generate_tests(
    model: str = MODEL,
    output_dir: Path = typer.Option(Path("generated_tests"), "--output-dir", help="Where the pytest file goes."),
    device: Optional[str] = typer.Option(None, "--device", help=f"Force the device under test ({registry_help(lambda: ', '.join(registry.torch_kinds()))}); default: the recommended one."),
    clear_cache: bool = typer.Option(False, "--clear-cache", help="Clear the resource pool before validating, and in the generated tests."),
    timeout: float = typer.Option(60.0, "--timeout", help="Seconds a pooled model may sit idle before it is freed (generated tests' pool)."),
    debug: bool = typer.Option(False, "--debug", help="Debug logging, here and in the generated tests."),
    benchmark_dir: Optional[Path] = typer.Option(None, "--benchmark-dir", help="Data directory with the published predictor (default: data/)."),
    no_validate: bool = typer.Option(False, "--no-validate", help="Write the file without building and running the model first."),
) -> None:
    """Render the family's Jinja2 template into a pytest file that builds the model through the
    ResourcePool on the recommended (or forced) device and checks its outputs (spec 003)."""
    import logging

    from devicefit.testgen import TestGenerationError, generate_test
    from models.catalog import UnknownModelError

    if debug:
        logging.basicConfig(level=logging.DEBUG)
    try:
        result = generate_test(model, output_dir, device, clear_cache, timeout, debug, benchmark_dir, validate=not no_validate)
    except (TestGenerationError, UnknownModelError) as exc:
        fail(str(exc))
    console.print(f"wrote {result.path}")
    console.print(f"  {result.model}: {result.family}, template {result.template}, recommended {result.recommended_hardware}, "
                  f"testing on {result.device_under_test}")
    console.print(f"  from: {result.classification_source}")
    if result.validation:
        console.print(f"  validated: ran once on {result.validation['device']}, first output {result.validation['first_output_shape']} "
                      f"{result.validation['dtype']}")
    console.print(f"run it: .venv/bin/python -m pytest {result.path}")


@app.command("export-templates", rich_help_panel=PANEL)
def export_templates(
    # a str, not a Path: Typer reads "" as Path("."), and the templates went into the current directory
    directory: str = typer.Argument("templates", help="Where to copy them (the integration guide loads ./templates)."),
    force: bool = typer.Option(False, "--force", help="Overwrite templates there that differ from devicefit's."),
) -> None:
    """Copy the test templates under the names `recommended_template` gives (hf_<family>_template.py,
    and the base they extend), for the integration guide's own Jinja2 code (spec 003): they render
    with a plain jinja2.Environment and the guide's variables (model_name, model_family,
    recommended_hardware, torch_device, ...) as well as with `devicefit generate-tests`."""
    from devicefit.testgen.naming import TemplateExportError
    from devicefit.testgen.naming import export_templates as export

    try:
        written = export(directory, force=force)
    except TemplateExportError as exc:
        fail(str(exc))
    for path in written:
        console.print(f"wrote {path}")
    if not written:
        console.print(f"{directory} already holds devicefit's templates, unchanged: nothing written")
