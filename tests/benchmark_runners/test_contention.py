"""Contention detection: what other processes used of the host's CPU while a config was timed."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmark_runners import contention
from benchmark_runners.contention import CONTENDED_SHARE, CpuSnapshot, other_cpu_share
from benchmark_runners.measure import ConfigMeasurer
from benchmark_runners.records import BenchmarkConfig
from tests.conftest import FAST_POLICY


def test_the_share_is_the_host_busy_time_less_the_measuring_process_own():
    before = CpuSnapshot(host_busy_ticks=1000, host_total_ticks=10_000, own_ticks=500)
    # 200 ticks of capacity (2 CPUs x 1 s at 100 Hz): 150 busy, 100 of them ours
    after = CpuSnapshot(host_busy_ticks=1150, host_total_ticks=10_200, own_ticks=600)
    assert other_cpu_share(before, after) == pytest.approx(0.25)
    assert contention.is_contended(0.25) and not contention.is_contended(CONTENDED_SHARE / 2)
    assert other_cpu_share(before, before) is None  # no tick elapsed: not measured, never a guess
    assert other_cpu_share(None, after) is None and contention.is_contended(None) is None
    # our own ticks are read at a different instant from the host's: never below 0 or above 1
    assert other_cpu_share(before, CpuSnapshot(1100, 10_200, 700)) == 0.0


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="contention is measured from /proc (Linux only)")
def test_a_competing_process_marks_the_config_contended(tiny_models):
    """One busy loop per CPU beside the measurement: every attempt is contended, so the config
    is measured twice and the row says so with the figure (the timings are not asserted)."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        measurer = ConfigMeasurer("test-run", {"suite": "pytest"}, {"cpu": {"name": "test cpu", "fingerprint": "cpu-test"}})
        row = measurer.run(BenchmarkConfig(model=str(tiny_models["text"]), policy=FAST_POLICY))
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert row.status == "ok", row.error
    assert row.contended is True and row.contention_attempts == 2
    assert row.other_cpu_share > CONTENDED_SHARE
