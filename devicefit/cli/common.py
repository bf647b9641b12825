"""What every command module shares: the Typer app and its consoles, one-line failures, list
parsing, and the one way the data directory is found.

Errors are handled in one place: `DevicefitGroup.invoke` turns any DevicefitError (and a
file-system fault) into one line on stderr and the error's exit code, for the console script and
for CliRunner alike. Commands raise; they do not format their own failures."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Callable, NoReturn, Optional

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text
from typer.core import TyperGroup

from benchmark_runners.records import MAX_ASKED_BATCH_SIZE, MAX_BATCH_SIZE, MODES, PRECISIONS
from devicefit.errors import DevicefitError
from devicefit.paths import DataPaths
from devicefit.shown_text import visible

# Text a terminal shows and never acts on (devicefit.shown_text): an ANSI sequence in a hostname
# or error cannot clear the screen, retitle the window or plant an OSC 8 link, and a direction
# override cannot show a name's characters in another order.
terminal_text = visible


class PlainConsole(Console):
    """A console on which a string is text, never markup: model names, hostnames, device names and
    error messages come from landing files other machines wrote and from backends, and a name like
    `[link=...]x[/link]` or `a[/]b` is data (rich markup rendered it as a link, or raised
    MarkupError). The code's own styles are set with `styled`; control characters are escaped."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(markup=False, emoji=False, **kwargs)

    def render_str(self, text: str, **kwargs: Any):
        return super().render_str(terminal_text(text), **{**kwargs, "markup": False, "emoji": False})


def styled(*parts: str | tuple[str, str]) -> Text:
    """One line whose styles the code sets: plain parts and (text, style) parts, each text as
    data (control characters escaped, brackets kept)."""
    return Text.assemble(*(terminal_text(p) if isinstance(p, str) else (terminal_text(p[0]), p[1]) for p in parts))


# Off a terminal (CI logs, pipes) rich would wrap tables at 80 columns; results need more.
# A stream closed at start (`devicefit benchmark --json F >&-` from cron) is None in sys.
console = PlainConsole(width=None if sys.stdout is not None and sys.stdout.isatty() else 220)
err = PlainConsole(stderr=True, width=None if sys.stderr is not None and sys.stderr.isatty() else 220)


def fail(message: str, code: int = 2) -> NoReturn:
    err.print(styled(("error:", "bold red"), f" {message}"))
    raise typer.Exit(code)


class DevicefitGroup(TyperGroup):
    """The root command group: the one place where errors become exit codes, and where the
    guides' space-separated list values are joined (devicefit.cli.spellings)."""

    def parse_args(self, ctx, args):
        from devicefit.cli.spellings import join_list_values

        try:  # the spellings read the device registry, which a bad DEVICEFIT_PLUGINS makes raise
            args = join_list_values(list(args))
        except DevicefitError as exc:
            fail(str(exc), exc.exit_code)
        return super().parse_args(ctx, args)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except DevicefitError as exc:
            fail(str(exc), exc.exit_code)
        except OSError as exc:
            # A read-only data directory, a full disk, a missing permission: the path and the
            # OS's reason, not a traceback.
            path = exc.filename or ""
            fail(f"{exc.strerror or exc}" + (f": {path}" if path else "") + f" ({type(exc).__name__})", 1)


