"""Asset selection strings used by jobs, `devicefit run` and CI, in one place so a test can
check each resolves to a non-empty set (a selection that matches nothing materializes
everything). Dagster's selection syntax: `key:x+` is x and everything downstream of it."""

MEASUREMENTS = "key:measurements"
INVENTORY = "key:hardware_inventory or key:model_catalog"
RESULTS = "key:benchmark_results+"  # benchmark_results and what derives from it
CI_SELECTIONS = {"inventory": INVENTORY, "measurements": MEASUREMENTS, "results": RESULTS}
