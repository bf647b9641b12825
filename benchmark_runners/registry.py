"""The one registry of device kinds and backends.

Everything that enumerates hardware derives from here: detection and the inventory, the
measurement partitions and sweep profiles, the compatibility matrix, the resource pool, the
selector, the API's enums, the client's device map and the CLI's choices. A device *kind* is a
platform devicefit can detect ("cuda", "webgpu"); a *backend* measures some kinds
(`benchmark_runners/backends/base.py` is its contract).

Adding a backend is one module (a `Backend` subclass) plus one entry in `BUILTIN_BACKENDS`, or,
outside this repository, a plugin module that calls `register_backend` (and `register_kind` for
a kind devicefit does not know yet), named in the `DEVICEFIT_PLUGINS` environment variable
(comma-separated module names) or under the `devicefit.plugins` entry-point group. Plugins are
imported the first time the registry is read, in every process that reads it (measurement
workers included), so a plugin is configured once, by its operator, never by a request.

This module imports nothing heavy: kinds are plain data, detectors and backend classes are
imported by name when first needed.
"""
from __future__ import annotations

import importlib
import os
import re
import threading
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING, Any, Callable

from models.errors import DevicefitError

if TYPE_CHECKING:
    from benchmark_runners.backends.base import Backend
    from benchmark_runners.hardware.platforms import PlatformInfo

PLUGINS_ENV = "DEVICEFIT_PLUGINS"
PLUGIN_ENTRY_POINTS = "devicefit.plugins"
# What register_backend requires of a backend (benchmark_runners.backends.base.Backend has it all).
_CONTRACT = ("name", "kinds", "device_pattern", "device_help", "precisions", "modes", "accepts_device", "unsupported_reason",
             "prepare", "make_step", "output", "measurement_context", "loaded_key", "versions", "input_device", "kind_reason",
             "model_reason")
_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,31}$")


class DeviceRegistryError(DevicefitError, ValueError):
    """A registration that would make the registry inconsistent, or a name it does not hold."""


@dataclass(frozen=True)
class DeviceKind:
    """A platform devicefit can detect, and what the rest of the code needs to know about it."""

    name: str
    detector: str  # "module:function" returning a PlatformInfo; imported when detection runs
    description: str
    # The id of each detected device, formatted from its inventory entry: "cpu", "cuda:{index}",
    # "openvino:{name}". None: its devices cannot be addressed by a backend.
    device_format: str | None = None
    torch_device: str | None = None  # where a torch module for this kind is placed; None: nowhere
    probed: bool = False  # the inventory measures its peak compute and bandwidth (a probe device)
    # The kind whose physical device its measurements run on (OpenVINO's CPU plugin: "cpu"), so
    # the two never measure at the same time. None: its own.
    shares_device_of: str | None = None
    # A kind whose devices a backend addresses as another kind's (ROCm builds of torch address
    # AMD GPUs as "cuda"): rows measured there are stored under that kind.
    addressed_as: str | None = None
    host_memory: bool = False  # its models live in the host's RAM (the CPU, Apple's unified memory)
    # The kind whose device does the work when detection says this kind's device is software
    # (WebGPU on SwiftShader's Vulkan runs on the CPU): its lock and fleet tag are then that kind's.
    software_runs_on: str | None = None
    # The precisions it runs natively, best first: what searches over precision enumerate.
    native_precisions: tuple[str, ...] = ()
    # The host queues its kernels and goes on while the device runs them (CUDA, ROCm, MPS): an
    # eager loop's dispatch overlaps the device's work instead of adding to it, so a step takes
    # the longer of the two (devicefit.predict.generation).
    asynchronous: bool = False

    @property
    def own_memory(self) -> bool:
        """Its models live in memory of their own (a CUDA or ROCm card), not in the host's RAM
        (the CPU, OpenVINO's CPU plugin, the browser's wasm, Apple's unified memory): what must fit
        there is the card allocator's peak, not the process's RSS."""
        return self.torch_device is not None and not self.host_memory

    def device_id(self, device: dict[str, Any]) -> str:
        if self.device_format is None:
            raise DeviceRegistryError(f"{self.name} devices have no device id a backend can address")
        return self.device_format.format(**device)

    def detect(self) -> "PlatformInfo":
        return _resolve(self.detector)()


