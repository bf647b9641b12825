"""A process-wide cache of constructed models (spec 003's ResourcePool).

`get_model(family, name, constructor, hardware_preferences={"device": ...})` builds a model once
per (family, name, device) and hands the same object back afterwards, placed on the requested
device, or on the best torch device present when none is asked for. A device that is absent is
not silently replaced: the request fails with the detection's reason.

Low-memory mode (`RESOURCE_POOL_LOW_MEMORY=1`, or `low_memory=True`) keeps the models' own bytes
(parameters and buffers, counted exactly) under a budget (`RESOURCE_POOL_MEMORY_BUDGET_MB`, or
half of the memory available when the pool starts), evicting the least recently used models
first. With an idle timeout (`RESOURCE_POOL_TIMEOUT` seconds, or `idle_timeout_s`), a daemon
thread frees models nobody has asked for in that long. `stats()` says what happened.
"""
from __future__ import annotations

import gc
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from benchmark_runners import registry
from devicefit.errors import DevicefitError

log = logging.getLogger("devicefit.resource_pool")
MB = 2**20


class DeviceUnavailable(DevicefitError, RuntimeError):
    """The requested device is not present; the message carries detection's reason."""


def model_bytes(model: Any) -> int:
    """Bytes held by a torch module's parameters and buffers (0 for anything else)."""
    total = 0
    for attr in ("parameters", "buffers"):
        getter = getattr(model, attr, None)
        if callable(getter):
            total += sum(t.numel() * t.element_size() for t in getter())
    return total


def resolve_device(requested: str | None) -> tuple[str, str]:
    """(torch device string, why) for a device kind or torch device string."""
    import torch

    if requested is None:
        if torch.cuda.is_available():
            return "cuda:0", "no device requested: CUDA is present"
        if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            return "mps", "no device requested: MPS is present"
        return "cpu", "no device requested: no accelerator is present"
    kind = requested.split(":")[0]
    # Each kind's torch device from the registry; OpenVINO's CPU plugin keeps the module on the CPU.
    placeable = {k.name: k for k in registry.kinds().values() if k.torch_device}
    if kind not in placeable:
        raise DeviceUnavailable(f"device {requested!r} is not one a torch model can be placed on "
                                f"({', '.join(placeable)})")
    target = placeable[kind].torch_device
    if target.startswith("cuda") and not torch.cuda.is_available():
        raise DeviceUnavailable(f"{requested} requested, but {_reason(kind)}")
    if target == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise DeviceUnavailable(f"{requested} requested, but {_reason(kind)}")
    device = requested if ":" in requested and kind == "cuda" else target
    shared = placeable[kind].shares_device_of
    why = "requested" if not shared else f"{kind} requested: the torch model stays on the {shared} device that {kind} runs on"
    return device, why


def _reason(kind: str) -> str:
    from benchmark_runners.hardware import detect_hardware

    return detect_hardware(probe=False).platforms[kind].reason or f"{kind} is not available"


@dataclass
class PooledModel:
    family: str
    name: str
    device: str
    placement: str
    model: Any
    bytes: int
    created: float
    last_used: float
    hits: int = 0


