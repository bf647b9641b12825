"""Spec 004's comparative analysis (one CSV row per model and config with every hardware's
figures and speedup vs CPU), its recommendations (best hardware per model by throughput,
latency and memory, with the margin over the best other hardware) and the training versus
inference comparison. All from the aggregated measurements; nothing here is predicted."""
from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path
from typing import Any

from devicefit.predict.memory_model import memory_target
from devicefit.reports.data import hardware_label, labelled
from devicefit.reports.figures import MIB, training_inference_pairs
from devicefit.reports.spreadsheet import spreadsheet_text
from devicefit.results_io import write_text_atomic

CONFIG_COLUMNS = ("model", "family", "mode", "precision", "batch_size", "input_dims")


def _column_prefix(label: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", label.lower()).strip("_")


def comparative_analysis(aggregates: list[dict[str, Any]]) -> tuple[list[str], list[dict[str, Any]]]:
    """(columns, rows): one row per (model, mode, precision, batch, input); per hardware
    `<hw>_p50_ms`, `<hw>_samples_per_s`, `<hw>_peak_mib` (what must fit on the device: a card's
    allocator peak where it has memory of its own, the process's peak RSS elsewhere, as
    devicefit.predict.memory_model.memory_target), `<hw>_speedup_vs_cpu_fp32`, `<hw>_runs`;
    where the generation scenario was measured also `<hw>_ttft_ms`, `<hw>_tpot_ms` (median) and
    `<hw>_decode_tokens_per_s` (empty on forward-pass rows, whose p50 is one pass, where a
    generation row's is the whole request); then the fastest hardware and its margin over the next.
    Two devices of one kind (two GPUs, two hosts' CPUs) are two hardware columns (labelled)."""
    aggregates = labelled(aggregates)
    labels = sorted({hardware_label(r) for r in aggregates}, key=lambda h: (h.split(" ", 1)[0] != "cpu", h))
    by_config: dict[tuple, dict[str, dict[str, Any]]] = {}
    for r in aggregates:
        by_config.setdefault(tuple(r.get(c) for c in CONFIG_COLUMNS), {})[hardware_label(r)] = r
    generation = {"ttft_ms": "ttft_ms", "tpot_ms": "tpot_p50_ms", "decode_tokens_per_s": "decode_tokens_per_s"} \
        if any(r.get("mode") == "generation" for r in aggregates) else {}
    columns = list(CONFIG_COLUMNS)
    for h in labels:
        p = _column_prefix(h)
        columns += [f"{p}_p50_ms", f"{p}_samples_per_s", f"{p}_peak_mib", f"{p}_speedup_vs_cpu_fp32", f"{p}_runs"]
        columns += [f"{p}_{c}" for c in generation]
    columns += ["fastest_hardware", "fastest_margin"]
    rows = []
    for config in sorted(by_config, key=lambda c: tuple("" if v is None else str(v).zfill(6) if isinstance(v, int) else str(v) for v in c)):
        per_hw = by_config[config]
        row: dict[str, Any] = dict(zip(CONFIG_COLUMNS, config))
        for h in labels:
            p, r = _column_prefix(h), per_hw.get(h)
            row[f"{p}_p50_ms"] = None if r is None else r["p50_ms"]
            row[f"{p}_samples_per_s"] = None if r is None else r["throughput_samples_per_s"]
            peak = None if r is None else memory_target(r)
            row[f"{p}_peak_mib"] = None if peak is None else peak / MIB
            row[f"{p}_speedup_vs_cpu_fp32"] = None if r is None else r.get("speedup_vs_cpu_fp32")
            row[f"{p}_runs"] = None if r is None else r["runs"]
            for column, field in generation.items():
                row[f"{p}_{column}"] = None if r is None else r.get(field)
        ranked = sorted(per_hw.items(), key=lambda kv: kv[1]["p50_ms"])
        row["fastest_hardware"] = ranked[0][0]
        row["fastest_margin"] = ranked[1][1]["p50_ms"] / ranked[0][1]["p50_ms"] if len(ranked) > 1 else None
        rows.append(row)
    return columns, rows


def _cell(value: Any) -> Any:
    if isinstance(value, float):
        return f"{value:.6g}"
    return "" if value is None else spreadsheet_text(value) if isinstance(value, str) else value


def analysis_csv(aggregates: list[dict[str, Any]]) -> str:
    columns, rows = comparative_analysis(aggregates)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _cell(v) for k, v in row.items()})
    return buf.getvalue()


