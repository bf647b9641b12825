"""Running many configs: one worker process per (model, backend, device), each config with a
deadline. A crash, an OOM kill or a timeout becomes a `failed` row and the sweep goes on in a
fresh worker; a config whose memory floor exceeds the device's free memory is `skipped` before
any worker allocates it. While a worker measures, the parent sleeps in select(): a polling parent would
steal a core from the model being measured."""
from __future__ import annotations

import atexit
import json
import logging
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from typing import Callable, Iterable

from benchmark_runners import registry
from benchmark_runners.constraints import ISA_CAPS, profile_env
from benchmark_runners.device_lock import hold_devices, physical_device
from benchmark_runners.environment import host_environment
from benchmark_runners.hardware import HardwareInventory, PlatformInfo, detect_hardware
from benchmark_runners.hardware.cpu_budget import detect_cpu_budget
from benchmark_runners.measure import now_iso
from benchmark_runners.memory_guard import memory_refusal
from benchmark_runners.paths import WORKER_SCRATCH_ENV
from benchmark_runners.records import MODES, BenchmarkConfig, BenchmarkResult
from benchmark_runners.worker import PRELOAD_ENV
from benchmark_runners.worker_scratch import ScratchDirectory, remove_abandoned
from benchmark_runners.zygote import UNKNOWN_RETURNCODE, ForkServer
from models.lifeline import LIFELINE_ENV, open_lifeline

log = logging.getLogger("devicefit.sweep")
# Set to any value: start every worker as a fresh interpreter instead of forking it from the
# fork server (benchmark_runners/zygote.py), e.g. to compare the two.
NO_FORK_SERVER_ENV = "DEVICEFIT_NO_FORK_SERVER"
WORKER_STARTUP_TIMEOUT_S = 180.0  # python + torch + transformers imports, on a loaded machine
STDERR_READ_BYTES = 256 * 1024
STDERR_TAIL_CHARS = 2000


@dataclass
class SweepEvent:
    kind: str  # waiting (for a device another process measures on) | worker_started | config_started | result
    config: BenchmarkConfig | None = None
    result: BenchmarkResult | None = None
    worker_pid: int | None = None
    message: str | None = None


EventHandler = Callable[[SweepEvent], None]


def new_run_id() -> str:
    return time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:8]


def _group(configs: Iterable[BenchmarkConfig]) -> list[list[tuple[int, BenchmarkConfig]]]:
    """(position, config) per worker, ordered so a loaded model is reused and batch sizes go
    upwards; the position puts each row back where its config was asked for."""
    groups: dict[tuple, list[tuple[int, BenchmarkConfig]]] = {}
    for i, c in enumerate(configs):
        groups.setdefault((c.model, c.backend, c.device, c.threads, c.isa), []).append((i, c))
    order = {mode: i for i, mode in enumerate(MODES)}
    return [sorted(g, key=lambda ic: (order[ic[1].mode], ic[1].precision, ic[1].batch_size, ic[1].seq_length or 0))
            for g in groups.values()]


def _device_table(inventory: HardwareInventory) -> dict[str, dict]:
    """Device id ("cpu", "cuda:0", "openvino:CPU") -> its name and fingerprint, for every
    detected device a backend can address; "cuda" stands for "cuda:0"."""
    table = {}
    for kind in registry.kinds().values():
        info = inventory.platforms.get(kind.name)
        if kind.device_format is None or info is None:
            continue
        for dev in info.devices:
            table[kind.device_id(dev)] = {"name": dev.get("full_device_name") or dev.get("name"), "fingerprint": dev.get("fingerprint")}
    for device in [d for d in table if d.endswith(":0")]:
        table.setdefault(device[:-2], table[device])
    return table


def threads_reason(threads: int | None, inventory: HardwareInventory) -> str | None:
    """Why a worker cannot run `threads` torch threads on this host: more than its logical cores
    is oversubscription, not a constraint (devices register refuses it too), and tens of
    thousands crash the worker in OpenMP's thread creation."""
    cpu = inventory.platforms.get("cpu")
    cores = (cpu.devices or [{}])[0].get("logical_cores") if cpu is not None else None
    if threads and cores and threads > cores:
        return f"{threads} threads on a host with {cores} logical cores is oversubscription, not a constraint (at most {cores})"
    return None


