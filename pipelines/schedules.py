"""The nightly sweep: one run per available (hardware, model) partition, full profile."""
import dagster as dg

from benchmark_runners.hardware import detect_hardware
from devicefit.profiles import Selection
from pipelines.jobs import measurements_job

DEVICE_TAG = "devicefit/device"  # dagster.yaml allows one run per tag value: one benchmark per device


def device_tag(partition_key: str) -> str:
    """The physical device a partition measures: OpenVINO's CPU plugin shares the CPU with torch,
    so their partitions must not run at the same time."""
    from devicefit.profiles import PHYSICAL_DEVICE

    kind = partition_key.split("|", 1)[0]
    return PHYSICAL_DEVICE.get(kind, kind)


def nightly_run_requests(date: str, available_kinds: list[str]) -> list[dg.RunRequest]:
    selection = Selection(profile="full")
    return [
        dg.RunRequest(
            run_key=f"nightly-{date}-{key}",
            partition_key=key,
            tags={DEVICE_TAG: device_tag(key), "devicefit/profile": "full"},
            run_config={"ops": {"measurements": {"config": {"profile": "full"}}}},
        )
        for key in selection.partition_keys(available_kinds)
    ]


@dg.schedule(job=measurements_job, cron_schedule="0 2 * * *", execution_timezone="UTC",
             default_status=dg.DefaultScheduleStatus.STOPPED,
             description="Nightly full sweep of every catalog model on every available measurable device.")
def nightly_benchmarks(context: dg.ScheduleEvaluationContext):
    date = context.scheduled_execution_time.strftime("%Y-%m-%d")
    return nightly_run_requests(date, detect_hardware(probe=False).available_kinds())