_PLATFORMS = "benchmark_runners.hardware.platforms"
_BROWSER = "benchmark_runners.browser.detection"
BUILTIN_KINDS = (
    DeviceKind("cpu", f"{_PLATFORMS}:detect_cpu", "the host CPU", "cpu", "cpu", probed=True, host_memory=True,
               native_precisions=("fp32", "bf16", "int8")),
    DeviceKind("cuda", f"{_PLATFORMS}:detect_cuda", "NVIDIA GPUs through CUDA", "cuda:{index}", "cuda:0", probed=True,
               native_precisions=("fp32", "fp16", "bf16", "int8"), asynchronous=True),
    # ROCm: devicefit names its devices "rocm:N" (rows, partitions, predictor specs of its own);
    # torch's ROCm build addresses the same GPUs as "cuda:N" through HIP (torch_device_string).
    DeviceKind("rocm", f"{_PLATFORMS}:detect_rocm", "AMD GPUs through ROCm (HIP)", "rocm:{index}", "rocm:0", probed=True,
               native_precisions=("fp32", "fp16", "bf16"), asynchronous=True),
    DeviceKind("mps", f"{_PLATFORMS}:detect_mps", "Apple GPUs through Metal Performance Shaders", "mps", "mps", probed=True,
               host_memory=True, native_precisions=("fp32", "fp16"), asynchronous=True),
    DeviceKind("openvino", f"{_PLATFORMS}:detect_openvino", "Intel OpenVINO runtime devices", "openvino:{name}", "cpu",
               shares_device_of="cpu", host_memory=True, native_precisions=("fp32", "bf16", "int8")),
    DeviceKind("qnn", f"{_PLATFORMS}:detect_qnn", "Qualcomm AI Engine Direct (QNN) NPUs"),
    # The browser kinds: onnxruntime-web in headless Chromium (benchmark_runners/browser). wasm
    # runs on the CPU's cores; WebGPU on the adapter the browser gives (SwiftShader's software
    # Vulkan, on the CPU, where there is no GPU: the fleet's concurrency tag says so per device).
    DeviceKind("wasm", f"{_BROWSER}:detect_wasm", "WebAssembly (SIMD, threads) in the browser, through onnxruntime-web", "wasm",
               shares_device_of="cpu", host_memory=True, native_precisions=("fp32", "int8")),
    DeviceKind("webnn", f"{_BROWSER}:detect_webnn", "the browser's WebNN API, through onnxruntime-web", "webnn",
               native_precisions=("fp32", "fp16")),
    DeviceKind("webgpu", f"{_BROWSER}:detect_webgpu", "the browser's WebGPU API, through onnxruntime-web", "webgpu",
               software_runs_on="cpu", native_precisions=("fp32", "fp16")),
)
# One entry per backend: "module:Class" of a benchmark_runners.backends.base.Backend subclass.
BUILTIN_BACKENDS = (
    "benchmark_runners.backends.torch_backend:TorchBackend",
    "benchmark_runners.backends.openvino_backend:OpenVINOBackend",
    "benchmark_runners.backends.browser_backend:BrowserBackend",
)


def _resolve(target: str) -> Any:
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


