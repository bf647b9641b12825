"""The hardware inventory: detected platforms, a stable fingerprint per device, and probe
figures, cached in data/hardware.json until an explicit refresh, a reboot, or (for the probe
figures) PROBE_MAX_AGE_S.

Why the probe ages out: a cache lived until the next reboot, so a lab server's nightly sweep
scored every row for weeks against one probe, and the probe most likely to be disturbed is the
one taken at boot. On the 2-vCPU Zen 4 EPYC (cpu-b203dd7cc145) the probe cached minutes after
boot read 111.6 fp32 / 8.0 bf16 GFLOP/s, and 158-199 / 218-355 idle four hours later, with no
other process's CPU time or steal for the contention check to see. Re-probing once per nightly
sweep costs about two seconds."""
from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import re
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmark_runners import registry
from benchmark_runners.hardware.platforms import PlatformInfo, detect_platforms
from benchmark_runners.hardware.probe import probe_device
from benchmark_runners.paths import hardware_cache_path

log = logging.getLogger("devicefit.hardware")

# 2: the fingerprints of devices on the host's CPU are qualified by it (host_qualified);
# 3: a CPU the process may use only part of (cpuset, CFS quota) has `usable_cpus` in its fingerprint.
CACHE_SCHEMA = 3
# A cached probe older than this is taken again by the callers that measure; 12 h
# means the nightly schedule (every 24 h) re-probes on its first partition and reuses that probe
# for the rest of the night.
PROBE_MAX_AGE_S = 12 * 3600.0
# Device attributes that identify hardware; anything volatile (free memory) stays out.
_STABLE_KEYS = ("name", "vendor", "architecture", "physical_cores", "logical_cores", "isa_flags",
                "memory_total_bytes", "compute_capability", "multiprocessors", "gcn_arch", "usable_cpus")


def device_fingerprint(kind: str, device: dict[str, Any]) -> str:
    stable = {k: device.get(k) for k in _STABLE_KEYS if device.get(k) is not None}
    if "memory_total_bytes" in stable:  # the kernel's view of RAM moves by a few MiB between boots
        stable["memory_total_bytes"] = round(stable["memory_total_bytes"] / 2**30)
    digest = hashlib.sha256(json.dumps([kind, stable], sort_keys=True).encode()).hexdigest()
    return f"{kind}-{digest[:12]}"


# A fingerprint as device_fingerprint writes it; one qualified by its host has a second group.
# FINGERPRINT is the shape every reader of a device id accepts (landing files' device records,
# --hardware): either form.
_PLAIN_FINGERPRINT = re.compile(r"[a-z0-9_]+-[0-9a-f]{12}")
FINGERPRINT = r"[a-z][a-z0-9_]{0,31}-[0-9a-f]{6,64}(?:-[0-9a-f]{6,64})?"


def host_qualified(fingerprint: str | None, host: str | None) -> str | None:
    """The fingerprint of a device that runs on the host's CPU (OpenVINO's CPU plugin, wasm,
    WebGPU on a software adapter), qualified by that CPU's: "openvino-4ebbcabb1705-b203dd7cc145".
    Such a device's own attributes say little (OpenVINO's CPU plugin is named "CPU" on every
    machine), so without the host an AMD EPYC's and a Xeon's OpenVINO were one device id: one
    fleet partition, one registered device, one baseline. A fingerprint already qualified, or
    without a host to qualify it by, is returned as it is."""
    if not isinstance(fingerprint, str) or not isinstance(host, str) or not host or not _PLAIN_FINGERPRINT.fullmatch(fingerprint):
        return fingerprint
    return f"{fingerprint}-{host.split('-', 1)[-1]}"


def unqualified(fingerprint: str) -> str | None:
    """The fingerprint a host-qualified one had before (host_qualified's input), or None for one
    that is not qualified: what files written before name the device by."""
    own, _, host = fingerprint.rpartition("-")
    return own if _PLAIN_FINGERPRINT.fullmatch(own) and re.fullmatch(r"[0-9a-f]{12}", host) else None


def qualify_host_runtimes(devices_by_kind: dict[str, list[Any]]) -> dict[str, str]:
    """Qualify, in place, the fingerprint of every device in `devices_by_kind` (kind -> device
    dicts, as detection and a landing file's hardware block hold them) that runs on the host's
    CPU by that CPU's fingerprint (host_qualified). Returns {old: new} for those it changed."""
    cpus = [d for d in devices_by_kind.get("cpu") or [] if isinstance(d, dict)]
    host = cpus[0].get("fingerprint") if cpus else None
    changed: dict[str, str] = {}
    for kind, devices in devices_by_kind.items():
        if kind == "cpu" or kind not in registry.kinds():
            continue
        for dev in devices or []:
            if not isinstance(dev, dict) or not dev.get("fingerprint"):
                continue
            software = bool(dev.get("software"))
            if registry.physical_kind(kind, software) != "cpu":
                continue  # a device of its own (a GPU, an NPU): its fingerprint is its own
            try:
                device = registry.kind(kind).device_id(dev)
            except (KeyError, IndexError, ValueError, TypeError, registry.DeviceRegistryError):
                continue  # a file's device that names no addressable device: left as it is
            if registry.runs_on_host_cpu(device, software):
                new = host_qualified(dev["fingerprint"], host)
                if new != dev["fingerprint"]:
                    changed[dev["fingerprint"]], dev["fingerprint"] = new, new
    return changed


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


