"""When derived assets rebuild: the automation conditions, in one place.

`benchmark_results` depends on every `measurements` partition (hardware kind x model), and on
any real machine some are always missing (no host has both CUDA and MPS). Dagster's `eager()`
waits for all of a dependency's partitions (`~any_deps_missing()`), so with it a newly landed
partition would never reach the store. `AFTER_NEW_MEASUREMENTS` is `eager()` without that
clause, Dagster's documented way of customizing it: any newly landed partition, from the
schedule, a sensor, the UI or the CLI, requests `benchmark_results`, and `eager()` on everything
downstream carries the rebuild through in the same evaluation. A partition whose materialization
the same evaluation also sees `benchmark_results` rebuilt after (what `devicefit run` does)
requests nothing: `eager()` counts a dependency update only since the asset was last handled.
A tick that falls between a `devicefit run`'s partitions does start the chain (once more)."""
import dagster as dg

AFTER_NEW_MEASUREMENTS = dg.AutomationCondition.eager().without(~dg.AutomationCondition.any_deps_missing()) \
    .with_label("eager_allow_missing")
EAGER = dg.AutomationCondition.eager()  # every dependency is one unpartitioned asset
