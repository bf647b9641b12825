"""A config that `make run`'s quick profile leaves to the predictors: one whose single call would
overrun the timed phase's bound (`TimingPolicy.call_budget_s`), predicted before it is loaded
from the same worker's smaller batches.

Under the quick profile's policy (1.5 s of timed calls, overrun to 2.25 s) a config whose call
takes longer than 2.25 s is timed once: its cold call and one sample, twice its call for a row
without an interval. On the 2-core AMD EPYC (run 34) sixteen such configs (whisper-tiny, gpt2 at
512 tokens or batch 16, ViT-base and CLIP at batch 16) took about 120 s of a 14-minute make run.
Replayed over run 34's rows and the Xeon's (benchmarks/call_budget_replay.py), predictors trained
without those rows held out other models as well as before (latency MAPE 12.5% -> 12.5%) and
predicted the rows themselves about as well (11.7% -> 11.9%): their information was already in
the smaller batches. The row is `skipped`
with reason code `over_call_budget`, saying what was predicted from what; the full profile, and
any run given explicit batch sizes, has no budget and measures them.

The prediction extrapolates the largest smaller batch measured of the same mode, precision and
input by the batch ratio to the power the two largest smaller batches measured (clamped to
[0.5, 1]: sublinear below, never faster than linear growth), or linearly from one. Where nothing
smaller was measured (a model's first batch), the config is measured.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence

from benchmark_runners.records import BenchmarkConfig, BenchmarkResult

REASON_CODE = "over_call_budget"
EXPONENT_RANGE = (0.5, 1.0)


def _same_shape(config: BenchmarkConfig, result: BenchmarkResult) -> bool:
    """Whether a measured row is `config` at a smaller batch (its key names everything else)."""
    return (result.status == "ok" and bool(result.p50_ms) and result.p50_ms > 0 and result.batch_size < config.batch_size
            and replace(config, batch_size=result.batch_size).key() == result.config_key)


def extrapolated_ms(batch: int, smaller: dict[int, float]) -> tuple[float, float, float | None]:
    """The call time at `batch` from the times measured at smaller batches ({batch: ms}): the
    largest one's time times the batch ratio to the power the two largest measured, clamped to
    EXPONENT_RANGE, or linearly from one. Returns (ms, the exponent used, the one measured or None)."""
    batches = sorted(smaller)
    last = batches[-1]
    measured = None
    if len(batches) >= 2:
        before = batches[-2]
        measured = math.log(smaller[last] / smaller[before]) / math.log(last / before)
    exponent = 1.0 if measured is None else min(max(measured, EXPONENT_RANGE[0]), EXPONENT_RANGE[1])
    return smaller[last] * (batch / last) ** exponent, exponent, measured


def predicted_call_ms(config: BenchmarkConfig, measured: Sequence[BenchmarkResult]) -> tuple[float, str] | None:
    """The call time `config` is expected to take from the rows of its smaller batches in
    `measured`, and how it was reached (for the row's reason); None where none was measured."""
    by_batch = {r.batch_size: r.p50_ms for r in measured if _same_shape(config, r)}  # the latest row of each batch
    if not by_batch:
        return None
    ms, exponent, fitted = extrapolated_ms(config.batch_size, by_batch)
    batches = sorted(by_batch)
    last = batches[-1]
    basis = "linear: one smaller batch measured" if fitted is None else \
        f"the exponent batches {batches[-2]} -> {last} measured" + (f", {fitted:.2f} clamped" if exponent != fitted else "")
    return ms, f"batch {last}'s {by_batch[last] / 1e3:.2f} s x ({config.batch_size}/{last})^{exponent:.2f}, {basis}"


def over_call_budget(config: BenchmarkConfig, measured: Sequence[BenchmarkResult]) -> str | None:
    """Why `config` is left to the predictors (its predicted call is over the policy's
    call_budget_s), or None: no budget, nothing smaller measured, or within it."""
    budget = config.policy.call_budget_s
    if budget is None:
        return None
    predicted = predicted_call_ms(config, measured)
    if predicted is None or predicted[0] <= budget * 1e3:
        return None
    ms, basis = predicted
    return (f"not measured: one call is predicted to take {ms / 1e3:.2f} s ({basis}), over this profile's "
            f"{budget:g} s call budget, within which a config is timed more than once; the predictors answer it "
            f"(measure it with explicit batch sizes, or the full profile)")