def _unavailable_reason(config: BenchmarkConfig, inventory: HardwareInventory, devices: dict) -> str | None:
    if (reason := threads_reason(config.threads, inventory)) is not None:
        return reason
    kind = config.device_kind
    if not inventory.platforms[kind].available:
        # a kind whose devices are addressed as this one's (ROCm builds of torch say "cuda")
        kind = next((k.name for k in registry.kinds().values()
                     if k.addressed_as == kind and inventory.platforms.get(k.name, PlatformInfo(k.name, False)).available), kind)
    info = inventory.platforms[kind]
    if not info.available:
        return f"{kind} is not available here: {info.reason}"
    if config.device not in devices:
        return f"{config.device} does not exist here ({len(info.devices)} {kind} device(s))"
    if config.isa:
        flags = (inventory.platforms["cpu"].devices or [{}])[0].get("isa_flags") or []
        if ISA_CAPS[config.isa]["flag"] not in flags:
            return (f"this CPU has no {config.isa} ({ISA_CAPS[config.isa]['flag']} is not among its flags): "
                    f"an {config.isa} cap would describe hardware that is not here")
    return None


def _exit_description(returncode: int) -> str:
    if returncode == UNKNOWN_RETURNCODE:
        return "worker process ended; its exit status is unknown (the fork server that started it was lost)"
    if returncode == 0:
        return "worker process exited before measuring every config"
    if returncode < 0:
        name = signal.Signals(-returncode).name
        hint = " (the kernel's out-of-memory killer sends SIGKILL when memory runs out)" if name == "SIGKILL" else ""
        return f"worker process killed by {name}{hint}"
    return f"worker process exited with code {returncode}"


def _worker_env() -> dict[str, str]:
    return dict(os.environ, TRANSFORMERS_OFFLINE="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1")


_server: ForkServer | None = None
_server_broken: str | None = None  # why workers are started the plain way in this process


def _fork_server(python: str) -> ForkServer | None:
    """This process's fork server (started on first use), for workers of this interpreter;
    None where workers run another one (a test's fake interpreter) or the server broke."""
    global _server
    if _server is not None and _server.lost:  # died under a worker (ForkedProcess saw it)
        _drop_fork_server(_server.lost)
    if python != sys.executable or _server_broken or os.environ.get(NO_FORK_SERVER_ENV):
        return None
    if _server is None:
        _server = ForkServer(python, _worker_env(), WORKER_STARTUP_TIMEOUT_S)
        atexit.register(_close_fork_server)
    return _server


def _drop_fork_server(reason: str) -> None:
    global _server_broken
    _server_broken = reason
    log.warning("worker fork server unusable (%s); starting workers as fresh processes", reason)
    _close_fork_server()


def _close_fork_server() -> None:
    global _server
    if _server is not None:
        _server.close()
        _server = None


