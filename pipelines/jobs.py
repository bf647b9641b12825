import dagster as dg

from pipelines import selections

measurements_job = dg.define_asset_job(
    "measurements_job", selection=selections.MEASUREMENTS,  # partitioned like its asset
    description="Benchmark one (hardware, model) partition and land its rows.",
)
results_job = dg.define_asset_job(
    "results_job", selection=selections.RESULTS,
    description="Load landing files into DuckDB and rebuild aggregates and the compatibility matrix.",
)
inventory_job = dg.define_asset_job("inventory_job", selection=selections.INVENTORY)
