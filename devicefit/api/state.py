"""What the API serves from: its settings, and the state it rebuilds when the pipeline publishes
(the selector over the newest predictor, the benchmark snapshot, the registered model names),
warmed at start-up so no request imports or traces anything the first time."""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi.concurrency import run_in_threadpool

from devicefit.benchmark_snapshot import SnapshotReader, snapshot_path
from devicefit.paths import DataPaths

log = logging.getLogger("devicefit.api")
PROBE_TIMEOUT_S = 120  # `devicefit detect` at a cold start-up: ~5-10 s on a 2-core VM, Chromium's start included
PROBE_LOCK = "api-start-up-probe"  # a lock of the device lock directory: one server's start-up probe at a time


@dataclass
class Settings:
    benchmark_dir: Path | None = None
    database: Path | None = None  # a DuckDB file (BENCHMARK_DB_PATH, --database): the store; its directory holds the rest
    config_path: Path | None = None
    debug: bool = False
    #: Answers of /hardware/select and /performance/predict kept per published predictor (LRU);
    #: 0 turns the cache off. The answer to a request is a pure function of the predictor version.
    response_cache_size: int = 4096
    #: Local model directories served under their directory names (`devicefit serve --model-dir`),
    #: beside those registered in the data directory's models.json (`devicefit models add`).
    model_dirs: tuple[Path, ...] = ()
    #: Models whose traces are cached at start-up: None for every catalog and registered model,
    #: () for none (tests that do not need it).
    warm_models: tuple[str, ...] | None = None

    def paths(self) -> DataPaths:
        if self.benchmark_dir:
            return DataPaths(self.benchmark_dir.resolve())
        return DataPaths.of_database(self.database) if self.database else DataPaths.default()


def encode_model_dirs(directories: list[Path] | tuple[Path, ...]) -> str:
    """DEVICEFIT_MODEL_DIRS's value for `directories`: a JSON list of strings. Joined with
    os.pathsep, a directory under a path holding ':' (`/data/run:2/bert`) came back as two paths,
    so the server that `devicefit serve` had just checked refused to start (or served another
    directory, where the first half named one)."""
    return json.dumps([str(d) for d in directories])


def decode_model_dirs(text: str) -> tuple[Path, ...]:
    """The directories encode_model_dirs wrote; text that is not a JSON list (an ASGI server
    started by hand with DEVICEFIT_MODEL_DIRS set the older way) is split on os.pathsep."""
    text = text.strip()
    if text.startswith("["):
        try:
            items = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"DEVICEFIT_MODEL_DIRS is not a JSON list of directories: {exc}") from None
        if not isinstance(items, list) or not all(isinstance(d, str) for d in items):
            raise ValueError("DEVICEFIT_MODEL_DIRS must be a JSON list of directory strings")
        return tuple(Path(d) for d in items if d)
    return tuple(Path(d) for d in text.split(os.pathsep) if d)