@dataclass
class HardwareInventory:
    platforms: dict[str, PlatformInfo]
    probes: dict[str, dict[str, Any]] = field(default_factory=dict)  # device id ("cpu", "cuda:0") -> probe
    detected_at: str = ""
    boot_id: str | None = None
    from_cache: bool = False

    def available_kinds(self) -> list[str]:
        return [k for k in registry.kind_names() if k in self.platforms and self.platforms[k].available]

    def fingerprint(self, device: str = "cpu") -> str:
        kind, _, index = device.partition(":")
        info = self.platforms[kind]
        if not info.available or not info.devices:
            raise ValueError(f"no {kind} device here: {info.reason}")
        dev = info.devices[int(index or 0)]
        return dev["fingerprint"]

    def torch_device(self) -> str:
        """The first accelerator torch can place a model on, else the CPU."""
        for kind in registry.kinds().values():
            if kind.name != "cpu" and kind.probed and kind.torch_device and self.platforms.get(kind.name, PlatformInfo(kind.name, False)).available:
                return kind.torch_device
        return "cpu"

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": CACHE_SCHEMA,
            "detected_at": self.detected_at,
            "boot_id": self.boot_id,
            "hostname": platform.node(),
            "torch_device": self.torch_device(),
            "platforms": {k: v.to_json() for k, v in self.platforms.items()},
            "probes": self.probes,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "HardwareInventory":
        return cls(
            platforms={k: PlatformInfo(**v) for k, v in data["platforms"].items()},
            probes=data.get("probes", {}),
            detected_at=data.get("detected_at", ""),
            boot_id=data.get("boot_id"),
            from_cache=True,
        )


def _read_cache(path: Path) -> HardwareInventory | None:
    try:
        data = json.loads(path.read_text())
        if data.get("schema") != CACHE_SCHEMA or set(data["platforms"]) != set(registry.kind_names()):
            return None
        inventory = HardwareInventory.from_json(data)
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None  # a missing or corrupt cache (nested past the decoder too) is simply re-detected
    if inventory.boot_id != _boot_id():
        return None  # hardware changes need a reboot; a new boot re-detects
    if _budget_changed(inventory):
        return None  # written by a process with another CPU budget: its fingerprint and probe are not ours
    return inventory


def cached_inventory(cache_path: Path | None = None) -> HardwareInventory | None:
    """The cached detection as detect_hardware would take it (this boot's, this CPU budget's),
    without detecting anything where there is none: a caller that only asks whether a probe is
    cached (the API's cold start) does not start a browser or import OpenVINO to learn it."""
    return _read_cache(cache_path or hardware_cache_path())


def _budget_changed(inventory: HardwareInventory) -> bool:
    """Whether the cached CPU was detected under another CPU budget or memory limit than this
    process's (a container sharing the host's data directory and boot id, `taskset`, systemd's
    CPUQuota=): `usable_cpus` is part of the fingerprint, and the probe ran at the budget's threads."""
    from benchmark_runners.hardware.platforms import BUDGET_KEYS, budget_keys

    cpu = inventory.platforms.get("cpu")
    if cpu is None or not cpu.devices:
        return False
    device = cpu.devices[0]
    expected = budget_keys(device.get("memory_total_bytes") or 0)
    return any(device.get(k) != expected.get(k) for k in BUDGET_KEYS)


def _too_old(inventory: HardwareInventory, max_age_s: float | None) -> bool:
    if max_age_s is None:
        return False
    age = probe_age_s(inventory)
    return age is None or age > max_age_s or age < -300  # a stamp from the future: a clock set back


def _write_cache(path: Path, inventory: HardwareInventory) -> None:
    """Best effort: a cache that cannot be written (a full disk, a read-only data directory, a
    directory in its place) costs the next run a detection, not this one its result, and leaves
    no temporary file behind."""
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".hardware-", suffix=".json")
        with os.fdopen(fd, "w") as fh:
            json.dump(inventory.to_json(), fh, indent=2)
        os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        log.warning("hardware cache %s not written (%s: %s); the next run detects again", path, type(exc).__name__, exc)


def probe_age_s(inventory: HardwareInventory, now: datetime | None = None) -> float | None:
    """Seconds since the inventory was detected and probed; None when its stamp is missing or
    unreadable (such a cache counts as too old wherever the age matters)."""
    try:
        detected = datetime.fromisoformat(inventory.detected_at)
    except (TypeError, ValueError):
        return None
    if detected.tzinfo is None:
        detected = detected.replace(tzinfo=timezone.utc)
    return ((now or datetime.now(timezone.utc)) - detected).total_seconds()


