"""The Dagster code location: loadable, selections non-empty, schedule fan-out."""
import shutil
from datetime import datetime, timezone
from pathlib import Path

import dagster as dg
import pytest

from models.catalog import catalog_names, swept_catalog_names
from pipelines import selections
from pipelines.definitions import defs
from pipelines.schedules import DEVICE_TAG, nightly_benchmarks, nightly_run_requests


def test_definitions_are_loadable():
    dg.Definitions.validate_loadable(defs)


def test_every_selection_string_resolves_to_a_non_empty_set():
    graph = defs.resolve_asset_graph()
    for name, selection in selections.CI_SELECTIONS.items():
        keys = dg.AssetSelection.from_string(selection).resolve(graph)
        assert keys, f"selection {name!r} = {selection!r} matches nothing (and would materialize everything)"
    results = {k.to_user_string() for k in dg.AssetSelection.from_string(selections.RESULTS).resolve(graph)}
    assert results == {"benchmark_results", "aggregated_results", "compatibility_matrix", "training_frame", "latency_predictor",
                       "throughput_predictor", "memory_predictor", "prediction_matrix", "prediction_validation",
                       "selection_map", "benchmark_reports", "regression_report"}


def test_partitions_are_device_by_model_and_grow_at_run_time():
    from assets.partitions import add_partitions_for

    definition = defs.resolve_assets_def("measurements").partitions_def
    assert [d.name for d in definition.partitions_defs] == ["device", "model"]
    with dg.instance_for_test() as instance:
        assert definition.get_partition_keys(dynamic_partitions_store=instance) == []
        add_partitions_for(instance, ["cpu-e1d9c1f8fde0|bert-tiny", "cpu-e1d9c1f8fde0+t1|bert-tiny", "cpu-e1d9c1f8fde0|gpt2"])
        add_partitions_for(instance, ["cpu-e1d9c1f8fde0|bert-tiny"])  # again: nothing added twice
        assert instance.get_dynamic_partitions("devices") == ["cpu-e1d9c1f8fde0", "cpu-e1d9c1f8fde0+t1"]
        assert instance.get_dynamic_partitions("models") == ["bert-tiny", "gpt2"]
        keys = definition.get_partition_keys(dynamic_partitions_store=instance)
        assert "cpu-e1d9c1f8fde0+t1|gpt2" in keys and len(keys) == 4  # the cross product, keyed device|model


INVENTORY = {"hostname": "h", "platforms": {
    "cpu": {"available": True, "devices": [{"index": 0, "name": "CPU", "logical_cores": 2, "isa_flags": ["avx2", "avx512f"],
                                            "fingerprint": "cpu-aaaaaaaaaaaa"}]},
    "openvino": {"available": True, "devices": [{"index": 0, "name": "CPU", "fingerprint": "openvino-bbbbbbbbbbbb"}]},
    "cuda": {"available": False, "reason": "no NVIDIA driver", "devices": []}}}


def test_nightly_schedule_requests_one_run_per_device_this_host_has_and_model():
    from devicefit.fleet.partitions import schedulable_devices

    registered = [{"id": "cpu-aaaaaaaaaaaa+t1", "kind": "cpu"},  # a profile registered on this host: measured too
                  {"id": "cpu-cccccccccccc", "kind": "cpu"},  # another host's CPU: its own worker measures it
                  {"id": "cuda-dddddddddddd", "kind": "cuda"}]
    targets = schedulable_devices(registered, INVENTORY)
    assert [t.device_id for t in targets] == ["cpu-aaaaaaaaaaaa+t1", "cpu-aaaaaaaaaaaa", "openvino-bbbbbbbbbbbb"]
    # With a broker, the other hosts' registered devices too, each tagged with its own host.
    fleet = schedulable_devices([{**d, "host_fingerprint": "cpu-cccccccccccc"} for d in registered], INVENTORY, dispatch=True)
    assert {t.device_id: t.tag for t in fleet} == {"cpu-aaaaaaaaaaaa+t1": "cpu@cpu-aaaaaaaaaaaa", "cpu-cccccccccccc": "cpu@cpu-cccccccccccc",
                                                   "cuda-dddddddddddd": "cuda@cpu-cccccccccccc", "cpu-aaaaaaaaaaaa": "cpu@cpu-aaaaaaaaaaaa",
                                                   "openvino-bbbbbbbbbbbb": "cpu@cpu-aaaaaaaaaaaa"}
    requests = nightly_run_requests("2026-11-22", targets)
    assert len(requests) == 3 * len(swept_catalog_names())  # the full profile: config-only models are measured when named
    assert len({r.run_key for r in requests}) == len(requests)
    assert {r.partition_key.split("|")[0] for r in requests} == {t.device_id for t in targets}
    # OpenVINO's CPU plugin and the 1-thread profile share the CPU: one at a time
    assert {r.tags[DEVICE_TAG] for r in requests} == {"cpu@cpu-aaaaaaaaaaaa"}
    assert all(r.run_config["ops"]["measurements"]["config"]["profile"] == "full" for r in requests)


