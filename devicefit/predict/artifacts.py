"""Trained predictors on disk (data/predictors/) and in DuckDB (predictor_versions)."""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from devicefit import store
from devicefit.errors import DevicefitError
from devicefit.paths import DataPaths
from devicefit.predict.training import ARTIFACT_FORMAT, ERROR_BARS, TARGETS
from devicefit.predict.validation_report import ValidationReport
from devicefit.results_io import write_json_atomic

CURRENT = "current.json"


class PredictorUnavailable(DevicefitError, RuntimeError):
    """No usable trained predictor is published: none yet, or one this version cannot read."""
    http_status = 503


def predictors_dir(paths: DataPaths) -> Path:
    return paths.root / "predictors"


def within_bars(artifact: dict[str, Any]) -> dict[str, bool]:
    targets = ValidationReport.of(artifact).targets
    return {t: targets[t].leave_one_model_out.mape <= ERROR_BARS[t] for t in TARGETS}


def save(paths: DataPaths, artifact: dict[str, Any], con: "store.Source | None" = None) -> Path:
    """Write the versioned artifact and `current.json` atomically, and record the version."""
    digest = hashlib.sha256(json.dumps(artifact["boosters"], sort_keys=True).encode()).hexdigest()[:8]
    artifact["version"] = artifact["trained_at"].replace(":", "").replace("-", "").split("+")[0] + "-" + digest
    directory = predictors_dir(paths)
    path = directory / f"predictor-{artifact['version']}.json"
    write_json_atomic(path, artifact)
    tmp = directory / f".{CURRENT}.tmp"
    shutil.copyfile(path, tmp)
    tmp.replace(directory / CURRENT)
    with store.opened(paths.database if con is None else con) as con:
        store.migrate(con)
        store.record_predictor_version(con, artifact["version"], artifact, str(path), all(within_bars(artifact).values()))
    return path


def load_current(paths: DataPaths) -> dict[str, Any] | None:
    """The published artifact, or None when there is none. One that is unreadable or written in
    another format raises PredictorUnavailable naming the file and what to do."""
    path = predictors_dir(paths) / CURRENT
    if not path.is_file():
        return None
    try:
        artifact = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as exc:  # not JSON, not UTF-8, or nested past the decoder (a damaged file)
        raise PredictorUnavailable(f"published predictor {path} is unreadable ({exc}): retrain with `make run`") from None
    found = artifact.get("format") if isinstance(artifact, dict) else None
    if found != ARTIFACT_FORMAT:
        raise PredictorUnavailable(f"published predictor {path} has format {found!r}; this version reads {ARTIFACT_FORMAT!r}: "
                                   "retrain with `make run` (or `devicefit run`)")
    return artifact


def version_summaries(paths: DataPaths) -> list[dict[str, Any]]:
    """Every published predictor version (newest first) with its held-out error per target,
    read from the artifact files, so a server can list them without opening DuckDB."""
    directory = predictors_dir(paths)
    try:
        current = load_current(paths)
    except PredictorUnavailable:
        current = None  # older versions are still listed; none of them is served
    out = []
    for path in sorted(directory.glob("predictor-*.json"), reverse=True) if directory.is_dir() else []:
        try:
            artifact = json.loads(path.read_text())
            targets = ValidationReport.of(artifact).targets
            out.append({"version": artifact["version"], "trained_at": artifact["trained_at"], "rows": artifact["rows"],
                        "models": len(artifact["models"]),
                        "current": current is not None and current.get("version") == artifact["version"],
                        "within_bars": within_bars(artifact),
                        "held_out": {t: {"mape": targets[t].leave_one_model_out.mape, "bar": ERROR_BARS[t],
                                         "interval_coverage": targets[t].interval_coverage} for t in TARGETS}})
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
            continue  # an unreadable or damaged file is not a version anyone can use
    return out
