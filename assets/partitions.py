"""Partitions of the measurements: model x hardware kind."""
import dagster as dg

from devicefit.profiles import MEASURABLE_KINDS
from models.catalog import catalog_names

measurement_partitions = dg.MultiPartitionsDefinition({
    "model": dg.StaticPartitionsDefinition(catalog_names()),
    "hardware": dg.StaticPartitionsDefinition(list(MEASURABLE_KINDS)),
})
