"""Measuring: what this machine has, and benchmarks of models on it."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from benchmark_runners import registry
from benchmark_runners.harness import FAULTS_WORTH_A_NOTE, page_faults_text
from devicefit.cli.common import (
    app,
    check_destination,
    console,
    csv_list,
    data_paths,
    err,
    fail,
    gib,
    int_list,
    print_regression,
    registry_help,
    styled,
    terminal_text,
    written,
)
from devicefit.cli.common import model_family as check_family

PANEL = "Measure"


@app.command(rich_help_panel=PANEL, help=f"Detect hardware platforms ({registry_help(lambda: ', '.join(registry.kind_names()))}) and probe each "
             "measurable device's matmul GFLOP/s and memory bandwidth. Cached in data/hardware.json until a reboot; "
             "a probe older than 12 h is taken again (not beside another process's measurement on the device: its earlier probe is shown).")
def detect(
    as_json: bool = typer.Option(False, "--json", help="Print the inventory as JSON."),
    refresh: bool = typer.Option(False, "--refresh", help="Re-detect and re-probe instead of reading the cache."),
) -> None:
    print_detection(as_json, refresh)


def print_detection(as_json: bool = False, refresh: bool = False) -> None:
    """`devicefit detect`'s output (also `predict --detect-hardware`)."""
    from benchmark_runners.hardware import detect_hardware
    from benchmark_runners.hardware.inventory import PROBE_MAX_AGE_S, probe_age_s
    from benchmark_runners.hardware.probe import HALF_PRECISIONS

    inv = detect_hardware(refresh=refresh, max_probe_age_s=PROBE_MAX_AGE_S)
    if as_json:
        print(json.dumps(inv.to_json(), indent=2))
        return
    age = probe_age_s(inv)
    ago = f", {age / 3600:.1f} h ago" if inv.from_cache and age is not None else ""
    table = Table(title=f"Hardware ({'cached ' if inv.from_cache else ''}detected {inv.detected_at}{ago})")
    for col in ("kind", "available", "measured by", "devices", "details / reason"):
        table.add_column(col)
    for kind, info in inv.platforms.items():
        devices = "\n".join(f"{d.get('name')} [{d.get('fingerprint')}]" for d in info.devices) or "-"
        if info.available and kind == "cpu":
            d = info.devices[0]
            detail = (f"{d['physical_cores']} physical / {d['logical_cores']} logical cores, "
                      f"{gib(d['memory_total_bytes'])}; ISA: {' '.join(d['isa_flags'])}")
            budget = d.get("cpu_budget") or {}
            if d.get("usable_cpus") is not None:  # a cpuset or a cgroup quota (hardware/cpu_budget.py)
                quota = (budget.get("quota") or {}).get("cpus")
                detail += (f"; this process may use {d['usable_cpus']:g} CPUs ({budget.get('affinity_cpus')} in its affinity mask"
                           + (f", a CFS quota of {quota:g}" if quota is not None else "") + f"): {budget.get('threads')} threads")
            if d.get("memory_limit_bytes"):
                detail += f"; cgroup memory limit {gib(d['memory_limit_bytes'])}"
        elif info.available:
            detail = ", ".join(f"{k}={v}" for k, v in info.details.items() if v is not None) or "-"
        else:
            detail = info.reason or "-"
        table.add_row(kind, styled(("yes", "green")) if info.available else styled(("no", "red")), info.backend or "-", devices, detail)
    console.print(table)
    if inv.probes:
        probe = Table(title="Device probe (measured)")
        for col in ("device", "fp32 matmul GFLOP/s (best / median)", "bf16 / fp16 matmul GFLOP/s", "copy bandwidth GB/s (best / median)",
                    "cache-resident copy GB/s", "tiny kernel us", "references (matmul GFLOP/s before / after, copy GB/s)", "threads", "took"):
            probe.add_column(col)
        for dev, p in inv.probes.items():
            if "error" in p:
                probe.add_row(dev, f"probe failed: {p['error']}", "", "", "", "", "", "", "")
                continue
            cache, tiny = p.get("cache_copy_gbs_best"), p.get("tiny_kernel_us_median")
            half = " / ".join("-" if p.get(f"matmul_gflops_{h}_best") is None else f"{p[f'matmul_gflops_{h}_best']:.1f}"
                              for h in HALF_PRECISIONS)
            probe.add_row(dev, f"{p['matmul_gflops_best']:.1f} / {p['matmul_gflops_median']:.1f}", half,
                          f"{p['memory_bandwidth_gbs_best']:.1f} / {p['memory_bandwidth_gbs_median']:.1f}",
                          "-" if cache is None else f"{cache:.1f}", "-" if tiny is None else f"{tiny:.2f}",
                          _probe_references(p.get("speed_reference")), str(p["threads"]), f"{p['duration_s']:.2f} s")
        console.print(probe)
        for dev, p in inv.probes.items():
            if line := gemm_suite_line(p.get("backend_gemm")):
                console.print(f"{dev}: {line}", soft_wrap=True)
        for dev, p in inv.probes.items():
            if p.get("reused"):  # its device was measuring for another process: not probed again beside it
                console.print(styled((f"{dev}: {p['reused']}", "yellow")))
    console.print(styled("torch device: ", (inv.torch_device(), "bold")))


