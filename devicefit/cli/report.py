"""Reports from the store: analysis, figures, recommendations, regression comparisons."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from devicefit.cli.common import (
    AS_JSON,
    BENCHMARK_DIR,
    aggregates,
    app,
    check_destination,
    console,
    csv_list,
    data_paths,
    err,
    fail,
    int_list,
    model_family,
    print_regression,
    select_errors,
    styled,
    written,
)

PANEL = "Report"


@app.command(rich_help_panel=PANEL)
def analyze(
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Catalog name or local model directory (model analysis)."),
    output: Optional[Path] = typer.Option(None, "--output", help="Without --model: write spec 004's comparative analysis CSV here. "
                                                                "With --model: write the analysis JSON here."),
    family: Optional[str] = typer.Option(None, "--family", help="Model family (default: classified)."),
    batch_sizes: str = typer.Option("1,8,32", "--batch-sizes", help="Comma-separated batch sizes."),
    hardware: Optional[str] = typer.Option(None, "--hardware", help="Comma-separated kinds (default: every kind)."),
    benchmark_dir: Optional[Path] = BENCHMARK_DIR,
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

    model_family(family)
    if model is None:
        if output is None:
            fail("give --model M (model analysis) or --output FILE (comparative analysis CSV of every measured config)")
        from devicefit.reports.analysis import write_analysis_csv

        rows = aggregates(data_paths(benchmark_dir, must_exist=True))
        if not rows:
            fail("the store holds no measured configs yet: run `make run` first")
        path = write_analysis_csv(rows, output)
        console.print(f"wrote the comparative analysis of {len(rows)} measured configs to {path}")
        return
    paths = DataPaths(benchmark_dir.resolve()) if benchmark_dir else DataPaths.default()
    try:
        result = analyze_model(HardwareSelector(benchmark_dir=benchmark_dir), model, family, int_list(batch_sizes, "--batch-sizes"),
                               csv_list(hardware, "--hardware") if hardware else None,
                               SnapshotReader(snapshot_path(paths)).current_or_none())
    except select_errors() as exc:
        fail(str(exc))
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


@app.command(rich_help_panel=PANEL)
def report(
    output_dir: Optional[Path] = typer.Option(None, "--output-dir", help="Where the dashboard goes (default data/outputs/reports)."),
    png: bool = typer.Option(True, "--png/--no-png", help="Also render PNGs (needs kaleido and a Chromium binary)."),
    benchmark_dir: Optional[Path] = BENCHMARK_DIR,
) -> None:
    """Plotly figures of the measurements (interactive HTML, PNG where Chromium is present), an
    index.html dashboard, the comparative analysis CSV and the recommendations (spec 004's --visualize)."""
    from devicefit.reports import publish_reports

    paths = data_paths(benchmark_dir, must_exist=True)
    published = publish_reports(paths, output_dir, png=png)
    d = published.dashboard
    if d.note:
        err.print(styled(("note:", "yellow"), f" {d.note}"))
    for name, path in d.html.items():
        console.print(f"{name:<24} {path}" + (f"  (+ {d.png[name].name})" if name in d.png else ""))
    for name, why in d.missing.items():
        console.print(styled(f"{name:<24} ", (f"not drawn: {why}", "yellow")))
    if d.png_unavailable:
        err.print(f"PNGs not rendered: {d.png_unavailable}")
    console.print(f"dashboard: {d.index}\nanalysis:  {published.analysis_csv}\nrecommendations: {published.recommendations}")


@app.command(rich_help_panel=PANEL)
def recommendations(
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Only this model."),
    benchmark_dir: Optional[Path] = BENCHMARK_DIR,
    as_json: bool = AS_JSON,
) -> None:
    """Best measured hardware per model and mode by throughput, latency and memory, with the
    margin over the best other hardware (spec 004's --recommendations)."""
    from devicefit.reports.analysis import recommendations as build

    recs = [r for r in build(aggregates(data_paths(benchmark_dir, must_exist=True), note=not as_json)) if model is None or r["model"].lower() == model.lower()]
    if model and not recs:
        fail(f"no measurements of {model!r}; `devicefit db status` lists what the store holds")
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


@app.command("compare-training-inference", rich_help_panel=PANEL)
def compare_training_inference(
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Only this model."),
    benchmark_dir: Optional[Path] = BENCHMARK_DIR,
    as_json: bool = AS_JSON,
) -> None:
    """Training step against inference for every config measured in both modes (spec 004's
    --compare-training-inference)."""
    from devicefit.reports.analysis import training_inference_comparison
    from models.catalog import UnknownModelError
    from models.resolve import resolve_model

    if model:
        try:
            model = resolve_model(model).name  # an alias (`bert`) or a hub id names the stored model
        except (UnknownModelError, ValueError):
            pass  # rows ingested under a name the catalog does not know are filtered as given
    pairs = training_inference_comparison(aggregates(data_paths(benchmark_dir, must_exist=True), note=not as_json), model)
    if not pairs:
        fail("no config was measured in both modes" + (f" for {model!r}" if model else "") +
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
                      f"{p['training_samples_per_s']:.1f}", *("-" if p[c] is None else f"{p[c]:.0f}" for c in ("inference_peak_mib", "training_peak_mib")))
    console.print(table)


@app.command(rich_help_panel=PANEL)
def compare(
    baseline: str = typer.Option(..., "--baseline", "--compare-to", help="'previous' (each config's earlier run in the store), a run id, a CSV, or a results/CI JSON file."),
    regression_alert: float = typer.Option(0.1, "--regression-alert", help="Relative slowdown of the median that counts as a regression (0.1 = 10%)."),
    alpha: float = typer.Option(0.01, "--alpha", help="Significance level of the one-sided Mann-Whitney test on the raw samples."),
    run: Optional[str] = typer.Option(None, "--run", help="Compare this run id (default: the latest run of each config)."),
    output_ci: Optional[Path] = typer.Option(None, "--output-ci", help="Write the machine-readable report (JSON) here."),
    export_baseline: Optional[Path] = typer.Option(None, "--export-baseline", help="Also write the current side as a baseline CSV (samples kept)."),
    benchmark_dir: Optional[Path] = BENCHMARK_DIR,
) -> None:
    """Compare measurements with a baseline config by config on the raw samples (spec 004's
    --compare-to ... --regression-alert). Exits 1 when any config regressed."""
    from devicefit.reports import regression, unmeasured
    from devicefit.results_io import write_json_atomic

    for path, option in ((output_ci, "--output-ci"), (export_baseline, "--export-baseline")):
        check_destination(path, option)  # an OSError at the end would exit 1, which says "a regression"
    if output_ci and export_baseline and output_ci.absolute() == export_baseline.absolute():
        fail(f"--output-ci and --export-baseline name the same file, {output_ci}: give each its own")
    paths = data_paths(benchmark_dir, must_exist=True)
    try:
        current = regression.current_sets(paths.database, run)
        # One run's skipped and failed rows say why a baseline config is missing from it; the latest
        # run of each config has none to say (a config skipped in the newest run is there as measured before).
        report_doc = regression.check_against_baseline(current, baseline, paths.database, regression_alert, alpha,
                                                       f"run {run}" if run else "latest run of each config",
                                                       unmeasured.in_run(paths.database, run) if run else None)
    except (regression.BaselineError, ValueError) as exc:
        fail(str(exc))
    print_regression(report_doc)
    writes = ((output_ci, "--output-ci", lambda: write_json_atomic(output_ci, report_doc), f"wrote {output_ci}"),
              (export_baseline, "--export-baseline", lambda: regression.write_baseline_csv(current, export_baseline),
               f"wrote {len(current)} configs to {export_baseline}"))
    unwritten: list[str] = []
    for path, option, write, done in writes:
        if path and written(path, option, write, unwritten):
            err.print(done)
    if unwritten:
        # after the verdict, a write failure (a full disk, the directory removed meanwhile) must
        # not exit 1, which says "a regression", nor end as the root group's OSError (1)
        fail("; ".join(unwritten) + f"; the comparison above is {report_doc['status']}")
    if report_doc["status"] == "fail":
        raise typer.Exit(1)
