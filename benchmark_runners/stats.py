"""Summary statistics of timing samples, with a distribution-free confidence interval of
the median (latency distributions are skewed; a mean +/- t*sd interval would lie)."""
from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass

Z_95 = 1.959963984540054
MIN_SAMPLES_FOR_CI = 6  # below this no order-statistic interval reaches 95% coverage


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default method) of pre-sorted values."""
    if not sorted_values:
        raise ValueError("no samples")
    pos = (len(sorted_values) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def median_ci(sorted_values: list[float], z: float = Z_95) -> tuple[float, float]:
    """Order-statistic CI of the median: ranks n/2 -/+ z*sqrt(n)/2 (binomial, normal
    approximation; Conover, Practical Nonparametric Statistics). Infinite when n is too small."""
    n = len(sorted_values)
    if n < MIN_SAMPLES_FOR_CI:
        return (-math.inf, math.inf)
    half = z * math.sqrt(n) / 2.0
    lo_rank = max(1, math.floor(n / 2.0 - half))
    hi_rank = min(n, math.ceil(n / 2.0 + 1 + half))
    return sorted_values[lo_rank - 1], sorted_values[hi_rank - 1]


def ci_relative_half_width(sorted_values: list[float]) -> float:
    lo, hi = median_ci(sorted_values)
    med = statistics.median(sorted_values)
    if not math.isfinite(lo) or med <= 0:
        return math.inf
    return (hi - lo) / 2.0 / med


@dataclass(frozen=True)
class SampleStats:
    """Figures of a sample set, in milliseconds."""

    count: int
    mean_ms: float
    p50_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float
    min_ms: float
    max_ms: float
    stdev_ms: float
    cv: float
    ci_low_ms: float
    ci_high_ms: float
    ci_rel_half_width: float

    def to_json(self) -> dict:
        out = asdict(self)
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in out.items()}


def summarize(samples_ms: list[float]) -> SampleStats:
    if not samples_ms:
        raise ValueError("cannot summarize an empty sample set")
    s = sorted(samples_ms)
    mean = statistics.fmean(s)
    stdev = statistics.stdev(s) if len(s) > 1 else 0.0
    lo, hi = median_ci(s)
    return SampleStats(
        count=len(s),
        mean_ms=mean,
        p50_ms=statistics.median(s),
        p90_ms=percentile(s, 90),
        p95_ms=percentile(s, 95),
        p99_ms=percentile(s, 99),
        min_ms=s[0],
        max_ms=s[-1],
        stdev_ms=stdev,
        cv=stdev / mean if mean > 0 else math.inf,
        ci_low_ms=lo,
        ci_high_ms=hi,
        ci_rel_half_width=ci_relative_half_width(s),
    )