def test_nightly_schedule_evaluates_on_this_machine_and_adds_its_partitions(tmp_path):
    from assets.resources import DevicefitData

    # The contexts are closed by `with`: an evaluation context enters its instance, which sets
    # Dagster's current definitions-state storage; left open, later tests find it disposed.
    with dg.instance_for_test() as instance, dg.build_schedule_context(
            instance=instance, scheduled_execution_time=datetime(2026, 11, 22, 2, tzinfo=timezone.utc),
            resources={"devicefit_data": DevicefitData(data_dir=str(tmp_path))}) as context:
        requests = list(nightly_benchmarks(context))
        assert requests and all(r.run_key.startswith("nightly-2026-11-22-") for r in requests)
        devices = instance.get_dynamic_partitions("devices")
        assert devices and {r.partition_key.split("|")[0] for r in requests} == set(devices)
        assert set(instance.get_dynamic_partitions("models")) == set(swept_catalog_names())


def test_the_partition_sensor_adds_registered_devices_and_models(tmp_path):
    from assets.resources import DevicefitData
    from devicefit import store
    from pipelines.sensors import register_partitions

    with store.opened(tmp_path / "devicefit.duckdb") as con:
        store.migrate(con)
        store.register_device(con, {"id": "cuda-dddddddddddd", "kind": "cuda", "name": "NVIDIA H100", "hostname": "gpu1",
                                    "host_fingerprint": "cpu-eeeeeeeeeeee", "hardware_fingerprint": "cuda-dddddddddddd",
                                    "profile": {"threads": None, "isa": None}, "details": {}, "probe": None})
    resources = {"devicefit_data": DevicefitData(data_dir=str(tmp_path))}
    with dg.instance_for_test() as instance, dg.build_sensor_context(instance=instance, resources=resources) as context:
        result = register_partitions(context)
        added = {r.partitions_def_name: r.partition_keys for r in result.dynamic_partitions_requests}
        assert "cuda-dddddddddddd" in added["devices"]  # another host's registered GPU: a partition here
        assert set(added["models"]) == set(catalog_names())
        for r in result.dynamic_partitions_requests:
            instance.add_dynamic_partitions(r.partitions_def_name, list(r.partition_keys))
        with dg.build_sensor_context(instance=instance, resources=resources) as again_context:
            assert isinstance(register_partitions(again_context), dg.SkipReason)


def test_a_malformed_model_registry_costs_its_own_models_only(tmp_path):
    """register_partitions raised RegistryError on a malformed models.json, so the catalog's
    models and the devices were not added either until the file was fixed."""
    from assets.resources import DevicefitData
    from pipelines.sensors import register_partitions

    (tmp_path / "models.json").write_text("{not json")
    resources = {"devicefit_data": DevicefitData(data_dir=str(tmp_path))}
    with dg.instance_for_test() as instance, dg.build_sensor_context(instance=instance, resources=resources) as context:
        result = register_partitions(context)
    added = {r.partitions_def_name: r.partition_keys for r in result.dynamic_partitions_requests}
    assert set(added["models"]) == set(catalog_names()) and added["devices"]


def test_the_instance_gives_duckdb_writers_one_slot_and_frees_slots_of_ended_runs(tmp_path, monkeypatch):
    shutil.copy(Path(__file__).resolve().parents[2] / "dagster_home" / "dagster.yaml", tmp_path / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    instance = dg.DagsterInstance.get()
    assert instance.event_log_storage.get_pool_config().default_pool_limit == 1
    assert instance.run_monitoring_enabled and instance.run_monitoring_settings["free_slots_after_run_end_seconds"] > 0
    tables = ("benchmark_results", "aggregated_results", "compatibility_matrix", "training_frame")
    writers = {key for key in tables if defs.resolve_assets_def(key).op.pool == "duckdb_writer"}
    assert writers == set(tables)


def test_the_console_logger_drops_only_the_tracebacks_of_sigint_and_sigterm_stops():
    import logging
    from types import SimpleNamespace

    from pipelines.loggers import is_interrupt_record

    def record(message, cls_name=None):
        rec = logging.LogRecord("dagster", logging.ERROR, __file__, 1, message, None, None)
        error = SimpleNamespace(cls_name=cls_name) if cls_name else None
        rec.dagster_event = SimpleNamespace(event_specific_data=SimpleNamespace(error=error))
        return rec

    assert is_interrupt_record(record("step failed", "DagsterExecutionInterruptedError"))
    assert is_interrupt_record(record("Execution of run failed: KeyboardInterrupt"))
    assert not is_interrupt_record(record("step failed", "ConversionException"))
    assert not is_interrupt_record(record("quarantined partition__cpu__x.json: bad"))
    # a real failure whose message quotes a worker's stderr is still shown
    assert not is_interrupt_record(record("worker said: KeyboardInterrupt in a thread", "RuntimeError"))


def test_typed_run_config_refuses_an_unknown_profile():
    from pydantic import ValidationError

    from assets.measurements import SweepConfig

    assert SweepConfig(profile="full").profile == "full"
    with pytest.raises(ValidationError, match="quick"):
        SweepConfig(profile="fastest")
    assert SweepConfig().probe_max_age_hours == 12  # the nightly schedule's runs re-probe once a night
    for age in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ValidationError, match="probe_max_age_hours"):
            SweepConfig(probe_max_age_hours=age)


def test_the_timing_checks_are_blocking():
    from assets.checks import throughput_consistent, timings_valid

    for check in (timings_valid, throughput_consistent):
        assert all(spec.blocking for spec in check.check_specs)
