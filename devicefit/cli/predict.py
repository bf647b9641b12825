"""Predictions from the published predictor: performance, distributed training, memory-constrained search."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from benchmark_runners import registry
from devicefit.cli.common import (
    BATCH_SIZE,
    BENCHMARK_DIR,
    DEBUG,
    MODE,
    MODEL,
    PRECISION,
    app,
    console,
    csv_list,
    debug_logging,
    fail,
    int_list,
    model_family,
    registry_help,
    select_errors,
    styled,
)

PANEL = "Predict"


@app.command(rich_help_panel=PANEL)
def predict(
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Catalog name or local model directory."),
    family: Optional[str] = typer.Option(None, "--family", help="Model family to report (default: classified)."),
    batch_size: int = BATCH_SIZE,
    seq_length: Optional[int] = typer.Option(None, "--seq-length", help="Tokens per sample for text models (default 128, capped at the model's limit)."),
    mode: str = typer.Option("inference", "--mode", "--scenario", help="inference, training, or generation (TTFT, time per "
                             "output token, decode tokens/s and the KV cache of a request of --seq-length prompt tokens, "
                             "default 256, and --new-tokens)."),
    new_tokens: Optional[int] = typer.Option(None, "--new-tokens", help="Generation: tokens each request generates (default 64)."),
    precision: str = PRECISION,
    hardware: Optional[str] = typer.Option(None, "--hardware", help="Comma-separated kinds (default: every kind devicefit knows)."),
    database: Optional[Path] = typer.Option(None, "--database", help="DuckDB file: the store itself, its directory holding predictors/ (--benchmark-dir wins)."),
    benchmark_dir: Optional[Path] = typer.Option(None, "--benchmark-dir", help="Data directory (holds predictors/ and devicefit.duckdb)."),
    generate_matrix: bool = typer.Option(False, "--generate-matrix", help="Write the spec 001 prediction matrix instead."),
    output_file: Path = typer.Option(Path("prediction_matrix.json"), "--output-file", help="Where --generate-matrix writes."),
    visualize: bool = typer.Option(False, "--visualize", help="With --generate-matrix: also write HTML figures."),
    output_dir: Path = typer.Option(Path("visualizations"), "--output-dir", help="Where --visualize writes."),
    batch_sizes: Optional[str] = typer.Option(None, "--batch-sizes", help="With --generate-matrix: comma-separated batch sizes."),
    config: Optional[Path] = typer.Option(None, "--config", help="Selection config JSON (spec 002) ranking the recommendation."),
    detect_hardware_first: bool = typer.Option(False, "--detect-hardware", help="Print this host's detected hardware first "
                                                                                 "(alone, without --model)."),
    distributed: bool = typer.Option(False, "--distributed", help="With --mode training: also plan training across --gpu-count GPUs."),
    gpu_count: int = typer.Option(1, "--gpu-count", min=1, max=1024, help="GPUs for --distributed (1 to 1024, as the API)."),
    debug: bool = DEBUG,
    as_json: bool = typer.Option(False, "--json", help="Print the response as JSON."),
) -> None:
    """Predict latency, throughput and memory from the published predictor (spec 001), each
    figure with its interval and the link of the fallback chain that produced it, and the
    hardware it recommends (ranked by the selection config's weights)."""
    debug_logging(debug)
    if detect_hardware_first:
        from devicefit.cli.measure import print_detection

        print_detection(as_json=False)
        if not model and not generate_matrix:
            return
    from benchmark_runners import registry
    from benchmark_runners.records import MAX_ASKED_BATCH_SIZE, MODES, PRECISIONS
    from devicefit.predict.api import HardwareModelPredictor, PredictorUnavailable
    from devicefit.results_io import write_json_atomic
    from models.catalog import UnknownModelError

    if not 1 <= batch_size <= MAX_ASKED_BATCH_SIZE:
        fail(f"--batch-size must be a positive integer up to {MAX_ASKED_BATCH_SIZE} (the API's bound), got {batch_size}")
    if mode not in MODES:
        fail(f"--mode must be one of {', '.join(MODES)}, got '{mode}'")
    if precision not in PRECISIONS:
        fail(f"--precision must be one of {', '.join(PRECISIONS)}, got '{precision}'")
    model_family(family)
    kinds = csv_list(hardware, "--hardware") if hardware else list(registry.kind_names())
    unknown = [k for k in kinds if k not in registry.kind_names()]
    if unknown:
        fail(f"unknown hardware {', '.join(unknown)}; known: {', '.join(registry.kind_names())}")
    if not generate_matrix and not model:
        fail("--model is required (or --generate-matrix)")
    try:
        if mode == "generation" and (generate_matrix or distributed):
            fail("--mode generation answers per device with TTFT and TPOT; --generate-matrix and --distributed are for "
                 "inference and training")
        api = HardwareModelPredictor(database_path=database, benchmark_dir=benchmark_dir, config_path=config)
        if generate_matrix:
            models = [{"name": model, **({"family": family} if family else {})}] if model else None
            matrix = api.create_hardware_prediction_matrix(models, int_list(batch_sizes, "--batch-sizes") if batch_sizes else None,
                                                           kinds if hardware else None, None, mode)
            write_json_atomic(output_file, matrix)
            console.print(f"prediction matrix: {output_file} ({len(matrix['models'])} models x {len(matrix['hardware_platforms'])} "
                          f"hardware x {len(matrix['batch_sizes'])} batch sizes x {len(matrix['precision_options'])} precisions)")
            if visualize:
                for path in api.visualize_matrix(matrix, output_dir):
                    console.print(f"  figure: {path}")
            return
        if mode == "generation":
            from models.resolve import resolve_model

            result = api.predict_generation_performance(resolve_model(model), family, kinds, kinds, batch_size, seq_length, precision, new_tokens)
            _print_generation(result, as_json)
            return
        if new_tokens is not None:
            fail("--new-tokens applies to the generation scenario: add --mode generation")
        result = api.predict_performance(model, family, kinds, batch_size, seq_length, mode, precision)
        ranked = [hw for hw in kinds if result["predictions"][hw]["latency"] is not None]
        if ranked:
            best = api.predict_optimal_hardware(model, family, batch_size, seq_length, mode, precision, available_hardware=ranked)
            result["recommendation"] = {k: best[k] for k in ("primary_recommendation", "fallback_options", "explanation")}
        if distributed:
            result["distributed"] = _distributed_plan(model, gpu_count, batch_size, seq_length, mode)
    except (PredictorUnavailable, UnknownModelError, ValueError, FileNotFoundError) as exc:
        fail(str(exc))
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
    if result.get("recommendation"):
        rec = result["recommendation"]
        console.print(styled("recommended: ", (rec["primary_recommendation"], "bold green"), f" ({rec['explanation']})"))
    if result.get("distributed"):
        d = result["distributed"]
        console.print(f"distributed training on {d['gpu_count']} GPU(s): {d['distributed_strategy']}, "
                      f"{d['estimated_memory']['per_gpu_gb']:.1f} of {d['max_memory_gb']:g} GB per GPU ({d['max_memory_source']})"
                      + ("" if d["fits"] else ", does not fit") + "; `devicefit distributed` shows the breakdown")


def _print_generation(result: dict, as_json: bool) -> None:
    """`predict --mode generation`: per device TTFT, TPOT, decode tokens/s and the KV cache, each
    with the link that answered it."""
    if as_json:
        print(json.dumps(result, indent=2))
        return
    first = next((e for e in result["predictions"].values() if e["source"] != "unavailable"), None)
    if first is None:
        for hw, e in result["predictions"].items():
            console.print(f"{hw}: unavailable: {e['detail']}")
        raise typer.Exit(1)
    prompt = f"{first['prompt_tokens']} prompt tokens" if first["prompt_tokens"] else "its audio window"
    table = Table(title=f"{result['model_name']} ({result['model_family']}), generation: {prompt} + {first['new_tokens']} new, "
                        f"batch {result['batch_size']}, {result['precision']} - predictor {result['predictor_version']}")
    for col in ("hardware", "TTFT ms", "TPOT ms", "decode tok/s", "request ms", "KV cache MiB", "TTFT source", "TPOT source"):
        table.add_column(col, justify="left" if col == "hardware" or "source" in col else "right")

    def fmt(value, digits=1):
        return "-" if value is None else f"{value:.{digits}f}"

    answered = {hw: e for hw, e in result["predictions"].items() if e["source"] != "unavailable"}
    for hw, e in answered.items():
        table.add_row(hw, fmt(e["ttft_ms"]), fmt(e.get("tpot_ms"), 2), fmt(e.get("decode_tokens_per_s")), fmt(e.get("request_ms")),
                      fmt(e["kv_cache_mb"]), e["ttft_source"] or "-", e["tpot_source"])
    console.print(table)
    for hw, e in result["predictions"].items():
        if hw not in answered:
            console.print(f"  {hw}: unavailable: {e['detail']}")
            continue
        console.print(f"  {hw}: TPOT: {e['tpot_detail']}")
        if e["ttft_source"] != "trained_predictor":
            console.print(f"  {hw}: TTFT: {e['ttft_detail']}")
    kv = first["kv_cache"]
    console.print(f"KV cache ({first['kv_cache_source']}): {kv['layers']} layers x 2 x {kv['kv_heads']} KV heads x "
                  f"{kv['head_dim']} x {kv['self_positions']} positions x batch {kv['batch_size']} x {kv['bytes_per_element']} B"
                  + (f" + cross-attention over {kv['cross_positions']} positions" if kv["cross_positions"] else ""))


def _distributed_plan(model: str, gpu_count: int, batch_size: int, seq_length: Optional[int], mode: str) -> dict:
    """`predict --distributed`: the training plan for `gpu_count` GPUs (spec 001's example),
    each GPU as large as this host's first CUDA device, else the published reference GPU's
    (devicefit.predict.hardware_specs), which the plan names."""
    from benchmark_runners.hardware import detect_hardware
    from devicefit.predict.hardware_specs import published_spec
    from devicefit.select.distributed import plan_distributed_training
    from models.resolve import resolve_model

    if mode != "training":
        fail("--distributed plans training: add --mode training")
    gpus = detect_hardware(probe=False).to_json()["platforms"].get("cuda", {}).get("devices") or []
    if gpus and gpus[0].get("memory_total_bytes"):
        memory_gb, where = gpus[0]["memory_total_bytes"] / 1e9, f"{gpus[0].get('name', 'cuda:0')} here"
    else:
        reference = published_spec("cuda")
        memory_gb, where = reference.memory_gb, f"{reference.name} ({reference.source})"
    plan = plan_distributed_training(resolve_model(model), gpu_count, batch_size, memory_gb, seq_length).to_response()
    plan["max_memory_source"] = where
    return plan


@app.command(rich_help_panel=PANEL)
def distributed(
    model: str = MODEL,
    gpu_count: int = typer.Option(1, "--gpu-count", help="GPUs in the data-parallel group (default 1, as the API's)."),
    batch_size: int = typer.Option(8, "--batch-size", help="Samples per GPU per optimizer step."),
    max_memory_gb: Optional[float] = typer.Option(None, "--max-memory-gb", help="Memory of each GPU, GB (1e9 bytes)."),
    seq_length: Optional[int] = typer.Option(None, "--seq-length", help="Tokens per sample (default 128, capped at the model's limit)."),
    fp32: bool = typer.Option(False, "--fp32", help="Train in fp32 instead of mixed precision."),
    as_json: bool = typer.Option(False, "--json", help="Print spec 000's /training/distributed response as JSON."),
) -> None:
    """A distributed training configuration (DDP, ZeRO-1/2, FSDP; accumulation, checkpointing,
    offload, 8-bit optimizer) chosen from memory arithmetic, with the per-GPU figures."""
    from devicefit.select.distributed import DistributedConfigError, plan_distributed_training
    from models.catalog import UnknownModelError
    from models.resolve import resolve_model

    try:
        plan = plan_distributed_training(resolve_model(model), gpu_count, batch_size, max_memory_gb, seq_length, not fp32)
    except (UnknownModelError, DistributedConfigError, ValueError, FileNotFoundError) as exc:
        fail(str(exc))
    response = plan.to_response()
    if as_json:
        print(json.dumps(response, indent=2))
        raise typer.Exit(0 if plan.fits else 1)
    m = response["estimated_memory"]
    console.print(styled((plan.model_name, "bold"), f" ({plan.parameters / 1e6:.1f}M parameters) on {gpu_count} GPU(s)"
                         + (f" x {max_memory_gb:g} GB" if max_memory_gb else "") + f", batch {batch_size} per GPU, seq {plan.sequence_length}"))
    console.print(styled("strategy: ", (response["distributed_strategy"], "bold"), f" ({response['equivalent']}); micro-batch "
                         f"{plan.micro_batch_size} x {plan.gradient_accumulation_steps} accumulation steps; checkpointing "
                         f"{'on' if plan.activation_checkpointing else 'off'}; CPU offload {'on' if plan.cpu_offload else 'off'}; "
                         f"8-bit optimizer {'on' if plan.eight_bit_optimizer else 'off'}"))
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


@app.command("memory-search", rich_help_panel=PANEL)
def memory_search_command(
    model: str = MODEL,
    hardware: str = typer.Option("cpu", "--hardware", help=registry_help(lambda: ", ".join(k.name for k in registry.kinds().values() if k.native_precisions)) + "."),
    memory_constrained: float = typer.Option(..., "--memory-constrained", help="Memory cap in MB (MiB)."),
    mode: str = MODE,
    benchmark_dir: Optional[Path] = BENCHMARK_DIR,
) -> None:
    """Spec 004's memory-constrained search: the batch size x precision with the best throughput
    whose peak memory stays under the cap, from measurements where they exist, else predictions."""
    from devicefit.predict.api import HardwareModelPredictor
    from devicefit.select.memory_search import memory_constrained_search

    try:
        result = memory_constrained_search(model, hardware, memory_constrained, mode,
                                           HardwareModelPredictor(benchmark_dir=benchmark_dir, record=False))
    except select_errors() as exc:
        fail(str(exc))
    print(json.dumps(result, indent=2))
