"""The pipeline's steps as plain functions; Dagster assets call these and add metadata."""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from benchmark_runners.hardware import HardwareInventory
from benchmark_runners.records import BenchmarkConfig, BenchmarkResult
from benchmark_runners.sweep import new_run_id, run_sweep
from devicefit import store
from devicefit.landing import LoadReport, load_landing_files, retire_landing, superseded_landing, write_landing
from devicefit.paths import DataPaths
from devicefit.profiles import Selection, partition_configs
from devicefit.results_io import results_document

if TYPE_CHECKING:
    from devicefit.fleet.partitions import LocalTarget


def partition_source_key(partition_key: str) -> str:
    return f"partition:{partition_key}"


@dataclass
class PartitionOutcome:
    partition_key: str
    results: list[BenchmarkResult]
    landing_path: str
    seconds: float

    def status_counts(self) -> dict[str, int]:
        return dict(Counter(r.status for r in self.results))


def local_partition_configs(partition_key: str, selection: Selection, inventory: HardwareInventory) -> tuple[LocalTarget, list[BenchmarkConfig]]:
    """The device a "<device id>|<model>" partition names on this host and the configs it
    measures there (its constraint profile's threads and ISA applied). DeviceUnavailable names
    a device this host does not have."""
    from dataclasses import replace

    from devicefit.fleet.partitions import capped_isa_flags, resolve_local, split_partition_key

    reference, model = split_partition_key(partition_key)
    target = resolve_local(reference, inventory.to_json())
    cpu_isa = capped_isa_flags(inventory.platforms["cpu"].devices[0].get("isa_flags", []), target.profile.isa)
    return target, [replace(c, device=target.device, threads=target.profile.threads or c.threads, isa=target.profile.isa)
                    for c in partition_configs(model, target.kind, selection, cpu_isa)]


def measure_partition(partition_key: str, selection: Selection, inventory: HardwareInventory, paths: DataPaths,
                      on_wait: Callable[[str], None] | None = None) -> PartitionOutcome:
    """Measure one "<device id>|<model>" partition on this host and land its rows atomically.
    The device is resolved against this host's detection (devicefit.fleet.partitions): its
    backend device, and its constraint profile applied to every config, with the profile's own
    probe in the document so the store registers the device with its own peaks. Killed midway,
    it leaves no landing file, so no partial rows ever reach the store. A device on another host
    is refused by name (DeviceUnavailable) before anything runs."""
    from benchmark_runners.hardware.inventory import unqualified
    from devicefit.fleet.partitions import host_of_inventory, split_partition_key
    from devicefit.fleet.partitions import partition_key as partition_key_of

    _, model = split_partition_key(partition_key)
    hardware = inventory.to_json()
    target, configs = local_partition_configs(partition_key, selection, inventory)
    if not target.profile.empty:
        from devicefit.fleet.profile_probe import profile_probe

        hardware = {**hardware, "probes": {**(hardware.get("probes") or {}), target.device_id: profile_probe(target, hardware, paths.root)}}
    started = time.perf_counter()
    run_id = new_run_id()
    results = run_sweep(configs, run_id=run_id, inventory=inventory,
                        on_event=lambda e: on_wait(e.message) if on_wait and e.kind == "waiting" else None)
    document = results_document(run_id, results, hardware)
    source_key = partition_source_key(partition_key)
    # Older partitions of this device: its kind's (before device partitions), and its id's from
    # before host-qualified ids (OpenVINO's CPU plugin was "openvino-4ebbcabb1705" on every host).
    earlier = [target.legacy_kind] if target.legacy_kind else []
    if (own := unqualified(target.hardware_fingerprint)) is not None:
        earlier.append(target.device_id.replace(target.hardware_fingerprint, own, 1))
    legacy = {key: found for key in (partition_source_key(partition_key_of(d, model)) for d in earlier) if key != source_key
              if (found := superseded_landing(paths.raw, key, target.hardware_fingerprint, host_of_inventory(hardware))) is not None}
    if legacy:
        document["supersedes"] = list(legacy)
    path = write_landing(paths.raw, source_key, document)
    for found in legacy.values():
        retire_landing(found)
    return PartitionOutcome(partition_key, results, str(path), time.perf_counter() - started)


def load_results(paths: DataPaths, con: store.Source | None = None) -> LoadReport:
    return load_landing_files(paths.database if con is None else con, paths.raw)


def refresh_aggregates(paths: DataPaths, con: store.Source | None = None) -> list[dict[str, Any]]:
    """Recompute the aggregates table and publish it as the benchmark snapshot the API serves
    (outside the pipeline: tests, scripts; the aggregated_results asset stores the same frame
    through its IO manager)."""
    with store.opened(paths.database if con is None else con) as con:
        store.migrate(con)
        frame = store.refresh_aggregates(con)
    return _publish_aggregates(paths, frame)


def aggregate_frame(paths: DataPaths, con: store.Source | None = None):
    """The aggregates as a polars frame (for the IO manager to store), published as the benchmark
    snapshot the API serves, the same document `refresh_aggregates` publishes. The snapshot is
    written first: if storing the frame then fails, the API serves the newer aggregates of the
    same measurements until the asset is materialized again."""
    with store.opened(paths.database if con is None else con, read_only=True) as con:
        frame = store.aggregate_frame(con)
    _publish_aggregates(paths, frame)
    return frame


