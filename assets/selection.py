"""The selection map (spec 002), rebuilt when the predictors or the compatibility matrix change;
the matrix arrives as its stored table (the compatibility_matrix asset's frame)."""
import dagster as dg
import polars as pl
from dagster_duckdb import DuckDBResource

from assets.automation import EAGER
from assets.metadata import OWNERS
from assets.predictors import PREDICTOR_KEYS
from assets.resources import DevicefitData, same_store
from assets.store_tables import StoreTablesManager
from devicefit.compatibility import matrix_of_rows
from devicefit.fleet.inventory import read_fleet_inventory, this_machine
from devicefit.pipeline import publish_selection_map


@dg.asset(deps=[*PREDICTOR_KEYS.values()], group_name="selection", automation_condition=EAGER, pool="duckdb_writer",
          kinds={"json"}, owners=OWNERS,
          description="Spec 002 selection map (families x size categories x modes, and batch sizes) over the fleet's "
                      "registered devices, data/outputs/.")
def selection_map(devicefit_data: DevicefitData, duckdb_reader: DuckDBResource, store_tables: dg.ResourceParam[StoreTablesManager],
                  compatibility_matrix: pl.DataFrame) -> dg.MaterializeResult:
    paths = same_store(devicefit_data, duckdb_reader, store_tables)
    with duckdb_reader.get_connection() as con:
        fleet = read_fleet_inventory(con, *this_machine())  # the fleet's registered devices, not this host's detection
    path, document = publish_selection_map(paths, fleet, compatibility=matrix_of_rows(compatibility_matrix.to_dicts()))
    cells = [c for f in document["model_families"].values() for sizes in f["model_sizes"].values() for c in sizes.values()]
    primaries: dict[str, int] = {}
    for c in cells:
        primaries[str(c["primary"])] = primaries.get(str(c["primary"]), 0) + 1
    return dg.MaterializeResult(metadata={"path": dg.MetadataValue.path(path), "cells": len(cells),
                                          "primary_by_hardware": dg.MetadataValue.json(primaries),
                                          "no_model": dg.MetadataValue.json({f: e["no_model"] for f, e in document["model_families"].items()})})
