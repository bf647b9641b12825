"""The store's registered devices (the fleet): register or refresh one, list them."""
from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from devicefit.store.connection import transaction
from devicefit.store.queries import query

_COLUMNS = ("id", "kind", "name", "hostname", "host_fingerprint", "hardware_fingerprint", "profile", "details", "probe",
            "registered_at")


def register_device(con, device: dict[str, Any]) -> bool:
    """Insert the device, or refresh a registered one (its description, probe and last_seen; its
    first registration time stays). Returns True when it was new."""
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    values = [device[c] if c not in ("profile", "details", "probe") or device[c] is None else json.dumps(device[c])
              for c in _COLUMNS[:-1]]
    registered = datetime.fromisoformat(device["registered_at"]).replace(tzinfo=None) if device.get("registered_at") else now
    with transaction(con, "register a device in"):
        new = not con.execute("SELECT count(*) FROM devices WHERE id = ?", [device["id"]]).fetchone()[0]
        if new:
            con.execute(f"INSERT INTO devices ({', '.join(_COLUMNS)}, last_seen) VALUES ({', '.join('?' * (len(_COLUMNS) + 1))})",
                        [*values, registered, now])
        else:
            con.execute("UPDATE devices SET kind = ?, name = ?, hostname = ?, host_fingerprint = ?, hardware_fingerprint = ?, "
                        "profile = ?, details = ?, probe = coalesce(?, probe), last_seen = ? WHERE id = ?",
                        [*values[1:], now, device["id"]])
    return new


def devices(con, kind: str | None = None) -> list[dict[str, Any]]:
    rows = query(con, "SELECT * FROM devices" + (" WHERE kind = ?" if kind else "") + " ORDER BY kind, id", [kind] if kind else [])
    for r in rows:
        for c in ("profile", "details", "probe"):
            r[c] = json.loads(r[c]) if isinstance(r[c], str) else r[c]
    return rows
