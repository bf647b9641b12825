"""What is being measured: the machine's hardware and the model catalog. Both are files or
metadata, not values Dagster would pickle: each returns a MaterializeResult."""
import dagster as dg
from pydantic import Field

from assets.metadata import OWNERS, rows_table, table_metadata
from benchmark_runners.hardware import detect_hardware
from benchmark_runners.paths import hardware_cache_path
from devicefit.catalog_facts import catalog_facts
from devicefit.pipeline import inventory_rows


class InventoryConfig(dg.Config):
    refresh: bool = Field(default=False, description="Re-detect and re-probe instead of using the cache.")


@dg.asset(group_name="inventory", kinds={"json"}, owners=OWNERS,
          description="Detected hardware platforms, device fingerprints and probe figures (data/hardware.json).")
def hardware_inventory(config: InventoryConfig) -> dg.MaterializeResult:
    inventory = detect_hardware(refresh=config.refresh)
    rows, probes = inventory_rows(inventory)
    return dg.MaterializeResult(metadata={
        "path": dg.MetadataValue.path(str(hardware_cache_path())),
        "available": dg.MetadataValue.text(", ".join(inventory.available_kinds())),
        "platforms": rows_table(rows, list(rows[0])),
        "probe": rows_table(probes, ["device", "matmul_gflops_best", "memory_bandwidth_gbs_best"]),
        "from_cache": inventory.from_cache,
    })


CATALOG_COLUMNS = [("name", "string"), ("family", "string"), ("subfamily", "string"), ("architecture", "string"),
                   ("parameters", "int"), ("forward_gflops_per_sample", "float"), ("weight_bytes", "int"), ("input", "string")]


@dg.asset(group_name="inventory", owners=OWNERS,
          description="The catalog: family, exact parameters, FLOPs per sample, weight bytes.")
def model_catalog() -> dg.MaterializeResult:
    facts = catalog_facts()
    return dg.MaterializeResult(metadata={
        **table_metadata(len(facts), CATALOG_COLUMNS),
        "families": dg.MetadataValue.text(", ".join(sorted({f["family"] for f in facts}))),
        "catalog": rows_table(facts, [name for name, _ in CATALOG_COLUMNS]),
    })