def gemm_suite_line(suite) -> str | None:
    """The host CPU's per-backend GEMM rates at the models' shapes, in one line: "fp32 GEMMs at
    the models' shapes (median over 5 shapes): torch 128.2, openvino 171.2 GFLOP/s"; None for a
    probe without them."""
    if not isinstance(suite, dict) or not suite.get("median_over_shapes"):
        return None
    rates = ", ".join(f"{name} {rate:.1f}" for name, rate in suite["median_over_shapes"].items())
    failed = "".join(f"; {name}: {error}" for name, error in (suite.get("errors") or {}).items())
    return f"fp32 GEMMs at the models' shapes (median over {len(suite.get('shapes') or [])} shapes): {rates} GFLOP/s{failed}"


def _probe_references(reference) -> str:
    """The speed and copy references read at the probe, which training sets against the rates
    around the device's rows (devicefit/predict/hardware_specs.py): "192 / 201, 37.2"; "-" for
    a probe taken before the references existed."""
    from benchmark_runners.speed_reference import copy_rate, mean_gflops

    if mean_gflops(reference) is None:
        return "-"
    copy = copy_rate(reference)
    return f"{reference['before_gflops']:.0f} / {reference['after_gflops']:.0f}, " + ("-" if copy is None else f"{copy:.1f}")


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
            elif r.mode == "generation":  # p50 is a whole request's; these are what a user of the model waits for
                prompt = f"{r.prompt_tokens} prompt" if r.prompt_tokens else "audio prompt"
                note = (f"{prompt} + {r.new_tokens} new: TTFT {r.ttft_ms:.1f} ms, TPOT {r.tpot_p50_ms:.2f} ms "
                        f"(p90 {r.tpot_p90_ms:.2f}), decode {r.decode_tokens_per_s:.1f} tok/s, "
                        f"KV cache {r.kv_cache_bytes / 2**20:.1f} MiB; {note}")
            if (r.minor_faults_per_iteration or 0) >= FAULTS_WORTH_A_NOTE:
                note = f"{page_faults_text(r.minor_faults_per_iteration)}; {note}"
            if r.contended:
                note = styled((f"contended: other processes used {r.other_cpu_share:.0%} of the CPU", "yellow"), f"; {note}")
            table.add_row(r.model, r.device, r.precision, r.mode, str(r.batch_size), styled(("ok", "green")),
                          f"{r.p50_ms:.2f}", ci, f"{r.p95_ms:.2f}", f"{r.throughput_samples_per_s:.1f}",
                          f"{r.peak_rss_bytes / 2**20:.0f} MiB", str(r.iterations), note)
        else:
            color = "yellow" if r.status == "skipped" else "red"
            table.add_row(r.model, r.device, r.precision, r.mode, str(r.batch_size), styled((r.status, color)),
                          "-", "-", "-", "-", "-", "-", r.error or "")
    return table


def _store_rows(document: dict, database: Path, unwritten: list[str]) -> None:
    """`benchmark --database FILE`: stored as `devicefit ingest` stores a file (once, however
    often); a store that refuses them is added to `unwritten`."""
    from devicefit import store
    from devicefit.ingest import store_results_document
    from devicefit.landing import LandingFileError

    try:
        report = store_results_document(document, database)
    except (LandingFileError, store.StoreError, OSError) as exc:
        unwritten.append(f"--database: rows not stored in {database}: {exc}")
        return
    err.print(f"stored {report.rows_loaded} rows in {database}")


def _check_names(specs: list, database: Optional[Path]) -> None:
    """Refuse, before anything is measured, models the store would take for one (two local
    directories of one name, here or in --database's store), and a local model whose name holds
    a control character, which the registry refuses too. The store's modules only
    with --database: a bare GPU host has no DuckDB, and `benchmark` without a store must run there."""
    from models.resolve import shared_name, unnamable_local

    problem = unnamable_local(specs) or shared_name(specs)
    if problem is None and database:
        problem = _stored_name_clash(specs, database)
    if problem:
        fail(problem)


