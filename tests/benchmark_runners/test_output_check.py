"""The output check's figures on edge cases, and the agreement tolerance's basis."""
import math

import numpy as np
import pytest

from benchmark_runners.backends.browser_backend import _agreement
from benchmark_runners.output_check import TORCH_REFERENCE_MARGIN, agreement_tolerance, check_output


def test_an_integer_output_at_its_types_most_negative_value_is_not_zero():
    """abs(-128) wraps to -128 in int8: the magnitudes are taken wider, so the output counts."""
    check = check_output(np.full(10, -128, dtype=np.int8))
    assert check.problem is None and check.max_abs == 128 and check.zero_share == 0


def test_torch_deviation_that_is_not_finite_widens_no_tolerance():
    """torch's own fp16 forward that overflowed gives an infinite (or NaN) deviation; as a
    tolerance it would pass any output, so the fixed one holds and the basis says why."""
    for own in (math.inf, math.nan):
        tolerance, basis = agreement_tolerance(2e-2, "fp16", own)
        assert tolerance == 2e-2 and "bounds nothing" in basis
    assert agreement_tolerance(2e-2, "fp16", 0.1)[0] == pytest.approx(TORCH_REFERENCE_MARGIN * 0.1)
    assert agreement_tolerance(2e-2, "fp16", None) == (2e-2, "fixed fp16 tolerance")
    far_off = _agreement(np.full(5, 1000.0), np.linspace(-3, 3, 5), "fp16", torch_own=math.inf)
    assert not far_off["within_tolerance"] and far_off["tolerance"] == 2e-2
