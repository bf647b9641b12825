"""Bringing measurements taken elsewhere (a GPU host, optimum-benchmark) into the store.

Accepted: this project's own export (`devicefit benchmark --json`, a landing file), and
optimum-benchmark's `benchmark_config.json` + `benchmark_report.json` (a directory holding both,
either file with its sibling, or the combined `benchmark.json`). The file is validated,
converted to result rows and landed under data/raw/ as `ingest:<sha>`; re-ingesting the same
content replaces its rows instead of adding them.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmark_runners.hardware.inventory import device_fingerprint
from benchmark_runners.records import BenchmarkConfig, BenchmarkResult
from benchmark_runners.stats import summarize
from devicefit.landing import LandingFileError, validate_document, write_landing
from devicefit.results_io import FORMAT, results_document

OPTIMUM_DTYPES = {None: "fp32", "auto": "fp32", "float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
# Report targets that time one step of the scenario, in order of preference.
OPTIMUM_TARGETS = {"inference": ("forward", "prefill"), "training": ("train", "overall")}


@dataclass
class IngestResult:
    source_key: str
    landing_path: Path
    rows: int
    format: str


def _load_json(path: Path) -> Any:
    if not path.is_file():
        raise LandingFileError(f"{path}: no such file")
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise LandingFileError(f"{path}: not valid JSON ({exc})") from exc


def _optimum_pair(path: Path) -> tuple[dict, dict] | None:
    """(config, report) if `path` is optimum-benchmark output, else None."""
    if path.is_dir():
        if (path / "benchmark.json").is_file():
            return _optimum_pair(path / "benchmark.json")
        cfg, rep = path / "benchmark_config.json", path / "benchmark_report.json"
        if not cfg.is_file() or not rep.is_file():
            raise LandingFileError(f"{path}: a directory must hold benchmark_config.json and benchmark_report.json")
        return _load_json(cfg), _load_json(rep)
    data = _load_json(path)
    if isinstance(data, dict) and "config" in data and "report" in data:
        return data["config"], data["report"]
    if path.name == "benchmark_report.json":
        return _load_json(path.with_name("benchmark_config.json")), data
    if path.name == "benchmark_config.json" or (isinstance(data, dict) and {"backend", "scenario"} <= set(data)):
        sibling = path.with_name("benchmark_report.json")
        if not sibling.is_file():
            raise LandingFileError(f"{path}: an optimum-benchmark config needs its benchmark_report.json beside it")
        return data, _load_json(sibling)
    return None


def _require(obj: Any, key: str, where: str) -> Any:
    if not isinstance(obj, dict) or obj.get(key) is None:
        raise LandingFileError(f"{where}: missing '{key}'")
    return obj[key]


def _mb_to_bytes(value: Any) -> int | None:
    return int(value * 2**20) if isinstance(value, (int, float)) and value == value and value >= 0 else None


def optimum_to_document(config: dict, report: dict, source: str, digest: str) -> dict[str, Any]:
    where = f"{source} (optimum-benchmark)"
    backend = _require(config, "backend", where)
    scenario = _require(config, "scenario", where)
    if backend.get("name") != "pytorch":
        raise LandingFileError(f"{where}: only the pytorch backend maps to devicefit's torch rows; this is {backend.get('name')!r}")
    dtype = backend.get("torch_dtype")
    if dtype not in OPTIMUM_DTYPES:
        raise LandingFileError(f"{where}: torch_dtype {dtype!r} is not one of {', '.join(map(str, OPTIMUM_DTYPES))}")
    mode = {"inference": "inference", "training": "training"}.get(scenario.get("name"))
    if mode is None:
        raise LandingFileError(f"{where}: scenario {scenario.get('name')!r} is neither inference nor training")
    shapes = scenario.get("input_shapes") or {}
    batch = scenario.get("training_arguments", {}).get("per_device_train_batch_size") if mode == "training" else shapes.get("batch_size")
    if not isinstance(batch, int) or batch < 1:
        raise LandingFileError(f"{where}: batch size {batch!r} is not a positive integer")
    device = str(_require(backend, "device", where))
    if device == "cuda" and backend.get("device_ids") not in (None, ""):
        device = f"cuda:{str(backend['device_ids']).split(',')[0]}"
    target_name = next((t for t in OPTIMUM_TARGETS[mode] if isinstance(report.get(t), dict)), None)
    if target_name is None:
        raise LandingFileError(f"{where}: report has none of the targets {', '.join(OPTIMUM_TARGETS[mode])}")
    target = report[target_name]
    latency = _require(target, "latency", f"{where} report.{target_name}")
    values = latency.get("values")
    if not isinstance(values, list) or not values or not all(isinstance(v, (int, float)) and v > 0 for v in values):
        raise LandingFileError(f"{where}: report.{target_name}.latency.values must be a non-empty list of positive seconds")
    scale = {"s": 1e3, "ms": 1.0}.get(latency.get("unit", "s"))
    if scale is None:
        raise LandingFileError(f"{where}: latency unit {latency.get('unit')!r} is not s or ms")
    samples_ms = [v * scale for v in values]
    try:
        cfg = BenchmarkConfig(model=str(_require(backend, "model", where)), device=device, precision=OPTIMUM_DTYPES[dtype],
                              mode=mode, batch_size=batch, seq_length=shapes.get("sequence_length"))
    except ValueError as exc:
        raise LandingFileError(f"{where}: {exc}") from exc
    env = config.get("environment") or {}
    kind = cfg.device_kind
    if kind == "cuda":
        names = env.get("gpu") or []
        vram = env.get("gpu_vram_mb")
        hw = {"name": names[0] if names else None, "memory_total_bytes": _mb_to_bytes(vram)}
    else:
        hw = {"name": env.get("cpu"), "logical_cores": env.get("cpu_count"), "memory_total_bytes": _mb_to_bytes(env.get("cpu_ram_mb"))}
    stats = summarize(samples_ms).to_json()
    stats.pop("count")
    memory = target.get("memory") or {}
    throughput = (target.get("throughput") or {}).get("value") or batch * len(samples_ms) / (sum(samples_ms) / 1e3)
    load = (report.get("load_model") or report.get("load") or {}).get("latency") or {}
    seq = shapes.get("sequence_length")
    row = BenchmarkResult.for_config(
        cfg, f"optimum-{digest[:12]}", datetime.now(timezone.utc).isoformat(timespec="seconds"), "ok", None,
        **stats, samples_ms=samples_ms, iterations=len(samples_ms), stop_reason="external",
        throughput_samples_per_s=float(throughput), tokens_per_s=float(throughput) * seq if seq and mode == "inference" else None,
        load_time_s=(load.get("values") or [None])[0] if load.get("values") else None,
        peak_rss_bytes=_mb_to_bytes(memory.get("max_ram")),
        device_allocated_peak_bytes=_mb_to_bytes(memory.get("max_allocated")),
        device_reserved_peak_bytes=_mb_to_bytes(memory.get("max_reserved")),
        memory_method="optimum-benchmark" if memory else None,
        device_name=hw["name"], hardware_fingerprint=device_fingerprint(kind, hw) if hw["name"] else None,
        input={"dims": {"seq_length": seq} if seq else {}, "optimum_input_shapes": shapes},
        precision_recipe=f"optimum-benchmark pytorch torch_dtype={dtype}",
        environment={"source": "optimum-benchmark", "hostname": env.get("hostname") or f"optimum:{hw['name']}",
                     "versions": {k: v for k, v in env.items() if k.endswith("_version")}, "report_target": target_name},
        policy={},
    )
    return results_document(row.run_id, [row], {"platforms": {}})


def ingest_file(path: Path, raw_dir: Path) -> IngestResult:
    """Validate `path`, convert it if needed, and land it; raises LandingFileError naming the problem."""
    path = Path(path)
    if not path.exists():
        raise LandingFileError(f"{path}: no such file or directory")
    pair = _optimum_pair(path)
    if pair is not None:
        config, report = pair
        digest = hashlib.sha256(json.dumps([config, report], sort_keys=True).encode()).hexdigest()
        document, fmt = optimum_to_document(config, report, str(path), digest), "optimum-benchmark"
    else:
        document = _load_json(path)
        if not isinstance(document, dict) or document.get("format") != FORMAT:
            raise LandingFileError(f"{path}: neither a devicefit results file (format {FORMAT!r}) nor optimum-benchmark output")
        validate_document(document, str(path))
        digest = hashlib.sha256(json.dumps(document["results"], sort_keys=True).encode()).hexdigest()
        fmt = FORMAT
    source_key = f"ingest:{digest[:16]}"
    landed = write_landing(raw_dir, source_key, document)
    return IngestResult(source_key, landed, len(document["results"]), fmt)