def _stored_name_clash(specs: list, database: Path) -> str | None:
    from devicefit import store
    from devicefit.store.model_identity import name_clash
    from models.analysis import parameter_count

    for spec in specs:
        if spec.source == "local":
            try:
                problem = name_clash(database, spec.name, parameter_count(spec), spec.path)
            except store.StoreError:
                return None  # another process's lock, say: the load checks again and names it
            if problem:
                return problem
    return None


def _is_store(path: Path) -> bool:
    from devicefit import store

    try:
        return store.is_duckdb_file(path)
    except OSError as exc:
        fail(f"--database {path} cannot be read: {exc.strerror or exc}")


def _check_baseline(compare_to: Optional[str], threshold: float) -> None:
    """A baseline that cannot be read (a corrupt file, a run id without a database) is named
    before the sweep, not after it. `previous` and run ids in a database are looked up once the rows exist."""
    if compare_to is None:  # before the imports: they need DuckDB, which a bare GPU host may lack
        return
    from devicefit.reports import regression
    from devicefit.reports.baselines import load_baseline

    try:
        regression.check_levels(threshold)  # compare() would refuse it after the sweep
    except ValueError as exc:
        fail(f"--regression-alert: {exc}")
    database = data_paths().database
    path = Path(compare_to)
    if compare_to == "previous" and database.exists():
        return
    if path.is_file() or path.suffix.lower() in (".csv", ".json") or not database.exists():
        try:
            load_baseline(compare_to, database if database.exists() else None, [])
        except (regression.BaselineError, ValueError) as exc:
            fail(str(exc))


