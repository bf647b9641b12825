"""The nightly loop: a newly landed measurements partition makes the automation sensor request
the whole derived chain, once; nothing new requests nothing (dg.evaluate_automation_conditions on
a real instance, the sensor's own evaluation)."""
import dagster as dg

from pipelines.definitions import defs

CHAIN = {"benchmark_results", "aggregated_results", "compatibility_matrix", "latency_predictor", "throughput_predictor",
         "memory_predictor", "training_frame", "prediction_validation", "prediction_matrix", "selection_map", "benchmark_reports",
         "regression_report"}


# Two devices of one host and every catalog model: the partitions the sensor would have added.
CPU, OPENVINO = "cpu-aaaaaaaaaaaa", "openvino-bbbbbbbbbbbb"


def _land(instance: dg.DagsterInstance, key: str, partition: str | None = None) -> None:
    if partition is not None:
        from assets.partitions import add_partitions_for
        from models.catalog import catalog_names

        add_partitions_for(instance, [f"{d}|{m}" for d in (CPU, OPENVINO) for m in catalog_names()])
    instance.report_runless_asset_event(dg.AssetMaterialization(asset_key=key, partition=partition))


def _requested(result) -> set[str]:
    return {r.key.to_user_string() for r in result.results if r.true_subset.size}


def test_one_new_partition_requests_the_whole_chain_once_and_nothing_new_requests_nothing():
    with dg.instance_for_test() as instance:
        first = dg.evaluate_automation_conditions(defs=defs, instance=instance)
        assert first.total_requested == 0  # the first evaluation of a fresh instance starts the clock
        for key in ("hardware_inventory", "model_catalog"):
            _land(instance, key)
        _land(instance, "measurements", f"{CPU}|bert-tiny")  # one of 2 x 18 partitions: the rest stay missing
        second = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=first.cursor)
        assert _requested(second) == CHAIN
        # The run those requests start materializes the chain; the next evaluation asks for nothing more.
        for key in CHAIN:
            _land(instance, key)
        third = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=second.cursor)
        assert third.total_requested == 0
        fourth = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=third.cursor)
        assert fourth.total_requested == 0
        # A later partition (the next night's, or another model) starts the chain again.
        _land(instance, "measurements", f"{OPENVINO}|bert-tiny")
        fifth = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=fourth.cursor)
        assert _requested(fifth) == CHAIN


def test_a_partition_already_followed_by_its_rebuild_requests_nothing():
    """`devicefit run` and CI land partitions and then run the results job themselves: the sensor
    must not rebuild the chain a second time."""
    with dg.instance_for_test() as instance:
        first = dg.evaluate_automation_conditions(defs=defs, instance=instance)
        _land(instance, "measurements", f"{CPU}|bert-tiny")
        for key in CHAIN:
            _land(instance, key)
        second = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=first.cursor)
        assert second.total_requested == 0


def test_plain_eager_would_have_requested_nothing():
    """Why the condition is customized: with eager() on benchmark_results, a missing partition of
    another hardware kind blocks the rebuild (the defect this guards against)."""
    from assets.results import benchmark_results

    def plain_eager(spec: dg.AssetSpec) -> dg.AssetSpec:
        return spec.replace_attributes(automation_condition=dg.AutomationCondition.eager()) if spec.key == benchmark_results.key else spec

    assets = [a.map_asset_specs(plain_eager) if isinstance(a, dg.AssetsDefinition) else a for a in defs.assets]
    eager_defs = dg.Definitions(assets=assets, resources=defs.resources)
    with dg.instance_for_test() as instance:
        first = dg.evaluate_automation_conditions(defs=eager_defs, instance=instance)
        _land(instance, "measurements", f"{CPU}|bert-tiny")
        second = dg.evaluate_automation_conditions(defs=eager_defs, instance=instance, cursor=first.cursor)
        assert second.total_requested == 0