class _Registry:
    def __init__(self) -> None:
        self.kinds: dict[str, DeviceKind] = {k.name: k for k in BUILTIN_KINDS}
        self.backends: dict[str, Backend] = {}
        self.lock = threading.RLock()
        self.loaded = False
        self.loading = False  # a plugin being imported may read the registry itself

    def load(self) -> None:
        """Built-in backends, then plugins: once per process (tried again after a failure)."""
        if self.loaded:  # the hot path (every read): no lock once loaded
            return
        with self.lock:
            if self.loaded or self.loading:
                return
            self.loading = True
            try:
                for target in BUILTIN_BACKENDS:
                    backend = _resolve(target)()
                    if backend.name not in self.backends:
                        register_backend(backend)
                for name in [m.strip() for m in os.environ.get(PLUGINS_ENV, "").split(",") if m.strip()]:
                    try:
                        importlib.import_module(name)
                    except ImportError as exc:
                        raise DeviceRegistryError(f"plugin module {name!r} named in {PLUGINS_ENV} cannot be imported: {exc}") from exc
                for entry in metadata.entry_points(group=PLUGIN_ENTRY_POINTS):
                    entry.load()
            finally:
                self.loading = False
            self.loaded = True


_registry = _Registry()


def register_kind(kind: DeviceKind) -> DeviceKind:
    """Add a device kind (a plugin's new platform). Its name must be new."""
    if not _NAME_RE.match(kind.name):
        raise DeviceRegistryError(f"device kind name {kind.name!r} must be lowercase letters, digits or '_' (at most 32)")
    with _registry.lock:
        if kind.name in _registry.kinds:
            raise DeviceRegistryError(f"device kind {kind.name!r} is registered already")
        _registry.kinds[kind.name] = kind
    return kind


def register_backend(backend: "Backend") -> "Backend":
    """Add a backend instance. Its name must be new and every kind it measures registered."""
    # Checked by shape, not by class: the contract module imports the records, which read this
    # registry, so importing it here would close a cycle.
    missing = [a for a in _CONTRACT if not hasattr(backend, a)]
    if missing:
        raise DeviceRegistryError(f"{backend!r} does not implement benchmark_runners.backends.base.Backend (lacks {', '.join(missing)})")
    if not _NAME_RE.match(backend.name):
        raise DeviceRegistryError(f"backend name {backend.name!r} must be lowercase letters, digits or '_' (at most 32)")
    with _registry.lock:
        if backend.name in _registry.backends:
            raise DeviceRegistryError(f"backend {backend.name!r} is registered already")
        unknown = [k for k in backend.kinds if k not in _registry.kinds]
        if unknown:
            raise DeviceRegistryError(f"backend {backend.name!r} measures unregistered kind(s) {', '.join(unknown)}; register_kind them first")
        taken = {k: b.name for b in _registry.backends.values() for k in b.kinds if k in backend.kinds}
        if taken:
            raise DeviceRegistryError(f"backend {backend.name!r}: kind(s) {', '.join(taken)} are measured by {', '.join(set(taken.values()))} already")
        _registry.backends[backend.name] = backend
    return backend


def kinds() -> dict[str, DeviceKind]:
    _registry.load()
    return dict(_registry.kinds)


def kind_names() -> tuple[str, ...]:
    return tuple(kinds())


def own_memory_kinds() -> tuple[str, ...]:
    """The kinds whose models live in memory of their own (DeviceKind.own_memory)."""
    return tuple(name for name, kind in kinds().items() if kind.own_memory)


def kind(name: str) -> DeviceKind:
    known = kinds()
    if name not in known:
        raise DeviceRegistryError(f"unknown hardware {name!r}; known: {', '.join(known)}")
    return known[name]


def backends() -> dict[str, "Backend"]:
    _registry.load()
    return dict(_registry.backends)


def backend_names() -> tuple[str, ...]:
    return tuple(backends())


def backend(name: str) -> "Backend":
    known = backends()
    if name not in known:
        raise DeviceRegistryError(f"unknown backend {name!r}; known: {', '.join(known)}")
    return known[name]


def backend_of_kind(kind_name: str) -> "Backend | None":
    """The backend that measures a kind's partitions, or None where nothing here measures it."""
    return next((b for b in backends().values() if kind_name in b.kinds), None)


def measurable_kinds() -> tuple[str, ...]:
    """Kinds some backend measures: the hardware dimension of the measurement partitions."""
    measured = {k for b in backends().values() for k in b.kinds}
    return tuple(k for k in kinds() if k in measured)


