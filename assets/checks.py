"""Asset checks: thin wrappers over devicefit.checks."""

import json
from typing import Callable

import dagster as dg
from dagster_duckdb import DuckDBResource

from assets.resources import DevicefitData
from assets.results import aggregated_results, benchmark_results, compatibility_matrix
from devicefit import checks
from devicefit.checks import CheckOutcome


def _run(duckdb_reader: DuckDBResource, check: Callable, severity=dg.AssetCheckSeverity.ERROR) -> dg.AssetCheckResult:
    with duckdb_reader.get_connection() as con:  # read-only, retried while a writer holds the lock
        outcome: CheckOutcome = check(con)
    return dg.AssetCheckResult(passed=outcome.passed, severity=severity, description=outcome.description,
                               metadata={k: dg.MetadataValue.json(v) if isinstance(v, (list, dict)) else v
                                         for k, v in outcome.metadata.items()})


# Blocking: a failed check stops the derived assets of the same run from building on bad rows.
@dg.asset_check(asset=benchmark_results, blocking=True, description="No NaN, zero or negative timings.")
def timings_valid(duckdb_reader: DuckDBResource) -> dg.AssetCheckResult:
    return _run(duckdb_reader, checks.timings_valid)


@dg.asset_check(asset=benchmark_results, blocking=True, description="Throughput agrees with batch size and latency samples.")
def throughput_consistent(duckdb_reader: DuckDBResource) -> dg.AssetCheckResult:
    return _run(duckdb_reader, checks.throughput_consistent)


@dg.asset_check(asset=benchmark_results, description="Each partition and ingested file has rows or recorded failures.")
def sources_have_rows(duckdb_reader: DuckDBResource) -> dg.AssetCheckResult:
    return _run(duckdb_reader, checks.sources_have_rows)


@dg.asset_check(asset=benchmark_results, description="CI of the median within its target (warning: time caps may stop first).")
def ci_within_target(duckdb_reader: DuckDBResource) -> dg.AssetCheckResult:
    return _run(duckdb_reader, checks.ci_within_target, dg.AssetCheckSeverity.WARN)


@dg.asset_check(asset=aggregated_results, description="Positive medians and speedups.")
def aggregates_valid(duckdb_reader: DuckDBResource) -> dg.AssetCheckResult:
    return _run(duckdb_reader, checks.aggregates_valid)


@dg.asset_check(asset=compatibility_matrix, description="Every family x hardware kind has an entry.")
def compatibility_complete(devicefit_data: DevicefitData) -> dg.AssetCheckResult:
    path = devicefit_data.paths().outputs / "compatibility_matrix.json"  # the published file, not a pickled copy
    outcome = checks.compatibility_complete(json.loads(path.read_text()))
    return dg.AssetCheckResult(passed=outcome.passed, description=outcome.description,
                               metadata={k: dg.MetadataValue.json(v) if isinstance(v, list) else v for k, v in outcome.metadata.items()})


ALL_CHECKS = [timings_valid, throughput_consistent, sources_have_rows, ci_within_target, aggregates_valid, compatibility_complete]