@app.command(rich_help_panel=PANEL)
def benchmark(
    model: str = typer.Option(..., "--model", "-m", help="Model(s), comma-separated: catalog names or local model directories."),
    device: str = typer.Option("cpu", "--device", "--hardware", help="Device(s), comma-separated: " + registry_help(lambda: "; ".join(f"{b.device_help} ({b.name})" for b in registry.backends().values())) + "."),
    batch_sizes: str = typer.Option("1", "--batch-sizes", "--batch-size", help="Comma-separated batch sizes, e.g. 1,8."),
    precision: str = typer.Option("fp32", "--precision", help="Comma-separated: fp32, fp16, bf16, int8."),
    mode: str = typer.Option("inference", "--mode", "--scenario", help="inference (one forward pass), training, generation "
                             "(a request of prompt + new tokens: TTFT, TPOT, decode tokens/s), or several, comma-separated."),
    seq_length: Optional[int] = typer.Option(None, "--seq-length", "--prompt-tokens", help="Tokens per sample for text models (default 128, "
                                             "capped at the model's limit); in the generation scenario, the prompt (default 256)."),
    new_tokens: Optional[int] = typer.Option(None, "--new-tokens", help="Generation scenario: tokens each request generates, "
                                             "every request the same length (default 64)."),
    timing: str = typer.Option("precise", "--timing", help="Timing policy: precise (the default: until the median's 95% CI "
                               "half-width is within 2%, at most 3 s of cold call and warm-up and 10 s of timed iterations per config) or quick (make run's: "
                               "at most 1 s of cold call and warm-up and 1.5 s of timed iterations, 2 s for a generation "
                               "request; six samples for an interval unless slow ones overrun the cap by half, three within 3% "
                               "of each other suffice). --ci-target and --max-time, given, override either."),
    ci_target: Optional[float] = typer.Option(None, "--ci-target", help="Stop when the median's 95% CI half-width is within this fraction (default 0.02)."),
    max_time: Optional[float] = typer.Option(None, "--max-time", help="Cap on timed seconds per config (default 10; --timing quick: 1.5, 2 for a generation request)."),
    timeout: float = typer.Option(600.0, "--timeout", help="Seconds per config (load included) before its worker is killed."),
    threads: Optional[int] = typer.Option(None, "--threads", help="torch threads, at most the host's logical cores (default: physical cores); set, the rows name the profile (device id +tN)."),
    isa: Optional[str] = typer.Option(None, "--isa", help="Cap the CPU's instruction set (avx2, avx512) as an older host would run: the worker starts with oneDNN's, ATen's and MKL's caps, and the rows name the profile (device id +avx2)."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write all rows, with raw samples, to this JSON file."),
    compare_to: Optional[str] = typer.Option(None, "--compare-to", help="Baseline to check these rows against: a CSV, a results/CI JSON file, a run id, or 'previous'."),
    regression_alert: float = typer.Option(0.1, "--regression-alert", help="Relative slowdown of the median that counts as a regression (with --compare-to)."),
    output_ci: Optional[Path] = typer.Option(None, "--output-ci", help="Write a machine-readable CI report (rows, and the comparison with --compare-to)."),
    training: bool = typer.Option(False, "--training", help="Measure training (the guides' spelling of --mode training)."),
    model_family: Optional[str] = typer.Option(None, "--model-family", help="The family the models must classify as (checked, not assumed)."),
    database: Optional[Path] = typer.Option(None, "--database", "--database-path", help="Also store the rows in this DuckDB file "
                                            "(landed beside it and loaded, as `devicefit ingest` does)."),
    no_database: bool = typer.Option(False, "--no-database", help="Store nothing (the default; the guides' explicit spelling)."),
) -> None:
    """Benchmark models in isolated worker processes and print a results table.

    Exits 0 when every config was measured or skipped with a reason, 1 when any failed or (with
    --compare-to) regressed against the baseline."""
    if training:
        if mode not in ("inference", "training"):
            fail(f"--training and --mode {mode} disagree: give one of them")
        mode = "training"
    if database and no_database:
        fail("--database and --no-database disagree: give one of them")
    destinations = [(path, option) for path, option in ((json_out, "--json"), (output_ci, "--output-ci"), (database, "--database")) if path]
    for path, option in destinations:
        check_destination(path, option)
    if database and database.is_file() and database.stat().st_size and not _is_store(database):
        fail(f"--database {database} is not a DuckDB store (its header is not DuckDB's): give a devicefit "
             "store, or a new file to create one")
    for i, (path, option) in enumerate(destinations):  # the later write would replace the earlier's file
        for other, other_option in destinations[i + 1:]:
            if os.path.abspath(path) == os.path.abspath(other):
                fail(f"{option} and {other_option} name the same file, {path}: give each its own")
    _check_baseline(compare_to, regression_alert)
    from benchmark_runners.device_lock import busy_elsewhere, physical_device
    from benchmark_runners.sweep import new_run_id, run_sweep, start_worker_early, threads_reason
    from devicefit.cli.common import model_list

    model_names = model_list(model)
    try:
        # an unknown device first: its lock file would be left in the machine-wide lock directory
        devices_busy = busy_elsewhere({physical_device(d) for d in csv_list(device, "--device") if registry.backend_for_device(d)})
    except (OSError, ValueError):  # no lock directory, or not a device: the sweep says which
        devices_busy = []
    from benchmark_runners.hardware import detect_hardware
    from benchmark_runners.hardware.inventory import PROBE_MAX_AGE_S

    # Before the early worker: a probe (the first detection after a boot) would count the
    # worker's imports as another process's CPU use, take itself again and not be cached.
    inventory = detect_hardware(max_probe_age_s=PROBE_MAX_AGE_S)
    if (reason := threads_reason(threads, inventory)) is not None:
        fail(f"--threads: {reason}")
    if not devices_busy and not isa:  # beside another process's measurement, its imports would disturb it
        start_worker_early(model_names[0])  # its imports run while the models are resolved and checked

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from benchmark_runners.records import BenchmarkConfig
    from devicefit.profiles import timing_policy
    from devicefit.results_io import results_document, write_json_atomic
    from models.catalog import UnknownModelError
    from models.inputs import input_signature
    from models.resolve import resolve_model

    specs = []
    for name in model_names:
        try:
            specs.append(resolve_model(name))
        except (UnknownModelError, FileNotFoundError, ValueError) as exc:
            fail(str(exc))
    # Two spellings of one model (bert-tiny, BERT-TINY, its Hugging Face id) are one: measured
    # twice, its rows would be the same config's twice, under two config keys.
    unique = {}
    for name, spec in zip(model_names, specs):
        unique.setdefault((spec.source, spec.name, str(spec.path)), (name, spec))
    model_names, specs = [n for n, _ in unique.values()], [s for _, s in unique.values()]
    _check_names(specs, database)
    if model_family:
        from models.classifier import classify_spec

        check_family(model_family, "--model-family")
        other = [f"{s.name} is {classify_spec(s).family}" for s in specs if classify_spec(s).family != model_family]
        if other:
            fail(f"--model-family {model_family}: {'; '.join(other)}")
    sizes = int_list(batch_sizes, "--batch-sizes")
    modes = csv_list(mode, "--mode")
    if new_tokens is not None and "generation" not in modes:
        fail("--new-tokens applies to the generation scenario: add --mode generation")
    from benchmark_runners.generation import generation_reason, request_shape

    try:
        policies = {m: timing_policy(timing, m, ci_target, max_time) for m in modes}
        configs = [
            BenchmarkConfig(model=name, device=dev, backend=registry.backend_for_device(dev).name, precision=p,
                            mode=m, batch_size=b, seq_length=seq_length, threads=threads, isa=isa, timeout_s=timeout, policy=policies[m],
                            new_tokens=new_tokens if m == "generation" else None)
            for name in model_names for dev in csv_list(device, "--device") for m in modes
            for p in csv_list(precision, "--precision") for b in sizes
        ]
        # A value given twice (--batch-sizes 1,1, -m bert-tiny,bert-tiny) is one config: measured
        # twice, its rows would share the run's natural key, which ingest and --database refuse.
        configs = list({c.key(): c for c in configs}.values())
        for spec in specs:  # impossible sizes are caught here, before any worker starts
            if "generation" in modes and not generation_reason(spec):
                request_shape(spec, seq_length, new_tokens)
            if modes != ["generation"]:
                input_signature(spec, sizes[0], seq_length)
    except ValueError as exc:
        fail(str(exc))

    run_id = new_run_id()
    err.print(f"run {run_id}: {len(configs)} configs on {', '.join(sorted({c.device for c in configs}))}")
    # auto_refresh=False: no redraw thread competing with the measured model for a core.
    with Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, auto_refresh=False) as progress:
        task = progress.add_task("benchmarking", total=len(configs))

        def on_event(event) -> None:
            if event.kind == "waiting":
                progress.console.print(event.message, soft_wrap=True)
            elif event.kind == "config_started":
                c = event.config
                progress.update(task, description=terminal_text(f"{c.model} {c.device} {c.precision} {c.mode} bs={c.batch_size}"))
            elif event.kind == "result":
                progress.advance(task)
            progress.refresh()

        results = run_sweep(configs, run_id=run_id, on_event=on_event, inventory=inventory)
    console.print(_results_table(results))
    failed = [r for r in results if r.status == "failed"]
    rows = [r.to_json() for r in results]
    document = results_document(run_id, results, inventory.to_json()) if json_out or database else None
    unwritten: list[str] = []  # outputs that could not be written: each said, then exit 2 once the rest is done
    if json_out and written(json_out, "--json", lambda: write_json_atomic(json_out, document), unwritten):
        err.print(f"wrote {len(results)} rows to {json_out}")
    if database:
        _store_rows(document, database, unwritten)
    regressed = False
    if compare_to or output_ci:
        from devicefit.reports import regression, unmeasured

        sets = regression.sets_from_results(rows)
        if compare_to and (sets or not failed):  # every config failing is the run's verdict, not a baseline error
            try:
                database = data_paths().database
                report = regression.check_against_baseline(sets, compare_to, database if database.exists() else None,
                                                           regression_alert, current_description=f"run {run_id}",
                                                           unmeasured=unmeasured.from_results(rows))
            except (regression.BaselineError, ValueError) as exc:
                fail(str(exc))
            print_regression(report)
            regressed = report["status"] == "fail"
        else:
            report = {"format": regression.CI_FORMAT, "status": "fail" if failed else "pass", "baseline": None,
                      "current": f"run {run_id}", "comparisons": []}
            if compare_to:
                report["note"] = f"nothing compared with {compare_to}: no config was measured"
                err.print(styled((report["note"], "yellow")))
        report["results"] = [{k: r[k] for k in ("model", "device", "precision", "mode", "batch_size", "status", "error",
                                                 "p50_ms", "throughput_samples_per_s", "peak_rss_bytes", "ci_rel_half_width")}
                             for r in rows]
        if failed:
            report["status"] = "fail"
        if output_ci and written(output_ci, "--output-ci", lambda: write_json_atomic(output_ci, report), unwritten):
            err.print(f"wrote the CI report to {output_ci}")
    if failed:
        err.print(styled((f"{len(failed)} of {len(results)} configs failed", "red")))
    if unwritten:
        # Not 1, which says a config failed or regressed (the table and verdict above say whether
        # one did), nor the root group's OSError (1).
        fail("; ".join(unwritten) + f"; the table above holds the {len(results)} rows measured ({len(failed)} failed)")
    if failed or regressed:
        raise typer.Exit(1)
