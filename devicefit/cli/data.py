"""The data devicefit keeps: the model registry, the DuckDB store, and ingesting results measured elsewhere."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from devicefit.cli.common import AS_JSON, app, console, data_paths, err, fail, styled

PANEL = "Data"

models_app = typer.Typer(help="The models devicefit knows: the catalog and the local models registered by name.")

app.add_typer(models_app, name="models", rich_help_panel=PANEL)


@models_app.callback(invoke_without_command=True)
def models(
    ctx: typer.Context,
    as_json: bool = AS_JSON,
    benchmark_dir: Optional[Path] = typer.Option(None, "--benchmark-dir", help="Data directory holding models.json (default: DEVICEFIT_DATA_DIR or ./data). `serve --benchmark-dir` reads the same file; other commands resolve registered names from the default."),
) -> None:
    """List the catalog and the registered models: family, architecture, exact parameter count.
    `devicefit models add DIR` registers a local model directory by name (the API serves models by name only)."""
    if ctx.invoked_subcommand is not None:
        return
    from models.analysis import parameter_count
    from models.catalog import InvalidModelError, load_catalog
    from models.classifier import classify_spec
    from models.registry import load_registered, read_registry

    data_dir = data_paths(benchmark_dir).root
    registered = read_registry(data_dir)  # a RegistryError is answered by the CLI's root group
    specs, broken = [(spec, "catalog") for spec in load_catalog().values()], []
    for name, directory in registered.items():
        try:
            specs.append((load_registered(name, directory), "registered"))
        except InvalidModelError as exc:
            broken.append(f"registered model '{name}' cannot be loaded: {exc}")
    rows = []
    for spec, source in specs:
        c = classify_spec(spec)
        rows.append({**spec.to_json(), "source": "registered" if source == "registered" else spec.source,
                     "family": c.family, "subfamily": c.subfamily, "parameters": parameter_count(spec)})
    if as_json:
        print(json.dumps(rows, indent=2))
    else:
        table = Table(title=f"Models ({len(rows) - len(registered) + len(broken)} in the catalog, {len(registered)} registered)")
        for col in ("name", "source", "family", "subfamily", "architecture", "parameters", "published"):
            table.add_column(col, justify="right" if col in ("parameters", "published") else "left")
        for r in rows:
            pub = f"{r['published_parameters'] / 1e6:.1f}M" if r["published_parameters"] else "-"
            table.add_row(r["name"], r["source"], r["family"], r["subfamily"] or "-", r["architecture"],
                          f"{r['parameters'] / 1e6:.2f}M", pub)
        console.print(table)
    for line in broken:
        err.print(styled(("warning:", "yellow"), f" {line}"))


@models_app.command("add")
def models_add(
    directory: Path = typer.Argument(..., help="A local Hugging Face model directory (config.json, optional weights)."),
    name: Optional[str] = typer.Option(None, "--name", help="Name to register it under (default: the directory's name)."),
    benchmark_dir: Optional[Path] = typer.Option(None, "--benchmark-dir", help="Data directory holding models.json (default: DEVICEFIT_DATA_DIR or ./data). `serve --benchmark-dir` reads the same file; other commands resolve registered names from the default."),
) -> None:
    """Register a local model directory by name, so the API (which takes names, never paths) and
    every command can use it. It is checked first: config.json readable, an architecture
    transformers has, sizes within the limits of models/limits.py, weights benchmark would load
    (safetensors, not a pickle alone)."""
    from models.registry import register_model, registry_file

    data_dir = data_paths(benchmark_dir).root
    try:
        spec = register_model(data_dir, directory, name)
    except OSError as exc:
        fail(f"cannot write the model registry {registry_file(data_dir)}: {exc.strerror or exc}")
    console.print(styled("registered ", (spec.name, "bold"), f" ({spec.architecture}) -> {spec.path} in {registry_file(data_dir)}"))


@models_app.command("remove")
def models_remove(
    name: str = typer.Argument(..., help="A registered model's name."),
    benchmark_dir: Optional[Path] = typer.Option(None, "--benchmark-dir", help="Data directory holding models.json (default: DEVICEFIT_DATA_DIR or ./data). `serve --benchmark-dir` reads the same file; other commands resolve registered names from the default."),
) -> None:
    """Forget a registered model (its directory is left alone)."""
    from models.registry import registry_file, unregister_model

    data_dir = data_paths(benchmark_dir).root
    try:
        path = unregister_model(data_dir, name)
    except OSError as exc:
        fail(f"cannot write the model registry {registry_file(data_dir)}: {exc.strerror or exc}")
    console.print(f"removed {name} ({path}) from {registry_file(data_dir)}")


db_app = typer.Typer(no_args_is_help=True, help="The DuckDB benchmark store (spec 004's --init-db / --status).")

app.add_typer(db_app, name="db", rich_help_panel=PANEL)


@db_app.command("init")
def db_init() -> None:
    """Create the database (or migrate it to the current schema)."""
    from devicefit import store

    paths = data_paths()
    applied = store.init_db(paths.database)
    console.print(f"{paths.database}: schema version {store.SCHEMA_VERSION}" +
                  (f" (applied migrations {', '.join(map(str, applied))})" if applied else " (already current)"))


@db_app.command("status")
def db_status(as_json: bool = AS_JSON) -> None:
    """Schema version, row counts per table, statuses, latest runs."""
    from devicefit import store

    info = store.status(data_paths().database)
    if as_json:
        print(json.dumps(info, indent=2, default=str))
        return
    console.print(styled((str(info["path"]), "bold"), f" ({info['size_bytes'] / 2**20:.1f} MiB), schema version "
                         f"{info['schema_version']} (current {info['current_schema_version']})"))
    table = Table(title="Tables")
    table.add_column("table")
    table.add_column("rows", justify="right")
    for name, n in info["tables"].items():
        table.add_row(name, str(n))
    console.print(table)
    if info.get("statuses"):
        console.print("measurements by status: " + ", ".join(f"{k} {v}" for k, v in info["statuses"].items()))
    for run in info.get("latest_runs", []):
        console.print(f"  run {run['run_id']} ({run['source_key']}): {run['rows']} rows at {run['written_at']} on {run['hostname']}")


@app.command(rich_help_panel=PANEL)
def ingest(
    path: Path = typer.Argument(..., help="A devicefit results JSON, a directory of them (another machine's landing files), or "
                                          "optimum-benchmark output (dir, benchmark.json, or benchmark_report.json with its config)."),
    load: bool = typer.Option(True, "--load/--no-load", help="Also load it into DuckDB now (otherwise at the next benchmark_results materialization)."),
) -> None:
    """Validate measurements taken elsewhere and land them under data/raw/ (and load them)."""
    from devicefit import store
    from devicefit.ingest import ingest_path
    from devicefit.landing import LandingFileError, load_landing_files

    paths = data_paths()
    try:
        results = ingest_path(path, paths.raw)
    except LandingFileError as exc:
        fail(f"cannot ingest: {exc}")
    for result in results:
        console.print(f"landed {result.rows} rows ({result.format}) as {result.source_key} -> {result.landing_path}")
    if load:
        try:
            report = load_landing_files(paths.database, paths.raw)
        except store.StoreError as exc:
            fail(f"{exc}; the file is landed and the next benchmark_results materialization loads it", 1)
        console.print(f"loaded {report.rows_loaded} rows from {len(report.loaded)} changed source(s) into {paths.database}")
        for line in report.duplicate_lines() + report.superseded_lines():
            console.print(line, markup=False, highlight=False)
        for line in report.future_probe_lines():
            err.print(line, markup=False, highlight=False)
        for name, reason in report.quarantined:
            err.print(styled(("quarantined", "red"), f" {name}: {reason}"))
        refused = sorted({r.landing_path.name for r in results} & {name for name, _ in report.quarantined})
        if refused:  # landed, then refused by the store (a model-name clash, say): nothing of it stored
            fail(f"the store refused {len(refused)} of the file(s) this ingest landed ({', '.join(refused)}): quarantined as above, "
                 "nothing of them stored", 1)
