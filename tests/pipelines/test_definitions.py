"""The Dagster code location: loadable, selections non-empty, schedule fan-out."""
import shutil
from datetime import datetime, timezone
from pathlib import Path

import dagster as dg
import pytest

from models.catalog import catalog_names
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


def test_partitions_are_hardware_by_model():
    keys = defs.resolve_assets_def("measurements").partitions_def.get_partition_keys()
    assert "cpu|bert-tiny" in keys and "cuda|gpt2" in keys
    assert "openvino|bert-tiny" in keys
    assert len(keys) == 4 * len(catalog_names())


def test_nightly_schedule_requests_one_run_per_available_partition():
    requests = nightly_run_requests("2026-11-22", ["cpu", "openvino"])
    assert len(requests) == 2 * len(catalog_names())  # cpu and openvino; cuda/mps absent
    assert len({r.run_key for r in requests}) == len(requests)
    assert {r.partition_key.split("|")[0] for r in requests} == {"cpu", "openvino"}
    assert all(r.tags[DEVICE_TAG] == "cpu" for r in requests)  # OpenVINO's CPU plugin shares the CPU: one at a time
    assert all(r.run_config["ops"]["measurements"]["config"]["profile"] == "full" for r in requests)


def test_nightly_schedule_evaluates_on_this_machine():
    context = dg.build_schedule_context(scheduled_execution_time=datetime(2026, 11, 22, 2, tzinfo=timezone.utc))
    requests = list(nightly_benchmarks(context))
    assert requests and all(r.run_key.startswith("nightly-2026-11-22-") for r in requests)


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


def test_the_timing_checks_are_blocking():
    from assets.checks import throughput_consistent, timings_valid

    for check in (timings_valid, throughput_consistent):
        assert all(spec.blocking for spec in check.check_specs)
