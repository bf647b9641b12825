"""The console script `devicefit`: the product's commands (devicefit.cli) plus `run`, which
materializes the Dagster pipeline. It lives here, in the orchestration layer, so the product
package never imports pipelines/ (arrows point one way: pipelines -> assets -> devicefit)."""
from __future__ import annotations

import os
from typing import Optional

import typer

from benchmark_runners import registry
from benchmark_runners.speed_reference import speed_summary
from devicefit.cli import app
from devicefit.cli.common import best_precision_table, console, csv_list, data_paths, err, exit_without_teardown, fail, int_list, registry_help, styled
from devicefit.errors import DevicefitError


@app.command("run", rich_help_panel="Measure")
def run_command(
    profile: str = typer.Option("quick", "--profile", help="quick (minutes) or full (the nightly sweep)."),
    model: Optional[str] = typer.Option(None, "--model", help="Comma-separated models instead of the profile's: catalog or registered names (a local directory: `devicefit models add DIR` first)."),
    hardware: Optional[str] = typer.Option(
        None, "--hardware", help=f"Comma-separated kinds ({registry_help(lambda: ', '.join(registry.measurable_kinds()))}: this host's first device of each, "
                                 "as it is) or device ids: this host's, with a constraint profile (cpu-<fingerprint>+t1, ...+avx2), and with "
                                 "DEVICEFIT_BROKER_URL set any registered device, measured by its host's `devicefit worker`. "
                                 "Default: every available kind."),
    category: Optional[str] = typer.Option(None, "--category", help="Comma-separated families, e.g. vision,audio."),
    all_models: bool = typer.Option(False, "--all", help="Every catalog model, the config-only large ones too (each skipped with the "
                                                          "reason where it does not fit in memory)."),
    limit: Optional[int] = typer.Option(None, "--limit", help="At most this many models."),
    batch_sizes: Optional[str] = typer.Option(None, "--batch-sizes", "--batch-size", help="Override the profile's batch sizes; each is measured (the quick profile's call budget skips none)."),
    precision: Optional[str] = typer.Option(None, "--precision", help="Override the profile's precisions."),
    training_mode: Optional[bool] = typer.Option(None, "--training-mode/--no-training-mode", help="Train every model / none (default: the profile's)."),
    generation_mode: Optional[bool] = typer.Option(None, "--generation/--no-generation", help="The generation scenario (TTFT, TPOT) for "
                                                   "every model that generates / none (default: the profile's, gpt2 and t5-small in quick)."),
    compare: bool = typer.Option(False, "--compare", help="Then print the comparative analysis (spec 004) of the models measured: "
                                                          "the fastest hardware per config and its margin."),
) -> None:
    """Materialize the pipeline through Dagster: measurements per (device, model), then the
    DuckDB store, aggregates and the compatibility matrix. Prints a summary and the paths written."""
    from models import stop_request
    from pipelines.run_watch import stops_cleanly

    # SIGINT/SIGTERM before the pipeline's own handlers (hardware detection, Dagster's imports):
    # one line and 130/143, as during the run, not a traceback or a silent death.
    with stops_cleanly():
        from benchmark_runners.hardware import detect_hardware
        from devicefit import store
        from devicefit.fleet.devices import DeviceUnavailable
        from devicefit.profiles import Selection
        from models.catalog import UnknownModelError
        from pipelines import dispatch
        from pipelines.run import run_pipeline

        try:
            selection = Selection(
                profile=profile, models=tuple(csv_list(model, "--model")) if model else (),
                hardware=tuple(csv_list(hardware, "--hardware")) if hardware else (),
                categories=tuple(csv_list(category, "--category")) if category else (), all_models=all_models, limit=limit,
                batch_sizes=tuple(int_list(batch_sizes, "--batch-sizes")) if batch_sizes else (),
                precisions=tuple(csv_list(precision, "--precision")) if precision else (), training_mode=training_mode,
                generation_mode=generation_mode)
            inventory = detect_hardware()
            dispatching = dispatch.broker_url() is not None  # then other hosts' workers measure their own devices
            keys = selection.partition_keys(inventory.to_json(), elsewhere=dispatching)
        except (ValueError, UnknownModelError, DeviceUnavailable) as exc:
            fail(str(exc))
        stop_request.raise_if_requested()
        if not keys:
            fail(f"nothing to measure: none of the selected hardware is available here (available: {', '.join(inventory.available_kinds())})")
        err.print(f"profile {profile}: {len(keys)} partitions")
        try:
            outcome = run_pipeline(selection, keys, lambda key, i, n: err.print(f"[{i + 1}/{n}] measuring {key}"),
                                   on_wait=lambda message: err.print(message, soft_wrap=True))
        except DevicefitError:
            raise  # RunInterrupted, WriterBusy: the group answers them with their own exit codes
        except RuntimeError as exc:
            fail(str(exc))
    for stale in outcome.reaped:
        err.print(styled(("stale run marked failed:", "yellow"), f" {stale}"))
    for failure in outcome.dispatch_failures:
        err.print(styled(("dispatched run failed:", "red"), f" {failure}"), soft_wrap=True)
    paths = data_paths()
    con = store.connect(paths.database, read_only=True)
    try:
        every = store.aggregates(con)
    finally:
        con.close()
    console.print(best_precision_table(every))
    if compare:
        _print_comparison(every, {k.split("|", 1)[1] for k in keys}, paths.outputs / "comparative_analysis.csv")
    statuses: dict[str, int] = {}
    for _, _, md in outcome.partitions:
        for k in ("ok", "skipped", "over_call_budget", "failed", "contended"):
            statuses[k] = statuses.get(k, 0) + int(md.get(k, 0))
    budget = statuses.get("over_call_budget", 0)
    console.print(f"configs: {statuses.get('ok', 0)} measured, {statuses.get('skipped', 0)} skipped"
                  + (f" ({budget} over the profile's call budget, left to the predictors)" if budget else "")
                  + f", {statuses.get('failed', 0)} failed"
                  + (f"; {statuses['contended']} measured while other processes used the CPU (flagged contended)"
                     if statuses.get("contended") else ""))
    speed = speed_summary([g for _, _, md in outcome.partitions for g in md.get("speed_references") or []],
                          [c for _, _, md in outcome.partitions for c in md.get("copy_references") or []])
    if speed:
        console.print(speed)
    warmed = outcome.warm
    if warmed is not None and warmed.tasks:
        console.print(f"before measuring: {warmed.tasks} cache entries (catalog facts, memory floors, conversions) in {warmed.seconds:.1f} s, "
                      f"{warmed.by_helper} of them by a second process ({warmed.helper})"
                      + (f"; {len(warmed.failed)} failed, left to the guard" if warmed.failed else ""))
    if outcome.map_ahead:
        console.print(f"during the results: the selection map's models traced in a second process ({outcome.map_ahead})")
    if outcome.time_line():
        console.print(outcome.time_line(), soft_wrap=True)
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
        err.print(styled(("check:", "yellow"), f" {check}"))
    broken = [k for k, ok, _ in outcome.partitions if not ok]
    if broken or not outcome.results_success:
        err.print(styled(("runs failed:", "red"), f" {', '.join(broken) or 'results_job'} (see `make ui`)"))
        raise typer.Exit(1)


