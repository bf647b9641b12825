"""A profiled device's own probe, measured once per detection and kept beside the data.

A device under a constraint profile has its own peaks (one thread: about half the GFLOP/s and
bandwidth; an AVX2 cap: no AVX-512 FMA), so the predictors must see the profile's probe, not the
CPU's. Probing takes a fresh process and seconds of full load, so the figure is cached per device
id under the data directory, valid while the host's detection is (same boot, same detection
time: `devicefit detect --refresh` re-probes both). A probe taken while other processes used the
CPU is returned but never cached, as the host's own probe is not."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from devicefit.fleet.devices import local_device, probe_under
from devicefit.fleet.partitions import LocalTarget
from devicefit.results_io import write_json_atomic


def cache_path(data_root: Path, device_id: str) -> Path:
    return Path(data_root) / "devices" / f"{re.sub(r'[^A-Za-z0-9._+-]+', '_', device_id)}.probe.json"


def profile_probe(target: LocalTarget, hardware: dict[str, Any], data_root: Path) -> dict[str, Any]:
    """The probe of `target` under its profile (keyed by its device id, as landing documents
    carry it); from the cache when the same detection made it."""
    stamp = {"detected_at": hardware.get("detected_at"), "boot_id": hardware.get("boot_id")}
    path = cache_path(data_root, target.device_id)
    try:
        cached = json.loads(path.read_text())
        if isinstance(cached, dict) and cached.get("stamp") == stamp and isinstance(cached.get("probe"), dict):
            return cached["probe"]
    except (OSError, ValueError):
        pass  # no cache, or an unreadable one: probe again
    device = local_device(target.kind, hardware, target.profile, target.index)
    probe = {**probe_under(device, target.index), "fingerprint": target.device_id}
    if not probe.get("contended"):
        write_json_atomic(path, {"device_id": target.device_id, "stamp": stamp, "probe": probe})
    return probe
