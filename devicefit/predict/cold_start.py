"""Answers before any training run (cold start).

Until the pipeline has trained and published a predictor, every read path (predict, select,
map, analyze, the API) answers from the lower links of the fallback chain, which need no
measurement: this host's probe (its measured peak GFLOP/s and memory bandwidth) for the kinds
it has, the published datasheet figure for the kinds it lacks, and the per-operator roofline at
an assumed fraction of peak (`static_rule`, with its deliberately wide x/4 interval and the
reason in `detail`). The cold artifact has the shape of a trained one with nothing trained in it
(no boosters, no fits, no calibration), so devicefit.predict.predictor serves it unchanged and
the chain upgrades itself the moment a trained artifact is published. It is built in memory and
never saved: reports, the prediction matrix asset and validation read only trained artifacts."""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from benchmark_runners import registry
from devicefit.predict.hardware_specs import device_specs
from devicefit.predict.training import ARTIFACT_FORMAT

COLD_VERSION = "cold-start"
REASON = ("no trained predictor yet (run `make run` or `devicefit run` to measure and train): answers come from the roofline "
          "on this host's probe, or the published datasheet figure for hardware it lacks, at an assumed fraction of peak")


def cold_artifact(inventory: dict[str, Any]) -> dict[str, Any]:
    """A predictor artifact with no trained part: device specs only (`inventory`: a detection's
    JSON, with its probes where taken)."""
    specs = device_specs(inventory)
    return {
        "format": ARTIFACT_FORMAT, "version": COLD_VERSION, "cold_start": REASON,
        "trained_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "rows": 0, "models": [], "skipped": {}, "contended_rows_used": 0,
        "domain": {"device_kind": [], "device": [], "family": []}, "devices": {},
        "categories": {}, "numeric": [], "process_baseline": {}, "efficiency": {},
        "baseline": {"roofline": {}, "memory": {}}, "validation": None,
        "specs": {kind: vars(spec) for kind, spec in specs.items()},
        # why a kind of this host has no spec: its probe failed or was not taken (another process
        # was measuring on the device), said in the answer instead of "nothing to predict from"
        "unprobed": {registry.kind_of_device(device): probe["error"] for device, probe in (inventory.get("probes") or {}).items()
                     if isinstance(probe, dict) and "error" in probe and registry.kind_of_device(device) not in specs},
        "boosters": {},
    }


def is_cold(artifact: dict[str, Any]) -> bool:
    return artifact.get("version") == COLD_VERSION
