"""What is being measured: the machine's hardware and the model catalog."""
import dagster as dg
from pydantic import Field

from benchmark_runners.hardware import detect_hardware
from devicefit.pipeline import catalog_facts, inventory_rows, markdown_table


class InventoryConfig(dg.Config):
    refresh: bool = Field(default=False, description="Re-detect and re-probe instead of using the cache.")


@dg.asset(group_name="inventory", description="Detected hardware platforms, device fingerprints and probe figures.")
def hardware_inventory(context: dg.AssetExecutionContext, config: InventoryConfig) -> dg.Output[dict]:
    inventory = detect_hardware(refresh=config.refresh)
    rows, probes = inventory_rows(inventory)
    return dg.Output(inventory.to_json(), metadata={
        "available": dg.MetadataValue.text(", ".join(inventory.available_kinds())),
        "platforms": dg.MetadataValue.md(markdown_table(rows, list(rows[0]))),
        "probe": dg.MetadataValue.md(markdown_table(probes, ["device", "matmul_gflops_best", "memory_bandwidth_gbs_best"])),
        "from_cache": inventory.from_cache,
    })


@dg.asset(group_name="inventory", description="The catalog: family, exact parameters, FLOPs per sample, weight bytes.")
def model_catalog() -> dg.Output[list]:
    facts = catalog_facts()
    return dg.Output(facts, metadata={
        "models": len(facts),
        "families": dg.MetadataValue.text(", ".join(sorted({f["family"] for f in facts}))),
        "catalog": dg.MetadataValue.md(markdown_table(facts, ["name", "family", "architecture", "parameters", "forward_gflops_per_sample"])),
    })
