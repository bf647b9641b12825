"""The speed reference the worker takes around each host-CPU config (speed_reference.py): which
devices get one, that a reading is a real rate, and that a measured row carries both readings."""
from benchmark_runners import registry
from benchmark_runners import speed_reference as sr
from benchmark_runners.measure import ConfigMeasurer
from benchmark_runners.records import BenchmarkConfig
from tests.conftest import FAST_POLICY


def test_only_devices_that_run_on_the_host_cpu_get_a_reference():
    assert registry.runs_on_host_cpu("cpu") and registry.runs_on_host_cpu("openvino:CPU")
    assert not registry.runs_on_host_cpu("openvino:GPU") and not registry.runs_on_host_cpu("cuda:0") and not registry.runs_on_host_cpu("mps")
    assert not registry.runs_on_host_cpu("no-such-kind")
    assert sr.reference_gflops("cuda:0") is None  # a CPU kernel says nothing of a GPU


def test_a_reading_is_a_positive_rate_and_the_row_keeps_both_with_their_kernel():
    rate = sr.reference_gflops("cpu")
    assert rate is not None and rate > 0
    record = sr.record(100.0, 64.0)
    assert record["before_gflops"] == 100.0 and record["after_gflops"] == 64.0
    assert record["kernel"] == sr.KERNEL and record["threads"] >= 1
    assert sr.mean_gflops(record) == 80.0  # geometric mean of the two
    assert sr.record(None, 64.0) is None
    for broken in (None, {}, {"before_gflops": 0, "after_gflops": 10}, {"before_gflops": "fast", "after_gflops": 10},
                   {"before_gflops": True, "after_gflops": 10}, {"before_gflops": float("inf"), "after_gflops": 10}):
        assert sr.mean_gflops(broken) is None


def test_a_measured_cpu_row_carries_the_readings_taken_around_its_timing(tiny_models):
    measurer = ConfigMeasurer("test-run", {"suite": "pytest"}, {"cpu": {"name": "test cpu", "fingerprint": "cpu-test"}})
    row = measurer.run(BenchmarkConfig(model=str(tiny_models["text"]), policy=FAST_POLICY))
    assert row.status == "ok", row.error
    reference = row.speed_reference
    assert reference["before_gflops"] > 0 and reference["after_gflops"] > 0 and reference["kernel"] == sr.KERNEL


def test_the_run_summary_says_how_many_configs_ran_well_below_the_median():
    assert sr.speed_summary([]) is None
    line = sr.speed_summary([100.0, 100.0, 100.0, 70.0, 120.0])
    assert "median 100 GFLOP/s" in line and "range 70-120" in line and "1 of 5 configs timed below 0.8x" in line

    class Row:
        def __init__(self, reference):
            self.speed_reference = reference

    rows = [Row({"before_gflops": 100.0, "after_gflops": 64.0}), Row(None)]
    assert sr.config_rates(rows) == [80.0]
