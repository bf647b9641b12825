"""benchmarks/harness_vs_bare.py says whether its rounds decide the p50 bar: each fresh
process's p50 is a draw of its own, so a median of four ratios can read +8% where eight read
-0.1% (the 2-core Zen 4 EPYC, batch 4, 2026-11-28)."""
import importlib.util
from pathlib import Path

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "harness_vs_bare.py"
_spec = importlib.util.spec_from_file_location("harness_vs_bare", _PATH)
harness_vs_bare = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(harness_vs_bare)


def test_a_verdict_says_whether_the_rounds_decide_it():
    decisiveness = harness_vs_bare.decisiveness
    assert "fewer than 6 rounds" in decisiveness([1.0, 1.01, 1.09, 0.99])
    assert "decisive, within the bar" in decisiveness([0.985, 0.99, 1.0, 1.005, 1.01, 1.015])
    assert "decisive, outside the bar" in decisiveness([1.03, 1.04, 1.05, 1.06, 1.07, 1.08])
    assert "decisive, outside the bar" in decisiveness([0.90, 0.91, 0.92, 0.93, 0.94, 0.97])
    # the eight rounds measured at batch 4: a median of -0.1%, rounds from -4.9% to +9.3%
    rounds = [537.15 / 548.41, 572.46 / 523.74, 546.08 / 574.49, 582.51 / 560.98, 581.45 / 598.87,
              627.26 / 611.14, 592.79 / 582.22, 557.84 / 580.95]
    verdict = decisiveness(rounds)
    assert "not decisive" in verdict and "rounds -4.9%..+9.3%" in verdict


def test_an_undecided_verdict_says_how_many_rounds_would_decide_it():
    rounds_to_decide = harness_vs_bare.rounds_to_decide
    # median +0.5%: 1.5 points of room; an interval of +-3% around it needs (3 / 1.5)^2 = 4x the rounds
    assert "about 40 rounds" in rounds_to_decide([1.005] * 10, 0.975, 1.035)
    assert "outside the bar" in rounds_to_decide([1.03] * 10, 1.0, 1.06)
    verdict = harness_vs_bare.decisiveness([0.95, 0.97, 1.0, 1.005, 1.01, 1.02, 1.04, 1.07])
    assert "not decisive" in verdict and "rounds at this spread would place the interval within" in verdict