def partition_device(kind_name: str) -> str:
    """The device a (kind, model) partition measures on ("cuda:0", "openvino:CPU")."""
    b = backend_of_kind(kind_name)
    if b is None:
        raise DeviceRegistryError(f"no backend measures {kind_name}; measurable: {', '.join(measurable_kinds())}")
    return b.kinds[kind_name]


def backend_for_device(device: str) -> "Backend":
    """The backend whose device pattern accepts a device string (the CLI's --device)."""
    for b in backends().values():
        if b.accepts_device(device):
            return b
    raise DeviceRegistryError(f"unknown device {device!r}; " + "; ".join(f"{b.name}: {b.device_help}" for b in backends().values()))


def torch_device_string(device: str) -> str:
    """The string torch addresses a devicefit device by: "rocm:N" is "cuda:N" on a ROCm build of
    torch (HIP keeps the CUDA device API); every other device string is torch's own."""
    kind, _, index = device.partition(":")
    return f"cuda:{index or 0}" if kind == "rocm" else device


def kind_of_device(device: str) -> str:
    """The kind a row measured on that device is stored under ("cuda:1" -> "cuda")."""
    return device.split(":")[0]


def runs_on_host_cpu(device: str, software: bool = False) -> bool:
    """Whether `device` executes on the host's CPU cores: the cpu kind, a kind that shares the
    CPU's device (OpenVINO's CPU plugin, wasm) but not that kind's other devices (openvino:GPU),
    and, with `software`, a kind whose device detection found to be a software one on the CPU
    (WebGPU on SwiftShader)."""
    k = kinds().get(kind_of_device(device))
    if k is None or physical_kind(k.name, software) != "cpu":
        return False
    return k.name == "cpu" or ":" not in device or device.split(":", 1)[1].upper() == "CPU"


def physical_kind(kind_name: str, software: bool = False) -> str:
    """The kind whose physical device a kind's measurements run on; `software`: detection found
    this kind's device to be a software one (see DeviceKind.software_runs_on)."""
    k = kinds().get(kind_name, DeviceKind(kind_name, "", ""))
    return k.shares_device_of or (k.software_runs_on if software else None) or kind_name


def own_device(kind_name: str, software: bool = False) -> bool:
    """Whether a registered kind's devices are hardware of their own beside the host's CPU (a GPU,
    an NPU), so that two of them behind one host CPU fingerprint (an H100 box and an H200 box of
    one cloud, or two different cards in one box) are two devices, told apart by their own
    fingerprints. Two identical cards have one fingerprint (inventory._STABLE_KEYS holds no serial)
    and are one device, as two identical CPUs are. A kind that runs on the CPU (OpenVINO's CPU
    plugin, wasm, WebGPU on a software adapter) is that CPU's."""
    return kind_name != "cpu" and kind_name in kinds() and physical_kind(kind_name, software) == kind_name


def torch_device(kind_name: str) -> str | None:
    k = kinds().get(kind_name)
    return k.torch_device if k else None


def declared_backend(kind_name: str) -> str | None:
    """The backend that supports a kind, as the compatibility matrix says it ("torch (as cuda)")."""
    b = backend_of_kind(kind_name)
    if b is not None:
        return b.name
    k = kinds().get(kind_name)
    if k and k.addressed_as:
        via = backend_of_kind(k.addressed_as)
        return f"{via.name} (as {k.addressed_as})" if via else None
    return None


def torch_kinds() -> tuple[str, ...]:
    """Kinds a torch module is placed on directly (not through another runtime)."""
    return tuple(k.name for k in kinds().values() if k.torch_device and k.shares_device_of is None)


def probed_kinds() -> tuple[str, ...]:
    return tuple(k.name for k in kinds().values() if k.probed)


def inference_only_kinds() -> tuple[str, ...]:
    return tuple(k for k in measurable_kinds() if "training" not in backend_of_kind(k).modes)


def detectors() -> dict[str, Callable[[], "PlatformInfo"]]:
    return {name: k.detect for name, k in kinds().items()}
