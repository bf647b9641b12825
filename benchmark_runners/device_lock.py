"""One benchmark per physical device on this machine, whatever started it.

Dagster's run queue keeps queued runs apart (the `devicefit/device` tag limit), but `devicefit
run`, `dagster asset materialize` in CI and `devicefit benchmark` execute outside the queue. So
every sweep holds an exclusive lock per physical device it measures on (OpenVINO's CPU plugin
holds the CPU's), an `flock` on a file in a machine-wide directory: the kernel releases it when
its holder dies, so a killed run never blocks the next one, and nothing has to be reaped.

Locks are re-entrant within a process (`devicefit run` holds them across its partitions, each
partition's sweep takes them again). A waiter says who holds the device and since when, and
gives up after a bound with `DeviceBusy`, never waiting forever."""
from __future__ import annotations

from benchmark_runners import registry
from benchmark_runners.lock_files import (  # noqa: F401 - device_lock is where callers take them from
    DEFAULT_WAIT_S,
    POLL_S,
    BadLockDir,
    BadWaitBound,
    DeviceBusy,
    busy_elsewhere,
    hold_devices,
    lock_dir,
    lock_name,
    wait_bound_env,
    wait_bound_s,
)


def physical_device(device: str) -> str:
    """The lock name of a config's device: "cpu" and "openvino:CPU" -> "cpu", "cuda" and
    "cuda:0" -> "cuda-0", "cuda:1" -> "cuda-1"."""
    return lock_name(device, software=_is_software(device.partition(":")[0]))


def _is_software(kind: str) -> bool:
    """Whether this host's detection found `kind`'s device to be software (WebGPU on SwiftShader),
    for kinds that can be; read from the cached detection."""
    if kind not in registry.kinds() or registry.kind(kind).software_runs_on is None:
        return False
    from benchmark_runners.hardware import detect_hardware

    devices = detect_hardware(probe=False).platforms.get(kind)
    return bool(devices and devices.devices and devices.devices[0].get("software"))
