"""The nightly sweep: one run per available (hardware, model) partition, full profile."""
import dagster as dg

from assets.measurements import SweepConfig
from benchmark_runners.hardware import detect_hardware
from devicefit.profiles import Selection, physical_device
from pipelines.jobs import measurements_job

DEVICE_TAG = "devicefit/device"  # dagster.yaml allows one run per tag value: one benchmark per device


def nightly_run_requests(date: str, available_kinds: list[str]) -> list[dg.RunRequest]:
    selection = Selection(profile="full")
    return [
        dg.RunRequest(
            run_key=f"nightly-{date}-{key}",
            partition_key=key,
            tags={DEVICE_TAG: physical_device(key), "devicefit/profile": "full"},
            run_config=dg.RunConfig(ops={"measurements": SweepConfig(profile="full")}),
        )
        for key in selection.partition_keys(available_kinds)
    ]


@dg.schedule(job=measurements_job, cron_schedule="0 2 * * *", execution_timezone="UTC",
             default_status=dg.DefaultScheduleStatus.STOPPED,
             description="Nightly full sweep of every catalog model on every available measurable device.")
def nightly_benchmarks(context: dg.ScheduleEvaluationContext):
    date = context.scheduled_execution_time.strftime("%Y-%m-%d")
    return nightly_run_requests(date, detect_hardware(probe=False).available_kinds())
