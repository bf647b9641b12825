"""The compatibility matrix, derived from measured statuses (spec 002's JSON shape).

Each family x hardware entry says where its verdict comes from: `measured` (rows exist),
`declared_unmeasured` (a devicefit backend supports the kind, but nothing was measured yet), or
`no_backend` (nothing here can measure it). A skip because hardware was absent is not evidence.
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from benchmark_runners.hardware.platforms import HARDWARE_KINDS
from devicefit import store
from models.catalog import FAMILIES

BACKEND_KINDS = {"cpu": "torch", "cuda": "torch", "mps": "torch", "rocm": "torch (as cuda)"}


def compatibility_matrix(con, inventory: dict[str, Any] | None = None) -> dict[str, Any]:
    rows = store.status_by_family_and_kind(con)
    platforms = (inventory or {}).get("platforms", {})
    families: dict[str, Any] = {}
    for family in FAMILIES:
        compat: dict[str, Any] = {}
        for kind in HARDWARE_KINDS:
            mine = [r for r in rows if r["family"] == family and r["device_kind"] == kind]
            precisions: dict[str, dict[str, int]] = {}
            for r in mine:
                precisions.setdefault(r["precision"], {"ok": 0, "failed": 0, "skipped": 0})[r["status"]] = r["n"]
            ok = sum(r["n"] for r in mine if r["status"] == "ok")
            failed = sum(r["n"] for r in mine if r["status"] == "failed")
            available = platforms.get(kind, {}).get("available")
            entry: dict[str, Any] = {"available_here": available}
            if ok or failed:
                entry.update(compatible=ok > 0, source="measured",
                             models_measured=sorted({m for r in mine if r["status"] == "ok" for m in r["models"]}),
                             precisions=precisions)
                reasons = sorted({x for r in mine for x in (r["reasons"] or []) if x})
                if reasons:
                    entry["reasons"] = reasons[:10]
            elif kind in BACKEND_KINDS:
                entry.update(compatible=True, source="declared_unmeasured",
                             declared_by=f"the {BACKEND_KINDS[kind]} backend supports {kind}; no measurement yet")
            else:
                entry.update(compatible=None, source="no_backend",
                             reason=platforms.get(kind, {}).get("reason") or f"devicefit has no backend that measures {kind}")
            compat[kind] = entry
        families[family] = {"hardware_compatibility": compat}
    return {
        "timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "hardware_types": list(HARDWARE_KINDS),
        "model_families": families,
    }


def summary_rows(matrix: dict[str, Any]) -> list[dict[str, str]]:
    """One row per family, one column per hardware kind: "yes (measured)", "- (no_backend)", ..."""
    def cell(entry: dict[str, Any]) -> str:
        verdict = {True: "yes", False: "no", None: "-"}[entry["compatible"]]
        return f"{verdict} ({entry['source']})"

    return [{"family": family, **{kind: cell(e) for kind, e in v["hardware_compatibility"].items()}}
            for family, v in matrix["model_families"].items()]
