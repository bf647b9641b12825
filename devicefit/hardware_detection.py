"""Spec 003's hardware detection API (`detect_available_hardware`, `HardwareDetector`) over
devicefit's own detection, benchmark_runners.hardware.detect_hardware.

Why a layer at all: the guide's callers ask questions the inventory answers only indirectly
(which torch device, given my order of preference and GPU index; what about CUDA). Every answer
here is read from one detected inventory, so it says the same as `devicefit detect`, the
selector and the API, and an absent platform keeps the detection's reason.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmark_runners import registry
from benchmark_runners.hardware import HardwareInventory, detect_hardware
from devicefit.errors import DevicefitError


class HardwareDetectionError(DevicefitError, ValueError):
    """A question about the hardware that cannot be answered as asked (unknown kind, no device)."""


class HardwareDetector:
    """One detection of this machine. `cache_file`: the detection cache to read and write
    (default: the data directory's hardware.json); `force_refresh` detects again instead of
    reading it; `probe` also measures each device's peaks (seconds; only predictions need it).
    `inventory`: a detection already made, used as it is."""

    def __init__(self, cache_file: str | Path | None = None, force_refresh: bool = False, probe: bool = False,
                 inventory: HardwareInventory | None = None):
        if inventory is None:
            cache = Path(cache_file).expanduser() if cache_file is not None else None
            inventory = detect_hardware(refresh=force_refresh, probe=probe, cache_path=cache)
        self.inventory = inventory

    def get_available_hardware(self) -> dict[str, bool]:
        """Per known kind, whether this machine has a usable device of it."""
        return {kind: self.inventory.platforms[kind].available for kind in registry.kind_names() if kind in self.inventory.platforms}

    def get_hardware_details(self) -> dict[str, dict[str, Any]]:
        """Per kind: availability, the reason when absent, the backend, devices and runtime details."""
        return {kind: info.to_json() for kind, info in self.inventory.platforms.items()}

    def get_cuda_details(self) -> dict[str, Any]:
        """CUDA as detected: available, device_count, each device (name, memory, compute
        capability, ...), the runtime and driver versions, and the reason when absent."""
        cuda = self.inventory.platforms["cuda"]
        return {"available": cuda.available, "device_count": len(cuda.devices), "devices": cuda.devices,
                "reason": cuda.reason, **cuda.details}

    def get_torch_device(self) -> str:
        """The first accelerator torch can place a model on, else the CPU (the inventory's answer)."""
        return self.inventory.torch_device()

    def get_torch_device_with_priority(self, priority_list: list[str] | None = None, preferred_index: int = 0) -> str:
        """The torch device of the first kind in `priority_list` this machine has (default: the
        registry's accelerators, then the CPU). For kinds with several devices, device
        `preferred_index` when it exists, else the first one, as the guide's "use second GPU
        if available" means. Kinds torch cannot place a model on directly (openvino, webnn,
        ...) are refused, and so is a list none of whose kinds is present, with the reasons:
        nothing is substituted silently."""
        torch_kinds = registry.torch_kinds()
        if priority_list is None:
            priority_list = [k for k in torch_kinds if k != "cpu"] + ["cpu"]
        if isinstance(priority_list, str):
            priority_list = [priority_list]
        if not isinstance(preferred_index, int) or preferred_index < 0:
            raise HardwareDetectionError(f"preferred_index must be a device index >= 0, got {preferred_index!r}")
        wrong = [k for k in priority_list if k not in torch_kinds]
        if wrong:
            raise HardwareDetectionError(f"not a kind torch places models on: {', '.join(map(str, wrong))}; "
                                         f"torch kinds: {', '.join(torch_kinds)}")
        reasons = []
        for kind in priority_list:
            info = self.inventory.platforms.get(kind)
            if info is None or not info.available or not info.devices:
                reasons.append(f"{kind}: {info.reason if info else 'not detected'}")
                continue
            devices = info.devices
            device = devices[preferred_index] if preferred_index < len(devices) else devices[0]
            return registry.kind(kind).device_id(device)
        raise HardwareDetectionError(f"none of {', '.join(priority_list)} is present: {'; '.join(reasons)}")


def detect_available_hardware(cache_file: str | Path | None = None, force_refresh: bool = False) -> dict[str, Any]:
    """Spec 003's one-call detection: `hardware` (kind -> available), `details` (per kind, as
    `HardwareDetector.get_hardware_details`), `reasons` for absent kinds, and `torch_device`, the
    device a torch model goes on by default here."""
    detector = HardwareDetector(cache_file, force_refresh)
    details = detector.get_hardware_details()
    return {"hardware": detector.get_available_hardware(), "details": details,
            "reasons": {kind: d["reason"] for kind, d in details.items() if d["reason"]},
            "torch_device": detector.get_torch_device(), "detected_at": detector.inventory.detected_at}
