"""Partitions of the measurements: model x hardware kind (every kind a registered backend measures)."""
import dagster as dg

from benchmark_runners import registry
from models.catalog import catalog_names

measurement_partitions = dg.MultiPartitionsDefinition({
    "model": dg.StaticPartitionsDefinition(catalog_names()),
    "hardware": dg.StaticPartitionsDefinition(list(registry.measurable_kinds())),
})
