"""Bringing measurements taken elsewhere (a GPU host, optimum-benchmark) into the store.

Accepted: this project's own export (`devicefit benchmark --json`, a landing file, or a
directory of them: another machine's landing files), and optimum-benchmark's
`benchmark_config.json` + `benchmark_report.json` (a directory holding both, either file with
its sibling, or the combined `benchmark.json`). The file is validated,
converted to result rows and landed under data/raw/ as `ingest:<sha>`; re-ingesting the same
content replaces its rows instead of adding them.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from benchmark_runners.hardware.inventory import device_fingerprint
from benchmark_runners.records import BenchmarkConfig, BenchmarkResult
from benchmark_runners.stats import summarize
from devicefit.landing import LandingFileError, too_large, validate_document, write_landing
from devicefit.landing_bounds import MAX_JSON_DEPTH, MIN_TIMING_MS, nests_deeper
from devicefit.landing_schema import INT64_MAX, PositiveInt32, Text, describe
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
        # /dev/zero or a FIFO was "no such file"; a read error (EIO) was the OS's words without the path
        raise LandingFileError(f"{path}: " + ("not a regular file (a directory, a device, a pipe or a socket)"
                                              if path.exists() else "no such file"))
    if (why := too_large(path)) is not None:
        raise LandingFileError(why)
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise LandingFileError(f"{path}: not valid JSON ({exc})") from exc
    except RecursionError:
        raise LandingFileError(f"{path}: JSON nested too deeply to read") from None
    except OSError as exc:
        raise LandingFileError(f"{path}: cannot be read ({exc.strerror or exc})") from None


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


# optimum-benchmark's files, as far as devicefit reads them, with strict types: a boolean is not
# a latency, a string is not a throughput. Unknown keys are kept out of the way, not refused:
# optimum-benchmark writes many this importer has no column for.
class _Optimum(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")


def _positive(value: float) -> float:
    if value <= 0:
        raise ValueError("latency values must be positive seconds (or milliseconds with unit 'ms')")
    return value


# Bounds that keep every converted figure finite and within its column: a latency of at most a
# year in seconds (1e3 of it in ms still sums finitely), a memory figure in MB whose bytes fit a
# BIGINT (1e308 MB made int(inf) raise).
MAX_LATENCY = 3.2e7
Latency = Annotated[float, Field(allow_inf_nan=False, le=MAX_LATENCY), AfterValidator(_positive)]
# optimum-benchmark's "MB" are decimal, bytes * 1e-6 ("MB, not MiB", its system_utils and memory tracker).
OPTIMUM_MB = 10**6
Megabytes = Annotated[float, Field(ge=0, le=INT64_MAX / OPTIMUM_MB / 2, allow_inf_nan=False)]


class OptimumBackend(_Optimum):
    name: Text
    model: Text
    device: Text
    device_ids: Text | Annotated[int, Field(ge=0)] | None = None
    torch_dtype: Text | None = None


class OptimumInputShapes(_Optimum):
    batch_size: PositiveInt32 | None = None
    sequence_length: PositiveInt32 | None = None


class OptimumTrainingArguments(_Optimum):
    per_device_train_batch_size: PositiveInt32 | None = None


class OptimumScenario(_Optimum):
    name: Text
    input_shapes: OptimumInputShapes = Field(default_factory=OptimumInputShapes)
    training_arguments: OptimumTrainingArguments = Field(default_factory=OptimumTrainingArguments)


class OptimumEnvironment(_Optimum):
    cpu: Text | None = None
    cpu_count: PositiveInt32 | None = None
    cpu_ram_mb: Megabytes | None = None
    gpu: list[Text] | None = None
    gpu_vram_mb: Megabytes | list[Megabytes] | None = None
    hostname: Text | None = None


class OptimumConfig(_Optimum):
    backend: OptimumBackend
    scenario: OptimumScenario
    environment: OptimumEnvironment = Field(default_factory=OptimumEnvironment)


class OptimumLatency(_Optimum):
    unit: Text = "s"
    values: Annotated[list[Latency], Field(min_length=1)]


class OptimumThroughput(_Optimum):
    unit: Text | None = None
    value: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None

    def samples_per_s(self) -> float | None:
        """The value where it counts samples; a prefill target's tokens/s (optimum-benchmark before
        0.5) is batch x sequence per second, so the rate is taken from the latencies instead."""
        return self.value if self.unit in (None, "samples/s") else None


class OptimumMemory(_Optimum):
    max_ram: Megabytes | None = None
    max_allocated: Megabytes | None = None
    max_reserved: Megabytes | None = None


class OptimumTarget(_Optimum):
    latency: OptimumLatency | None = None
    throughput: OptimumThroughput | None = None
    memory: OptimumMemory | None = None


class OptimumReport(_Optimum):
    forward: OptimumTarget | None = None
    prefill: OptimumTarget | None = None
    train: OptimumTarget | None = None
    overall: OptimumTarget | None = None
    load_model: OptimumTarget | None = None
    load: OptimumTarget | None = None


def _parse(model: type[BaseModel], data: Any, what: str, where: str) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise LandingFileError(f"{where}: {describe(exc, what)}") from None


def _mb_to_bytes(value: float | None) -> int | None:
    return None if value is None else round(value * OPTIMUM_MB)


def optimum_to_document(config: Any, report: Any, source: str, digest: str) -> dict[str, Any]:
    where = f"{source} (optimum-benchmark)"
    if nests_deeper([config, report]):  # its unknown keys ride along into JSON columns (versions, input shapes)
        raise LandingFileError(f"{where}: nested more than {MAX_JSON_DEPTH} levels deep (optimum-benchmark's files nest a few)")
    cfg_in: OptimumConfig = _parse(OptimumConfig, config, "config", where)
    rep: OptimumReport = _parse(OptimumReport, report, "report", where)
    backend, scenario, env = cfg_in.backend, cfg_in.scenario, cfg_in.environment
    if backend.name != "pytorch":
        raise LandingFileError(f"{where}: only the pytorch backend maps to devicefit's torch rows; this is {backend.name!r}")
    dtype = backend.torch_dtype
    if dtype not in OPTIMUM_DTYPES:
        raise LandingFileError(f"{where}: torch_dtype {dtype!r} is not one of {', '.join(map(str, OPTIMUM_DTYPES))}")
    mode = {"inference": "inference", "training": "training"}.get(scenario.name)
    if mode is None:
        raise LandingFileError(f"{where}: scenario {scenario.name!r} is neither inference nor training")
    shapes = scenario.input_shapes
    batch = scenario.training_arguments.per_device_train_batch_size if mode == "training" else shapes.batch_size
    if batch is None:
        raise LandingFileError(f"{where}: batch size {batch!r} is not a positive integer")
    device = backend.device
    if device == "cuda" and backend.device_ids not in (None, ""):
        device = f"cuda:{str(backend.device_ids).split(',')[0]}"
    target_name = next((t for t in OPTIMUM_TARGETS[mode] if getattr(rep, t) is not None), None)
    if target_name is None:
        raise LandingFileError(f"{where}: report has none of the targets {', '.join(OPTIMUM_TARGETS[mode])}")
    target: OptimumTarget = getattr(rep, target_name)
    if target.latency is None:
        raise LandingFileError(f"{where} report.{target_name}: missing 'latency'")
    scale = {"s": 1e3, "ms": 1.0}.get(target.latency.unit)
    if scale is None:
        raise LandingFileError(f"{where}: latency unit {target.latency.unit!r} is not s or ms")
    samples_ms = [v * scale for v in target.latency.values]
    if min(samples_ms) < MIN_TIMING_MS:
        raise LandingFileError(f"{where} report.{target_name}.latency.values: {min(target.latency.values)!r} "
                               f"{target.latency.unit} is under a nanosecond: not a measurement")
    seq = shapes.sequence_length
    try:
        cfg = BenchmarkConfig(model=backend.model, device=device, precision=OPTIMUM_DTYPES[dtype],
                              mode=mode, batch_size=batch, seq_length=seq)
    except ValueError as exc:
        raise LandingFileError(f"{where}: {exc}") from exc
    kind = cfg.device_kind
    if kind == "cuda":
        vram = env.gpu_vram_mb[0] if isinstance(env.gpu_vram_mb, list) and env.gpu_vram_mb else env.gpu_vram_mb
        hw = {"name": env.gpu[0] if env.gpu else None, "memory_total_bytes": _mb_to_bytes(vram or None)}
    else:
        hw = {"name": env.cpu, "logical_cores": env.cpu_count, "memory_total_bytes": _mb_to_bytes(env.cpu_ram_mb)}
    stats = summarize(samples_ms).to_json()
    stats.pop("count")
    memory = target.memory or OptimumMemory()
    throughput = (target.throughput.samples_per_s() if target.throughput else None) or batch * len(samples_ms) / (sum(samples_ms) / 1e3)
    load = rep.load_model or rep.load
    load_latency = load.latency if load is not None else None
    load_scale = {"s": 1.0, "ms": 1e-3}.get(load_latency.unit) if load_latency is not None else None
    if load_latency is not None and load_scale is None:
        raise LandingFileError(f"{where}: load latency unit {load_latency.unit!r} is not s or ms")
    versions = {k: v for k, v in (env.model_extra or {}).items() if k.endswith("_version")}
    row = BenchmarkResult.for_config(
        cfg, f"optimum-{digest[:12]}", datetime.now(timezone.utc).isoformat(timespec="seconds"), "ok", None,
        **stats, samples_ms=samples_ms, iterations=len(samples_ms), stop_reason="external",
        throughput_samples_per_s=float(throughput),
        forward_tokens_per_s=float(throughput) * seq if seq and mode == "inference" else None,
        load_time_s=load_latency.values[0] * load_scale if load_latency is not None else None,
        peak_rss_bytes=_mb_to_bytes(memory.max_ram),
        device_allocated_peak_bytes=_mb_to_bytes(memory.max_allocated),
        device_reserved_peak_bytes=_mb_to_bytes(memory.max_reserved),
        memory_method="optimum-benchmark" if target.memory is not None else None,
        device_name=hw["name"], hardware_fingerprint=device_fingerprint(kind, hw) if hw["name"] else None,
        input={"dims": {"seq_length": seq} if seq else {}, "optimum_input_shapes": shapes.model_dump(exclude_unset=True)},
        precision_recipe=f"optimum-benchmark pytorch torch_dtype={dtype}",
        environment={"source": "optimum-benchmark", "hostname": env.hostname or f"optimum:{hw['name']}",
                     "versions": versions, "report_target": target_name},
        policy={},
    )
    return results_document(row.run_id, [row], {"platforms": {}})


def _prepare(path: Path) -> tuple[dict[str, Any], str, str]:
    """(document, format, source key) of one file or optimum-benchmark directory, validated."""
    from devicefit.store.loading import ingest_key, partition_identity

    pair = _optimum_pair(path)
    if pair is not None:
        config, report = pair
        digest = hashlib.sha256(json.dumps([config, report], sort_keys=True).encode()).hexdigest()
        return optimum_to_document(config, report, str(path), digest), "optimum-benchmark", f"ingest:{digest[:16]}"
    document = _load_json(path)
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise LandingFileError(f"{path}: neither a devicefit results file (format {FORMAT!r}) nor optimum-benchmark output")
    validate_document(document, str(path))
    # A partition's file of a machine that names itself is keyed by that partition and machine,
    # not by its rows: a later run of it, ingested later, replaces the earlier one, as a re-run
    # replaces its rows where it was measured (keyed by the rows, both runs were stored and every
    # aggregate was the median of the two); and the loader keeps one run of it beside the
    # partition's own file (devicefit.store.loading._partition_twin).
    return document, FORMAT, ingest_key(partition_identity(document.get("source_key"), document) or document["results"])


def _machine_source(document: dict[str, Any]) -> tuple[Any, str | None, Any] | None:
    """(source key, host CPU fingerprint, hostname) a document names, or None without a source
    key: which source of which machine it holds."""
    from devicefit.store.loading import host_fingerprint

    key = document.get("source_key")
    if not isinstance(key, str) or not key:
        return None
    hardware = document.get("hardware") if isinstance(document.get("hardware"), dict) else {}
    return key, host_fingerprint(document), str(hardware.get("hostname") or "")  # as partition_identity names it


def _refuse_an_older_run(landed: Path, document: dict[str, Any]) -> None:
    """LandingFileError when raw/ or the landing share already holds this partition of this
    machine (the same ingest key, store.loading.partition_identity) from a run written after
    `document`: landing it would replace the newer run with the older one. A host that had not
    pulled yet pushed its older run over the share's newer copy, which the writer then stored.
    A share that cannot be read is not asked: the push after landing fails and says so."""
    from devicefit.landing_share import LandingShareError, share_url, shared_copy
    from devicefit.results_io import written_at

    try:
        held = json.loads(landed.read_bytes()) if landed.is_file() else None
    except (OSError, ValueError, RecursionError):
        held = None  # unreadable: the loader quarantines it; the new file replaces it
    try:
        shared = shared_copy(landed.name)
        on_share = json.loads(shared) if shared is not None else None
    except (LandingShareError, ValueError, RecursionError):
        on_share = None
    ours = written_at(document)
    for where, copy in ((f"already ingested as {landed.name}", held), (f"on the landing share {share_url()} as raw/{landed.name}", on_share)):
        theirs = written_at(copy) if isinstance(copy, dict) else None
        if ours is not None and theirs is not None and theirs > ours:
            raise LandingFileError(f"{document.get('source_key')} of this machine: run {document.get('run_id')} (written {ours.isoformat()}) "
                                   f"is older than the run {copy.get('run_id')} (written {theirs.isoformat()}) {where}; not landed "
                                   "(a later run of a partition replaces an earlier one, never the other way)")


def ingest_file(path: Path, raw_dir: Path) -> IngestResult:
    """Validate `path`, convert it if needed, and land it; raises LandingFileError naming the problem."""
    path = Path(path)
    if not path.exists():
        raise LandingFileError(f"{path}: no such file or directory")
    return _land_all(raw_dir, [_prepare(path)])[0]


def _land_all(raw_dir: Path, prepared: list[tuple[dict[str, Any], str, str]]) -> list[IngestResult]:
    """Land every prepared document (all validated before this; all landed here or none), then
    push each to the landing share when one is configured. A share that cannot take them fails
    the ingest naming what happened: every file is landed in raw/ (the next load here stores
    them), these reached the share and these did not; the same ingest again, once the share is
    reachable, pushes them (a landed file replaces itself). It failed with the share's error
    alone, and the next load stored the files landed before it without a word."""
    from devicefit.landing import landing_path
    from devicefit.landing_share import LandingShareError, push

    for document, _, key in prepared:
        _refuse_an_older_run(landing_path(raw_dir, key), document)
    created: list[Path] = []
    results = []
    try:  # landed here all or none: a failure halfway (a full disk, Ctrl-C) removes what this call created
        for document, fmt, key in prepared:
            existed = landing_path(raw_dir, key).exists()
            results.append(IngestResult(key, write_landing(raw_dir, key, document, share=False), len(document["results"]), fmt))
            if not existed:
                created.append(results[-1].landing_path)
    except BaseException:
        for landed in created:
            landed.unlink(missing_ok=True)
        raise
    pushed: list[str] = []
    for result in results:
        try:
            push(result.landing_path, raw_dir)
        except LandingShareError as exc:
            missing = [name for name in dict.fromkeys(r.landing_path.name for r in results) if name not in pushed]
            raise LandingShareError(
                f"{exc}; all {len(results)} file(s) are landed in {raw_dir} (the next load here stores them); "
                f"on the share: {', '.join(pushed) or 'none'}; not on it: {', '.join(missing)}; ingest again once "
                "the share can be written") from None
        if result.landing_path.name not in pushed:
            pushed.append(result.landing_path.name)
    return results


OPTIMUM_FILES = ("benchmark.json", "benchmark_config.json", "benchmark_report.json")


def ingest_path(path: Path, raw_dir: Path) -> list[IngestResult]:
    """A file, an optimum-benchmark directory, or a directory of devicefit results files (another
    machine's landing files, as `../shared/datasets/*` holds them). Every file of a directory is
    validated before any is landed: one bad file lands none, and the error names it."""
    path = Path(path)
    if not path.is_dir() or any((path / name).is_file() for name in OPTIMUM_FILES):
        return [ingest_file(path, raw_dir)]
    files = sorted(p for p in path.glob("*.json") if p.is_file())
    if not files:
        raise LandingFileError(f"{path}: the directory holds neither devicefit results files (*.json) nor optimum-benchmark "
                               f"output ({' or '.join(OPTIMUM_FILES[1:])})")
    prepared = [_prepare(f) for f in files]
    _refuse_stray_copies(files, [document for document, _, _ in prepared])
    return _land_all(raw_dir, prepared)


def _refuse_stray_copies(files: list[Path], documents: list[dict[str, Any]]) -> None:
    """LandingFileError when two files hold one source of one machine (its `source_key`, its host).
    Where they were written the loader keeps one and quarantines the other (a stray copy such as
    `partition__cpu__gpt2.old.json`, an older run of the partition); ingested, each became a source
    of its own and both runs were stored. Two machines' files of one partition stay two sources."""
    from devicefit.landing import landing_path

    seen: dict[tuple[Any, ...], Path] = {}
    for path, document in zip(files, documents):
        machine = _machine_source(document)
        if machine is None:
            continue
        key = machine[0]
        if machine in seen:
            own = landing_path(path.parent, key).name
            raise LandingFileError(f"{path}: holds the same source ({key}) of the same machine as {seen[machine].name} (its own "
                                   f"file is {own}): two files of one source replace each other where they were written, and "
                                   "ingesting both would store both runs; ingest the directory without the stray copy")
        seen[machine] = path


def store_results_document(document: dict[str, Any], database: str | Path):
    """Store a results document (one `devicefit benchmark` run) in the DuckDB file `database`:
    landed beside it as `devicefit ingest` lands a file, then loaded, so the rows are validated
    and stored once however often this is called. Returns the load report; LandingFileError or
    store.StoreError say why nothing was stored."""
    import tempfile

    from devicefit.landing import load_landing_files
    from devicefit.paths import DataPaths
    from devicefit.results_io import write_json_atomic

    paths = DataPaths.of_database(database)
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / f"benchmark-{document['run_id']}.json"
        write_json_atomic(source, document)
        ingest_path(source, paths.raw)
    return load_landing_files(paths.database, paths.raw)
