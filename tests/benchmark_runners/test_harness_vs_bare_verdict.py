"""benchmarks/harness_vs_bare.py says whether its rounds decide the p50 bar: each fresh
process's p50 is a draw of its own, so a median of four ratios can read +8% where eight read
-0.1% (the 2-core Zen 4 EPYC, batch 4, 2026-11-28)."""
import importlib.util
from pathlib import Path

import pytest

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
    # An interval that sits to one side of its median: the far side decides, never fewer rounds than run.
    lopsided = sorted([0.975, 0.999, 1, 1, 1, 1, 1.001, 1.005])
    assert "about 13 rounds" in harness_vs_bare.decisiveness(lopsided)


def test_cvs_of_different_counts_compare_and_earlier_logs_pool(tmp_path):
    """Six samples against thirteen of one distribution: population standard deviations read
    the six 9% lower; the c4-unbiased CVs agree. A log from before (no CV note) is rescaled
    from the counts its lines give; a log from after is read as printed."""
    import random
    import statistics

    rng = random.Random(5)
    ratios = [harness_vs_bare.cv([rng.gauss(100, 3) for _ in range(6)]) / harness_vs_bare.cv([rng.gauss(100, 3) for _ in range(13)])
              for _ in range(4000)]
    assert abs(statistics.median(ratios) - 1) < 0.03
    line = ("batch 16 round 1: worker p50 2350.00 ms (cv 4.8%, n 6, time_cap), bare p50 2250.00 ms (cv 4.8%, n 13), "
            "threads worker/bare 2/2, others used 1.2% of the CPU\n")
    old, new = tmp_path / "old.log", tmp_path / "new.log"
    old.write_text(line)
    new.write_text(harness_vs_bare.CV_NOTE + "\n" + line)
    [before] = harness_vs_bare.pooled([old])[16]
    [after] = harness_vs_bare.pooled([new])[16]
    assert after["worker_cv"] == after["bare_cv"] == 4.8 and before["worker_p50"] == 2350.0
    c4 = harness_vs_bare.c4
    assert before["worker_cv"] / before["bare_cv"] == pytest.approx(
        ((6 / 5) ** 0.5 / c4(6)) / ((13 / 12) ** 0.5 / c4(13)))


def test_pool_names_a_log_it_cannot_use(tmp_path):
    """--pool on a missing file, or on a file with no round lines, says which; nothing is pooled."""
    empty = tmp_path / "empty.log"
    empty.write_text("nothing here\n")
    with pytest.raises(ValueError, match="empty.log holds no round lines"):
        harness_vs_bare.pooled([empty])
    with pytest.raises(ValueError, match="cannot read .*missing.log"):
        harness_vs_bare.pooled([tmp_path / "missing.log"])
