"""The store's registered devices (the fleet): register or refresh one, list them, and register
the devices that loaded rows were measured on (a landing file or an ingested one brings its
devices with it, so every device with a row in the store is a registered device)."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any, NamedTuple

from devicefit.store.connection import transaction
from devicefit.store.queries import query

_COLUMNS = ("id", "kind", "name", "hostname", "host_fingerprint", "hardware_fingerprint", "profile", "details", "probe",
            "registered_at")


def row_device_id(hardware_fingerprint: str | None, profile: str | None) -> str | None:
    """The registered device a row ran on (devicefit.fleet.devices.device_id's form)."""
    if not hardware_fingerprint:
        return None
    return f"{hardware_fingerprint}+{profile}" if profile else hardware_fingerprint


def document_probes(hardware: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A document's probes by fingerprint, each stamped with when its detection ran (the hardware
    block's `detected_at`), so that a store can tell an older probe from a newer one."""
    stamp = hardware.get("detected_at")
    return {p.get("fingerprint"): ({"detected_at": stamp, **p} if stamp else p)
            for p in (hardware.get("probes") or {}).values() if isinstance(p, dict)}


# How far past this machine's clock a probe's stamp may lie and still be when it ran (two
# machines' clocks differ, a zone written wrong is hours off). A stamp past it is no time: a
# foreign file's probe stamped 9999-01-01 otherwise stayed the device's probe for good, newer
# than every probe measured after it.
PROBE_CLOCK_TOLERANCE = timedelta(days=1)


def kept_probe(held: Any, new: Any, now: datetime | None = None) -> Any:
    """The probe a store keeps for a device that holds `held` when a document brings `new`,
    whatever order documents are ingested in (ProbeRank, compared in this order): first a probe
    whose stamp can be believed over one stamped more than PROBE_CLOCK_TOLERANCE past `now`
    (naive UTC; default this moment), whatever either's contention, since such a stamp says the
    probe is not what it claims; then an undisturbed probe over a disturbed one (or none); then
    the later by its detection time (`document_probes`'s stamp, naive times read as UTC), a
    stamped probe over one without a readable time (stored before probes were stamped). A tie
    goes to `new`, as a probe measured again replaces the one before."""
    if not isinstance(held, dict):
        return new
    if not isinstance(new, dict):
        return held
    now = _utc_now() if now is None else now
    return held if probe_rank(new, now) < probe_rank(held, now) else new


class ProbeRank(NamedTuple):
    """What kept_probe compares a probe by, most telling first (the larger tuple is kept)."""
    believable: bool  # not stamped past the clock's tolerance (a probe without a stamp claims no time)
    undisturbed: bool  # not measured beside a busy neighbour (its `contended`)
    stamped: bool  # its stamp is readable and believable
    at: datetime  # when it ran; datetime.min where not stamped


def probe_rank(probe: dict[str, Any], now: datetime) -> ProbeRank:
    """`probe`'s standing against another probe of its device, by `now` (naive UTC)."""
    at, trusted = _probed_at(probe), _trusted_time(probe, now)
    return ProbeRank(believable=at is None or trusted is not None, undisturbed=not probe.get("contended"),
                     stamped=trusted is not None, at=trusted or datetime.min)


def future_stamped(hardware: dict[str, Any], now: datetime | None = None) -> dict[str, str]:
    """The probes of a document's hardware block stamped past this clock's tolerance, by
    fingerprint, with their stamp: kept_probe keeps none of them over a probe stamped believably
    or not stamped, whatever either's contention."""
    now = _utc_now() if now is None else now
    return {str(fp): str(p["detected_at"]) for fp, p in document_probes(hardware).items()
            if _probed_at(p) is not None and _trusted_time(p, now) is None}


def _utc_now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def _trusted_time(probe: dict[str, Any], now: datetime) -> datetime | None:
    """When the probe ran, if its stamp says so readably and not past `now`'s tolerance."""
    at = _probed_at(probe)
    return at if at is not None and at <= now + PROBE_CLOCK_TOLERANCE else None


def _probed_at(probe: dict[str, Any]) -> datetime | None:
    from devicefit.landing_schema import parse_timestamp

    try:
        return parse_timestamp(probe["detected_at"])
    except (KeyError, TypeError, ValueError):
        return None


def _upsert(con, device: dict[str, Any], now: datetime) -> bool:
    """Insert or refresh, inside the caller's transaction. True when the device was new."""
    values = [device[c] if c not in ("profile", "details", "probe") or device[c] is None else json.dumps(device[c])
              for c in _COLUMNS[:-1]]
    registered = datetime.fromisoformat(device["registered_at"]).replace(tzinfo=None) if device.get("registered_at") else now
    new = not con.execute("SELECT count(*) FROM devices WHERE id = ?", [device["id"]]).fetchone()[0]
    if new:
        con.execute(f"INSERT INTO devices ({', '.join(_COLUMNS)}, last_seen) VALUES ({', '.join('?' * (len(_COLUMNS) + 1))})",
                    [*values, registered, now])
    else:
        held = con.execute("SELECT probe FROM devices WHERE id = ?", [device["id"]]).fetchone()[0]
        old = json.loads(held) if held else None
        if old is not None and kept_probe(old, device.get("probe"), now) is old:
            values[-1] = None  # coalesce keeps the held probe
        con.execute("UPDATE devices SET kind = ?, name = coalesce(?, name), hostname = coalesce(?, hostname), "
                    "host_fingerprint = coalesce(?, host_fingerprint), hardware_fingerprint = ?, profile = ?, "
                    "details = coalesce(?, details), probe = coalesce(?, probe), last_seen = ? WHERE id = ?",
                    [*values[1:], now, device["id"]])
    return new


def register_device(con, device: dict[str, Any]) -> bool:
    """Insert the device, or refresh a registered one (its description, probe and last_seen; its
    first registration time stays). Returns True when it was new."""
    with transaction(con, "register a device in"):
        return _upsert(con, device, datetime.now(timezone.utc).replace(tzinfo=None))


def measured_devices(rows: list[Any], document: dict[str, Any], host: str | None) -> list[dict[str, Any]]:
    """The devices `rows` (BenchmarkResults of one landing document) were measured on, as device
    records: kind, name and fingerprint from the rows, the host from the document, the
    description and probe from its hardware block (a profiled device's probe is the one taken
    under its profile, recorded under its device id; never the unconstrained one)."""
    from devicefit.fleet.constraints import ConstraintProfile

    hardware = document.get("hardware") or {}
    described = {d.get("fingerprint"): d for info in (hardware.get("platforms") or {}).values()
                 for d in (info.get("devices") or []) if isinstance(d, dict)}
    probes = document_probes(hardware)
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        device_id = row_device_id(r.hardware_fingerprint, r.device_profile)
        if device_id is None or device_id in out:
            continue
        profile = ConstraintProfile.parse_slug(r.device_profile or "")
        details = {k: v for k, v in (described.get(r.hardware_fingerprint) or {}).items()
                   if k not in ("memory_available_bytes", "fingerprint")} or None
        out[device_id] = {
            "id": device_id, "kind": r.device.split(":")[0], "name": r.device_name or r.device,
            "hostname": hardware.get("hostname") or (r.environment or {}).get("hostname"), "host_fingerprint": host,
            "hardware_fingerprint": r.hardware_fingerprint, "profile": profile.to_json(), "details": details,
            # Its own probe only: a profiled device's is recorded under its device id.
            "probe": probes.get(device_id),
        }
    return list(out.values())


def register_measured(con, rows: list[Any], document: dict[str, Any], host: str | None, now: datetime) -> int:
    """Register (or refresh) the devices of a document's rows, inside the caller's transaction.
    Returns how many were new."""
    return sum(_upsert(con, device, now) for device in measured_devices(rows, document, host))


def devices(con, kind: str | None = None) -> list[dict[str, Any]]:
    rows = query(con, "SELECT * FROM devices" + (" WHERE kind = ?" if kind else "") + " ORDER BY kind, id", [kind] if kind else [])
    for r in rows:
        for c in ("profile", "details", "probe"):
            r[c] = json.loads(r[c]) if isinstance(r[c], str) else r[c]
    return rows