def _measured_elsewhere(device: str, software: bool) -> str | None:
    """Why `device` is not probed now: another process holds its device lock (it is measuring,
    and seconds of matmul and copies beside it would disturb both); None when it is free or
    held by this process (`devicefit run` probes between its own sweeps)."""
    from benchmark_runners.lock_files import busy_elsewhere, lock_name
    from models.errors import DevicefitError

    try:
        busy = busy_elsewhere([lock_name(device, software)])
    except (OSError, ValueError, DevicefitError):  # no usable lock directory: the sweep reports it
        return None
    return f"not probed: another process is measuring on {busy[0]} (its device lock is held)" if busy else None


def detect_hardware(refresh: bool = False, probe: bool = True, cache_path: Path | None = None,
                    max_probe_age_s: float | None = None) -> HardwareInventory:
    """Detect (or read the cached) inventory. `refresh` re-detects and re-probes. Where `probe`
    is asked for, a cache probed more than `max_probe_age_s` ago is probed again: what measures
    (the measurements asset, `devicefit benchmark`) and `devicefit detect` pass PROBE_MAX_AGE_S;
    None (the default: predictions, the guide's classifier reading the cache it was given) takes
    the cache at any age, as do callers that only ask which devices exist (`probe=False`)."""
    path = cache_path or hardware_cache_path()
    cached = None if refresh else _read_cache(path)
    if cached is not None and not probe:
        return cached
    if cached is not None and cached.probes and not _too_old(cached, max_probe_age_s):
        return cached
    if cached is not None and not cached.probes:
        platforms = cached.platforms  # which devices exist is known (see _keep_platforms): only the probe is missing
    else:
        platforms = _detected_platforms()
    probes: dict[str, dict[str, Any]] = {}
    busy_devices: list[str] = []
    if probe:
        for kind in registry.probed_kinds():
            info = platforms[kind]
            if not info.available:
                continue
            for dev in info.devices:
                device = registry.kind(kind).device_id(dev)
                if (busy := _measured_elsewhere(device, bool(dev.get("software")))) is not None:  # its probe would disturb that measurement
                    earlier = _read_cache(path) or HardwareInventory({}, {})
                    previous = earlier.probes.get(device)
                    result = (dict(previous, reused=f"{busy}; the probe of {earlier.detected_at} is used")
                              if previous and "error" not in previous else {"device": device, "error": busy})
                    busy_devices.append(device)
                else:
                    try:
                        result = probe_device(device).to_json()
                    except Exception as exc:  # a probe failure is reported, not hidden
                        result = {"device": device, "error": f"{type(exc).__name__}: {exc}"}
                result["fingerprint"] = dev["fingerprint"]
                probes[device] = result
    inventory = HardwareInventory(
        platforms=platforms,
        probes=probes,
        detected_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        boot_id=_boot_id(),
    )
    if probe and not busy_devices and not any(p.get("contended") for p in probes.values()):
        _write_cache(path, inventory)  # a disturbed (or a skipped) probe is used once, never kept for the next run
    elif probe:
        _keep_platforms(path, inventory)
    return inventory


def _detected_platforms() -> dict[str, PlatformInfo]:
    platforms = detect_platforms()
    for kind, info in platforms.items():
        for dev in info.devices:
            dev["fingerprint"] = device_fingerprint(kind, dev)
    qualify_host_runtimes({kind: info.devices for kind, info in platforms.items()})
    return platforms


def _keep_platforms(path: Path, inventory: HardwareInventory) -> None:
    """Where no usable cache exists, cache which devices exist without a probe. A measuring
    process's probe that was disturbed or skipped would otherwise leave every later process
    that asks only which devices exist (a run's steps, its helpers, the API) to detect them
    again, each starting Chromium and importing OpenVINO (3.8 s of both cores on the 2-vCPU AVX2
    EPYC, beside whatever is being measured). Only what probes writes it, as it writes a probed
    cache: a detection that never asked for a probe (a script, the API, with an environment of
    its own) is not kept. A cache without probes is never taken as a probe: what measures probes
    on it, and only its platforms are reused then. Not kept: a detection in which a platform
    failed (a browser that timed out on a busy host may start next time); a cache of this boot
    that holds a probe taken earlier, another CPU budget's too (a `taskset` process beside the
    main one must not take its probe away)."""
    if any((info.reason or "").startswith("detection failed") for info in inventory.platforms.values()):
        return
    if not _holds_a_probe(path):
        _write_cache(path, HardwareInventory(inventory.platforms, {}, inventory.detected_at, inventory.boot_id))


def _holds_a_probe(path: Path) -> bool:
    """Whether `path` is a cache of this boot with a probe in it, whatever CPU budget wrote it."""
    try:
        data = json.loads(path.read_text())
        return data.get("schema") == CACHE_SCHEMA and data.get("boot_id") == _boot_id() and bool(data.get("probes"))
    except (OSError, ValueError, TypeError, AttributeError, RecursionError):
        return False