class _Worker:
    """One worker process. It runs in its own session (so a kill reaches its whole group), and
    it holds the read end of a lifeline pipe whose write end only this parent holds: when the
    parent dies, however it dies (kill -9 included), the kernel closes the write end and the
    worker exits at once instead of measuring on beside the next run."""

    def __init__(self, job: dict, python: str, model: str = "", forked: bool = True, env: dict[str, str] | None = None):
        """Start the process; it imports its libraries while the parent decides what to `send`.
        `forked`: from the fork server where there is one (its first fork waits for its imports).
        `env`: variables a library reads at load (an ISA cap): such a worker is always a fresh
        interpreter, since a forked one would inherit the server's libraries as loaded."""
        self.job = job
        self.env = dict(env or {})
        self.configs: list[BenchmarkConfig] = []
        self.stderr = tempfile.TemporaryFile()
        # Removed by close() whatever became of the worker (paths.WORKER_SCRATCH_ENV); locked till then (worker_scratch.py).
        self.scratch = ScratchDirectory()
        self.lifeline: int | None = None
        try:
            lifeline_read, self.lifeline = open_lifeline()  # the worker gets the read end only
        except BaseException:
            self.scratch.remove()
            raise
        own = {PRELOAD_ENV: model, WORKER_SCRATCH_ENV: self.scratch.path}
        try:
            server = _fork_server(python) if forked and not self.env else None
            if server is not None:
                try:
                    self.proc = server.fork(own, self.stderr.fileno(), lifeline_read)
                    return
                except (RuntimeError, OSError) as exc:
                    _drop_fork_server(f"{type(exc).__name__}: {exc}")
            env = dict(_worker_env(), **self.env, **{LIFELINE_ENV: str(lifeline_read)}, **own)
            self.proc = subprocess.Popen(
                [python, "-m", "benchmark_runners.worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=self.stderr, env=env, start_new_session=True, pass_fds=(lifeline_read,),
            )
        except BaseException:  # no worker: nothing else would close what was made for it
            os.close(self.lifeline)
            self.lifeline = None
            self.scratch.remove()
            self.stderr.close()
            raise
        finally:
            os.close(lifeline_read)

    def send(self, configs: list[BenchmarkConfig], earlier: list[BenchmarkResult] = ()) -> None:
        """The configs to measure, and the rows its group's earlier worker produced (a crash or a
        timeout started this one): the call budget's evidence (benchmark_runners.call_budget)."""
        self.configs = configs
        try:
            self.proc.stdin.write(json.dumps({**self.job, "configs": [c.to_json() for c in configs],
                                              "earlier": [r.to_json() for r in earlier]}).encode())
            self.proc.stdin.close()
        except BrokenPipeError:
            pass  # it died starting; _drive reports how

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            try:  # a worker forked an instant ago may not lead its session yet
                os.kill(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()

    def stderr_tail(self) -> str:
        """The end of what the worker wrote on stderr, warnings left out. Only the last 256 KiB are
        read: a worker that logged for hours wrote far more than a row's error keeps."""
        size = self.stderr.seek(0, os.SEEK_END)
        self.stderr.seek(max(0, size - STDERR_READ_BYTES))
        text = self.stderr.read().decode(errors="replace").strip()
        lines = [ln for ln in text.splitlines() if "Warning" not in ln and ln.strip()]
        return "\n".join(lines)[-STDERR_TAIL_CHARS:]

    def close(self) -> None:
        if self.proc.stdout:
            self.proc.stdout.close()
        self.stderr.close()
        if self.lifeline is not None:
            os.close(self.lifeline)
            self.lifeline = None
        self.scratch.remove()


def start_fork_server(python: str = sys.executable) -> None:
    """Start this process's fork server now, so its imports (torch, transformers: about 5 s)
    run beside what the caller does before its first sweep (`devicefit run`: the catalog
    asset, whose own imports and traces take about 7 s) instead of before the first worker."""
    _fork_server(python)


_early: _Worker | None = None  # started by start_worker_early, taken by the next sweep


def start_worker_early(model: str = "", python: str = sys.executable) -> None:
    """Start the next sweep's first worker now, so its imports (python, torch, the model's
    transformers class: about 4 s) overlap what the caller does before the sweep, such as
    resolving and validating the model (about 5 s of the same imports in the CLI). Unused, it
    is killed at exit; its lifeline ends it if this process dies first."""
    global _early
    if _early is None:
        # A fresh interpreter: forking would first wait for the fork server's own imports,
        # which is the very wait this worker exists to overlap.
        _early = _Worker({}, python, model, forked=False)
        atexit.register(_discard_early_worker)


def _discard_early_worker() -> None:
    global _early
    if _early is not None:
        _early.kill()
        _early.close()
        _early = None


def _new_worker(job: dict, python: str, config: BenchmarkConfig) -> _Worker:
    """The early worker if one was started with this interpreter and the environment `config`
    needs (none, unless it is capped to an ISA), else a fresh one."""
    global _early
    env = profile_env(None, config.isa)
    fits = _early is not None and _early.proc.args[0] == python and _early.env == env
    worker, _early = (_early, None) if fits else (None, _early)
    if worker is None or worker.proc.poll() is not None:
        if worker is not None:
            worker.close()
        return _Worker(job, python, config.model, env=env)
    worker.job = job
    return worker


def _drive(worker: _Worker, run_id: str, emit: EventHandler) -> list[BenchmarkResult]:
    """Collect results until the worker finishes, dies or misses a deadline. Returns the rows
    it produced plus, if it broke, one failed row for the config it was measuring."""
    results: list[BenchmarkResult] = []
    sel = selectors.DefaultSelector()
    fd = worker.proc.stdout.fileno()
    sel.register(fd, selectors.EVENT_READ)
    buffer = b""
    current: int | None = None
    deadline = time.monotonic() + WORKER_STARTUP_TIMEOUT_S
    failure: str | None = None
    failure_code = "worker_died"
    while True:
        events = sel.select(timeout=max(0.0, deadline - time.monotonic()))
        if not events:
            limit = worker.configs[current].timeout_s if current is not None else WORKER_STARTUP_TIMEOUT_S
            worker.kill()
            failure = f"timed out after {limit:g} s (load and measurement); worker killed"
            failure_code = "timeout"
            break
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            worker.proc.wait()
            if worker.proc.returncode != 0 or current is not None or len(results) < len(worker.configs):
                tail = worker.stderr_tail()
                failure = _exit_description(worker.proc.returncode) + (f"; last output: {tail[-500:]}" if tail else "")
            break
        buffer += chunk
        while b"\n" in buffer and failure is None:
            line, buffer = buffer.split(b"\n", 1)
            try:
                message = json.loads(line)
                index = message["index"]
            except (ValueError, KeyError, TypeError):
                worker.kill()
                failure = f"worker sent malformed output: {line[:200]!r}"
                break
            if message["event"] == "start":
                current = index
                deadline = time.monotonic() + worker.configs[index].timeout_s
                emit(SweepEvent("config_started", worker.configs[index], worker_pid=worker.proc.pid))
            else:
                result = BenchmarkResult.from_json(message["result"])
                results.append(result)
                current = None
                deadline = time.monotonic() + WORKER_STARTUP_TIMEOUT_S
                emit(SweepEvent("result", worker.configs[index], result, worker.proc.pid))
        if failure is not None:
            break
    sel.close()
    if failure is not None:
        # The config in flight, or (a worker that died before starting one) the first pending.
        index = current if current is not None else len(results)
        if index < len(worker.configs):
            config = worker.configs[index]
            result = BenchmarkResult.for_config(config, run_id, now_iso(), "failed", failure, failure_code, **_named(config))
            results.append(result)
            emit(SweepEvent("result", config, result, worker.proc.pid))
    return results


def run_sweep(
    configs: list[BenchmarkConfig],
    run_id: str | None = None,
    on_event: EventHandler | None = None,
    inventory: HardwareInventory | None = None,
    python: str = sys.executable,
) -> list[BenchmarkResult]:
    """Measure every config; returns one row per config, in the order given."""
    run_id = run_id or new_run_id()
    emit = on_event or (lambda e: None)
    for path in remove_abandoned():  # left by a sweep killed together with its worker
        log.info("removed the scratch directory %s, whose sweep and worker are gone", path)
    inventory = inventory or detect_hardware()
    devices = _device_table(inventory)
    # The cores this process may run on, within its cgroup's CPU quota (hardware/cpu_budget.py):
    # the host's physical cores, unless a cpuset or a quota leaves it fewer.
    job = {"run_id": run_id, "host_environment": host_environment(), "devices": devices,
           "default_threads": detect_cpu_budget().threads}
    # One benchmark per physical device on this machine, whoever started the other (device_lock).
    with hold_devices({physical_device(c.device) for c in configs},
                      on_wait=lambda message: emit(SweepEvent("waiting", message=message))):
        rows = _sweep_groups(configs, run_id, job, python, inventory, devices, emit)
    return [rows[i] for i in range(len(configs))]


def _named(config: BenchmarkConfig) -> dict[str, str | None]:
    """The model's resolved name and path, for a row this process writes (skipped before a
    worker, failed with it): the worker's rows carry them, and `--model BERT-TINY` or a
    directory's path must not store that config's skip under another name than its ok rows."""
    from models.catalog import UnknownModelError
    from models.resolve import resolve_model

    try:
        spec = resolve_model(config.model)
    except (UnknownModelError, ValueError, OSError):  # the row already says what went wrong
        return {}
    return {"model": spec.name, "model_path": str(spec.path) if spec.path else None}


def _sweep_groups(configs: list[BenchmarkConfig], run_id: str, job: dict, python: str, inventory: HardwareInventory,
                  devices: dict[str, dict], emit: EventHandler) -> dict[int, BenchmarkResult]:
    rows: dict[int, BenchmarkResult] = {}
    for group in _group(configs):
        pending: list[tuple[int, BenchmarkConfig]] = []
        worker: _Worker | None = None
        try:
            for position, config in group:
                reason, code = _unavailable_reason(config, inventory, devices), "device_unavailable"
                if not reason:
                    # The memory guard traces the model (seconds, the first time): start the
                    # worker first so its imports run meanwhile.
                    worker = worker or _new_worker(job, python, config)
                    reason, code = memory_refusal(config, inventory), "insufficient_memory"
                if reason:
                    rows[position] = BenchmarkResult.for_config(config, run_id, now_iso(), "skipped", reason, code,
                                                                environment=job["host_environment"], **_named(config))
                    emit(SweepEvent("result", config, rows[position]))
                else:
                    pending.append((position, config))
        except BaseException:
            if worker is not None:
                worker.kill()
                worker.close()
            raise
        if worker is not None and not pending:  # every config refused: nothing for it to do
            worker.kill()
            worker.close()
        earlier: list[BenchmarkResult] = []
        while pending:
            worker = worker or _new_worker(job, python, pending[0][1])
            worker.send([c for _, c in pending], earlier)
            emit(SweepEvent("worker_started", worker_pid=worker.proc.pid))
            try:
                produced = _drive(worker, run_id, emit)
            finally:
                if worker.proc.poll() is None:
                    worker.kill()
                worker.close()
                worker = None
            for (position, _), result in zip(pending, produced):
                rows[position] = result
            earlier += produced
            pending = pending[len(produced):]
    return rows
