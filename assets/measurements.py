"""The measurements: one partition per (hardware, model), each landing its rows atomically."""

from typing import Literal

import dagster as dg
from pydantic import Field

from assets.metadata import OWNERS
from assets.partitions import measurement_partitions
from assets.resources import DevicefitData
from benchmark_runners.call_budget import REASON_CODE as CALL_BUDGET_CODE
from benchmark_runners.code_version import measurement_code_version
from benchmark_runners.hardware import detect_hardware
from benchmark_runners.hardware.inventory import PROBE_MAX_AGE_S
from benchmark_runners.speed_reference import config_rates, worker_copy_rates
from devicefit.pipeline import measure_partition, results_markdown
from devicefit.profiles import Selection


class SweepConfig(dg.Config):
    """Spec 004's options as run config; empty lists mean "as the profile says"."""

    profile: Literal["quick", "full"] = Field(default="quick", description="quick (make run) or full (nightly)")
    batch_sizes: list[int] = Field(default_factory=list, description="override the profile's batch sizes")
    precisions: list[str] = Field(default_factory=list, description="override: fp32, fp16, bf16, int8")
    training_mode: bool | None = Field(default=None, description="true: also train; false: inference only; null: profile")
    generation_mode: bool | None = Field(default=None, description="true: also the generation scenario for every model that "
                                                                   "generates; false: none; null: profile")
    probe_max_age_hours: float = Field(default=PROBE_MAX_AGE_S / 3600, gt=0, allow_inf_nan=False,
                                       description="re-probe the device first when its cached probe is older than this")

    def selection(self) -> Selection:
        return Selection(profile=self.profile, batch_sizes=tuple(self.batch_sizes), precisions=tuple(self.precisions),
                         training_mode=self.training_mode, generation_mode=self.generation_mode)


@dg.asset(
    partitions_def=measurement_partitions,
    group_name="measurement",
    deps=["hardware_inventory", "model_catalog"],
    description="Benchmark rows of one model on one hardware kind, landed as data/raw/partition__<hw>__<model>.json.",
    tags={"devicefit/kind": "benchmark"},
    kinds={"pytorch", "openvino", "json"},
    owners=OWNERS,
    code_version=measurement_code_version(),  # the harness, backends, worker and model building
)
def measurements(context: dg.AssetExecutionContext, config: SweepConfig, devicefit_data: DevicefitData) -> dg.MaterializeResult:
    hardware = detect_hardware(max_probe_age_s=config.probe_max_age_hours * 3600)
    outcome = measure_partition(context.partition_key, config.selection(), hardware, devicefit_data.paths(),
                                on_wait=context.log.warning)  # another process measures on this device
    counts = outcome.status_counts()
    for r in outcome.results:
        if r.status == "failed":
            context.log.warning(f"{r.model} {r.device} {r.precision} {r.mode} bs={r.batch_size} failed: {r.error}")
        elif r.contended:
            context.log.warning(f"{r.model} {r.device} {r.precision} {r.mode} bs={r.batch_size} contended: other processes used "
                                f"{r.other_cpu_share:.0%} of the CPU on both attempts")
    return dg.MaterializeResult(metadata={
        "rows": len(outcome.results),
        "ok": counts.get("ok", 0),
        "skipped": counts.get("skipped", 0),
        "over_call_budget": sum(r.reason_code == CALL_BUDGET_CODE for r in outcome.results),  # left to the predictors
        "failed": counts.get("failed", 0),
        "contended": sum(bool(r.contended) for r in outcome.results),
        "duration_s": round(outcome.seconds, 1),
        # the host CPU's rate on the worker's fixed kernel around each config (speed_reference.py)
        "speed_references": dg.MetadataValue.json(config_rates(outcome.results)),
        "copy_references": dg.MetadataValue.json(worker_copy_rates(outcome.results)),  # GB/s, one a worker
        "probe_detected_at": hardware.detected_at,  # the probe every row of this partition is scored against
        "landing_file": dg.MetadataValue.path(outcome.landing_path),
        "results": dg.MetadataValue.md(results_markdown(outcome.results)),
    })
