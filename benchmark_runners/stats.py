"""Summary statistics of timing samples, with a distribution-free confidence interval of
the median (latency distributions are skewed; a mean +/- t*sd interval would lie)."""
from __future__ import annotations

import functools
import math
import statistics
from dataclasses import asdict, dataclass
from fractions import Fraction

MIN_SAMPLES_FOR_CI = 6  # below this no order-statistic interval reaches 95% coverage


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default method) of pre-sorted values."""
    if not sorted_values:
        raise ValueError("no samples")
    pos = (len(sorted_values) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


# Exact binomial ranks up to this many samples (a few milliseconds to find, once per count);
# past it the normal approximation, which is within a rank of them by then.
EXACT_RANKS_UP_TO = 2000


@functools.lru_cache(maxsize=4096)
def median_ci_ranks(n: int, confidence: float = 0.95) -> tuple[int, int] | None:
    """1-based ranks (r, n + 1 - r) of the narrowest symmetric order-statistic interval that
    covers the median of any continuous distribution with probability at least `confidence`:
    that probability is 1 - 2 P(B <= r - 1) for B ~ Binomial(n, 1/2), computed exactly (Hahn &
    Meeker, Statistical Intervals, 5.2). None: n samples are too few for any interval.

    It was the normal approximation with ranks rounded outward (floor(n/2 - z sqrt(n)/2) and
    ceil(n/2 + 1 + z sqrt(n)/2); Conover), whose coverage at the 9-40 samples a CPU config
    stops at was 97.1-99.8% rather than 95%: one rank wider on each side than the exact interval
    at 17 of those 32 counts (9, 10, 12, 13, 15, 17, 18, 20, 23, 25, ...) and at about half of
    them up to 100, so a config kept sampling to narrow an interval that already said more than
    it claimed."""
    tail = (1 - Fraction(str(confidence))) / 2  # allowed probability on each side
    if n > EXACT_RANKS_UP_TO:
        z = statistics.NormalDist().inv_cdf(1 - float(tail))
        half = z * math.sqrt(n) / 2.0
        lo = max(1, math.floor(n / 2.0 - half))
        return lo, n + 1 - lo
    below, term, total, rank = 0, 1, 1 << n, None  # below = sum of C(n, i) for i < r
    for r in range(1, n // 2 + 1):
        below += term  # now C(n, 0) + ... + C(n, r - 1)
        term = term * (n - r + 1) // r
        if below * tail.denominator > tail.numerator * total:
            break
        rank = r
    return None if rank is None else (rank, n + 1 - rank)


def median_ci(sorted_values: list[float], confidence: float = 0.95) -> tuple[float, float]:
    """Distribution-free CI of the median: the order statistics at median_ci_ranks. Infinite
    when n is too small for one."""
    ranks = median_ci_ranks(len(sorted_values), confidence)
    if ranks is None:
        return (-math.inf, math.inf)
    return sorted_values[ranks[0] - 1], sorted_values[ranks[1] - 1]


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
    if not all(math.isfinite(x) for x in samples_ms):  # NaN has no place in a sort, inf no mean
        raise ValueError(f"cannot summarize samples that are not finite numbers: {[x for x in samples_ms if not math.isfinite(x)][:3]}")
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
