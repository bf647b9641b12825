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


def _offenders(con, where: str, columns: str = "model, device, precision, mode, batch_size, source_key") -> list[dict]:
    return store.query(con, f"SELECT {columns} FROM measurements WHERE status = 'ok' AND ({where}) LIMIT 20")


def timings_valid(con) -> CheckOutcome:
    bad = _offenders(con, "p50_ms IS NULL OR isnan(p50_ms) OR p50_ms <= 0 OR isnan(mean_ms) OR mean_ms <= 0 "
                          "OR len(samples_ms) = 0 OR list_min(samples_ms) <= 0 OR list_bool_or(list_transform(samples_ms, x -> isnan(x)))")
    return CheckOutcome(not bad, "no NaN, zero or negative timings in measured rows" if not bad
                        else f"{len(bad)}+ measured rows have NaN, zero or negative timings", {"offenders": bad})


def throughput_consistent(con, tolerance: float = THROUGHPUT_TOLERANCE) -> CheckOutcome:
    bad = _offenders(con, f"abs(throughput_samples_per_s - batch_size * len(samples_ms) * 1000.0 / list_sum(samples_ms)) "
                          f"> {tolerance} * throughput_samples_per_s")
    return CheckOutcome(not bad, f"throughput = batch x iterations / timed seconds within {tolerance:.0%} in every row"
                        if not bad else f"{len(bad)}+ rows whose throughput disagrees with batch and latency", {"offenders": bad})


def sources_have_rows(con) -> CheckOutcome:
    empty = store.query(con, "SELECT source_key FROM sources WHERE rows = 0")
    counts = store.query(con, "SELECT source_key, rows FROM sources ORDER BY source_key")
    return CheckOutcome(not empty, "every partition and ingested file has rows (measured, skipped or failed with reasons)"
                        if not empty else f"{len(empty)} sources have no rows", {"empty": empty, "sources": len(counts)})


def ci_within_target(con) -> CheckOutcome:
    wide = _offenders(con, "ci_rel_half_width IS NULL OR ci_rel_half_width > ci_target",
                      "model, device, precision, mode, batch_size, ci_rel_half_width, ci_target, stop_reason")
    total = con.execute("SELECT count(*) FROM measurements WHERE status = 'ok'").fetchone()[0]
    n_wide = con.execute("SELECT count(*) FROM measurements WHERE status = 'ok' AND "
                         "(ci_rel_half_width IS NULL OR ci_rel_half_width > ci_target)").fetchone()[0]
    return CheckOutcome(n_wide == 0, f"{n_wide} of {total} measured rows stopped (time cap) before their CI reached the target",
                        {"wide": wide, "rows_over_target": n_wide, "rows": total})


def aggregates_valid(con) -> CheckOutcome:
    bad = store.query(con, "SELECT model, device_kind, precision, batch_size FROM aggregates WHERE p50_ms IS NULL OR isnan(p50_ms) "
                           "OR p50_ms <= 0 OR (speedup_vs_cpu_fp32 IS NOT NULL AND (isnan(speedup_vs_cpu_fp32) OR speedup_vs_cpu_fp32 <= 0)) LIMIT 20")
    return CheckOutcome(not bad, "aggregates have positive medians and speedups" if not bad else "invalid aggregate rows", {"offenders": bad})


def compatibility_complete(matrix: dict[str, Any]) -> CheckOutcome:
    missing = [(f, k) for f, entry in matrix["model_families"].items() for k in matrix["hardware_types"]
               if k not in entry["hardware_compatibility"]]
    measured = sum(1 for entry in matrix["model_families"].values() for e in entry["hardware_compatibility"].values()
                   if e["source"] == "measured")
    return CheckOutcome(not missing, f"every family x hardware entry present; {measured} backed by measurements",
                        {"missing": missing, "measured_entries": measured})
