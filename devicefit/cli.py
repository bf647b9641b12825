"""The `devicefit` command line: detect, models, classify, benchmark, db, ingest, run, predict, select, map, distributed,
resources, recommend, memory-search, analyze, serve, report, recommendations, compare, compare-training-inference,
generate-tests."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from benchmark_runners.records import MAX_BATCH_SIZE

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Measure models on this machine's hardware and say where they run best.")
# Off a terminal (CI logs, pipes) rich would wrap tables at 80 columns; results need more.
console = Console(width=None if sys.stdout.isatty() else 220)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 220)


def _fail(message: str, code: int = 2) -> None:
    err.print(f"[bold red]error:[/] {message}")
    raise typer.Exit(code)


def _csv(value: str, what: str) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        _fail(f"{what} is empty")
    return items


def _ints(value: str, what: str) -> list[int]:
    out = []
    for item in _csv(value, what):
        try:
            n = int(item)
        except ValueError:
            _fail(f"{what}: '{item}' is not an integer")
        if not 1 <= n <= MAX_BATCH_SIZE:
            _fail(f"{what}: batch size must be an integer from 1 to {MAX_BATCH_SIZE:,}, got {n}")
        out.append(n)
    return out


def _gb(n: Optional[float]) -> str:
    return "-" if n is None else f"{n / 2**30:.1f} GiB"


@app.command()
def detect(
    as_json: bool = typer.Option(False, "--json", help="Print the inventory as JSON."),
    refresh: bool = typer.Option(False, "--refresh", help="Re-detect and re-probe instead of reading the cache."),
) -> None:
    """Detect hardware platforms (cpu, cuda, rocm, mps, openvino, qnn, webnn, webgpu) and probe
    each measurable device's matmul GFLOP/s and memory bandwidth. Cached in data/hardware.json."""
    from benchmark_runners.hardware import detect_hardware

    inv = detect_hardware(refresh=refresh)
    if as_json:
        print(json.dumps(inv.to_json(), indent=2))
        return
    table = Table(title=f"Hardware ({'cached ' if inv.from_cache else ''}detected {inv.detected_at})")
    for col in ("kind", "available", "measured by", "devices", "details / reason"):
        table.add_column(col)
    for kind, info in inv.platforms.items():
        devices = "\n".join(f"{d.get('name')} [{d.get('fingerprint')}]" for d in info.devices) or "-"
        if info.available and kind == "cpu":
            d = info.devices[0]
            detail = (f"{d['physical_cores']} physical / {d['logical_cores']} logical cores, "
                      f"{_gb(d['memory_total_bytes'])}; ISA: {' '.join(d['isa_flags'])}")
        elif info.available:
            detail = ", ".join(f"{k}={v}" for k, v in info.details.items() if v is not None) or "-"
        else:
            detail = info.reason or "-"
        table.add_row(kind, "[green]yes[/]" if info.available else "[red]no[/]", info.backend or "-", devices, detail)
    console.print(table)
    if inv.probes:
        probe = Table(title="Device probe (measured)")
        for col in ("device", "fp32 matmul GFLOP/s (best / median)", "copy bandwidth GB/s (best / median)", "threads", "took"):
            probe.add_column(col)
        for dev, p in inv.probes.items():
            if "error" in p:
                probe.add_row(dev, f"probe failed: {p['error']}", "", "", "")
                continue
            probe.add_row(dev, f"{p['matmul_gflops_best']:.1f} / {p['matmul_gflops_median']:.1f}",
                          f"{p['memory_bandwidth_gbs_best']:.1f} / {p['memory_bandwidth_gbs_median']:.1f}",
                          str(p["threads"]), f"{p['duration_s']:.2f} s")
        console.print(probe)
    console.print(f"torch device: [bold]{inv.torch_device()}[/]")


models_app = typer.Typer(help="The models devicefit knows: the catalog and the local models registered by name.")
app.add_typer(models_app, name="models")


def _models_data_dir(benchmark_dir: Optional[Path]) -> Path:
    from models.registry import default_data_dir

    return Path(benchmark_dir).resolve() if benchmark_dir else default_data_dir()


@models_app.callback(invoke_without_command=True)
def models(
    ctx: typer.Context,
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
    benchmark_dir: Optional[Path] = typer.Option(None, "--benchmark-dir", help="Data directory holding models.json (default: DEVICEFIT_DATA_DIR or ./data). `serve --benchmark-dir` reads the same file; other commands resolve registered names from the default."),
) -> None:
    """List the catalog and the registered models: family, architecture, exact parameter count.
    `devicefit models add DIR` registers a local model directory by name (the API serves models by name only)."""
    if ctx.invoked_subcommand is not None:
        return
    from models.analysis import parameter_count
    from models.catalog import InvalidModelError, load_catalog
    from models.classifier import classify_spec
    from models.registry import RegistryError, load_registered, read_registry

    data_dir = _models_data_dir(benchmark_dir)
    try:
        registered = read_registry(data_dir)
    except RegistryError as exc:
        _fail(str(exc))
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
        err.print(f"[yellow]warning:[/] {line}")


@models_app.command("add")
def models_add(
    directory: Path = typer.Argument(..., help="A local Hugging Face model directory (config.json, optional weights)."),
    name: Optional[str] = typer.Option(None, "--name", help="Name to register it under (default: the directory's name)."),
    benchmark_dir: Optional[Path] = typer.Option(None, "--benchmark-dir", help="Data directory holding models.json (default: DEVICEFIT_DATA_DIR or ./data). `serve --benchmark-dir` reads the same file; other commands resolve registered names from the default."),
) -> None:
    """Register a local model directory by name, so the API (which takes names, never paths) and
    every command can use it. It is checked first: config.json readable, an architecture
    transformers has, sizes within the limits of models/limits.py."""
    from models.catalog import InvalidModelError
    from models.registry import RegistryError, register_model, registry_file

    data_dir = _models_data_dir(benchmark_dir)
    try:
        spec = register_model(data_dir, directory, name)
    except (InvalidModelError, RegistryError) as exc:
        _fail(str(exc))
    except OSError as exc:
        _fail(f"cannot write the model registry {registry_file(data_dir)}: {exc.strerror or exc}")
    console.print(f"registered [bold]{spec.name}[/] ({spec.architecture}) -> {spec.path} in {registry_file(data_dir)}")


@models_app.command("remove")
def models_remove(
    name: str = typer.Argument(..., help="A registered model's name."),
    benchmark_dir: Optional[Path] = typer.Option(None, "--benchmark-dir", help="Data directory holding models.json (default: DEVICEFIT_DATA_DIR or ./data). `serve --benchmark-dir` reads the same file; other commands resolve registered names from the default."),
) -> None:
    """Forget a registered model (its directory is left alone)."""
    from models.registry import RegistryError, registry_file, unregister_model

    data_dir = _models_data_dir(benchmark_dir)
    try:
        path = unregister_model(data_dir, name)
    except RegistryError as exc:
        _fail(str(exc))
    except OSError as exc:
        _fail(f"cannot write the model registry {registry_file(data_dir)}: {exc.strerror or exc}")
    console.print(f"removed {name} ({path}) from {registry_file(data_dir)}")