def write_analysis_csv(aggregates: list[dict[str, Any]], path: Path) -> Path:
    path = Path(path)
    write_text_atomic(path, analysis_csv(aggregates))
    return path


CRITERIA = {
    # criterion: (the row's figure, better is higher?, which configs compete, what is compared)
    "throughput": ("throughput_samples_per_s", True, "every batch size", "samples/s"),
    "latency": ("p50_ms", False, "the smallest measured batch", "ms p50"),
    # what must fit on the device (memory_target): a card's allocator peak, elsewhere peak RSS
    "memory": ("memory_bytes", False, "the smallest measured batch", "bytes peak (a card's allocator where it has its own memory, else RSS)"),
}


def recommendations(aggregates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per model and mode, the best hardware (with the precision and batch that got it) by each
    criterion, and its margin over the best config on any *other* hardware (None when only one
    hardware was measured: then there is no choice to recommend between, and it says so)."""
    out = []
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in labelled(aggregates):
        groups.setdefault((r["model"], r["mode"]), []).append({**r, "memory_bytes": memory_target(r)})
    for (model, mode), rows in sorted(groups.items()):
        default_dims = max({r["input_dims"] for r in rows}, key=lambda d: sum(r["input_dims"] == d for r in rows))
        rows = [r for r in rows if r["input_dims"] == default_dims]
        entry: dict[str, Any] = {"model": model, "family": rows[0].get("family"), "mode": mode, "input_dims": default_dims,
                                 "hardware_measured": sorted({hardware_label(r) for r in rows})}
        for criterion, (column, higher, scope, unit) in CRITERIA.items():
            candidates = [r for r in rows if r.get(column) is not None]
            if scope != "every batch size" and candidates:
                smallest = min(r["batch_size"] for r in candidates)
                candidates = [r for r in candidates if r["batch_size"] == smallest]
            if not candidates:
                entry[criterion] = None
                continue
            ranked = sorted(candidates, key=lambda r: r[column], reverse=higher)
            best = ranked[0]
            rival = next((r for r in ranked if hardware_label(r) != hardware_label(best)), None)
            margin = None if rival is None else (best[column] / rival[column] if higher else rival[column] / best[column])
            entry[criterion] = {
                "hardware": hardware_label(best), "precision": best["precision"], "batch_size": best["batch_size"], "value": best[column],
                "unit": unit, "runner_up": None if rival is None else {"hardware": hardware_label(rival), "precision": rival["precision"],
                                                                      "batch_size": rival["batch_size"], "value": rival[column]},
                "margin": margin,
                "note": f"only {hardware_label(best)} was measured" if rival is None else
                        f"{margin:.2f}× better than {hardware_label(rival)}",
            }
        out.append(entry)
    return out


def write_recommendations(aggregates: list[dict[str, Any]], path: Path) -> Path:
    path = Path(path)
    write_text_atomic(path, json.dumps(recommendations(aggregates), indent=1, default=str))
    return path


def training_inference_comparison(aggregates: list[dict[str, Any]], model: str | None = None) -> list[dict[str, Any]]:
    """Spec 004's --compare-training-inference: configs measured in both modes, with the ratio of
    training step to inference latency, throughput and peak memory of each, per device: labelled
    (label_devices) so that two machines' CPUs are "cpu (AMD EPYC)" and "cpu (Intel Xeon)", each
    step paired with its own machine's inference."""
    rows = labelled([r for r in aggregates if model is None or r["model"].lower() == model.lower()])
    return training_inference_pairs(rows)
