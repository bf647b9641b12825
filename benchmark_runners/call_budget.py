"""A config that `make run`'s quick profile leaves to the predictors: one whose single call would
overrun the timed phase's bound (`TimingPolicy.call_budget_s`), predicted before it is loaded
from the same worker's smaller batches.

Under the quick profile's policy (1.5 s of timed calls, overrun to 2.25 s) a config whose call
takes longer than 2.25 s is timed once: its cold call and one sample, twice its call for a row
without an interval. On the 2-core AMD EPYC (run 34) 18 inference configs were timed once, about
120 s of a 14-minute make run. Replayed over run 34's rows and the Xeon's
(benchmarks/call_budget_replay.py), predictors trained without the rows this rule skips held out
other models as well as before and predicted the skipped rows about as well as when they were
measured: their information is in the smaller batches. The row is `skipped` with reason code
`over_call_budget`, saying what was predicted from what; the full profile, and any run given
explicit batch sizes, has no budget and measures them.

A call is what the harness times: a row's p50 times the requests it ran in flight (OpenVINO's
throughput mode runs several and records one batch's share). The prediction extrapolates the call
of the largest smaller batch measured of the same config by the batch ratio to the power the two
largest measured (clamped to [0.5, 1]: sublinear below, never faster than linear growth). It
needs two smaller batches, so that the config's own batch scaling was measured; a row timed
under contention is no evidence. With fewer, the config is measured. A worker started again after
a crash gets its group's earlier rows (benchmark_runners.sweep), so a restart does not lose them.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence

from benchmark_runners.records import BenchmarkConfig, BenchmarkResult

REASON_CODE = "over_call_budget"
EXPONENT_RANGE = (0.5, 1.0)
MIN_SMALLER_BATCHES = 2  # the config's own batch scaling measured before a larger batch is left out


def _same_shape(config: BenchmarkConfig, result: BenchmarkResult) -> bool:
    """Whether a measured row is `config` at a smaller batch (its key names everything else),
    timed without contention."""
    return (result.status == "ok" and bool(result.p50_ms) and result.p50_ms > 0 and result.batch_size < config.batch_size
            and not result.contended and replace(config, batch_size=result.batch_size).key() == result.config_key)


def call_ms(result: BenchmarkResult) -> float:
    """The harness's call: the row's p50 times the requests each call ran in flight."""
    return float(result.p50_ms) * float((result.backend_config or {}).get("infer_requests") or 1)


def extrapolated_ms(batch: int, smaller: dict[int, float]) -> tuple[float, float, float] | None:
    """The call time at `batch` from the calls measured at smaller batches ({batch: ms}): the
    largest one's call times the batch ratio to the power the two largest measured, clamped to
    EXPONENT_RANGE. Returns (ms, the exponent used, the one measured), or None where fewer than
    MIN_SMALLER_BATCHES were measured."""
    if len(smaller) < MIN_SMALLER_BATCHES:
        return None
    before, last = sorted(smaller)[-2:]
    measured = math.log(smaller[last] / smaller[before]) / math.log(last / before)
    exponent = min(max(measured, EXPONENT_RANGE[0]), EXPONENT_RANGE[1])
    return smaller[last] * (batch / last) ** exponent, exponent, measured


def predicted_call_ms(config: BenchmarkConfig, measured: Sequence[BenchmarkResult]) -> tuple[float, str] | None:
    """The call time `config` is expected to take from the rows of its smaller batches in
    `measured`, and how it was reached (for the row's reason); None where fewer than
    MIN_SMALLER_BATCHES were measured."""
    by_batch = {r.batch_size: call_ms(r) for r in measured if _same_shape(config, r)}  # the latest row of each batch
    if (extrapolated := extrapolated_ms(config.batch_size, by_batch)) is None:
        return None
    ms, exponent, fitted = extrapolated
    before, last = sorted(by_batch)[-2:]
    basis = f"the exponent batches {before} -> {last} measured" + (f", {fitted:.2f} clamped" if exponent != fitted else "")
    return ms, f"batch {last}'s {by_batch[last] / 1e3:.2f} s a call x ({config.batch_size}/{last})^{exponent:.2f}, {basis}"


def over_call_budget(config: BenchmarkConfig, measured: Sequence[BenchmarkResult]) -> str | None:
    """Why `config` is left to the predictors (its predicted call is over the policy's
    call_budget_s), or None: no budget, fewer than two smaller batches measured, or within it."""
    budget = config.policy.call_budget_s
    if budget is None:
        return None
    predicted = predicted_call_ms(config, measured)
    if predicted is None or predicted[0] <= budget * 1e3:
        return None
    ms, basis = predicted
    return (f"not measured: one call is predicted to take {ms / 1e3:.2f} s ({basis}), over this profile's {budget:g} s "
            f"call budget (a longer call is timed once); the predictors answer it. To measure it, name its batch size "
            f"(devicefit run --batch-sizes {config.batch_size}) or run the full profile")