def check_destination(path: Optional[Path], option: str) -> None:
    """Refuse, before any work, a file the command could not write at its end (a sweep's rows
    would be lost; `compare` exits 1 for a regression, so a write error there must not be its 1):
    a directory, or a path under a file or an unwritable directory."""
    if path is None:
        return
    if path.is_dir():
        fail(f"{option} {path} is a directory: give the file to write")
    parent = path.absolute().parent
    while not parent.exists() and parent != parent.parent:  # created by the write
        parent = parent.parent
    if not parent.is_dir():
        fail(f"{option} {path}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        fail(f"{option} {path}: {parent} is not writable")


def written(path: Path, option: str, write: Callable[[], object], unwritten: list[str]) -> bool:
    """Whether an output written after the work (a sweep, a comparison) was written; one that was
    not (a full disk, its directory removed meanwhile) is added to `unwritten`, naming the option,
    the file and why, so the caller still writes the others and then fails naming every one."""
    try:
        write()
        return True
    except OSError as exc:
        unwritten.append(f"{option} {path} was not written: {exc.strerror or exc} ({type(exc).__name__})")
        return False


def registry_help(text: Callable[[], str]) -> str:
    """Help text built from the device registry when the commands are declared (at import). A
    registry that cannot load (DEVICEFIT_PLUGINS naming a module that does not import) must not
    raise there, outside every handler, as a traceback: the help says so, and the error is one
    line when a command reads the registry."""
    try:
        return text()
    except DevicefitError as exc:
        return f"(the device registry did not load: {exc})"


app = typer.Typer(cls=DevicefitGroup, add_completion=False, no_args_is_help=True,
                  help="Measure models on this machine's hardware and say where they run best.")


# Options several commands share, declared once (Typer reads each as the parameter's default).
BENCHMARK_DIR = typer.Option(None, "--benchmark-dir", help="Data directory (default: DEVICEFIT_DATA_DIR or ./data).")
MODEL = typer.Option(..., "--model", "-m", help="Catalog name, a registered model's name, or a local model directory.")
AS_JSON = typer.Option(False, "--json", help="Print as JSON.")
MODE = typer.Option("inference", "--mode", help=f"{' or '.join(MODES)}.")
PRECISION = typer.Option("fp32", "--precision", help=f"{', '.join(PRECISIONS)}.")
BATCH_SIZE = typer.Option(1, "--batch-size", help=f"Samples per batch (1 to {MAX_ASKED_BATCH_SIZE}, as the API).")
DEBUG = typer.Option(False, "--debug", help="Debug logging of devicefit's own modules on stderr (the guides' --debug).")


def debug_logging(enabled: bool) -> None:
    """`--debug`: devicefit's loggers at DEBUG on stderr (third-party libraries stay quiet)."""
    if not enabled:
        return
    import logging

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    for name in ("devicefit", "benchmark_runners", "models"):
        logger = logging.getLogger(name)
        logger.setLevel(logging.DEBUG)
        logger.addHandler(handler)


def csv_list(value: str, what: str) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        fail(f"{what} is empty")
    return items


def model_list(value: str, what: str = "--model") -> list[str]:
    """Comma-separated models, where a local model directory's path may hold commas itself: the
    longest run of pieces that, joined back, names an existing file or directory is one model."""
    pieces, out, i = value.split(","), [], 0
    while i < len(pieces):
        for j in range(len(pieces), i + 1, -1):
            joined = ",".join(pieces[i:j]).strip()
            if os.path.exists(joined):
                out.append(joined)
                i = j
                break
        else:
            if pieces[i].strip():
                out.append(pieces[i].strip())
            i += 1
    if not out:
        fail(f"{what} is empty")
    return out


def model_family(value: Optional[str], what: str = "--family") -> Optional[str]:
    """A --family value: one of the catalog's families, spelled exactly, as `benchmark
    --model-family` and the API (422) take it; None (the model's family is classified) passes.
    An unchecked family answered for a family no compatibility matrix row names, so a typo
    (`Embedding`) recommended hardware the family's measurements had ruled out."""
    if value is None:
        return None
    from models.catalog import FAMILIES

    if value not in FAMILIES:
        near = value.strip().lower().replace("-", "_").replace(" ", "_")
        hint = f" (did you mean '{near}'?)" if near in FAMILIES else ""
        fail(f"{what} must be one of {', '.join(FAMILIES)}, got '{value}'{hint}")
    return value


def int_list(value: str, what: str) -> list[int]:
    """Comma-separated batch sizes, each from 1 to the store's INTEGER limit."""
    out = []
    for item in csv_list(value, what):
        try:
            n = int(item)
        except ValueError:
            fail(f"{what}: '{item}' is not an integer")
        if not 1 <= n <= MAX_BATCH_SIZE:
            fail(f"{what}: batch size must be an integer from 1 to {MAX_BATCH_SIZE:,}, got {n}")
        out.append(n)
    return out


def gib(n: Optional[float]) -> str:
    return "-" if n is None else f"{n / 2**30:.1f} GiB"


def data_paths(benchmark_dir: Optional[Path] = None, database: Optional[Path] = None, must_exist: bool = False) -> DataPaths:
    """The data directory: --benchmark-dir, else --database's (that file is the store, its
    directory holds the rest), else DEVICEFIT_DATA_DIR or ./data. With `must_exist`, a missing
    store is a one-line error."""
    if benchmark_dir:
        paths = DataPaths(Path(benchmark_dir).resolve())
    elif database:
        paths = DataPaths.of_database(database)
    else:
        paths = DataPaths.default()
    if must_exist and not paths.database.exists():
        fail(f"no database at {paths.database}: run `make run` or `devicefit run` first")
    return paths


def aggregates(paths: DataPaths, note: bool = True) -> list[dict[str, Any]]:
    """The store's aggregates (store.aggregates_as_measured), its note on stderr where they are not
    what the measurements give now (`note=False`: a --json answer, whose readers parse the output)."""
    from devicefit import store

    con = store.connect(paths.database, read_only=True)
    try:
        rows, why = store.aggregates_as_measured(con)
    finally:
        con.close()
    if why and note:
        err.print(styled(("note:", "yellow"), f" {why}"))
    return rows


def classifier(benchmark_dir: Optional[Path], config: Optional[Path] = None):
    from devicefit.select.resources import HardwareAwareModelClassifier

    return HardwareAwareModelClassifier(benchmark_dir=benchmark_dir, config_path=config)


def select_errors() -> tuple:
    """What selection raises for bad input: devicefit's own errors, and value errors from the
    records' validation."""
    return (DevicefitError, ValueError)


def print_regression(report: dict) -> None:
    shown = [c for c in report["comparisons"] if c["verdict"] in ("regression", "improvement", "inconclusive")]
    table = Table(title=f"vs {report['baseline']}: threshold {report['threshold']:g}, alpha {report['alpha']:g} — "
                        + ", ".join(f"{n} {v}" for v, n in report["summary"].items() if n))
    for c in ("config", "verdict", "baseline p50 ms", "current p50 ms", "change", "p-value"):
        table.add_column(c)
    for c in shown:
        colour = {"regression": "red", "inconclusive": "yellow"}.get(c["verdict"], "green")
        table.add_row(c["config"], styled((c["verdict"], colour)), f"{c['baseline_p50_ms']:.3f}", f"{c['current_p50_ms']:.3f}",
                      f"{100 * c['change']:+.1f}%", "-" if c["p_value"] is None else f"{c['p_value']:.2g}")
    console.print(table)
    for c in report["comparisons"]:
        if c["verdict"] == "inconclusive":
            console.print(styled((f"{c['config']}: {c['method']}", "yellow")))
        if c.get("note"):  # the page faults moved with a change, or the allocators differ
            console.print(f"{c['config']}: {c['note']}")
        if c["verdict"] == "missing" and c["method"].startswith("in the baseline; "):  # skipped or failed in this run
            console.print(styled((f"{c['config']}: missing, {c['method'].removeprefix('in the baseline; ')}", "yellow")), soft_wrap=True)


def exit_without_teardown(code: Any) -> NoReturn:
    """End the console script the way `sys.exit(code)` would, minus the interpreter's teardown:
    with torch and transformers loaded (every measuring command has them) finalizing their
    modules takes about 0.8 s after the work is done, which a user waits for on every command
    (measured on the 2-core Xeon: 4.0 s vs 3.2 s for a process that only imports them). The
    atexit handlers still run (they stop workers and the fork server), output is flushed and
    logging shut down. A process with a non-daemon thread still running is left to the normal
    exit, which waits for that thread."""
    import atexit
    import logging
    import os
    import threading

    if isinstance(code, str):  # sys.exit("message"): print it, status 1
        print(code, file=sys.stderr)
        code = 1
    status = 0 if code is None else code if isinstance(code, int) else 1
    if any(t is not threading.main_thread() and not t.daemon and t.is_alive() for t in threading.enumerate()):
        sys.exit(status)
    atexit._run_exitfuncs()  # noqa: SLF001 - the documented handlers, run as the normal exit would
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        if stream is None:  # closed when the process started
            continue
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`devicefit ... | head`)
            pass
    os._exit(status)


