"""The sensor that keeps the measurement partitions in step with the fleet: every registered
device (the store's `devices`, which hosts, workers and loaded rows register) and this host's
devices, times every known model (the catalog and the models an operator registered), becomes a
(device, model) partition without a code change or a restart."""
import dagster as dg

from assets.partitions import DEVICES, MODELS, missing_partitions
from assets.resources import DevicefitData
from benchmark_runners import registry
from benchmark_runners.hardware import detect_hardware
from devicefit.fleet.inventory import registered_devices
from devicefit.fleet.partitions import local_device_ids
from models.catalog import catalog_names
from models.registry import RegistryError, read_registry


def known_devices_and_models(devicefit_data: DevicefitData, log=None) -> tuple[list[str], list[str]]:
    """The devices and models partitions are made of. A registry file that cannot be read costs
    its own models only (a warning naming why): the catalog's and the devices still become
    partitions, where the error used to stop the sensor whole until the file was fixed."""
    paths = devicefit_data.paths()
    devices = [d["id"] for d in registered_devices(paths.database, log) if d.get("kind") in registry.measurable_kinds()]
    devices += local_device_ids(detect_hardware(probe=False).to_json())
    try:
        registered = list(read_registry(paths.root))
    except RegistryError as exc:
        if log is not None:
            log.warning(f"registered models left out: {exc}")
        registered = []
    return devices, [*catalog_names(), *registered]


@dg.sensor(minimum_interval_seconds=300, default_status=dg.DefaultSensorStatus.RUNNING,
           description="Adds a (device, model) partition for every registered device and known model.")
def register_partitions(context: dg.SensorEvaluationContext, devicefit_data: DevicefitData):
    devices, models = known_devices_and_models(devicefit_data, context.log)
    missing = missing_partitions(context.instance, devices, models)
    requests = [d.build_add_request(missing[d.name]) for d in (DEVICES, MODELS) if missing[d.name]]
    if not requests:
        return dg.SkipReason("every registered device and known model is a partition already")
    return dg.SensorResult(dynamic_partitions_requests=requests)