@dataclass
class ResourcePool:
    low_memory: bool | None = None  # None: RESOURCE_POOL_LOW_MEMORY
    memory_budget_mb: float | None = None  # None: RESOURCE_POOL_MEMORY_BUDGET_MB, else half of available memory
    idle_timeout_s: float | None = None  # None: RESOURCE_POOL_TIMEOUT, else never
    clock: Callable[[], float] = time.monotonic
    _models: OrderedDict = field(default_factory=OrderedDict)
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _counts: dict[str, int] = field(default_factory=lambda: {"hits": 0, "misses": 0, "evictions": 0, "expired": 0})
    _events: list[str] = field(default_factory=list)
    _reaper: threading.Thread | None = None
    _stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self):
        if self.low_memory is None:
            self.low_memory = os.environ.get("RESOURCE_POOL_LOW_MEMORY", "0").lower() in ("1", "true", "yes")
        if self.memory_budget_mb is None and os.environ.get("RESOURCE_POOL_MEMORY_BUDGET_MB"):
            self.memory_budget_mb = float(os.environ["RESOURCE_POOL_MEMORY_BUDGET_MB"])
        if self.memory_budget_mb is None and self.low_memory:
            import psutil

            self.memory_budget_mb = psutil.virtual_memory().available / MB / 2
        if self.idle_timeout_s is None and os.environ.get("RESOURCE_POOL_TIMEOUT"):
            self.idle_timeout_s = float(os.environ["RESOURCE_POOL_TIMEOUT"])
        if self.memory_budget_mb is not None and self.memory_budget_mb <= 0:
            raise ValueError(f"the memory budget must be positive, got {self.memory_budget_mb} MB")
        if self.idle_timeout_s is not None:
            if self.idle_timeout_s <= 0:
                raise ValueError(f"the idle timeout must be positive, got {self.idle_timeout_s} s")
            self._reaper = threading.Thread(target=self._reap, name="resource-pool-reaper", daemon=True)
            self._reaper.start()

    def get_model(self, family: str, name: str, constructor: Callable[[], Any],
                  hardware_preferences: dict[str, Any] | None = None) -> Any:
        """The pooled model, built by `constructor()` on first use and moved to the device."""
        device, placement = resolve_device((hardware_preferences or {}).get("device"))
        key = (family, name, device)
        with self._lock:  # held while constructing: two first requests must not build two models
            entry = self._models.get(key)
            if entry is not None:
                entry.hits += 1
                entry.last_used = self.clock()
                self._models.move_to_end(key)
                self._counts["hits"] += 1
                return entry.model
            self._counts["misses"] += 1
            model = constructor()
            if hasattr(model, "to"):
                model = model.to(device)
            size = model_bytes(model)
            now = self.clock()
            self._models[key] = PooledModel(family, name, device, placement, model, size, now, now)
            self._events.append(f"loaded {name} on {device} ({size / MB:.1f} MB; {placement})")
            log.debug(self._events[-1])
            if self.low_memory:
                self._evict_to_budget(keep=key)
        return model

    def _evict_to_budget(self, keep: tuple) -> None:
        budget = self.memory_budget_mb * MB
        while self.memory_bytes() > budget:
            victim = next((k for k in self._models if k != keep), None)
            if victim is None:
                self._events.append(f"{keep[1]} alone ({self._models[keep].bytes / MB:.1f} MB) exceeds the "
                                    f"{self.memory_budget_mb:.0f} MB budget; kept, as it was asked for")
                log.warning(self._events[-1])
                return
            self._drop(victim, "evicted (least recently used, over the low-memory budget)", "evictions")

    def _drop(self, key: tuple, why: str, counter: str) -> None:
        entry = self._models.pop(key)
        self._counts[counter] += 1
        self._events.append(f"{why}: {entry.name} on {entry.device} ({entry.bytes / MB:.1f} MB)")
        log.debug(self._events[-1])
        del entry
        gc.collect()
        if key[2].startswith("cuda"):
            import torch

            torch.cuda.empty_cache()

    def cleanup_idle(self) -> list[str]:
        """Free every model idle for longer than the timeout; returns their names."""
        if self.idle_timeout_s is None:
            return []
        with self._lock:
            now = self.clock()
            idle = [k for k, e in self._models.items() if now - e.last_used > self.idle_timeout_s]
            for key in idle:
                self._drop(key, f"expired (idle over {self.idle_timeout_s:g} s)", "expired")
        return [k[1] for k in idle]

    def _reap(self) -> None:
        interval = min(max(self.idle_timeout_s / 4, 0.05), 30.0)
        while not self._stop.wait(interval):
            self.cleanup_idle()

    def memory_bytes(self) -> int:
        return sum(e.bytes for e in self._models.values())

    def clear(self) -> None:
        with self._lock:
            for key in list(self._models):
                self._drop(key, "cleared", "evictions")

    def close(self) -> None:
        self._stop.set()
        self.clear()

    def stats(self) -> dict[str, Any]:
        with self._lock:
            total = self._counts["hits"] + self._counts["misses"]
            return {**self._counts, "hit_rate": self._counts["hits"] / total if total else None,
                    "low_memory": self.low_memory, "memory_budget_mb": self.memory_budget_mb,
                    "idle_timeout_s": self.idle_timeout_s, "memory_mb": self.memory_bytes() / MB,
                    "models": [{"family": e.family, "name": e.name, "device": e.device, "placement": e.placement,
                                "memory_mb": e.bytes / MB, "hits": e.hits} for e in self._models.values()],
                    "events": list(self._events[-50:])}


_global: ResourcePool | None = None
_global_lock = threading.Lock()


def get_global_resource_pool() -> ResourcePool:
    """The process-wide pool, configured from the environment on first use."""
    global _global
    with _global_lock:
        if _global is None:
            _global = ResourcePool()
        return _global
