"""`devicefit run`: materialize the pipeline through Dagster on this machine, one run per
(hardware, model) partition, then the results; every run is recorded in DAGSTER_HOME, so the
UI (`make ui`) shows them. The only place outside pipelines/ and assets/ that imports Dagster."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from devicefit.profiles import Selection


@dataclass
class PipelineRun:
    partitions: list[tuple[str, bool, dict]] = field(default_factory=list)  # (key, success, metadata)
    results_success: bool | None = None
    failed_checks: list[str] = field(default_factory=list)


def _instance():
    from dagster import DagsterInstance

    home = os.environ.get("DAGSTER_HOME")
    if not home:
        raise RuntimeError("DAGSTER_HOME is not set: export DAGSTER_HOME=$PWD/dagster_home (the Makefile does)")
    if not Path(home).is_absolute() or not Path(home).is_dir():
        raise RuntimeError(f"DAGSTER_HOME must be an absolute path to an existing directory, got {home!r}")
    return DagsterInstance.get()


def run_pipeline(selection: Selection, partition_keys: list[str], on_partition: Callable[[str, int, int], None] | None = None) -> PipelineRun:
    from pipelines.definitions import defs
    from devicefit.profiles import physical_device
    from pipelines.schedules import DEVICE_TAG

    instance = _instance()
    outcome = PipelineRun()
    quiet = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}  # the summary says what matters
    defs.resolve_job_def("inventory_job").execute_in_process(run_config=quiet, instance=instance)
    measure_job = defs.resolve_job_def("measurements_job")
    config = {**quiet, "ops": {"measurements": {"config": {
        "profile": selection.profile, "batch_sizes": list(selection.batch_sizes),
        "precisions": list(selection.precisions), "training_mode": selection.training_mode}}}}
    for i, key in enumerate(partition_keys):
        if on_partition:
            on_partition(key, i, len(partition_keys))
        result = measure_job.execute_in_process(run_config=config, instance=instance, partition_key=key,
                                                raise_on_error=False, tags={DEVICE_TAG: physical_device(key)})
        metadata = {}
        for event in result.get_asset_materialization_events():
            metadata = {k: v.value for k, v in event.materialization.metadata.items() if k in ("ok", "skipped", "failed", "duration_s")}
        outcome.partitions.append((key, result.success, metadata))
    results = defs.resolve_job_def("results_job").execute_in_process(run_config=quiet, instance=instance, raise_on_error=False)
    outcome.results_success = results.success
    for event in results.all_events:
        if event.event_type_value == "ASSET_CHECK_EVALUATION":
            evaluation = event.event_specific_data
            if not evaluation.passed:
                outcome.failed_checks.append(f"{evaluation.check_name} ({evaluation.severity.value}): {evaluation.description}")
    return outcome
