"""Refuse a configuration that cannot fit before a worker allocates anything.

`--batch-sizes 100000` on a host without swap would otherwise ask for tens of GB and bring the
out-of-memory killer down on the worker (or on a neighbour). The sweep asks `memory_refusal`
for every config first; a refusal becomes a `skipped` row naming the floor and the free memory,
so the user sees both figures and nothing is attempted.
"""
from __future__ import annotations

import logging

import psutil

from benchmark_runners import registry
from benchmark_runners.hardware import HardwareInventory
from benchmark_runners.hardware.memory_budget import find_memory_limit
from benchmark_runners.records import BenchmarkConfig

# The floor leaves out the process itself, and the kernel's OOM killer acts before memory is
# exhausted: refuse once the floor passes this share of what is free.
FREE_SHARE = 0.9
GIB = 2**30
log = logging.getLogger("devicefit.memory_guard")


def free_memory(config: BenchmarkConfig, inventory: HardwareInventory) -> tuple[int, str] | None:
    """(bytes, what they are) for the device `config` runs on, or None where unknown. CPU,
    OpenVINO on the CPU and Apple's unified memory share the host's available RAM, or what the
    process's cgroup memory limit leaves where that is less (hardware/memory_budget.py); a GPU is
    judged by its total memory (its free memory is only known once a process holds a context)."""
    kind = config.device_kind
    if registry.kind(kind).host_memory:
        host = psutil.virtual_memory().available
        limit = find_memory_limit()  # a container's limit, which the host's figure does not show
        if limit is not None and limit.available_bytes < host:
            return limit.available_bytes, (f"available under this process's cgroup memory limit of "
                                           f"{limit.limit_bytes / GIB:.1f} GiB ({limit.directory})")
        return host, "available on this host"
    platform = inventory.platforms.get(kind)
    if platform is not None and not platform.available:  # ROCm builds of torch address AMD GPUs as "cuda"
        platform = next((inventory.platforms[k.name] for k in registry.kinds().values()
                         if k.addressed_as == kind and k.name in inventory.platforms and inventory.platforms[k.name].available), platform)
    index = int(config.device.split(":")[1]) if ":" in config.device and config.device.split(":")[1].isdigit() else 0
    devices = platform.devices if platform else []
    if index < len(devices) and devices[index].get("memory_total_bytes"):
        return int(devices[index]["memory_total_bytes"]), f"in total on {config.device}"
    return None


def memory_floor_of(config: BenchmarkConfig):
    """The least memory `config` needs (models.memory_floor.MemoryFloor): weights, and the peak
    activations of a meta-device trace, plus the KV cache a generation request grows. Raises
    what resolving or tracing the model raises (LookupError, ValueError, RuntimeError,
    NotImplementedError)."""
    from models.memory_floor import memory_floor
    from models.resolve import resolve_model

    spec = resolve_model(config.model)
    if config.mode == "generation":  # the prefill's forward at the prompt, and the cache the request grows
        from dataclasses import replace

        from benchmark_runners.generation import kv_cache, request_shape

        shape = request_shape(spec, config.seq_length, config.new_tokens)
        floor = memory_floor(spec, config.batch_size, config.precision, "inference", shape.signature_seq_length)
        cache = kv_cache(spec.config, config.batch_size, shape.prompt_tokens or 0, shape.new_tokens,
                         2 if config.precision in ("fp16", "bf16") else 4, spec.config.get("max_source_positions"))
        return replace(floor, activation_bytes=floor.activation_bytes + cache.total_bytes)
    return memory_floor(spec, config.batch_size, config.precision, config.mode, config.seq_length)


def memory_refusal(config: BenchmarkConfig, inventory: HardwareInventory) -> str | None:
    """Why `config` cannot fit on its device, naming both figures; None when it may fit or when
    either figure is unknown (then the worker's own OOM handling is the guard)."""
    free = free_memory(config, inventory)
    if free is None:
        return None
    try:
        floor = memory_floor_of(config)
    except (LookupError, ValueError, RuntimeError, NotImplementedError) as exc:
        # An unknown model (the worker reports it) or a model the meta-device trace cannot run:
        # measure without the guard, and say so.
        log.warning("memory guard off for %s: no memory floor (%s: %s)", config.key(), type(exc).__name__, exc)
        return None
    available, where = free
    if floor.total_bytes <= FREE_SHARE * available:
        return None
    return (f"needs at least {floor.total_bytes / GIB:.1f} GiB ({floor.describe()}) but {config.device} has "
            f"{available / GIB:.1f} GiB {where}; refused before allocating (the guard keeps "
            f"{100 * (1 - FREE_SHARE):.0f}% headroom)")
