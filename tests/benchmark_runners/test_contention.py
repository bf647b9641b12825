"""Contention detection: what other processes used of the host's CPU while a config was timed."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmark_runners import contention
from benchmark_runners.contention import CONTENDED_SHARE, MIN_TICKS, MIN_WINDOW_S, CpuSnapshot, other_cpu_share
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
    assert other_cpu_share(before, CpuSnapshot(1100, 10_200, 603)) == 0.0
    # counters that do not even hold our own work (100 ticks of ours, 10 busy) see no neighbour
    # either: not measured, never "no contention"
    assert other_cpu_share(before, CpuSnapshot(1010, 10_200, 600)) is None


def test_a_window_of_a_few_ticks_is_rounding_not_a_share():
    """/proc/stat charges whole 10 ms ticks: over 4 ticks a spinning neighbour reads 0% or 50% by
    chance (CI read 0.0 beside two busy loops), so fewer than MIN_TICKS ticks is not measured."""
    before = CpuSnapshot(host_busy_ticks=1000, host_total_ticks=10_000, own_ticks=500)
    assert other_cpu_share(before, CpuSnapshot(1000 + MIN_TICKS - 1, 10_000 + MIN_TICKS - 1, 500 + MIN_TICKS - 1)) is None
    assert other_cpu_share(before, CpuSnapshot(1000 + MIN_TICKS, 10_000 + MIN_TICKS, 500)) == 1.0


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="contention is measured from /proc (Linux only)")
def test_a_short_window_is_held_open_until_it_holds_enough_ticks(monkeypatch):
    """A timed phase of a few milliseconds is closed no sooner than MIN_WINDOW_S after it began,
    the process idle meanwhile, so the share it reports is read over enough ticks to resolve."""
    closed: list[contention.CpuSnapshot] = []
    real_snapshot = contention.snapshot
    monkeypatch.setattr(contention, "snapshot", lambda helpers=(): closed.append(real_snapshot(helpers)) or closed[-1])
    before = real_snapshot()
    share = contention.share_since(before)
    after = closed[-1]
    assert after.taken_at - before.taken_at >= MIN_WINDOW_S
    if share is None and after.host_total_ticks - before.host_total_ticks < MIN_TICKS:
        pytest.skip("/proc/stat did not advance with wall time here (a sandbox's synthetic counters)")
    assert after.host_total_ticks - before.host_total_ticks >= MIN_TICKS * 0.8  # ~10 a CPU; USER_HZ is 100
    assert share is not None or after.own_ticks - before.own_ticks > after.host_busy_ticks - before.host_busy_ticks
    assert contention.share_since(None) is None


def test_a_window_already_long_enough_is_closed_at_once(monkeypatch):
    """Only a short window waits: one that began MIN_WINDOW_S ago or more is read immediately."""
    slept: list[float] = []
    monkeypatch.setattr(contention.time, "sleep", slept.append)
    monkeypatch.setattr(contention, "snapshot", lambda helpers=(): CpuSnapshot(2000, 20_000, 500, contention.time.monotonic()))
    long_ago = CpuSnapshot(1000, 10_000, 500, contention.time.monotonic() - 2 * MIN_WINDOW_S)
    assert contention.share_since(long_ago) == pytest.approx(0.1) and slept == []
    just_now = CpuSnapshot(1000, 10_000, 500, contention.time.monotonic())
    contention.share_since(just_now)
    assert len(slept) == 1 and 0 < slept[0] <= MIN_WINDOW_S


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="contention is measured from /proc (Linux only)")
def test_a_competing_process_marks_the_config_contended(tiny_models):
    """One busy loop per CPU this process may use beside the measurement: every attempt is
    contended, so the config is measured twice and the row says so with the figure (the timings
    are not asserted). The loops inherit the affinity mask, so they land on the same CPUs.
    Each says when it spins: measured before an interpreter had started (slow beside a busy
    suite), the tiny model's first attempt took milliseconds on an idle CPU and passed."""
    hogs = [subprocess.Popen([sys.executable, "-c", "print('spinning', flush=True)\nwhile True: pass"], stdout=subprocess.PIPE, text=True)
            for _ in range(len(os.sched_getaffinity(0)))]
    try:
        assert all(hog.stdout.readline().strip() == "spinning" for hog in hogs)
        measurer = ConfigMeasurer("test-run", {"suite": "pytest"}, {"cpu": {"name": "test cpu", "fingerprint": "cpu-test"}})
        row = measurer.run(BenchmarkConfig(model=str(tiny_models["text"]), policy=FAST_POLICY))
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
            hog.stdout.close()
    assert row.status == "ok", row.error
    if row.other_cpu_share is None:
        pytest.skip("contention is not measurable here: /proc/stat's busy time does not hold this process's own work")
    assert row.contended is True and row.contention_attempts == 2, \
        f"other_cpu_share {row.other_cpu_share}, attempts {row.contention_attempts}, {len(os.sched_getaffinity(0))} CPUs usable"
    assert row.other_cpu_share > CONTENDED_SHARE


_STAT = """cpu  900 0 100 9000 0 0 0 0 0 0
cpu0 300 0 0 700 0 0 0 0 0 0
cpu1 200 0 100 700 0 0 0 0 0 0
cpu2 200 0 0 3800 0 0 0 0 0 0
cpu3 200 0 0 3800 0 0 0 0 0 0
intr 1 2 3
"""


def test_only_the_cpus_this_process_may_use_are_counted(tmp_path, monkeypatch):
    """In a container pinned to 2 CPUs of a bigger host, the host-wide line would dilute a
    neighbour on our CPUs by every CPU we cannot use; the per-CPU lines of the mask are summed."""
    stat = tmp_path / "stat"
    stat.write_text(_STAT)
    monkeypatch.setattr(contention, "_PROC_STAT", stat)
    assert contention._host_ticks({0, 1}) == (600, 2000)
    assert contention._host_ticks({2}) == (200, 4000)
    # every CPU, no mask, or a mask /proc/stat does not list: the host-wide line
    assert contention._host_ticks({0, 1, 2, 3}) == contention._host_ticks(None) == (1000, 10000)
    assert contention._host_ticks({7}) == (1000, 10000)
    stat.write_text("garbage")
    assert contention._host_ticks({0}) is None
    monkeypatch.setattr(contention, "_PROC_STAT", tmp_path / "absent")
    assert contention.snapshot() is None
