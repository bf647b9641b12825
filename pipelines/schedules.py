"""The nightly sweep: one run per (device, model) partition of the fleet's registered devices,
full profile: the devices this host has, or with a broker (DEVICEFIT_BROKER_URL) every
registered device, each run tagged with its device's Celery queue."""
import dagster as dg

from assets.measurements import SweepConfig
from assets.partitions import add_partitions_for
from assets.resources import DevicefitData
from benchmark_runners.hardware import detect_hardware
from devicefit.fleet.inventory import registered_devices
from devicefit.fleet.partitions import ScheduledDevice, partition_key, schedulable_devices
from devicefit.profiles import Selection
from pipelines import dispatch
from pipelines.jobs import measurements_job

DEVICE_TAG = "devicefit/device"  # dagster.yaml allows one run per tag value: one benchmark per device


def nightly_run_requests(date: str, devices: list[ScheduledDevice], extra_tags=None) -> list[dg.RunRequest]:
    """One full-profile run per (device, model); `extra_tags(device)`: tags a launcher needs
    (the Celery queue of the device's worker)."""
    selection = Selection(profile="full")
    return [
        dg.RunRequest(
            run_key=f"nightly-{date}-{key}",
            partition_key=key,
            tags={DEVICE_TAG: t.tag, "devicefit/profile": "full", **(extra_tags(t) if extra_tags else {})},
            run_config=dg.RunConfig(ops={"measurements": SweepConfig(profile="full")}),
        )
        for t in devices for key in (partition_key(t.device_id, m) for m in selection.model_names())
    ]


@dg.schedule(job=measurements_job, cron_schedule="0 2 * * *", execution_timezone="UTC",
             default_status=dg.DefaultScheduleStatus.STOPPED,
             description="Nightly full sweep of every catalog model on every registered device this host has "
                         "(constraint profiles included), and this host's devices not registered yet.")
def nightly_benchmarks(context: dg.ScheduleEvaluationContext, devicefit_data: DevicefitData):
    date = context.scheduled_execution_time.strftime("%Y-%m-%d")
    hardware = detect_hardware(probe=False).to_json()
    dispatching = dispatch.broker_url() is not None  # then every registered device's worker gets its runs
    devices = schedulable_devices(registered_devices(devicefit_data.paths().database, context.log), hardware, dispatch=dispatching)
    requests = nightly_run_requests(date, devices, (lambda d: {dispatch.QUEUE_TAG: dispatch.device_queue(d.device_id)})
                                    if dispatching else None)
    add_partitions_for(context.instance, [r.partition_key for r in requests])  # a run's key must exist first
    return requests
