"""Devices as entities: what a measurement ran on, with a stable id.

A device is a physical device (its hardware fingerprint: a hash of the stable attributes the
detection reads, so the same CPU model on two hosts of the same make is one hardware entry), on
a host, used under a constraint profile. Its id is the fingerprint plus the profile's slug
(`cpu-e1d9c1f8fde0`, `cpu-e1d9c1f8fde0+t1`, `cpu-e1d9c1f8fde0+t2-avx2`): stable across runs and
reboots, different for every profile, and equal to the fingerprint the store already records
on every measured row when no profile applies, so rows measured before keep their device."""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from benchmark_runners import registry
from devicefit.errors import DevicefitError
from devicefit.fleet.constraints import ConstraintProfile

PROBE_TIMEOUT_S = 120.0


class DeviceUnavailable(DevicefitError, LookupError):
    """The device asked for is not on this host (with the detection's reason)."""


class ProbeFailed(DevicefitError, RuntimeError):
    exit_code = 1


def device_id(hardware_fingerprint: str, profile: ConstraintProfile) -> str:
    slug = profile.slug()
    return f"{hardware_fingerprint}+{slug}" if slug else hardware_fingerprint


@dataclass
class Device:
    id: str
    kind: str
    name: str
    hostname: str
    host_fingerprint: str  # the host's CPU fingerprint: how measured rows name their host
    hardware_fingerprint: str
    profile: ConstraintProfile = field(default_factory=ConstraintProfile)
    details: dict[str, Any] = field(default_factory=dict)  # the detection's description (cores, ISA, memory, driver)
    probe: dict[str, Any] | None = None  # measured under the profile
    registered_at: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "name": self.name, "hostname": self.hostname,
                "host_fingerprint": self.host_fingerprint, "hardware_fingerprint": self.hardware_fingerprint,
                "profile": self.profile.to_json(), "details": self.details, "probe": self.probe,
                "registered_at": self.registered_at}


def local_device(kind: str, inventory: dict[str, Any], profile: ConstraintProfile | None = None, index: int = 0) -> Device:
    """This host's device of `kind` (the `index`-th), under `profile`, from a detection's JSON."""
    registry.kind(kind)  # an unknown kind is refused by name
    profile = profile or ConstraintProfile()
    info = (inventory.get("platforms") or {}).get(kind) or {}
    devices = info.get("devices") or []
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise DeviceUnavailable(f"a device index is 0, 1, ...; got {index!r}")
    if not info.get("available") or index >= len(devices):
        raise DeviceUnavailable(f"no {kind} device {index} on this host: {info.get('reason') or 'not detected'}")
    dev = devices[index]
    profile.check_applies(kind, dev)
    cpu = ((inventory["platforms"].get("cpu") or {}).get("devices") or [{}])[0]
    stable = {k: v for k, v in dev.items() if k not in ("memory_available_bytes", "fingerprint")}
    return Device(id=device_id(dev["fingerprint"], profile), kind=kind, name=dev.get("name") or kind,
                  hostname=inventory.get("hostname") or platform.node(), host_fingerprint=cpu.get("fingerprint", ""),
                  hardware_fingerprint=dev["fingerprint"], profile=profile, details=stable,
                  registered_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))


def probe_under(device: Device, index: int = 0, timeout_s: float = PROBE_TIMEOUT_S) -> dict[str, Any]:
    """The device's peak GFLOP/s and bandwidth measured in a fresh process under its profile
    (an ISA cap is read at library load: it cannot be applied to this process). A device with no
    probe of its own (OpenVINO's CPU plugin) is probed on the CPU it runs on."""
    kind = registry.kind(device.kind)
    torch_device = kind.device_id({"index": index}) if kind.probed else "cpu"
    env = {**os.environ, **device.profile.env()}
    cmd = [sys.executable, "-m", "devicefit.fleet.probe_process", torch_device, str(device.profile.threads or "")]
    try:
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        raise ProbeFailed(f"probing {device.id} took over {timeout_s:.0f} s") from exc
    if out.returncode != 0:
        raise ProbeFailed(f"probing {device.id} failed (exit {out.returncode}): {out.stderr.strip()[-500:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])
