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


def beside_nothing(monkeypatch) -> None:
    """A copy reading taken beside other processes is left out (the test below): these tests
    are about a reading's plumbing, and must pass on a busy machine too."""
    from benchmark_runners import contention

    monkeypatch.setattr(contention, "is_contended", lambda share: False)


def test_a_measured_cpu_row_carries_the_readings_taken_around_its_timing_and_its_workers_copy_reading(tiny_models, monkeypatch):
    beside_nothing(monkeypatch)
    copies = []
    real_copy = sr.reference_copy_gbs
    monkeypatch.setattr(sr, "reference_copy_gbs", lambda device: copies.append(device) or real_copy(device))
    measurer = ConfigMeasurer("test-run", {"suite": "pytest"}, {"cpu": {"name": "test cpu", "fingerprint": "cpu-test"}})
    rows = [measurer.run(BenchmarkConfig(model=str(tiny_models["text"]), batch_size=b, policy=FAST_POLICY)) for b in (1, 2)]
    for row in rows:
        assert row.status == "ok", row.error
        reference = row.speed_reference
        assert reference["before_gflops"] > 0 and reference["after_gflops"] > 0 and reference["kernel"] == sr.KERNEL
        assert reference["copy_gbs"] > 0 and reference["copy_kernel"] == sr.COPY_KERNEL
    assert copies == ["cpu"]  # once a process: its 128 MiB of fresh pages cost more than a small config's timing
    assert rows[0].speed_reference["copy_gbs"] == rows[1].speed_reference["copy_gbs"]


def test_the_copy_reading_is_a_rate_of_the_host_cpu_and_leaves_nothing_resident(monkeypatch):
    import psutil

    beside_nothing(monkeypatch)
    assert sr.reference_copy_gbs("cuda:0") is None and sr.reference_copy_gbs("openvino:GPU") is None
    sr.reference_gflops("cpu")  # torch imported and its kernels warm, without a copy reading yet
    before = psutil.Process().memory_info().rss
    assert sr.reference_copy_gbs("cpu") > 0
    assert psutil.Process().memory_info().rss - before < 16 * 2**20  # its two 64 MiB buffers are unmapped, not cached
    record = sr.record(100.0, 64.0, 41.5)
    assert record["copy_gbs"] == 41.5 and record["copy_kernel"] == sr.COPY_KERNEL and sr.copy_rate(record) == 41.5
    assert "copy_gbs" not in sr.record(100.0, 64.0)
    for broken in (None, {}, {"copy_gbs": 0}, {"copy_gbs": -3.0}, {"copy_gbs": True}, {"copy_gbs": float("nan")}, {"copy_gbs": "fast"}):
        assert sr.copy_rate(broken) is None


def test_a_copy_reading_that_cannot_be_taken_or_was_taken_beside_others_is_absent_and_the_config_still_measures(tiny_models, monkeypatch):
    import mmap

    from benchmark_runners import contention

    monkeypatch.setattr(contention, "is_contended", lambda share: True)
    assert sr.reference_copy_gbs("cpu") is None  # beside other processes: theirs, not the machine's
    monkeypatch.undo()

    def refuse(*_args, **_kwargs):
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(mmap, "mmap", refuse)
    assert sr.reference_copy_gbs("cpu") is None
    measurer = ConfigMeasurer("test-run", {"suite": "pytest"}, {"cpu": {"name": "test cpu", "fingerprint": "cpu-test"}})
    row = measurer.run(BenchmarkConfig(model=str(tiny_models["text"]), policy=FAST_POLICY))
    assert row.status == "ok", row.error
    assert row.speed_reference["before_gflops"] > 0 and "copy_gbs" not in row.speed_reference


def test_the_run_summary_says_how_many_configs_ran_well_below_the_median():
    assert sr.speed_summary([]) is None
    line = sr.speed_summary([100.0, 100.0, 100.0, 70.0, 120.0])
    assert "median 100 GFLOP/s" in line and "range 70-120" in line and "1 of 5 configs timed below 0.8x" in line

    class Row:
        def __init__(self, reference):
            self.speed_reference = reference

    rows = [Row({"before_gflops": 100.0, "after_gflops": 64.0}), Row(None)]
    assert sr.config_rates(rows) == [80.0]
    # the copy kernel: one reading a worker, its configs in a row
    workers = [Row({"before_gflops": 1.0, "after_gflops": 1.0, "copy_gbs": c}) for c in (34.0, 53.0, 34.0, 53.0, 53.0, 51.0)]
    assert sr.worker_copy_rates(workers + [Row(None)]) == [34.0, 53.0, 51.0]  # whatever order a sweep returns rows in
    assert sr.per_worker([("a", 34.0), ("b", 34.0), ("a", 34.0), ("a", None)]) == [34.0, 34.0]  # two workers, one reading each
    line = sr.speed_summary([100.0] * 5, [34.0, 53.0, 51.0])
    assert "copy bandwidth (once a worker): median 51.0 GB/s, range 34.0-53.0 over 3 workers" in line
