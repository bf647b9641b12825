"""`devicefit cache [prune]`: what the on-disk caches hold, and removing what no run reads any more."""
from __future__ import annotations

import json
import time
from typing import Optional

import typer
from rich.table import Table

from devicefit.cli.common import AS_JSON, app, console, err, fail, styled

PANEL = "Data"
cache_app = typer.Typer(help="The on-disk caches: converted models under <data>/cache (ONNX, OpenVINO IR, openvino-genai) "
                             "and the derived facts under DEVICEFIT_CACHE_DIR (default ~/.cache/devicefit).")
app.add_typer(cache_app, name="cache", rich_help_panel=PANEL)


def _size(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def _when(t: float | None) -> str:
    return "-" if t is None else time.strftime("%Y-%m-%d %H:%M", time.localtime(t))


@cache_app.callback(invoke_without_command=True)
def cache(ctx: typer.Context, as_json: bool = AS_JSON) -> None:
    """List every cache entry with its size, when it was last read or written, and whether this
    installation would read it: current; stale (another torch, transformers, OpenVINO or
    optimum-intel version, another recipe, a model directory gone or a catalog config changed);
    incomplete (a conversion that did not finish); unknown (metadata that does not say what made
    it, or a converter that cannot run here now); converting or abandoned staging. `devicefit cache prune` removes what no run reads."""
    if ctx.invoked_subcommand is not None:
        return
    from benchmark_runners.cache_prune import UNREAD_STATES
    from benchmark_runners.conversion_cache import all_entries

    entries = all_entries()
    if as_json:
        print(json.dumps([e.to_json() for e in entries], indent=2))
        return
    table = Table(title="Cache entries")
    for col in ("cache", "entry", "model", "state", "size", "last used", "why"):
        table.add_column(col, justify="right" if col == "size" else "left", overflow="fold")
    for e in entries:
        table.add_row(e.cache, e.name, e.model or "-", e.state, _size(e.size_bytes), _when(e.last_used), e.reason or "-")
    console.print(table)
    unread = [e for e in entries if e.state in UNREAD_STATES]
    console.print(f"{len(entries)} entries, {_size(sum(e.size_bytes for e in entries))}; "
                  f"{len(unread)} that no run here reads ({_size(sum(e.size_bytes for e in unread))}): "
                  "`devicefit cache prune` removes them")


@cache_app.command("prune")
def cache_prune(
    ctx: typer.Context,
    everything: bool = typer.Option(False, "--all", help="Every entry, current ones and the derived facts too."),
    unused_days: Optional[float] = typer.Option(None, "--unused-days", help="Also entries not read or written for this many days."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Only this model's entries: its name as the entries record it, or a local model directory's path (needed where two directories share a name)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Say what would go, remove nothing."),
    as_json: bool = AS_JSON,
) -> None:
    """Remove the entries no run here reads (stale, incomplete, abandoned staging); with --all,
    --unused-days or --model, current entries too, only while no measurement on this machine holds
    a device lock (they would be converted again). Entries being written and files the caches do
    not recognise are never removed."""
    from benchmark_runners.cache_prune import model_entries, prune
    from benchmark_runners.conversion_cache import all_entries

    as_json = as_json or bool(ctx.parent and ctx.parent.params.get("as_json"))  # `cache --json prune` too

    if unused_days is not None and not unused_days >= 0:
        fail(f"--unused-days must be a number of days >= 0, got {unused_days}")
    if everything and (unused_days is not None or model is not None):
        fail("--all removes every entry: it takes neither --unused-days nor --model")
    entries = all_entries()
    if model is not None and not model_entries(entries, model):
        fail(f"no cache entry records the model {model!r} (devicefit cache lists them)")
    report = prune(entries, everything=everything, unused_days=unused_days, model=model, dry_run=dry_run)
    if as_json:
        print(json.dumps({"dry_run": report.dry_run, "freed_bytes": report.freed_bytes, "kept": report.kept,
                          "removed": [e.to_json() for e in report.removed]}, indent=2))
        return
    verb = "would remove" if dry_run else "removed"
    for e in report.removed:
        console.print(styled(f"{verb} ", (f"{e.cache}/{e.name}", "bold"), f" ({e.state}, {_size(e.size_bytes)})"))
    summary = f"{verb} {len(report.removed)} entries, {_size(report.freed_bytes)}; kept {report.kept}"
    (console if report.removed else err).print(summary)