def _print_comparison(aggregates: list[dict], models: set[str], csv_path) -> None:
    """`run --compare`: the comparative analysis rows of the models this run measured."""
    from rich.table import Table

    from devicefit.reports.analysis import comparative_analysis

    _, rows = comparative_analysis([r for r in aggregates if r["model"] in models])
    table = Table(title=f"comparative analysis ({len(rows)} configs; every column in {csv_path})")
    for col in ("model", "mode", "precision", "batch", "fastest hardware", "margin over the next"):
        table.add_column(col)
    for r in rows:
        margin = r.get("fastest_margin")
        table.add_row(r["model"], r["mode"], r["precision"], str(r["batch_size"]), r["fastest_hardware"],
                      "only one measured" if margin is None else f"{margin:.2f}x")
    console.print(table)


@app.command("worker", rich_help_panel="Measure")
def worker_command(
    device: Optional[str] = typer.Option(None, "--device", help="The device id to serve (cpu-<fingerprint>, with a constraint profile: "
                                                             "...+t1, ...+avx2); `devicefit detect` shows this host's fingerprints."),
    writer: bool = typer.Option(False, "--writer", help="Serve the fleet's writer queue instead: the runs that write the DuckDB store "
                                                        "(loading landing files, aggregates, predictors, reports), on the host that holds it."),
    concurrency: int = typer.Option(1, "--concurrency", min=1, help="Runs at once on the device (1: one benchmark at a time); "
                                                                   "the writer always runs one."),
    probe: bool = typer.Option(True, "--probe/--no-probe", help="Describe the device with its probe (under its profile, if any)."),
    loglevel: str = typer.Option("INFO", "--loglevel", help="The Celery worker's log level."),
) -> None:
    """Serve one device of this host to the fleet: register it (the instance's device partitions,
    and raw/devices/<id>.json for the store), then run a Celery worker that consumes only the
    device's queue and executes the measurement runs sent there. With --writer, on the host that
    holds the store, consume the writer's queue: the derived runs the daemon's automation sensor
    (or the UI) launches after measurements land. Needs DEVICEFIT_BROKER_URL and DAGSTER_HOME
    (dagster_home/multihost). Stops on SIGTERM or Ctrl-C."""
    from pipelines.worker import serve, serve_writer

    if writer == (device is not None):
        err.print("error: give --device ID (serve a device) or --writer (serve the store's writer queue), one of them")
        raise typer.Exit(2)
    on_info = lambda m: err.print(m, soft_wrap=True)  # noqa: E731
    if writer:
        serve_writer(loglevel=loglevel.upper(), on_info=on_info)
    else:
        serve(device, concurrency=concurrency, loglevel=loglevel.upper(), probe=probe, on_info=on_info)


def main() -> None:
    try:
        app()
    except SystemExit as exc:  # typer ends every command this way, success included
        exit_without_teardown(exc.code)


if __name__ == "__main__":  # pragma: no cover
    main()
