"""The compatibility matrix, derived from measured statuses (spec 002's JSON shape).

Each family x hardware entry says where its verdict comes from: `measured` (rows exist),
`declared_unmeasured` (a devicefit backend supports the kind, but nothing was measured yet), or
`no_backend` (nothing here can measure it). A skip because hardware was absent is not evidence.
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from benchmark_runners import registry
from devicefit import store
from devicefit.contracts import COMPATIBILITY_MATRIX_FORMAT
from devicefit.fleet.partitions import host_of_inventory
from models.catalog import FAMILIES

# Median achieved fraction of the device's probed fp32 matmul peak, as spec 002's rating.
RATING_THRESHOLDS = ((0.5, "high"), (0.15, "medium"), (0.0, "low"))


def performance_ratings(con, inventory: dict[str, Any] | None) -> dict[tuple[str, str], dict[str, Any]]:
    """(family, kind) -> rating from this machine's measured fp32 inference efficiency against
    its probe: rows of another host (a store holding the Xeon's landing files beside the EPYC's),
    or of a constraint profile, are not divided by this machine's peak (the Xeon's rows read 98%
    of the EPYC's peak and 49% of their own, and the two machines' rows were one median). Kinds
    without a probe here get no rating."""
    probes = (inventory or {}).get("probes") or {}
    here = host_of_inventory(inventory or {})
    peaks = {registry.kind_of_device(d): p.get("matmul_gflops_best")
             for d, p in probes.items() if isinstance(p, dict) and p.get("matmul_gflops_best")}
    from devicefit.predict.hardware_specs import runs_on_cpu

    for kind, info in ((inventory or {}).get("platforms") or {}).items():  # wasm, software WebGPU: rated against the CPU they run on
        devices = info.get("devices") or [{}]
        if "cpu" in peaks and kind not in peaks and runs_on_cpu(kind, bool(devices[0].get("software"))):
            peaks[kind] = peaks["cpu"]
    efficiencies: dict[tuple[str, str], list[float]] = {}
    for r in store.fp32_inference_gflops(con):
        if r["device_kind"] in peaks and here is not None and r["host_fingerprint"] == here and not r["device_profile"]:
            efficiencies.setdefault((r["family"], r["device_kind"]), []).append(r["gflops"] / peaks[r["device_kind"]])
    out = {}
    for key, values in efficiencies.items():
        median = sorted(values)[len(values) // 2]
        rating = next(label for bound, label in RATING_THRESHOLDS if median >= bound)
        out[key] = {"performance_rating": rating,
                    "performance_basis": f"median fp32 inference reaches {median:.0%} of the probed {peaks[key[1]]:.0f} GFLOP/s "
                                         f"over {len(values)} rows measured on this machine ({here})"}
    return out


def compatibility_matrix(con, inventory: dict[str, Any] | None = None) -> dict[str, Any]:
    rows = store.status_by_family_and_kind(con)
    ratings = performance_ratings(con, inventory)
    platforms = (inventory or {}).get("platforms", {})
    families: dict[str, Any] = {}
    for family in FAMILIES:
        compat: dict[str, Any] = {}
        for kind in registry.kind_names():
            mine = [r for r in rows if r["family"] == family and r["device_kind"] == kind]
            precisions: dict[str, dict[str, int]] = {}
            for r in mine:
                precisions.setdefault(r["precision"], {"ok": 0, "failed": 0, "skipped": 0})[r["status"]] = r["n"]
            ok = sum(r["n"] for r in mine if r["status"] == "ok")
            failed = sum(r["n"] for r in mine if r["status"] == "failed")
            platform = platforms.get(kind, {})
            entry: dict[str, Any] = {"available": platform.get("available"), "registered_devices": platform.get("registered") or []}
            if ok or failed:
                entry.update(compatible=ok > 0, source="measured",
                             models_measured=sorted({m for r in mine if r["status"] == "ok" for m in r["models"]}),
                             precisions=precisions)
                reasons = sorted({x for r in mine for x in (r["reasons"] or []) if x})
                if reasons:
                    entry["reasons"] = reasons[:10]
            elif registry.declared_backend(kind):
                entry.update(compatible=True, source="declared_unmeasured",
                             declared_by=f"the {registry.declared_backend(kind)} backend supports {kind}; no measurement yet")
            else:
                entry.update(compatible=None, source="no_backend",
                             reason=platforms.get(kind, {}).get("reason") or f"devicefit has no backend that measures {kind}")
            entry.update(ratings.get((family, kind), {"performance_rating": None,
                                                      "performance_basis": "no fp32 inference measured against a probe here"}))
            compat[kind] = entry
        families[family] = {"hardware_compatibility": compat}
    return {
        "format": COMPATIBILITY_MATRIX_FORMAT,
        "timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "hardware_types": list(registry.kind_names()),
        "model_families": families,
    }


def summary_rows(matrix: dict[str, Any]) -> list[dict[str, str]]:
    """One row per family, one column per hardware kind: "yes (measured)", "- (no_backend)", ..."""
    def cell(entry: dict[str, Any]) -> str:
        verdict = {True: "yes", False: "no", None: "-"}[entry["compatible"]]
        return f"{verdict} ({entry['source']})"

    return [{"family": family, **{kind: cell(e) for kind, e in v["hardware_compatibility"].items()}}
            for family, v in matrix["model_families"].items()]


# The matrix as a table, one row per family x hardware kind: the compatibility_matrix asset's
# value, stored in the store and handed to the selection map. The nested JSON is the product.
TABLE_SCHEMA = {"family": "String", "device_kind": "String", "compatible": "Boolean", "source": "String",
                "available": "Boolean", "registered_devices": "List(String)", "models_measured": "List(String)", "reasons": "List(String)",
                "performance_rating": "String", "performance_basis": "String"}


def table_rows(matrix: dict[str, Any]) -> list[dict[str, Any]]:
    """Each family x kind entry flattened; a no_backend entry's one reason is its `reasons`."""
    return [{"family": family, "device_kind": kind, "compatible": e["compatible"], "source": e["source"],
             "available": e.get("available"), "registered_devices": e.get("registered_devices") or [], "models_measured": e.get("models_measured") or [],
             "reasons": e.get("reasons") or ([e["reason"]] if e.get("reason") else []),
             "performance_rating": e.get("performance_rating"), "performance_basis": e.get("performance_basis")}
            for family, v in matrix["model_families"].items() for kind, e in v["hardware_compatibility"].items()]


def table_frame(matrix: dict[str, Any]):
    """`table_rows` as a polars frame with fixed column types (a column of None stays typed)."""
    import polars as pl

    types = {"String": pl.String, "Boolean": pl.Boolean, "List(String)": pl.List(pl.String)}
    return pl.DataFrame(table_rows(matrix), schema={c: types[t] for c, t in TABLE_SCHEMA.items()})


def matrix_of_rows(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What the selector reads of the matrix (family -> kind -> entry), back from table rows."""
    families: dict[str, Any] = {}
    for r in rows:
        entry = {k: r[k] for k in ("compatible", "source", "available", "models_measured", "performance_rating")}
        entry["reasons"] = list(r["reasons"] or [])
        entry["registered_devices"] = list(r.get("registered_devices") or [])
        families.setdefault(r["family"], {"hardware_compatibility": {}})["hardware_compatibility"][r["device_kind"]] = entry
    return {"model_families": families}