def _publish_aggregates(paths: DataPaths, frame) -> list[dict[str, Any]]:
    from devicefit.benchmark_snapshot import publish_snapshot

    rows = store.rows_of(frame)
    publish_snapshot(paths, rows)
    return rows


# What markdown would read as markup inside a table cell: emphasis, code, links and images
# (`[...](...)` needs its brackets), raw HTML, the cell separator, and the escape itself.
_MARKDOWN_SPECIAL = str.maketrans({c: "\\" + c for c in "\\`*_[]<>|"})


def markdown_text(value: str) -> str:
    """`value` as literal text in a markdown table cell (the Dagster UI renders the metadata): a
    model name, device or backend error like `[x](https://...)` or `**x**` is shown, not rendered
    as a link or emphasis; newlines become spaces."""
    return value.replace("\r", " ").replace("\n", " ").translate(_MARKDOWN_SPECIAL)


def markdown_table(rows: list[dict[str, Any]], columns: list[str], limit: int = 40) -> str:
    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"
        return "" if v is None else markdown_text(str(v)[:120])

    lines = ["| " + " | ".join(map(markdown_text, columns)) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(fmt(r.get(c)) for c in columns) + " |" for r in rows[:limit]]
    if len(rows) > limit:
        lines.append(f"\n_{len(rows) - limit} more rows not shown_")
    return "\n".join(lines)


def results_markdown(results: list[BenchmarkResult]) -> str:
    rows = []
    for r in results:
        rows.append({"model": r.model, "device": r.device, "precision": r.precision, "mode": r.mode, "batch": r.batch_size,
                     "status": r.status, "p50 ms": r.p50_ms,
                     "CI ±%": None if r.ci_rel_half_width is None else 100 * r.ci_rel_half_width,
                     "samples/s": r.throughput_samples_per_s,
                     "peak RSS MiB": None if r.peak_rss_bytes is None else r.peak_rss_bytes / 2**20,
                     "note": r.error or r.stop_reason})
    return markdown_table(rows, list(rows[0]) if rows else ["model"])


def write_output_json(paths: DataPaths, name: str, document: Any) -> str:
    """Validated against its contract (devicefit.contracts) first, with the schemas beside it."""
    from devicefit.contracts import publish

    path = paths.outputs / name
    publish(path, document)
    return str(path)


def inventory_rows(inventory: HardwareInventory) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(platform rows, probe rows) for the hardware_inventory asset's metadata tables."""
    platforms = [{"kind": k, "available": v.available, "measured by": v.backend,
                  "devices": ", ".join(d.get("name") or "" for d in v.devices), "reason": v.reason}
                 for k, v in inventory.platforms.items()]
    probes = [{"device": d, "matmul_gflops_best": p.get("matmul_gflops_best"), "memory_bandwidth_gbs_best": p.get("memory_bandwidth_gbs_best")}
              for d, p in inventory.probes.items()]
    return platforms, probes


def train_predictors(paths: DataPaths, inventory: HardwareInventory, connect: Callable[[], Any] | None = None,
                     rows: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Train on every measured row in the store (or on `rows`, the pipeline's training frame),
    validate on held-out models, publish. `connect`: a context manager factory for the store (the
    pipeline's DuckDBResource), opened twice: to read the devices (and the rows when not given),
    and to record the version; the lock is not held while training."""
    from devicefit.predict.publish import train_and_publish

    return train_and_publish(paths, inventory.to_json(), connect, rows)


def publish_prediction_matrix(paths: DataPaths) -> tuple[str, dict[str, Any]]:
    from devicefit.predict import artifacts
    from devicefit.predict.matrix import prediction_matrix
    from devicefit.predict.predictor import PerformancePredictor

    artifact = artifacts.load_current(paths)
    if artifact is None:
        raise RuntimeError(f"no trained predictor in {artifacts.predictors_dir(paths)}")
    from devicefit.predict import served

    predictor = PerformancePredictor(artifact)
    matrix = prediction_matrix(predictor, on_predictions=lambda reqs, preds: served.record(paths, predictor, "matrix", reqs, preds))
    return write_output_json(paths, "prediction_matrix.json", matrix), matrix


def publish_selection_map(paths: DataPaths, inventory: dict[str, Any],
                          compatibility: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """Spec 002's selection map from the published predictor and the compatibility matrix (the
    caller's, else the published one). Map cells are not recorded as served predictions: nobody
    asked for them."""
    from devicefit.select.selection_map import selection_map
    from devicefit.select.selector import HardwareSelector

    selector = HardwareSelector(benchmark_dir=paths.root, inventory=inventory, record=False, compatibility=compatibility)
    # Its representatives' traces on both cores (models.parallel_warm): 25 s on one, on a 2-core AMD EPYC.
    document = selection_map(selector, helpers=None)
    return write_output_json(paths, "selection_map.json", document), document


def validate_served_predictions(paths: DataPaths, con: store.Source | None = None) -> tuple[int, list[dict[str, Any]]]:
    """Load served-prediction files and compare them with measurements taken since."""
    from devicefit.predict.served import read_served, served_dir

    with store.opened(paths.database if con is None else con) as con:
        store.migrate(con)
        loaded = 0
        for path in sorted(served_dir(paths).glob("served-*.jsonl")) if served_dir(paths).is_dir() else []:
            rows = read_served(path)
            store.replace_served_predictions(con, path.name, rows)
            loaded += len(rows)
        return loaded, store.refresh_prediction_errors(con)
