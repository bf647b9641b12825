"""Data-quality checks on the store, as plain functions; Dagster asset checks call them."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from devicefit import store

THROUGHPUT_TOLERANCE = 0.02  # throughput vs batch * iterations / total time


@dataclass
class CheckOutcome:
    passed: bool
    description: str
    metadata: dict[str, Any] = field(default_factory=dict)


def timings_valid(con) -> CheckOutcome:
    bad = store.invalid_timing_rows(con)
    return CheckOutcome(not bad, "no NaN, zero or negative timings in measured rows" if not bad
                        else f"{len(bad)}+ measured rows have NaN, zero or negative timings", {"offenders": bad})


def throughput_consistent(con, tolerance: float = THROUGHPUT_TOLERANCE) -> CheckOutcome:
    bad = store.inconsistent_throughput_rows(con, tolerance)
    return CheckOutcome(not bad, f"throughput = batch x iterations / timed seconds within {tolerance:.0%} in every row"
                        if not bad else f"{len(bad)}+ rows whose throughput disagrees with batch and latency", {"offenders": bad})


def sources_have_rows(con) -> CheckOutcome:
    sources = store.source_rows(con)
    # A source whose every row another source already stored is not empty: it was deduplicated.
    empty = [s["source_key"] for s in sources if s["rows"] == 0 and s["duplicate_rows"] == 0]
    return CheckOutcome(not empty, "every partition and ingested file has rows (measured, skipped or failed with reasons, "
                                   "or already stored by another source)"
                        if not empty else f"{len(empty)} sources have no rows", {"empty": empty, "sources": len(sources)})


def ci_within_target(con) -> CheckOutcome:
    wide = store.wide_ci_rows(con)
    n_wide, total = store.wide_ci_counts(con)
    return CheckOutcome(n_wide == 0, f"{n_wide} of {total} measured rows stopped (time cap) before their CI reached the target",
                        {"wide": wide, "rows_over_target": n_wide, "rows": total})


def aggregates_valid(con) -> CheckOutcome:
    bad = store.invalid_aggregate_rows(con)
    return CheckOutcome(not bad, "aggregates have positive medians and speedups" if not bad else "invalid aggregate rows", {"offenders": bad})


def compatibility_complete(matrix: dict[str, Any]) -> CheckOutcome:
    missing = [(f, k) for f, entry in matrix["model_families"].items() for k in matrix["hardware_types"]
               if k not in entry["hardware_compatibility"]]
    measured = sum(1 for entry in matrix["model_families"].values() for e in entry["hardware_compatibility"].values()
                   if e["source"] == "measured")
    return CheckOutcome(not missing, f"every family x hardware entry present; {measured} backed by measurements",
                        {"missing": missing, "measured_entries": measured})
