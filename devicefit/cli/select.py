"""Hardware selection and model classification (spec 002/003)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from devicefit.cli.common import (
    AS_JSON,
    BATCH_SIZE,
    BENCHMARK_DIR,
    DEBUG,
    PRECISION,
    app,
    classifier,
    console,
    csv_list,
    debug_logging,
    fail,
    int_list,
    model_family,
    select_errors,
    styled,
)

PANEL = "Select"


@app.command(rich_help_panel=PANEL)
def classify(
    model: str = typer.Argument(..., help="Catalog name, Hugging Face id of a catalog model, or local model directory."),
    model_class: Optional[str] = typer.Option(None, "--model-class", help="Architecture class, e.g. BertForMaskedLM."),
    task: Optional[list[str]] = typer.Option(None, "--task", help="A task the model serves (repeatable)."),
    as_json: bool = AS_JSON,
    hardware_aware: bool = typer.Option(False, "--hardware-aware", help="Add spec 003's recommended hardware, resource requirements and hardware profile (JSON)."),
    benchmark_dir: Optional[Path] = typer.Option(None, "--benchmark-dir", help="Data directory for --hardware-aware (default: data/)."),
) -> None:
    """Classify a model into a family and subfamily, with the evidence that decided it."""
    from models.classifier import classify_model

    if not model.strip():
        fail("the model name is empty: give a catalog name, a Hugging Face id or a local model directory")
    if hardware_aware:
        try:
            print(json.dumps(classifier(benchmark_dir).classify_model(model, model_class, task), indent=2))
        except select_errors() as exc:
            fail(str(exc))
        return
    result = classify_model(model, model_class, task)
    if as_json:
        print(json.dumps(result.to_json(), indent=2))
        return
    if result.family is None:
        fail(f"no evidence about '{model}': not in the catalog, not a local directory, and its name, class and tasks say nothing", 1)
    console.print(styled((model, "bold"), ": family ", (result.family, "bold"),
                         f", subfamily {result.subfamily or '-'}, confidence {result.confidence:.2f}"))
    table = Table(title="Evidence")
    for col in ("source", "observation", "family", "subfamily", "weight"):
        table.add_column(col)
    for e in result.evidence:
        table.add_row(e.source, e.observation, e.family, e.subfamily or "-", f"{e.weight:.2f}")
    console.print(table)


@app.command("select", rich_help_panel=PANEL)
def select_command(
    model: str = typer.Option(..., "--model", "-m", "--model-name", help="Catalog name, a registered model's name, or a local model "
                                                                        "directory (--model-name: spec 002's spelling)."),
    family: Optional[str] = typer.Option(None, "--family", "--model-family", help="Model family (default: classified)."),
    batch_size: int = BATCH_SIZE,
    seq_length: Optional[int] = typer.Option(None, "--seq-length", "--prompt-tokens", "--context-length",
                                             help="Tokens per sample for text models; in the generation scenario, the prompt (default 256)."),
    mode: Optional[str] = typer.Option(None, "--mode", "--scenario", help="inference (default), training or generation (TTFT, TPOT, "
                                       "decode tokens/s); --task sets it."),
    precision: str = PRECISION,
    hardware: Optional[str] = typer.Option(None, "--hardware", help="Comma-separated kinds you have (default: what is detected here), or registered device ids (devicefit devices list) to choose among those devices, with measured and predicted figures."),
    task: Optional[str] = typer.Option(None, "--task", help="classification, generation (selected on generation figures), embedding, "
                                                          "speech_recognition, fine_tuning, training."),
    max_latency_ms: Optional[float] = typer.Option(None, "--max-latency-ms", help="Exclude hardware predicted slower than this "
                                                   "(in the generation scenario: the whole request)."),
    new_tokens: Optional[int] = typer.Option(None, "--new-tokens", help="Generation scenario: tokens each request generates (default 64)."),
    max_tpot_ms: Optional[float] = typer.Option(None, "--max-tpot-ms", help="Generation scenario: exclude hardware whose predicted time "
                                                "per output token exceeds this."),
    max_ttft_ms: Optional[float] = typer.Option(None, "--max-ttft-ms", help="Generation scenario: exclude hardware whose predicted time "
                                                "to first token exceeds this."),
    distributed: bool = typer.Option(False, "--distributed", help="Training across --gpu-count GPUs (memory per GPU from the distributed plan)."),
    gpu_count: int = typer.Option(1, "--gpu-count", min=1, max=1024, help="GPUs for --distributed (1 to 1024, as the API)."),
    config: Optional[Path] = typer.Option(None, "--config", help="Selection config JSON (spec 002) over the shipped defaults."),
    benchmark_dir: Optional[Path] = BENCHMARK_DIR,
    debug: bool = DEBUG,
    as_json: bool = typer.Option(False, "--json", help="Print the /hardware/select response as JSON."),
) -> None:
    """Recommend hardware: constraints first (available, compatible, fits, latency bound), then
    candidates scored against the best one with the configured weights and preferences."""
    debug_logging(debug)
    from benchmark_runners import registry
    from devicefit.predict.api import PredictorUnavailable
    from devicefit.select.config import SelectionConfigError
    from devicefit.select.selector import TASK_MODES, HardwareSelector, SelectionError
    from models.catalog import UnknownModelError

    model_family(family)
    # The task fixes the mode: a --mode beside it that says otherwise was dropped without a word
    # (`--task training --mode generation` selected on training figures), as was --distributed
    # outside training.
    if task in TASK_MODES and mode is not None and mode != TASK_MODES[task]:
        fail(f"--task {task} selects on {TASK_MODES[task]} figures, not --mode {mode}: give one of them")
    mode = TASK_MODES.get(task) or mode or "inference"
    if distributed and mode != "training":
        fail(f"--distributed plans training across --gpu-count GPUs; this selection is on {mode} figures (add --mode training)")
    wanted = csv_list(hardware, "--hardware") if hardware else []
    if wanted and not all(w in registry.kind_names() for w in wanted):
        kinds = [w for w in wanted if w in registry.kind_names()]
        if kinds:
            fail(f"--hardware mixes kinds ({', '.join(kinds)}) with device ids ({', '.join(w for w in wanted if w not in kinds)}): "
                 "give kinds, or registered device ids (devicefit devices list)")
        if task or distributed:
            fail("--task and --distributed choose among kinds; with device ids give --mode and --batch-size")
        if mode == "generation" or new_tokens or max_tpot_ms or max_ttft_ms:
            fail("the generation scenario chooses among kinds (--hardware cpu,cuda); registered device ids are chosen on "
                 "forward-pass figures")
        return _select_devices(model, wanted, batch_size, seq_length, mode, precision, max_latency_ms, config, benchmark_dir, as_json)
    try:
        selector = HardwareSelector(benchmark_dir=benchmark_dir, config_path=config)
        kwargs = dict(available_hardware=csv_list(hardware, "--hardware") if hardware else None, distributed=distributed,
                      gpu_count=gpu_count, max_latency_ms=max_latency_ms, sequence_length=seq_length, precision=precision,
                      new_tokens=new_tokens, max_tpot_ms=max_tpot_ms, max_ttft_ms=max_ttft_ms)
        if task:
            result = selector.select_hardware_for_task(family, model, task, batch_size, **kwargs)
        else:
            result = selector.select_hardware(family, model, batch_size, mode=mode, **kwargs)
    except (PredictorUnavailable, SelectionConfigError, SelectionError, UnknownModelError, ValueError) as exc:
        fail(str(exc))
    if as_json:
        print(json.dumps(result, indent=2))
        return
    scenario = (f"generation, {result['sequence_length'] or 'audio'} prompt + {result['new_tokens']} new tokens"
                if result["mode"] == "generation" else result["mode"])
    console.print(styled((result["model_name"], "bold"), f" ({result['model_family']}, {result['model_size'] / 1e6:.1f}M parameters, "
                         f"{result['model_size_category']}), batch {batch_size}, {result['precision']}, {scenario}"))
    console.print(styled("primary: ", (result["primary_recommendation"], "bold green"),
                         f"; fallbacks: {', '.join(result['fallback_options']) or 'none'}"))
    if result["mode"] == "generation":
        return _generation_table(result)
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


def _generation_table(result: dict) -> None:
    table = Table()
    for col in ("hardware", "score", "TPOT ms", "TTFT ms", "decode tok/s", "request ms", "memory MiB", "KV cache MiB", "TPOT by",
                "excluded"):
        table.add_column(col)

    def cell(value, digits: int = 1) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    for hw, s in result["all_scores"].items():
        p = s["predictions"]
        table.add_row(hw, cell(s.get("score"), 2), cell(p["tpot_ms"], 2), cell(p["ttft_ms"]), cell(p["throughput"]), cell(p["latency"]),
                      cell(p["memory_mb"], 0), cell(p["kv_cache_mb"]), p["tpot_source"] or p["source"], s["excluded"] or "")
    console.print(table)
    console.print(result["explanation"])


def _select_devices(model: str, device_ids: list[str], batch_size: int, seq_length: Optional[int], mode: str, precision: str,
                    max_latency_ms: Optional[float], config: Optional[Path], benchmark_dir: Optional[Path], as_json: bool) -> None:
    """`select --hardware <device ids>`: among registered devices (devicefit.select.devices)."""
    from devicefit.predict.api import PredictorUnavailable
    from devicefit.select.config import SelectionConfigError
    from devicefit.select.devices import select_devices, to_json
    from devicefit.select.selector import HardwareSelector, SelectionError
    from models.catalog import UnknownModelError

    try:
        selector = HardwareSelector(benchmark_dir=benchmark_dir, config_path=config, inventory={})
        result = select_devices(selector, model, device_ids, batch_size, seq_length, mode, precision, max_latency_ms)
    except (PredictorUnavailable, SelectionConfigError, SelectionError, UnknownModelError, ValueError) as exc:
        fail(str(exc))
    if as_json:
        print(to_json(result))
        return
    console.print(styled((result["model_name"], "bold"), f" ({result['model_family']}), batch {batch_size}, {precision}, {mode}: primary ",
                         (result["primary_recommendation"], "bold green"), f"; fallbacks: {', '.join(result['fallback_options']) or 'none'}"))
    table = Table()
    for col in ("device", "name", "profile", "measured ms", "predicted ms", "predicted by", "excluded"):
        table.add_column(col)
    for device, e in result["devices"].items():
        measured, predicted = e["measured"], e["predicted"]
        table.add_row(device, e["name"] or "-", ", ".join(f"{k}={v}" for k, v in e["profile"].items()) or "-",
                      f"{measured['latency']:.2f}" if measured else "-",
                      f"{predicted['latency']:.2f}" if predicted["latency"] else "-", predicted["source"], e["excluded"] or "")
    console.print(table)
    console.print(result["explanation"])


@app.command("map", rich_help_panel=PANEL)
def map_command(
    families: Optional[str] = typer.Option(None, "--families", help="Comma-separated families (default: all five)."),
    batch_sizes: Optional[str] = typer.Option(None, "--batch-sizes", help="Comma-separated batch sizes (default 1,4,16,32,64)."),
    hardware: Optional[str] = typer.Option(None, "--hardware", help="Comma-separated kinds to choose among (default: every kind)."),
    output: Path = typer.Option(Path("hardware_map.json"), "--output", help="Where to write the map JSON."),
    config: Optional[Path] = typer.Option(None, "--config", help="Selection config JSON over the shipped defaults."),
    benchmark_dir: Optional[Path] = BENCHMARK_DIR,
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
        document = selection_map(selector, csv_list(families, "--families") if families else None,
                                 int_list(batch_sizes, "--batch-sizes") if batch_sizes else None,
                                 csv_list(hardware, "--hardware") if hardware else None)
    except (PredictorUnavailable, SelectionConfigError, SelectionError, ValueError) as exc:
        fail(str(exc))
    write_json_atomic(output, document)
    table = Table(title=f"selection map ({output})")
    for col in ("family", "size", "model", "inference", "training"):
        table.add_column(col)
    for family, entry in document["model_families"].items():
        for size, cell in entry["model_sizes"].items():
            table.add_row(family, size, cell["inference"]["model"], str(cell["inference"]["primary"]), str(cell["training"]["primary"]))
    console.print(table)


@app.command(rich_help_panel=PANEL)
def resources(
    models: list[str] = typer.Argument(..., help="Models to hold in one resource pool."),
    benchmark_dir: Optional[Path] = BENCHMARK_DIR,
) -> None:
    """Spec 003's resource pool configuration: per model its family, recommended hardware and
    memory/disk/core requirements (measured or predicted, each saying which), and whether the
    models together need a low-memory mode here."""
    try:
        config = classifier(benchmark_dir).get_optimal_resource_pool_config(models)
    except select_errors() as exc:
        fail(str(exc))
    print(json.dumps(config, indent=2))


@app.command(rich_help_panel=PANEL)
def recommend(
    task: str = typer.Option(..., "--task", help="A Hugging Face task (text-generation, image-classification, ...) or a selector task type."),
    hardware: Optional[str] = typer.Option(None, "--hw", "--hardware", help="Comma-separated hardware the model must run on."),
    limit: int = typer.Option(5, "--limit", min=1, help="At most this many models (1 or more)."),
    benchmark_dir: Optional[Path] = BENCHMARK_DIR,
) -> None:
    """Catalog models for a task, ranked by predicted latency on the allowed hardware (spec 003)."""
    try:
        result = classifier(benchmark_dir).recommend_model_for_task(task, csv_list(hardware, "--hardware") if hardware else None, limit)
    except select_errors() as exc:
        fail(str(exc))
    print(json.dumps(result, indent=2))