@dataclass
class ServiceState:
    """The selector over the currently published predictor, rebuilt when a newer one appears."""

    settings: Settings
    _selector: Any = None
    _stamp: Any = None  # mtimes (None: absent) of the predictor, the compatibility matrix and the hardware cache
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _snapshot: SnapshotReader | None = None
    _answers: OrderedDict = field(default_factory=OrderedDict)
    _names: Any = None
    # (inventory, hardware cache mtime then): the start-up probe's detection, for the cold answers
    # until a newer cache appears (_probe_when_cold)
    _cold_inventory: Any = None

    def _probe_when_cold(self) -> None:
        """Cold (no trained predictor yet) the answers scale by this host's probe; where the cache
        holds none this boot (a fresh data directory, a reboot, a probe that was disturbed)
        `devicefit detect --json` takes one now, once, in a process of its own (its own session,
        killed whole past PROBE_TIMEOUT_S: nothing in this server holds a GPU context, waits
        behind it, or outlives it). Its inventory serves the cold answers until a newer hardware
        cache appears, also where the probe was not cached (disturbed, or skipped beside another
        process's measurement: the answer names why). Without it a server on a fresh install
        answered "nothing to predict from" for the CPU it runs on, where the CLI, which probes,
        answered."""
        from benchmark_runners.hardware.inventory import cached_inventory
        from benchmark_runners.lock_files import BadLockDir, DeviceBusy, hold_devices

        if self.artifact_path().exists() or ((cached := cached_inventory()) is not None and cached.probes):
            return
        # One start-up probe at a time on this machine: the workers of `serve --workers N` each
        # probed at once, each disturbing the others' probe. One that waited takes the probe the
        # one before it cached, or takes its own after it.
        try:
            with hold_devices([PROBE_LOCK], wait_s=PROBE_TIMEOUT_S + 30):
                if (cached := cached_inventory()) is not None and cached.probes:
                    return
                self._run_probe()
        except DeviceBusy:
            log.warning("could not probe this host for the cold start: another server's start-up probe held %s past %d s",
                        PROBE_LOCK, PROBE_TIMEOUT_S + 30)
        except BadLockDir as exc:  # the measurements' locks cannot work either; the probe still can
            log.warning("probing for the cold start without waiting for other servers' probes: %s", exc)
            self._run_probe()

    def _run_probe(self) -> None:
        """`devicefit detect --json` in its own session (_probe_when_cold), its inventory kept."""
        import signal
        import subprocess
        import sys

        from benchmark_runners.paths import hardware_cache_path

        child = subprocess.Popen([sys.executable, "-m", "devicefit.cli", "detect", "--json"], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, start_new_session=True,
                                 env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)})
        try:
            out, err = child.communicate(timeout=PROBE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)  # the detection's browser and driver with it
            child.communicate()
            log.warning("could not probe this host for the cold start: `devicefit detect` took over %d s", PROBE_TIMEOUT_S)
            return
        try:
            inventory, _ = json.JSONDecoder().raw_decode(out[out.index("{"):])
        except ValueError:
            log.warning("could not probe this host for the cold start: %s", (err or out).strip()[-500:])
            return
        cache = hardware_cache_path()
        self._cold_inventory = (inventory, cache.stat().st_mtime if cache.exists() else None)

    def names(self):
        """The model names this server accepts (models.registry.ModelNames), read once."""
        if self._names is None:
            from models.registry import ModelNames

            with self._lock:
                if self._names is None:
                    names, warnings = ModelNames.load(self.settings.paths().root, self.settings.model_dirs)
                    for warning in warnings:
                        log.warning("%s", warning)
                    self._names = names
        return self._names

    def start(self) -> float:
        """Everything a request would otherwise do first, done once before serving: imports
        (transformers resolves its classes lazily, and two threads resolving at once can fail),
        the registered models' checks, the predictor, and each model's traces (0.1-1 s per model
        and mode; the first request per model paid it). Returns the seconds it took."""
        import devicefit.select.analysis  # noqa: F401 - imported here, not racing on a request
        import devicefit.select.distributed  # noqa: F401
        import devicefit.select.selection_map  # noqa: F401
        from devicefit.errors import DevicefitError
        from devicefit.predict.features import model_point
        from models.catalog import load_catalog
        from models.inputs import model_class
        from models.op_profile import training_peak_activation_bytes

        started = time.perf_counter()
        names = self.names()
        self._probe_when_cold()
        try:
            self.selector()
        except DevicefitError as exc:  # no usable predictor, config or compatibility matrix yet
            log.warning("not answering predictions yet: %s", exc)
        served = [*load_catalog().values(), *names.registered.values()]
        wanted = self.settings.warm_models
        # Config-only models (7B-70B) are traced on their first request, not at every start-up.
        traced = [m for m in served if not m.config_only] if wanted is None else [names.resolve(n) for n in wanted]
        for spec in served:  # every model class and config class imported, whatever is traced
            try:
                model_class(spec)
                spec.build_config()
            except Exception:  # noqa: BLE001 - a model that cannot be built answers its own error later
                log.exception("could not import the classes of %s at start-up", spec.name)
        for spec in traced:
            try:
                model_point(spec)
                training_peak_activation_bytes(spec)
            except Exception:  # noqa: BLE001 - a model that cannot be traced answers its own error later
                log.exception("could not trace %s at start-up", spec.name)
        seconds = time.perf_counter() - started
        log.info("ready: %d model(s) imported, %d traced in %.1f s", len(served), len(traced), seconds)
        return seconds

    def answer(self, endpoint: str, request: Any, compute: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
        """`compute(selector)` for this request, or the answer already given to an identical
        request under the same published predictor. Repeats are not logged again as served
        predictions: the first answer was."""
        selector = self.selector()
        size = self.settings.response_cache_size
        if size <= 0:
            return compute(selector)
        key = (id(selector), endpoint, request.model_dump_json())
        with self._lock:
            if key in self._answers:
                self._answers.move_to_end(key)
                return self._answers[key]
        value = compute(selector)
        with self._lock:
            self._answers[key] = value
            while len(self._answers) > size:
                self._answers.popitem(last=False)
        return value

    async def answer_async(self, endpoint: str, request: Any, spec: Any, sequence_length: int | None, mode: str,
                           compute: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
        """`answer`, on the event loop when the model's traces are cached (the usual case: work
        of ~0.3 ms), in the thread pool when one is still needed (an unusual sequence length),
        so one slow trace never stalls every other request. The generation scenario also traces
        a decode step (models.op_profile.decode_step_ops): always the thread pool."""
        from models.op_profile import is_traced

        if mode != "generation" and is_traced(spec, sequence_length, training=mode == "training"):
            return self.answer(endpoint, request, compute)
        return await run_in_threadpool(self.answer, endpoint, request, compute)

    def snapshot(self) -> SnapshotReader:
        if self._snapshot is None:
            self._snapshot = SnapshotReader(snapshot_path(self.settings.paths()))
        return self._snapshot

    def artifact_path(self) -> Path:
        from devicefit.predict.artifacts import CURRENT, predictors_dir

        return predictors_dir(self.settings.paths()) / CURRENT

    def selector(self):
        from benchmark_runners.paths import hardware_cache_path
        from devicefit.select.selector import HardwareSelector

        path = self.artifact_path()
        matrix = self.settings.paths().outputs / "compatibility_matrix.json"
        hardware = hardware_cache_path()
        # Before any predictor is published the selector answers cold (devicefit.predict.cold_start,
        # every answer labelled static_rule); a published artifact replaces it at the next request,
        # as a newly published compatibility matrix does (a run may publish one and no predictor),
        # and as a new detection does (`devicefit detect`: the probe the cold answers scale by).
        stamp = tuple(p.stat().st_mtime if p.exists() else None for p in (path, matrix, hardware))
        with self._lock:
            if self._selector is None or stamp != self._stamp:
                from benchmark_runners.hardware import detect_hardware

                probed, then = self._cold_inventory or (None, None)
                inventory = probed if probed is not None and stamp[0] is None and stamp[2] == then else None
                self._selector = HardwareSelector(benchmark_dir=self.settings.paths().root, config_path=self.settings.config_path,
                                                  inventory=inventory or detect_hardware(probe=False).to_json())
                self._stamp = stamp
                self._answers.clear()
                log.info("loaded predictor %s", self._selector.predictor.predictor.version())
            return self._selector
