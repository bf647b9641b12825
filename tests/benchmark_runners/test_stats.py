import math
import random
import statistics

import numpy as np
import pytest

from benchmark_runners.stats import MIN_SAMPLES_FOR_CI, ci_relative_half_width, median_ci, median_ci_ranks, summarize


def test_percentiles_match_numpy():
    rng = random.Random(0)
    values = [rng.lognormvariate(0, 0.3) for _ in range(501)]
    s = summarize(values)
    for q, got in ((50, s.p50_ms), (90, s.p90_ms), (95, s.p95_ms), (99, s.p99_ms)):
        assert got == pytest.approx(np.percentile(values, q))
    assert s.stdev_ms == pytest.approx(statistics.stdev(values))
    assert s.cv == pytest.approx(s.stdev_ms / s.mean_ms)


def test_median_ci_covers_the_true_median_about_95_percent_of_the_time():
    rng = random.Random(1)
    true_median = math.exp(0)  # lognormal(0, s) has median 1
    trials, covered = 400, 0
    for _ in range(trials):
        sample = sorted(rng.lognormvariate(0, 0.5) for _ in range(40))
        lo, hi = median_ci(sample)
        covered += lo <= true_median <= hi
    assert 0.91 <= covered / trials <= 0.99


def _coverage(n: int, lo: int, hi: int) -> float:
    """P(x_(lo) <= median <= x_(hi)) for n draws of a continuous distribution, exactly."""
    return sum(math.comb(n, k) for k in range(lo, hi)) / 2**n


def test_median_ci_ranks_are_the_narrowest_with_at_least_95_percent_coverage():
    assert median_ci_ranks(MIN_SAMPLES_FOR_CI - 1) is None
    for n in range(MIN_SAMPLES_FOR_CI, 301):
        lo, hi = median_ci_ranks(n)
        assert hi == n + 1 - lo
        assert _coverage(n, lo, hi) >= 0.95, n
        if lo + 1 < hi - 1:  # one rank narrower on each side falls short
            assert _coverage(n, lo + 1, hi - 1) < 0.95, n
    # The normal approximation with outward rounding it replaces covered 99.6% at n = 9.
    assert median_ci_ranks(9) == (2, 8)
    assert median_ci_ranks(15) == (4, 12)


def test_median_ci_ranks_past_the_exact_range_stay_near_95_percent():
    lo, hi = median_ci_ranks(5000)
    assert 0.95 <= _coverage(5000, lo, hi) <= 0.96


def test_ci_is_infinite_with_too_few_samples_and_narrows_with_more():
    assert median_ci([1.0, 2.0, 3.0]) == (-math.inf, math.inf)
    rng = random.Random(2)
    few = sorted(rng.gauss(10, 1) for _ in range(20))
    many = sorted(rng.gauss(10, 1) for _ in range(2000))
    assert ci_relative_half_width(many) < ci_relative_half_width(few)


def test_summary_json_has_no_infinities():
    assert summarize([1.0, 2.0]).to_json()["ci_low_ms"] is None


def test_empty_samples_are_an_error():
    with pytest.raises(ValueError):
        summarize([])


def test_samples_that_are_not_finite_are_an_error_naming_them():
    """A NaN sorts anywhere (its order statistics would be arbitrary) and an infinity has no mean."""
    for bad in (math.nan, math.inf):
        with pytest.raises(ValueError, match="not finite"):
            summarize([1.0, bad, 2.0])