def best_precision_table(every: list[dict]) -> Table:
    """The run's summary: per config (model, device, mode, batch, input), the fastest precision
    beside the same config's fp32 figure."""
    from devicefit.reports.data import labelled

    every = labelled(every)  # two GPUs (or two hosts' CPUs) of one kind are named by device
    rows = [r for r in every if r["is_best_precision"]]

    def config(r: dict) -> tuple:  # the same work on the same device: 128 and 512 tokens are two configs
        return r["model"], r["backend"], r["device_kind"], r["host"], r.get("accelerator"), r["mode"], r["batch_size"], r["input_dims"]

    fp32 = {config(r): r["p50_ms"] for r in every if r["precision"] == "fp32"}
    table = Table(title="Best precision per config (median over runs)")
    for col in ("model", "hardware", "mode", "batch", "tokens", "best", "p50 ms", "fp32 p50 ms", "samples/s", "speedup vs cpu fp32"):
        table.add_column(col, justify="left" if col in ("model", "hardware", "mode", "best") else "right")
    for r in rows:
        base = fp32.get(config(r))
        hardware = r.get("hardware_label") or r["device_kind"]
        hardware += f" ({r['device_profile']})" if r.get("device_profile") else ""
        table.add_row(r["model"], hardware, r["mode"], str(r["batch_size"]), str(r["seq_length"] or "-"), r["best_precision"], f"{r['p50_ms']:.2f}",
                      f"{base:.2f}" if base else "-", f"{r['throughput_samples_per_s']:.1f}",
                      f"{r['speedup_vs_cpu_fp32']:.2f}x" if r["speedup_vs_cpu_fp32"] else "-")
    return table
