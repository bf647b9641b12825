"""The fleet as an inventory: the store's registered devices in the shape a host's detection has.

The compatibility matrix and the selection map answer for the fleet, not for the host that
happens to build them: a kind is available when a device of it is registered (a GPU box's CUDA
device is available although the Dagster host has no GPU), and its memory and probe are that
device's. Per kind one device represents it where the documents have one entry per kind: the
building host's own device when it is registered (its rows are the ones measured beside the
rest), else the first registered device as it is (no constraint profile), else the first one.
Every registered id stays listed under its kind."""
from __future__ import annotations

from typing import Any

from benchmark_runners import registry

UNREGISTERED = "no registered device of this kind (a worker on its host registers it: devicefit worker --device ID)"


def _representative(devices: list[dict[str, Any]], local_host: str | None, local_hardware: frozenset[str] = frozenset()) -> dict[str, Any]:
    def rank(d: dict[str, Any]) -> tuple[int, int, int, str]:
        plain = not any((d.get("profile") or {}).values())
        # two GPUs behind one host CPU fingerprint (two cloud boxes): this machine's own card first
        return (0 if plain and local_host and d.get("host_fingerprint") == local_host else 1,
                0 if d.get("hardware_fingerprint") in local_hardware else 1, 0 if plain else 1, d["id"])

    return min(devices, key=rank)


def fleet_inventory(devices: list[dict[str, Any]], local_host: str | None = None,
                    local_hardware: frozenset[str] = frozenset()) -> dict[str, Any]:
    """An inventory document (platforms, probes) of the registered `devices` (store.devices);
    `local_host`: the building host's CPU fingerprint, whose devices represent their kinds;
    `local_hardware`: its devices' own fingerprints (partitions.hardware_of_inventory)."""
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for d in devices:
        by_kind.setdefault(d["kind"], []).append(d)
    platforms: dict[str, Any] = {}
    probes: dict[str, Any] = {}
    for kind in registry.kind_names():
        mine = by_kind.get(kind) or []
        if not mine:
            platforms[kind] = {"kind": kind, "available": False, "reason": UNREGISTERED, "devices": [], "registered": []}
            continue
        rep = _representative(mine, local_host, local_hardware)
        described = {"name": rep.get("name"), **(rep.get("details") or {}), "fingerprint": rep["hardware_fingerprint"],
                     "device_id": rep["id"], "hostname": rep.get("hostname")}
        platforms[kind] = {"kind": kind, "available": True, "reason": None, "devices": [described],
                           "registered": sorted(d["id"] for d in mine)}
        if isinstance(rep.get("probe"), dict) and registry.kind(kind).probed:
            device = registry.kind(kind).device_id({**described, "index": 0})
            probes[device] = {**rep["probe"], "fingerprint": rep["id"]}
    return {"hostname": None, "source": "registered devices", "platforms": platforms, "probes": probes}


def read_fleet_inventory(con, local_host: str | None = None, local_hardware: frozenset[str] = frozenset()) -> dict[str, Any]:
    """`fleet_inventory` of the store's registered devices (an open connection)."""
    from devicefit import store

    return fleet_inventory(store.devices(con), local_host, local_hardware)


def this_machine() -> tuple[str | None, frozenset[str]]:
    """The building host's CPU fingerprint and its devices' own fingerprints (from its cached
    detection, read once, no probe): which of the registered devices represent their kinds when
    several do (of two GPUs behind one host CPU fingerprint, its own); nothing else is read."""
    from benchmark_runners.hardware import detect_hardware
    from devicefit.fleet.partitions import hardware_of_inventory, host_of_inventory

    inventory = detect_hardware(probe=False).to_json()
    return host_of_inventory(inventory), hardware_of_inventory(inventory)


def registered_devices(database, log=None) -> list[dict[str, Any]]:
    """The fleet's registered devices from the store at `database`, read-only; none when the
    store is absent or cannot be read now (another process holds its write lock, an older
    schema): said through `log`, and the caller goes on with this host's devices."""
    from pathlib import Path

    import duckdb

    from devicefit import store
    from devicefit.errors import DevicefitError

    if not Path(database).exists():
        return []
    try:
        with store.opened(database, read_only=True) as con:
            return store.devices(con)
    except (DevicefitError, duckdb.Error, OSError) as exc:
        if log is not None:
            log.warning(f"registered devices not read ({type(exc).__name__}: {exc}); going on with this host's devices only")
        return []