@app.command()
def classify(
    model: str = typer.Argument(..., help="Catalog name, Hugging Face id of a catalog model, or local model directory."),
    model_class: Optional[str] = typer.Option(None, "--model-class", help="Architecture class, e.g. BertForMaskedLM."),
    task: Optional[list[str]] = typer.Option(None, "--task", help="A task the model serves (repeatable)."),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
    hardware_aware: bool = typer.Option(False, "--hardware-aware", help="Add spec 003's recommended hardware, resource requirements and hardware profile (JSON)."),
    benchmark_dir: Optional[Path] = typer.Option(None, "--benchmark-dir", help="Data directory for --hardware-aware (default: data/)."),
) -> None:
    """Classify a model into a family and subfamily, with the evidence that decided it."""
    from models.classifier import classify_model

    if hardware_aware:
        try:
            print(json.dumps(_classifier(benchmark_dir).classify_model(model, model_class, task), indent=2))
        except _select_errors() as exc:
            _fail(str(exc))
        return
    from models.catalog import InvalidModelError

    try:
        result = classify_model(model, model_class, task)
    except InvalidModelError as exc:
        _fail(str(exc))
    if as_json:
        print(json.dumps(result.to_json(), indent=2))
        return
    if result.family is None:
        _fail(f"no evidence about '{model}': not in the catalog, not a local directory, and its name, class and tasks say nothing", 1)
    console.print(f"[bold]{model}[/]: family [bold]{result.family}[/], subfamily {result.subfamily or '-'}, confidence {result.confidence:.2f}")
    table = Table(title="Evidence")
    for col in ("source", "observation", "family", "subfamily", "weight"):
        table.add_column(col)
    for e in result.evidence:
        table.add_row(e.source, e.observation, e.family, e.subfamily or "-", f"{e.weight:.2f}")
    console.print(table)


def _results_table(results) -> Table:
    table = Table(title="Benchmark results (latency per batch; CI = 95% CI of the median)")
    for col in ("model", "device", "precision", "mode", "batch", "status", "p50 ms", "95% CI", "p95 ms",
                "samples/s", "peak RSS", "iters", "note"):
        table.add_column(col, justify="right" if col in ("batch", "p50 ms", "p95 ms", "samples/s", "iters") else "left")
    for r in results:
        if r.status == "ok":
            ci = f"±{100 * r.ci_rel_half_width:.1f}%" if r.ci_rel_half_width is not None else "n/a"
            note = r.stop_reason or ""
            if r.mode == "training":
                note = f"fwd {r.forward_ms:.1f} / bwd {r.backward_ms:.1f} / opt {r.optimizer_ms:.1f} ms; {note}"
            table.add_row(r.model, r.device, r.precision, r.mode, str(r.batch_size), "[green]ok[/]",
                          f"{r.p50_ms:.2f}", ci, f"{r.p95_ms:.2f}", f"{r.throughput_samples_per_s:.1f}",
                          f"{r.peak_rss_bytes / 2**20:.0f} MiB", str(r.iterations), note)
        else:
            color = "yellow" if r.status == "skipped" else "red"
            table.add_row(r.model, r.device, r.precision, r.mode, str(r.batch_size), f"[{color}]{r.status}[/]",
                          "-", "-", "-", "-", "-", "-", r.error or "")
    return table


