"""The `devicefit` command line: detect, models, classify, benchmark."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

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
        if n < 1:
            _fail(f"{what}: batch size must be a positive integer, got {n}")
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


@app.command()
def models(as_json: bool = typer.Option(False, "--json", help="Print as JSON.")) -> None:
    """List the catalog: family, architecture, exact parameter count."""
    from models.analysis import parameter_count
    from models.catalog import load_catalog
    from models.classifier import classify_spec

    rows = []
    for spec in load_catalog().values():
        c = classify_spec(spec)
        rows.append({**spec.to_json(), "family": c.family, "subfamily": c.subfamily, "parameters": parameter_count(spec)})
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = Table(title=f"Model catalog ({len(rows)} models)")
    for col in ("name", "family", "subfamily", "architecture", "parameters", "published"):
        table.add_column(col, justify="right" if col in ("parameters", "published") else "left")
    for r in rows:
        pub = f"{r['published_parameters'] / 1e6:.1f}M" if r["published_parameters"] else "-"
        table.add_row(r["name"], r["family"], r["subfamily"] or "-", r["architecture"], f"{r['parameters'] / 1e6:.2f}M", pub)
    console.print(table)


@app.command()
def classify(
    model: str = typer.Argument(..., help="Catalog name, Hugging Face id of a catalog model, or local model directory."),
    model_class: Optional[str] = typer.Option(None, "--model-class", help="Architecture class, e.g. BertForMaskedLM."),
    task: Optional[list[str]] = typer.Option(None, "--task", help="A task the model serves (repeatable)."),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
) -> None:
    """Classify a model into a family and subfamily, with the evidence that decided it."""
    from models.classifier import classify_model

    result = classify_model(model, model_class, task)
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
    device: str = typer.Option("cpu", "--device", help="Device(s), comma-separated: cpu, cuda, cuda:N, mps."),
    batch_sizes: str = typer.Option("1", "--batch-sizes", help="Comma-separated batch sizes, e.g. 1,8."),
    precision: str = typer.Option("fp32", "--precision", help="Comma-separated: fp32, fp16, bf16, int8."),
    mode: str = typer.Option("inference", "--mode", help="inference, training, or inference,training."),
    seq_length: Optional[int] = typer.Option(None, "--seq-length", help="Tokens per sample for text models (default 128, capped at the model's limit)."),
    ci_target: float = typer.Option(0.02, "--ci-target", help="Stop when the median's 95% CI half-width is within this fraction."),
    max_time: float = typer.Option(30.0, "--max-time", help="Cap on timed seconds per config."),
    timeout: float = typer.Option(600.0, "--timeout", help="Seconds per config (load included) before its worker is killed."),
    threads: Optional[int] = typer.Option(None, "--threads", help="torch threads (default: physical cores)."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write all rows, with raw samples, to this JSON file."),
) -> None:
    """Benchmark models in isolated worker processes and print a results table.

    Exits 0 when every config was measured or skipped with a reason, 1 when any failed."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

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
            BenchmarkConfig(model=name, device=dev, precision=p, mode=m, batch_size=b, seq_length=seq_length,
                            threads=threads, timeout_s=timeout, policy=policy)
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
    if failed:
        err.print(f"[red]{len(failed)} of {len(results)} configs failed[/]")
        raise typer.Exit(1)


def main() -> None:  # pragma: no cover - console entry
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