@app.command()
def benchmark(
    model: str = typer.Option(..., "--model", "-m", help="Model(s), comma-separated: catalog names or local model directories."),
    device: str = typer.Option("cpu", "--device", help="Device(s), comma-separated: cpu, cuda, cuda:N, mps (torch); openvino:CPU, openvino:GPU (OpenVINO)."),
    batch_sizes: str = typer.Option("1", "--batch-sizes", help="Comma-separated batch sizes, e.g. 1,8."),
    precision: str = typer.Option("fp32", "--precision", help="Comma-separated: fp32, fp16, bf16, int8."),
    mode: str = typer.Option("inference", "--mode", help="inference, training, or inference,training."),
    seq_length: Optional[int] = typer.Option(None, "--seq-length", help="Tokens per sample for text models (default 128, capped at the model's limit)."),
    ci_target: float = typer.Option(0.02, "--ci-target", help="Stop when the median's 95% CI half-width is within this fraction."),
    max_time: float = typer.Option(30.0, "--max-time", help="Cap on timed seconds per config."),
    timeout: float = typer.Option(600.0, "--timeout", help="Seconds per config (load included) before its worker is killed."),
    threads: Optional[int] = typer.Option(None, "--threads", help="torch threads (default: physical cores)."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write all rows, with raw samples, to this JSON file."),
    compare_to: Optional[str] = typer.Option(None, "--compare-to", help="Baseline to check these rows against: a CSV, a results/CI JSON file, a run id, or 'previous'."),
    regression_alert: float = typer.Option(0.1, "--regression-alert", help="Relative slowdown of the median that counts as a regression (with --compare-to)."),
    output_ci: Optional[Path] = typer.Option(None, "--output-ci", help="Write a machine-readable CI report (rows, and the comparison with --compare-to)."),
) -> None:
    """Benchmark models in isolated worker processes and print a results table.

    Exits 0 when every config was measured or skipped with a reason, 1 when any failed or (with
    --compare-to) regressed against the baseline."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from benchmark_runners import registry
    from benchmark_runners.harness import TimingPolicy
    from benchmark_runners.hardware import detect_hardware
    from benchmark_runners.records import BenchmarkConfig
    from benchmark_runners.sweep import new_run_id, run_sweep
    from devicefit.results_io import results_document, write_json_atomic
    from models.catalog import UnknownModelError, resolve_model
    from models.inputs import input_signature

    model_names = _csv(model, "--model")
    specs = []
    for name in model_names:
        try:
            specs.append(resolve_model(name))
        except (UnknownModelError, FileNotFoundError, ValueError) as exc:
            _fail(str(exc))
    sizes = _ints(batch_sizes, "--batch-sizes")
    try:
        policy = TimingPolicy(ci_target=ci_target, max_time_s=max_time)
        configs = [
            BenchmarkConfig(model=name, device=dev, backend=registry.backend_for_device(dev).name, precision=p,
                            mode=m, batch_size=b, seq_length=seq_length, threads=threads, timeout_s=timeout, policy=policy)
            for name in model_names for dev in _csv(device, "--device") for m in _csv(mode, "--mode")
            for p in _csv(precision, "--precision") for b in sizes
        ]
        for spec in specs:  # impossible sizes are caught here, before any worker starts
            input_signature(spec, sizes[0], seq_length)
    except ValueError as exc:
        _fail(str(exc))

    inventory = detect_hardware()
    run_id = new_run_id()
    err.print(f"run {run_id}: {len(configs)} configs on {', '.join(sorted({c.device for c in configs}))}")
    # auto_refresh=False: no redraw thread competing with the measured model for a core.
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, auto_refresh=False) as progress:
        task = progress.add_task("benchmarking", total=len(configs))

        def on_event(event) -> None:
            if event.kind == "config_started":
                c = event.config
                progress.update(task, description=f"{c.model} {c.device} {c.precision} {c.mode} bs={c.batch_size}")
            elif event.kind == "result":
                progress.advance(task)
            progress.refresh()

        results = run_sweep(configs, run_id=run_id, on_event=on_event, inventory=inventory)
    console.print(_results_table(results))
    if json_out:
        write_json_atomic(json_out, results_document(run_id, results, inventory.to_json()))
        err.print(f"wrote {len(results)} rows to {json_out}")
    failed = [r for r in results if r.status == "failed"]
    regressed = False
    if compare_to or output_ci:
        from devicefit.reports import regression

        sets = regression.sets_from_results([r.to_json() for r in results])
        if compare_to:
            try:
                database = _paths().database
                report = regression.check_against_baseline(sets, compare_to, database if database.exists() else None,
                                                           regression_alert, current_description=f"run {run_id}")
            except (regression.BaselineError, ValueError) as exc:
                _fail(str(exc))
            _print_regression(report)
            regressed = report["status"] == "fail"
        else:
            report = {"format": regression.CI_FORMAT, "status": "fail" if failed else "pass", "baseline": None,
                      "current": f"run {run_id}", "comparisons": []}
        report["results"] = [{k: r.to_json()[k] for k in ("model", "device", "precision", "mode", "batch_size", "status", "error",
                                                           "p50_ms", "throughput_samples_per_s", "peak_rss_bytes", "ci_rel_half_width")}
                             for r in results]
        if failed:
            report["status"] = "fail"
        if output_ci:
            write_json_atomic(output_ci, report)
            err.print(f"wrote the CI report to {output_ci}")
    if failed:
        err.print(f"[red]{len(failed)} of {len(results)} configs failed[/]")
    if failed or regressed:
        raise typer.Exit(1)


db_app = typer.Typer(no_args_is_help=True, help="The DuckDB benchmark store (spec 004's --init-db / --status).")
app.add_typer(db_app, name="db")


def _paths():
    from devicefit.paths import DataPaths

    return DataPaths.default()


@db_app.command("init")
def db_init() -> None:
    """Create the database (or migrate it to the current schema)."""
    from devicefit import store

    paths = _paths()
    try:
        applied = store.init_db(paths.database)
    except store.StoreError as exc:
        _fail(str(exc))
    console.print(f"{paths.database}: schema version {store.SCHEMA_VERSION}" +
                  (f" (applied migrations {', '.join(map(str, applied))})" if applied else " (already current)"))


@db_app.command("status")
def db_status(as_json: bool = typer.Option(False, "--json", help="Print as JSON.")) -> None:
    """Schema version, row counts per table, statuses, latest runs."""
    from devicefit import store

    try:
        info = store.status(_paths().database)
    except store.StoreError as exc:
        _fail(str(exc))
    if as_json:
        print(json.dumps(info, indent=2, default=str))
        return
    console.print(f"[bold]{info['path']}[/] ({info['size_bytes'] / 2**20:.1f} MiB), schema version "
                  f"{info['schema_version']} (current {info['current_schema_version']})")
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


@app.command()
def ingest(
    path: Path = typer.Argument(..., help="A devicefit results JSON, or optimum-benchmark output (dir, benchmark.json, or benchmark_report.json with its config)."),
    load: bool = typer.Option(True, "--load/--no-load", help="Also load it into DuckDB now (otherwise at the next benchmark_results materialization)."),
) -> None:
    """Validate measurements taken elsewhere and land them under data/raw/ (and load them)."""
    from devicefit import store
    from devicefit.ingest import ingest_file
    from devicefit.landing import LandingFileError, load_landing_files

    paths = _paths()
    try:
        result = ingest_file(path, paths.raw)
    except LandingFileError as exc:
        _fail(f"cannot ingest: {exc}")
    console.print(f"landed {result.rows} rows ({result.format}) as {result.source_key} -> {result.landing_path}")
    if load:
        try:
            report = load_landing_files(paths.database, paths.raw)
        except store.StoreError as exc:
            _fail(f"{exc}; the file is landed and the next benchmark_results materialization loads it", 1)
        console.print(f"loaded {report.rows_loaded} rows from {len(report.loaded)} changed source(s) into {paths.database}")
        for key, skipped in report.duplicates:
            console.print(f"skipped {skipped} rows of {key}: already stored by another source "
                          "(same run_id and config_key), not stored twice")
        for name, reason in report.quarantined:
            err.print(f"[red]quarantined[/] {name}: {reason}")


@app.command("run")
def run_command(
    profile: str = typer.Option("quick", "--profile", help="quick (minutes) or full (the nightly sweep)."),
    model: Optional[str] = typer.Option(None, "--model", help="Comma-separated models instead of the profile's."),
    hardware: Optional[str] = typer.Option(None, "--hardware", help="Comma-separated kinds: cpu, cuda, mps, openvino (default: all available)."),
    category: Optional[str] = typer.Option(None, "--category", help="Comma-separated families, e.g. vision,audio."),
    all_models: bool = typer.Option(False, "--all", help="Every catalog model."),
    limit: Optional[int] = typer.Option(None, "--limit", help="At most this many models."),
    batch_sizes: Optional[str] = typer.Option(None, "--batch-sizes", help="Override the profile's batch sizes."),
    precision: Optional[str] = typer.Option(None, "--precision", help="Override the profile's precisions."),
    training_mode: Optional[bool] = typer.Option(None, "--training-mode/--no-training-mode", help="Train every model / none (default: the profile's)."),
) -> None:
    """Materialize the pipeline through Dagster: measurements per (hardware, model), then the
    DuckDB store, aggregates and the compatibility matrix. Prints a summary and the paths written."""
    from benchmark_runners.hardware import detect_hardware
    from devicefit import store
    from devicefit.profiles import Selection
    from devicefit.run_pipeline import RunInterrupted, WriterBusy, run_pipeline
    from models.catalog import UnknownModelError

    try:
        selection = Selection(
            profile=profile, models=tuple(_csv(model, "--model")) if model else (),
            hardware=tuple(_csv(hardware, "--hardware")) if hardware else (),
            categories=tuple(_csv(category, "--category")) if category else (), all_models=all_models, limit=limit,
            batch_sizes=tuple(_ints(batch_sizes, "--batch-sizes")) if batch_sizes else (),
            precisions=tuple(_csv(precision, "--precision")) if precision else (), training_mode=training_mode)
        inventory = detect_hardware()
        keys = selection.partition_keys(inventory.available_kinds())
    except (ValueError, UnknownModelError) as exc:
        _fail(str(exc))
    if not keys:
        _fail(f"nothing to measure: none of the selected hardware is available here (available: {', '.join(inventory.available_kinds())})")
    err.print(f"profile {profile}: {len(keys)} partitions")
    try:
        outcome = run_pipeline(selection, keys, lambda key, i, n: err.print(f"[{i + 1}/{n}] measuring {key}"),
                               on_wait=lambda message: err.print(message, soft_wrap=True))
    except (RunInterrupted, WriterBusy) as exc:
        _fail(str(exc), exc.exit_code)
    except RuntimeError as exc:
        _fail(str(exc))
    for stale in outcome.reaped:
        err.print(f"[yellow]stale run marked failed:[/] {stale}")
    paths = _paths()
    con = store.connect(paths.database, read_only=True)
    try:
        every = store.aggregates(con)
    finally:
        con.close()
    rows = [r for r in every if r["is_best_precision"]]
    fp32 = {(r["model"], r["device_kind"], r["mode"], r["batch_size"]): r["p50_ms"] for r in every if r["precision"] == "fp32"}
    table = Table(title="Best precision per config (median over runs)")
    for col in ("model", "hardware", "mode", "batch", "best", "p50 ms", "fp32 p50 ms", "samples/s", "speedup vs cpu fp32"):
        table.add_column(col, justify="left" if col in ("model", "hardware", "mode", "best") else "right")
    for r in rows:
        base = fp32.get((r["model"], r["device_kind"], r["mode"], r["batch_size"]))
        table.add_row(r["model"], r["device_kind"], r["mode"], str(r["batch_size"]), r["best_precision"], f"{r['p50_ms']:.2f}",
                      f"{base:.2f}" if base else "-", f"{r['throughput_samples_per_s']:.1f}",
                      f"{r['speedup_vs_cpu_fp32']:.2f}x" if r["speedup_vs_cpu_fp32"] else "-")
    console.print(table)
    statuses: dict[str, int] = {}
    for _, _, md in outcome.partitions:
        for k in ("ok", "skipped", "failed"):
            statuses[k] = statuses.get(k, 0) + int(md.get(k, 0))
    console.print(f"configs: {statuses.get('ok', 0)} measured, {statuses.get('skipped', 0)} skipped, {statuses.get('failed', 0)} failed")
    console.print("written:")
    written = (("database", paths.database), ("landing files", paths.raw),
               ("compatibility matrix", paths.outputs / "compatibility_matrix.json"),
               ("prediction matrix", paths.outputs / "prediction_matrix.json"),
               ("selection map", paths.outputs / "selection_map.json"), ("predictors", paths.root / "predictors"),
               ("served predictions", paths.root / "predictions"), ("hardware inventory", paths.root / "hardware.json"),
               ("benchmark snapshot (API)", paths.outputs / "benchmarks.json"),
               ("report dashboard", paths.outputs / "reports" / "index.html"),
               ("comparative analysis", paths.outputs / "comparative_analysis.csv"),
               ("recommendations", paths.outputs / "recommendations.json"),
               ("regression report", paths.outputs / "regression_report.json"))
    for label, path in written:
        if path.exists():
            console.print(f"  {label}: {path}")
    console.print(f"  dagster runs: {os.environ.get('DAGSTER_HOME')}")
    for check in outcome.failed_checks:
        err.print(f"[yellow]check:[/] {check}")
    broken = [k for k, ok, _ in outcome.partitions if not ok]
    if broken or not outcome.results_success:
        err.print(f"[red]runs failed:[/] {', '.join(broken) or 'results_job'} (see `make ui`)")
        raise typer.Exit(1)


@app.command()
def predict(
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Catalog name or local model directory."),
    family: Optional[str] = typer.Option(None, "--family", help="Model family to report (default: classified)."),
    batch_size: int = typer.Option(1, "--batch-size", help="Samples per batch."),
    seq_length: Optional[int] = typer.Option(None, "--seq-length", help="Tokens per sample for text models (default 128, capped at the model's limit)."),
    mode: str = typer.Option("inference", "--mode", help="inference or training."),
    precision: str = typer.Option("fp32", "--precision", help="fp32, fp16, bf16 or int8."),
    hardware: Optional[str] = typer.Option(None, "--hardware", help="Comma-separated kinds (default: every kind devicefit knows)."),
    database: Optional[Path] = typer.Option(None, "--database", help="DuckDB file; its directory is the data directory."),
    benchmark_dir: Optional[Path] = typer.Option(None, "--benchmark-dir", help="Data directory (holds predictors/ and devicefit.duckdb)."),
    generate_matrix: bool = typer.Option(False, "--generate-matrix", help="Write the spec 001 prediction matrix instead."),
    output_file: Path = typer.Option(Path("prediction_matrix.json"), "--output-file", help="Where --generate-matrix writes."),
    visualize: bool = typer.Option(False, "--visualize", help="With --generate-matrix: also write HTML figures."),
    output_dir: Path = typer.Option(Path("visualizations"), "--output-dir", help="Where --visualize writes."),
    batch_sizes: Optional[str] = typer.Option(None, "--batch-sizes", help="With --generate-matrix: comma-separated batch sizes."),
    as_json: bool = typer.Option(False, "--json", help="Print the response as JSON."),
) -> None:
    """Predict latency, throughput and memory from the published predictor (spec 001), each
    figure with its interval and the link of the fallback chain that produced it."""
    from benchmark_runners import registry
    from benchmark_runners.records import MODES, PRECISIONS
    from devicefit.predict.api import HardwareModelPredictor, PredictorUnavailable
    from devicefit.results_io import write_json_atomic
    from models.catalog import UnknownModelError

    if batch_size < 1:
        _fail(f"--batch-size must be a positive integer, got {batch_size}")
    if mode not in MODES:
        _fail(f"--mode must be one of {', '.join(MODES)}, got '{mode}'")
    if precision not in PRECISIONS:
        _fail(f"--precision must be one of {', '.join(PRECISIONS)}, got '{precision}'")
    kinds = _csv(hardware, "--hardware") if hardware else list(registry.kind_names())
    unknown = [k for k in kinds if k not in registry.kind_names()]
    if unknown:
        _fail(f"unknown hardware {', '.join(unknown)}; known: {', '.join(registry.kind_names())}")
    if not generate_matrix and not model:
        _fail("--model is required (or --generate-matrix)")
    try:
        api = HardwareModelPredictor(database_path=database, benchmark_dir=benchmark_dir)
        if generate_matrix:
            models = [{"name": model, **({"family": family} if family else {})}] if model else None
            matrix = api.create_hardware_prediction_matrix(models, _ints(batch_sizes, "--batch-sizes") if batch_sizes else None,
                                                           kinds if hardware else None, None, mode)
            write_json_atomic(output_file, matrix)
            console.print(f"prediction matrix: {output_file} ({len(matrix['models'])} models x {len(matrix['hardware_platforms'])} "
                          f"hardware x {len(matrix['batch_sizes'])} batch sizes x {len(matrix['precision_options'])} precisions)")
            if visualize:
                for path in api.visualize_matrix(matrix, output_dir):
                    console.print(f"  figure: {path}")
            return
        result = api.predict_performance(model, family, kinds, batch_size, seq_length, mode, precision)
    except (PredictorUnavailable, UnknownModelError, ValueError, FileNotFoundError) as exc:
        _fail(str(exc))
    if as_json:
        print(json.dumps(result, indent=2))
        return
    table = Table(title=f"{result['model_name']} ({result['model_family']}), batch {batch_size}, {precision}, {mode} "
                        f"- predictor {result['predictor_version']}")
    for col in ("hardware", "latency ms", "throughput /s", "memory MiB", "source"):
        table.add_column(col, justify="left" if col in ("hardware", "source") else "right")

    def fmt(value, interval, digits=1):
        if value is None:
            return "-"
        return f"{value:.{digits}f}" + (f" [{interval[0]:.{digits}f}, {interval[1]:.{digits}f}]" if interval else "")

    for hw, e in result["predictions"].items():
        table.add_row(hw, fmt(e["latency"], e["latency_interval"]), fmt(e["throughput"], e["throughput_interval"]),
                      fmt(e["memory_usage"], e["memory_interval"], 0), e["source"])
    console.print(table)
    levels = {e["interval_level"] for e in result["predictions"].values() if e["interval_level"]}
    if levels:
        console.print(f"intervals: {', '.join(f'{x:.0%}' for x in sorted(levels))} conformal, calibrated on held-out models; "
                      "static_rule intervals are a fixed x/÷4")
    for hw, e in result["predictions"].items():
        if e["source"] != "trained_predictor":
            console.print(f"  {hw}: {e['detail']}")


@app.command()
def distributed(
    model: str = typer.Option(..., "--model", "-m", help="Catalog name or local model directory."),
    gpu_count: int = typer.Option(..., "--gpu-count", help="GPUs in the data-parallel group."),
    batch_size: int = typer.Option(8, "--batch-size", help="Samples per GPU per optimizer step."),
    max_memory_gb: Optional[float] = typer.Option(None, "--max-memory-gb", help="Memory of each GPU, GB (1e9 bytes)."),
    seq_length: Optional[int] = typer.Option(None, "--seq-length", help="Tokens per sample (default 128, capped at the model's limit)."),
    fp32: bool = typer.Option(False, "--fp32", help="Train in fp32 instead of mixed precision."),
    as_json: bool = typer.Option(False, "--json", help="Print spec 000's /training/distributed response as JSON."),
) -> None:
    """A distributed training configuration (DDP, ZeRO-1/2, FSDP; accumulation, checkpointing,
    offload, 8-bit optimizer) chosen from memory arithmetic, with the per-GPU figures."""
    from devicefit.select.distributed import DistributedConfigError, plan_distributed_training
    from models.catalog import UnknownModelError, resolve_model

    try:
        plan = plan_distributed_training(resolve_model(model), gpu_count, batch_size, max_memory_gb, seq_length, not fp32)
    except (UnknownModelError, DistributedConfigError, ValueError, FileNotFoundError) as exc:
        _fail(str(exc))
    response = plan.to_response()
    if as_json:
        print(json.dumps(response, indent=2))
        raise typer.Exit(0 if plan.fits else 1)
    m = response["estimated_memory"]
    console.print(f"[bold]{plan.model_name}[/] ({plan.parameters / 1e6:.1f}M parameters) on {gpu_count} GPU(s)"
                  + (f" x {max_memory_gb:g} GB" if max_memory_gb else "") + f", batch {batch_size} per GPU, seq {plan.sequence_length}")
    console.print(f"strategy: [bold]{response['distributed_strategy']}[/] ({response['equivalent']}); micro-batch "
                  f"{plan.micro_batch_size} x {plan.gradient_accumulation_steps} accumulation steps; checkpointing "
                  f"{'on' if plan.activation_checkpointing else 'off'}; CPU offload {'on' if plan.cpu_offload else 'off'}; "
                  f"8-bit optimizer {'on' if plan.eight_bit_optimizer else 'off'}")
    table = Table(title="memory per GPU (GB)")
    for col in ("weights", "gradients", "optimizer", "activations", "gathered layer", "CUDA context", "per GPU", "total"):
        table.add_column(col, justify="right")
    table.add_row(*(f"{m[k]:.2f}" for k in ("parameters_gb", "gradients_gb", "optimizer_gb", "activations_gb", "gathered_layer_gb",
                                           "cuda_context_gb", "per_gpu_gb", "total_gb")))
    console.print(table)
    console.print(f"activations: {plan.activation_method}")
    for note in plan.notes:
        console.print(f"  {note}")
    if not plan.fits:
        raise typer.Exit(1)


@app.command("select")
def select_command(
    model: str = typer.Option(..., "--model", "-m", help="Catalog name or local model directory."),
    family: Optional[str] = typer.Option(None, "--family", help="Model family (default: classified)."),
    batch_size: int = typer.Option(1, "--batch-size", help="Samples per batch."),
    seq_length: Optional[int] = typer.Option(None, "--seq-length", help="Tokens per sample for text models."),
    mode: str = typer.Option("inference", "--mode", help="inference or training."),
    precision: str = typer.Option("fp32", "--precision", help="fp32, fp16, bf16 or int8."),
    hardware: Optional[str] = typer.Option(None, "--hardware", help="Comma-separated kinds you have (default: what is detected here)."),
    task: Optional[str] = typer.Option(None, "--task", help="classification, generation, embedding, speech_recognition, fine_tuning, training."),
    max_latency_ms: Optional[float] = typer.Option(None, "--max-latency-ms", help="Exclude hardware predicted slower than this."),
    distributed: bool = typer.Option(False, "--distributed", help="Training across --gpu-count GPUs (memory per GPU from the distributed plan)."),
    gpu_count: int = typer.Option(1, "--gpu-count", help="GPUs for --distributed."),
    config: Optional[Path] = typer.Option(None, "--config", help="Selection config JSON (spec 002) over the shipped defaults."),
    benchmark_dir: Optional[Path] = typer.Option(None, "--benchmark-dir", help="Data directory (default: data/)."),
    as_json: bool = typer.Option(False, "--json", help="Print the /hardware/select response as JSON."),
) -> None:
    """Recommend hardware: constraints first (available, compatible, fits, latency bound), then
    candidates scored against the best one with the configured weights and preferences."""
    from devicefit.predict.api import PredictorUnavailable
    from devicefit.select.config import SelectionConfigError
    from devicefit.select.selector import HardwareSelector, SelectionError
    from models.catalog import UnknownModelError

    try:
        selector = HardwareSelector(benchmark_dir=benchmark_dir, config_path=config)
        kwargs = dict(available_hardware=_csv(hardware, "--hardware") if hardware else None, distributed=distributed,
                      gpu_count=gpu_count, max_latency_ms=max_latency_ms, sequence_length=seq_length, precision=precision)
        if task:
            result = selector.select_hardware_for_task(family, model, task, batch_size, **kwargs)
        else:
            result = selector.select_hardware(family, model, batch_size, mode=mode, **kwargs)
    except (PredictorUnavailable, SelectionConfigError, SelectionError, UnknownModelError, ValueError) as exc:
        _fail(str(exc))
    if as_json:
        print(json.dumps(result, indent=2))
        return
    console.print(f"[bold]{result['model_name']}[/] ({result['model_family']}, {result['model_size'] / 1e6:.1f}M parameters, "
                  f"{result['model_size_category']}), batch {batch_size}, {result['precision']}, {result['mode']}")
    console.print(f"primary: [bold green]{result['primary_recommendation']}[/]; fallbacks: {', '.join(result['fallback_options']) or 'none'}")
    table = Table()
    for col in ("hardware", "score", "latency ms", "throughput /s", "memory MiB", "source", "excluded"):
        table.add_column(col)
    for hw, s in result["all_scores"].items():
        p = s["predictions"]
        table.add_row(hw, f"{s['score']:.2f}" if "score" in s else "-", f"{p['latency']:.1f}" if p["latency"] else "-",
                      f"{p['throughput']:.1f}" if p["throughput"] else "-", f"{p['memory_mb']:.0f}" if p["memory_mb"] else "-",
                      p["source"], s["excluded"] or "")
    console.print(table)
    console.print(result["explanation"])


@app.command("map")
def map_command(
    families: Optional[str] = typer.Option(None, "--families", help="Comma-separated families (default: all five)."),
    batch_sizes: Optional[str] = typer.Option(None, "--batch-sizes", help="Comma-separated batch sizes (default 1,4,16,32,64)."),
    hardware: Optional[str] = typer.Option(None, "--hardware", help="Comma-separated kinds to choose among (default: every kind)."),
    output: Path = typer.Option(Path("hardware_map.json"), "--output", help="Where to write the map JSON."),
    config: Optional[Path] = typer.Option(None, "--config", help="Selection config JSON over the shipped defaults."),
    benchmark_dir: Optional[Path] = typer.Option(None, "--benchmark-dir", help="Data directory (default: data/)."),
) -> None:
    """Write spec 002's selection map: per family, the recommendation per size category and mode
    and per batch size, each cell answered for a real catalog model of that category."""
    from devicefit.predict.api import PredictorUnavailable
    from devicefit.results_io import write_json_atomic
    from devicefit.select.config import SelectionConfigError
    from devicefit.select.selection_map import selection_map
    from devicefit.select.selector import HardwareSelector, SelectionError

    try:
        selector = HardwareSelector(benchmark_dir=benchmark_dir, config_path=config, record=False)
        document = selection_map(selector, _csv(families, "--families") if families else None,
                                 _ints(batch_sizes, "--batch-sizes") if batch_sizes else None,
                                 _csv(hardware, "--hardware") if hardware else None)
    except (PredictorUnavailable, SelectionConfigError, SelectionError, ValueError) as exc:
        _fail(str(exc))
    write_json_atomic(output, document)
    table = Table(title=f"selection map ({output})")
    for col in ("family", "size", "model", "inference", "training"):
        table.add_column(col)
    for family, entry in document["model_families"].items():
        for size, cell in entry["model_sizes"].items():
            table.add_row(family, size, cell["inference"]["model"], str(cell["inference"]["primary"]), str(cell["training"]["primary"]))
    console.print(table)


def _classifier(benchmark_dir: Optional[Path], config: Optional[Path] = None):
    from devicefit.select.resources import HardwareAwareModelClassifier

    return HardwareAwareModelClassifier(benchmark_dir=benchmark_dir, config_path=config)


def _select_errors() -> tuple:
    from devicefit.predict.api import PredictorUnavailable
    from devicefit.select.config import SelectionConfigError
    from devicefit.select.memory_search import MemorySearchError
    from devicefit.select.selector import SelectionError
    from models.catalog import UnknownModelError

    return (PredictorUnavailable, SelectionConfigError, SelectionError, MemorySearchError, UnknownModelError, ValueError)


@app.command()
def resources(
    models: list[str] = typer.Argument(..., help="Models to hold in one resource pool."),
    benchmark_dir: Optional[Path] = typer.Option(None, "--benchmark-dir", help="Data directory (default: data/)."),
) -> None:
    """Spec 003's resource pool configuration: per model its family, recommended hardware and
    memory/disk/core requirements (measured or predicted, each saying which), and whether the
    models together need a low-memory mode here."""
    try:
        config = _classifier(benchmark_dir).get_optimal_resource_pool_config(models)
    except _select_errors() as exc:
        _fail(str(exc))
    print(json.dumps(config, indent=2))


@app.command()
def recommend(
    task: str = typer.Option(..., "--task", help="A Hugging Face task (text-generation, image-classification, ...) or a selector task type."),
    hardware: Optional[str] = typer.Option(None, "--hw", "--hardware", help="Comma-separated hardware the model must run on."),
    limit: int = typer.Option(5, "--limit", help="At most this many models."),
    benchmark_dir: Optional[Path] = typer.Option(None, "--benchmark-dir", help="Data directory (default: data/)."),
) -> None:
    """Catalog models for a task, ranked by predicted latency on the allowed hardware (spec 003)."""
    try:
        result = _classifier(benchmark_dir).recommend_model_for_task(task, _csv(hardware, "--hardware") if hardware else None, limit)
    except _select_errors() as exc:
        _fail(str(exc))
    print(json.dumps(result, indent=2))


@app.command("memory-search")
def memory_search_command(
    model: str = typer.Option(..., "--model", "-m", help="Catalog name or local model directory."),
    hardware: str = typer.Option("cpu", "--hardware", help="cpu, cuda, rocm or mps."),
    memory_constrained: float = typer.Option(..., "--memory-constrained", help="Memory cap in MB (MiB)."),
    mode: str = typer.Option("inference", "--mode", help="inference or training."),
    benchmark_dir: Optional[Path] = typer.Option(None, "--benchmark-dir", help="Data directory (default: data/)."),
) -> None:
    """Spec 004's memory-constrained search: the batch size x precision with the best throughput
    whose peak memory stays under the cap, from measurements where they exist, else predictions."""
    from devicefit.predict.api import HardwareModelPredictor
    from devicefit.select.memory_search import memory_constrained_search

    try:
        result = memory_constrained_search(model, hardware, memory_constrained, mode,
                                           HardwareModelPredictor(benchmark_dir=benchmark_dir, record=False))
    except _select_errors() as exc:
        _fail(str(exc))
    print(json.dumps(result, indent=2))


def _check_served_models(root: Optional[Path], model_dirs: list[Path]) -> None:
    """Refuses a bad --model-dir (or an unreadable registry) before binding, not on the first request."""
    from models.catalog import InvalidModelError
    from models.registry import ModelNames, RegistryError, default_data_dir

    try:
        _, warnings = ModelNames.load(root or default_data_dir(), model_dirs)
    except (InvalidModelError, RegistryError) as exc:
        _fail(str(exc))
    for line in warnings:
        err.print(f"[yellow]warning:[/] {line}")


@app.command()
def serve(
    host: str = typer.Option(os.environ.get("DEVICEFIT_HOST", "127.0.0.1"), "--host", help="Address to bind (default 127.0.0.1: this machine only)."),
    port: int = typer.Option(8000, "--port", help="Port to listen on."),
    database: Optional[Path] = typer.Option(os.environ.get("BENCHMARK_DB_PATH"), "--database", help="DuckDB file; its directory is the data directory (env BENCHMARK_DB_PATH)."),
    benchmark_dir: Optional[Path] = typer.Option(os.environ.get("BENCHMARK_DIR"), "--benchmark-dir", help="Data directory (env BENCHMARK_DIR; default data/)."),
    config: Optional[Path] = typer.Option(os.environ.get("CONFIG_PATH"), "--config", help="Selection config JSON (env CONFIG_PATH)."),
    reload: bool = typer.Option(False, "--reload", help="Restart on code changes (development)."),
    workers: int = typer.Option(1, "--workers", help="Worker processes."),
    debug: bool = typer.Option(os.environ.get("DEBUG", "0") == "1", "--debug", help="Debug logging and error details (env DEBUG=1)."),
    cache_size: int = typer.Option(int(os.environ.get("API_CACHE_SIZE", "4096")), "--cache-size",
                                   help="Select/predict answers kept per published predictor (env API_CACHE_SIZE; 0 = off)."),
    model_dir: Optional[list[Path]] = typer.Option(None, "--model-dir", help="A local model directory the API may analyse, "
                                                   "under its directory's name (repeatable); beside those of `devicefit models add`."),
    warm_up: bool = typer.Option(True, "--warm-up/--no-warm-up", help="Trace every model at start-up, so no request pays for it."),
) -> None:
    """Serve spec 000's REST API from the published artifacts (OpenAPI docs at /docs)."""
    import uvicorn

    from devicefit.select.config import SelectionConfigError, load_config

    if workers < 1:
        _fail(f"--workers must be at least 1, got {workers}")
    root = Path(benchmark_dir).resolve() if benchmark_dir else (Path(database).resolve().parent if database else None)
    if config is not None:
        try:
            load_config(config)  # refuse a bad config before binding, not on the first request
        except SelectionConfigError as exc:
            _fail(str(exc))
    # Workers and --reload import the app by name, so settings travel as environment variables.
    if root is not None:
        os.environ["DEVICEFIT_DATA_DIR"] = str(root)
    if config is not None:
        os.environ["CONFIG_PATH"] = str(Path(config).resolve())
    os.environ["DEBUG"] = "1" if debug else "0"
    if cache_size < 0:
        _fail(f"--cache-size must be 0 or more, got {cache_size}")
    os.environ["API_CACHE_SIZE"] = str(cache_size)
    _check_served_models(root, model_dir or [])
    os.environ["DEVICEFIT_MODEL_DIRS"] = os.pathsep.join(str(Path(d).resolve()) for d in model_dir or [])
    os.environ["DEVICEFIT_WARM_UP"] = "1" if warm_up else "0"
    import copy

    from uvicorn.config import LOGGING_CONFIG

    # The app's own log (start-up time, registry warnings, unexpected errors) beside uvicorn's.
    log_config = copy.deepcopy(LOGGING_CONFIG)
    log_config["loggers"]["devicefit"] = {"handlers": ["default"], "level": "DEBUG" if debug else "INFO", "propagate": False}
    uvicorn.run("devicefit.api.main:app", host=host, port=port, reload=reload, workers=None if reload else workers,
                log_level="debug" if debug else "info", log_config=log_config)


@app.command()
def analyze(
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Catalog name or local model directory (model analysis)."),
    output: Optional[Path] = typer.Option(None, "--output", help="Without --model: write spec 004's comparative analysis CSV here. "
                                                                "With --model: write the analysis JSON here."),
    family: Optional[str] = typer.Option(None, "--family", help="Model family (default: classified)."),
    batch_sizes: str = typer.Option("1,8,32", "--batch-sizes", help="Comma-separated batch sizes."),
    hardware: Optional[str] = typer.Option(None, "--hardware", help="Comma-separated kinds (default: every kind)."),
    benchmark_dir: Optional[Path] = typer.Option(None, "--benchmark-dir", help="Data directory (default: data/)."),
    as_json: bool = typer.Option(False, "--json", help="Print spec 000's /analysis/model response as JSON."),
) -> None:
    """With --model: performance per batch size and hardware, in both modes, measured (from the
    published benchmark snapshot) where this exact config was measured and predicted otherwise,
    each labelled, with the recommendation per batch size (spec 000's /analysis/model).
    Without --model, `--output FILE` writes spec 004's comparative analysis: one CSV row per model
    and config with every hardware's figures and speedup vs CPU."""
    from devicefit.benchmark_snapshot import SnapshotReader, snapshot_path
    from devicefit.paths import DataPaths
    from devicefit.select.analysis import analyze_model
    from devicefit.select.selector import HardwareSelector

    if model is None:
        if output is None:
            _fail("give --model M (model analysis) or --output FILE (comparative analysis CSV of every measured config)")
        from devicefit.reports.analysis import write_analysis_csv

        rows = _aggregates(_report_paths(benchmark_dir))
        if not rows:
            _fail("the store holds no measured configs yet: run `make run` first")
        path = write_analysis_csv(rows, output)
        console.print(f"wrote the comparative analysis of {len(rows)} measured configs to {path}")
        return
    paths = DataPaths(benchmark_dir.resolve()) if benchmark_dir else DataPaths.default()
    try:
        result = analyze_model(HardwareSelector(benchmark_dir=benchmark_dir), model, family, _ints(batch_sizes, "--batch-sizes"),
                               _csv(hardware, "--hardware") if hardware else None,
                               SnapshotReader(snapshot_path(paths)).current_or_none())
    except _select_errors() as exc:
        _fail(str(exc))
    if output:
        from devicefit.results_io import write_json_atomic

        write_json_atomic(output, result)
        err.print(f"wrote {output}")
    if as_json:
        print(json.dumps(result, indent=2))
        return
    for mode in ("inference", "training"):
        table = Table(title=f"{result['model_name']} ({result['model_family']}), {mode}: latency ms [source]")
        table.add_column("batch")
        for hw in result["hardware_platforms"]:
            table.add_column(hw)
        table.add_column("recommended")
        for b, by_hw in result[mode]["performance"].items():
            cells = [f"{p['latency']:.1f} [{p['source']}]" if p["latency"] is not None else "-" for p in by_hw.values()]
            table.add_row(b, *cells, str(result[mode]["recommendations"][b]["primary"]))
        console.print(table)


def _report_paths(benchmark_dir: Optional[Path]):
    from devicefit.paths import DataPaths

    paths = DataPaths(benchmark_dir.resolve()) if benchmark_dir else DataPaths.default()
    if not paths.database.exists():
        _fail(f"no database at {paths.database}: run `make run` or `devicefit run` first")
    return paths


def _aggregates(paths) -> list:
    from devicefit import store

    try:
        con = store.connect(paths.database, read_only=True)
        try:
            return store.aggregates(con)
        finally:
            con.close()
    except store.StoreError as exc:
        _fail(str(exc))


@app.command()
def report(
    output_dir: Optional[Path] = typer.Option(None, "--output-dir", help="Where the dashboard goes (default data/outputs/reports)."),
    png: bool = typer.Option(True, "--png/--no-png", help="Also render PNGs (needs kaleido and a Chromium binary)."),
    benchmark_dir: Optional[Path] = typer.Option(None, "--benchmark-dir", help="Data directory (default: data/)."),
) -> None:
    """Plotly figures of the measurements (interactive HTML, PNG where Chromium is present), an
    index.html dashboard, the comparative analysis CSV and the recommendations (spec 004's --visualize)."""
    from devicefit import store
    from devicefit.reports import publish_reports

    paths = _report_paths(benchmark_dir)
    try:
        published = publish_reports(paths, output_dir, png=png)
    except store.StoreError as exc:
        _fail(str(exc))
    d = published.dashboard
    for name, path in d.html.items():
        console.print(f"{name:<24} {path}" + (f"  (+ {d.png[name].name})" if name in d.png else ""))
    for name, why in d.missing.items():
        console.print(f"{name:<24} [yellow]not drawn: {why}[/]")
    if d.png_unavailable:
        err.print(f"PNGs not rendered: {d.png_unavailable}")
    console.print(f"dashboard: {d.index}\nanalysis:  {published.analysis_csv}\nrecommendations: {published.recommendations}")


@app.command()
def recommendations(
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Only this model."),
    benchmark_dir: Optional[Path] = typer.Option(None, "--benchmark-dir", help="Data directory (default: data/)."),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
) -> None:
    """Best measured hardware per model and mode by throughput, latency and memory, with the
    margin over the best other hardware (spec 004's --recommendations)."""
    from devicefit.reports.analysis import recommendations as build

    recs = [r for r in build(_aggregates(_report_paths(benchmark_dir))) if model is None or r["model"].lower() == model.lower()]
    if model and not recs:
        _fail(f"no measurements of {model!r}; `devicefit db status` lists what the store holds")
    if as_json:
        print(json.dumps(recs, indent=2, default=str))
        return
    table = Table(title="Best measured hardware per model (margin: vs the best other hardware)")
    for c in ("model", "mode", "measured on", "throughput", "latency", "memory"):
        table.add_column(c)

    def cell(e) -> str:
        if e is None:
            return "-"
        return f"{e['hardware']} {e['precision']} b{e['batch_size']} ({e['note']})"

    for r in recs:
        table.add_row(r["model"], r["mode"], ", ".join(r["hardware_measured"]), cell(r["throughput"]), cell(r["latency"]), cell(r["memory"]))
    console.print(table)


@app.command("compare-training-inference")
def compare_training_inference(
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Only this model."),
    benchmark_dir: Optional[Path] = typer.Option(None, "--benchmark-dir", help="Data directory (default: data/)."),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
) -> None:
    """Training step against inference for every config measured in both modes (spec 004's
    --compare-training-inference)."""
    from devicefit.reports.analysis import training_inference_comparison

    pairs = training_inference_comparison(_aggregates(_report_paths(benchmark_dir)), model)
    if not pairs:
        _fail("no config was measured in both modes" + (f" for {model!r}" if model else "") +
              "; measure training with `devicefit benchmark --mode inference,training`")
    if as_json:
        print(json.dumps(pairs, indent=2))
        return
    table = Table(title="Training vs inference (same hardware, precision, batch and input)")
    for c in ("model", "hardware", "precision", "batch", "inference ms", "training ms", "ratio", "inference samples/s",
              "training samples/s", "inference MiB", "training MiB"):
        table.add_column(c, justify="right" if c not in ("model", "hardware", "precision") else "left")
    for p in pairs:
        table.add_row(p["model"], p["hardware"], p["precision"], str(p["batch_size"]), f"{p['inference_p50_ms']:.2f}",
                      f"{p['training_p50_ms']:.2f}", f"{p['training_to_inference']:.1f}×", f"{p['inference_samples_per_s']:.1f}",
                      f"{p['training_samples_per_s']:.1f}", f"{p['inference_peak_mib']:.0f}", f"{p['training_peak_mib']:.0f}")
    console.print(table)


def _print_regression(report: dict) -> None:
    shown = [c for c in report["comparisons"] if c["verdict"] in ("regression", "improvement")]
    table = Table(title=f"vs {report['baseline']}: threshold {report['threshold']:g}, alpha {report['alpha']:g} — "
                        + ", ".join(f"{n} {v}" for v, n in report["summary"].items() if n))
    for c in ("config", "verdict", "baseline p50 ms", "current p50 ms", "change", "p-value"):
        table.add_column(c)
    for c in shown:
        colour = "red" if c["verdict"] == "regression" else "green"
        table.add_row(c["config"], f"[{colour}]{c['verdict']}[/]", f"{c['baseline_p50_ms']:.3f}", f"{c['current_p50_ms']:.3f}",
                      f"{100 * c['change']:+.1f}%", "-" if c["p_value"] is None else f"{c['p_value']:.2g}")
    console.print(table)


@app.command()
def compare(
    baseline: str = typer.Option(..., "--baseline", "--compare-to", help="'previous' (each config's earlier run in the store), a run id, a CSV, or a results/CI JSON file."),
    regression_alert: float = typer.Option(0.1, "--regression-alert", help="Relative slowdown of the median that counts as a regression (0.1 = 10%)."),
    alpha: float = typer.Option(0.01, "--alpha", help="Significance level of the one-sided Mann-Whitney test on the raw samples."),
    run: Optional[str] = typer.Option(None, "--run", help="Compare this run id (default: the latest run of each config)."),
    output_ci: Optional[Path] = typer.Option(None, "--output-ci", help="Write the machine-readable report (JSON) here."),
    export_baseline: Optional[Path] = typer.Option(None, "--export-baseline", help="Also write the current side as a baseline CSV (samples kept)."),
    benchmark_dir: Optional[Path] = typer.Option(None, "--benchmark-dir", help="Data directory (default: data/)."),
) -> None:
    """Compare measurements with a baseline config by config on the raw samples (spec 004's
    --compare-to ... --regression-alert). Exits 1 when any config regressed."""
    from devicefit.reports import regression
    from devicefit.results_io import write_json_atomic

    paths = _report_paths(benchmark_dir)
    try:
        current = regression.current_sets(paths.database, run)
        report_doc = regression.check_against_baseline(current, baseline, paths.database, regression_alert, alpha,
                                                       f"run {run}" if run else "latest run of each config")
    except (regression.BaselineError, ValueError) as exc:
        _fail(str(exc))
    _print_regression(report_doc)
    if output_ci:
        write_json_atomic(output_ci, report_doc)
        err.print(f"wrote {output_ci}")
    if export_baseline:
        regression.write_baseline_csv(current, export_baseline)
        err.print(f"wrote {len(current)} configs to {export_baseline}")
    if report_doc["status"] == "fail":
        raise typer.Exit(1)


@app.command("generate-tests")
def generate_tests(
    model: str = typer.Option(..., "--model", "-m", help="Catalog name or local model directory."),
    output_dir: Path = typer.Option(Path("generated_tests"), "--output-dir", help="Where the pytest file goes."),
    device: Optional[str] = typer.Option(None, "--device", help="Force the device under test (cpu, cuda, mps, ...); default: the recommended one."),
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
        _fail(str(exc))
    console.print(f"wrote {result.path}")
    console.print(f"  {result.model}: {result.family}, template {result.template}, recommended {result.recommended_hardware}, "
                  f"testing on {result.device_under_test}")
    console.print(f"  from: {result.classification_source}")
    if result.validation:
        console.print(f"  validated: ran once on {result.validation['device']}, first output {result.validation['first_output_shape']} "
                      f"{result.validation['dtype']}")
    console.print(f"run it: .venv/bin/python -m pytest {result.path}")


def main() -> None:
    """The console entry: file-system faults (a read-only data directory, a full disk, a missing
    permission) end in one line naming the path and the OS's reason, not a traceback."""
    try:
        app()
    except OSError as exc:
        path = exc.filename or ""
        reason = exc.strerror or str(exc)
        err.print(f"error: {reason}" + (f": {path}" if path else "") + f" ({type(exc).__name__})")
        sys.exit(1)


if __name__ == "__main__":  # pragma: no cover
    main()
