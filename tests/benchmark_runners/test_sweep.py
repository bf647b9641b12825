"""Isolation: every config in a worker process; crashes and timeouts become failed rows and
the sweep goes on."""
import os
import signal
import tempfile
from pathlib import Path

from benchmark_runners.harness import TimingPolicy
from benchmark_runners.records import BenchmarkConfig, BenchmarkResult
from benchmark_runners.sweep import run_sweep
from tests.conftest import FAST_POLICY


def test_a_worker_killed_mid_sweep_fails_only_its_config():
    """...and its scratch directory (paths.WORKER_SCRATCH_ENV: where a worker's browser keeps its
    temporary files) goes with it: the sweep removes it, since a killed worker cannot."""
    from benchmark_runners import sweep

    sweep._discard_early_worker()  # one an earlier test started holds a scratch directory of its own
    configs = [BenchmarkConfig("bert-tiny", batch_size=b, policy=FAST_POLICY) for b in (1, 2, 4)]
    killed = []
    scratch_before = set(Path(tempfile.gettempdir()).glob("devicefit-worker-*"))

    def on_event(event):
        if event.kind == "config_started" and event.config.batch_size == 2 and not killed:
            live = set(Path(tempfile.gettempdir()).glob("devicefit-worker-*")) - scratch_before
            for scratch in live:  # what a browser would leave there
                (scratch / "org.chromium.Chromium.test").mkdir()
            os.kill(event.worker_pid, signal.SIGKILL)
            killed.append(live)

    results = run_sweep(configs, on_event=on_event)
    assert killed[0], "the worker had a scratch directory"
    assert not set(Path(tempfile.gettempdir()).glob("devicefit-worker-*")) - scratch_before
    assert [r.status for r in results] == ["ok", "failed", "ok"]
    assert "SIGKILL" in results[1].error and results[1].reason_code == "worker_died"
    assert [r.batch_size for r in results] == [1, 2, 4]
    assert results[2].iterations >= 2  # measured by a fresh worker after the crash
    assert len({r.run_id for r in results}) == 1


def test_a_config_that_overruns_its_timeout_is_killed_and_the_sweep_continues():
    never_converges = TimingPolicy(ci_target=0.0, min_iterations=10**6, max_iterations=10**7, max_time_s=600)
    configs = [
        BenchmarkConfig("bert-tiny", batch_size=1, policy=never_converges, timeout_s=8),
        BenchmarkConfig("bert-tiny", batch_size=2, policy=FAST_POLICY),
    ]
    results = run_sweep(configs)
    assert results[0].status == "failed"
    assert "timed out after 8 s" in results[0].error and results[0].reason_code == "timeout"
    assert results[1].status == "ok"


def test_absent_hardware_is_a_skipped_row_with_the_detection_reason():
    results = run_sweep([BenchmarkConfig("bert-tiny", device="mps", policy=FAST_POLICY)])
    assert results[0].status == "skipped"
    assert results[0].error.startswith("mps is not available here:") and results[0].reason_code == "device_unavailable"


def test_a_row_the_sweep_writes_itself_names_the_model_as_the_workers_rows_do(tiny_models):
    """A skip before any worker (absent hardware, no memory for it) or a worker's death was
    stored under the name as typed (BERT-TINY, a directory's path), beside the same config's ok
    rows under the resolved name: one model under two names in the store."""
    results = run_sweep([BenchmarkConfig("BERT-TINY", device="mps", policy=FAST_POLICY),
                         BenchmarkConfig(str(tiny_models["text"]), device="mps", policy=FAST_POLICY)])
    assert [r.status for r in results] == ["skipped", "skipped"]
    assert results[0].model == "bert-tiny" and results[0].model_path is None
    assert results[1].model == tiny_models["text"].name and results[1].model_path == str(tiny_models["text"].resolve())


def test_rows_carry_provenance_and_round_trip_through_json():
    [row] = run_sweep([BenchmarkConfig("bert-tiny", batch_size=2, policy=FAST_POLICY)])
    assert row.status == "ok", row.error
    env = row.environment
    assert env["versions"]["torch"].startswith("2.13")
    assert env["torch_threads"] >= 1
    assert "git" in env and "python" in env
    assert row.hardware_fingerprint.startswith("cpu-")
    assert row.memory_method in ("kernel_vmhwm", "sampled_rss_10ms")
    assert BenchmarkResult.from_json(row.to_json()) == row


def _fake_python(tmp_path, body: str) -> str:
    script = tmp_path / "fake-python"
    script.write_text("#!/bin/sh\ncat > /dev/null\n" + body + "\n")
    script.chmod(0o755)
    return str(script)


def test_a_worker_that_writes_garbage_fails_its_configs_and_the_sweep_ends(tmp_path):
    configs = [BenchmarkConfig("bert-tiny", batch_size=b, policy=FAST_POLICY) for b in (1, 2)]
    rows = run_sweep(configs, python=_fake_python(tmp_path, "echo 'not json'"))
    assert [r.status for r in rows] == ["failed", "failed"]
    assert all("malformed output" in r.error for r in rows)


def test_a_worker_that_exits_early_fails_its_configs_and_the_sweep_ends(tmp_path):
    rows = run_sweep([BenchmarkConfig("bert-tiny", policy=FAST_POLICY)], python=_fake_python(tmp_path, "exit 0"))
    assert rows[0].status == "failed"
    assert "exited before measuring" in rows[0].error


def test_the_same_config_twice_gives_two_rows_in_order():
    config = BenchmarkConfig("bert-tiny", policy=FAST_POLICY)
    rows = run_sweep([config, BenchmarkConfig("bert-tiny", device="mps", policy=FAST_POLICY), config])
    assert [r.status for r in rows] == ["ok", "skipped", "ok"]


def test_a_worker_started_early_measures_the_next_sweep_and_an_unused_one_is_killed():
    """The CLI starts the first worker before it resolves models (their imports overlap); the
    sweep takes that worker, and one nobody takes is killed at exit, not left running."""
    from benchmark_runners import sweep

    sweep.start_worker_early("bert-tiny")
    early_pid = sweep._early.proc.pid
    started = []
    [row] = run_sweep([BenchmarkConfig("bert-tiny", batch_size=1, policy=FAST_POLICY)],
                      on_event=lambda e: started.append(e.worker_pid) if e.kind == "worker_started" else None)
    assert row.status == "ok" and started == [early_pid] and sweep._early is None

    sweep.start_worker_early("bert-tiny")
    unused = sweep._early.proc
    sweep._discard_early_worker()
    assert unused.poll() is not None and sweep._early is None


def test_workers_are_forked_from_one_server_and_the_sweep_falls_back_without_it(monkeypatch):
    """Every group's worker is a fresh process forked from the sweeping process's fork server
    (its imports done once); a server that breaks is dropped with the reason, and workers start
    as fresh interpreters instead, measuring the same."""
    import psutil

    from benchmark_runners import sweep

    pids = []
    configs = [BenchmarkConfig("bert-tiny", batch_size=1, policy=FAST_POLICY),
               BenchmarkConfig("all-MiniLM-L6-v2", batch_size=1, policy=FAST_POLICY)]
    rows = run_sweep(configs, on_event=lambda e: pids.append(e.worker_pid) if e.kind == "worker_started" else None)
    assert [r.status for r in rows] == ["ok", "ok"] and len(set(pids)) == 2
    # The server's imports and the worker's own are out of the collector's reach (a full
    # collection walked some 370,000 objects otherwise, at every model a worker releases).
    assert all(r.environment["gc_frozen_objects"] > 100_000 for r in rows)
    assert all("settings" in r.environment["allocator"] for r in rows)  # the worker says which malloc it ran with
    server = sweep._server
    assert server is not None and server.proc.poll() is None
    for pid in pids:  # each worker was the server's child, in a session of its own, and is gone
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE

    def broken(*args, **kwargs):
        raise RuntimeError("fork server exited")

    monkeypatch.setattr(server, "fork", broken)
    monkeypatch.setattr(sweep, "_server_broken", None)
    [row] = run_sweep([BenchmarkConfig("bert-tiny", batch_size=2, policy=FAST_POLICY)])
    assert row.status == "ok" and sweep._server is None and "fork server exited" in sweep._server_broken
    assert row.environment["gc_frozen_objects"] > 100_000  # a fresh interpreter freezes its own
    assert server.proc.poll() is not None  # the broken server was shut down, not left behind


def test_a_fork_server_lost_under_its_worker_loses_no_row(monkeypatch):
    """The fork server killed (as by the out-of-memory killer) while its worker measures: the
    worker, re-parented, finishes and its rows arrive; the sweep watches its pid instead of
    asking the dead server, and the next sweep starts workers as fresh interpreters, saying why."""
    from benchmark_runners import sweep

    monkeypatch.setattr(sweep, "_server_broken", None)
    configs = [BenchmarkConfig("bert-tiny", batch_size=b, policy=FAST_POLICY) for b in (1, 2)]
    killed = []

    def on_event(event):
        if event.kind == "config_started" and not killed:
            killed.append(sweep._server.proc.pid)
            os.kill(killed[0], signal.SIGKILL)
            sweep._server.proc.wait()

    rows = run_sweep(configs, on_event=on_event)
    assert killed and [r.status for r in rows] == ["ok", "ok"], [r.error for r in rows]
    [row] = run_sweep([BenchmarkConfig("bert-tiny", batch_size=4, policy=FAST_POLICY)])
    assert row.status == "ok" and sweep._server is None and "fork server lost" in sweep._server_broken


def test_a_model_made_after_the_freeze_is_still_collected():
    """freeze_imports takes what is alive at the worker's start out of the collector's reach;
    a model made and dropped afterwards (reference cycles included) is still freed by the
    collection between configs."""
    import subprocess
    import sys

    code = """
import gc, weakref
from benchmark_runners.worker import freeze_imports
freeze_imports()
assert gc.get_freeze_count() > 0
class Node: pass
a, b = Node(), Node()
a.other, b.other = b, a
gone = weakref.ref(a)
del a, b
gc.collect()
print("freed" if gone() is None else "kept")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "freed", out.stderr


def test_a_dead_workers_error_is_read_from_the_end_of_its_stderr_only():
    """A worker that logged for hours: its row's error is the last lines, and reading it does not
    load the whole file (50 MB here) into the parent."""
    import tempfile
    from types import SimpleNamespace

    from benchmark_runners import sweep

    class CountingFile:
        def __init__(self, inner):
            self.inner, self.read_bytes = inner, 0

        def seek(self, *a):
            return self.inner.seek(*a)

        def read(self, *a):
            data = self.inner.read(*a)
            self.read_bytes += len(data)
            return data

    with tempfile.TemporaryFile() as raw:
        line = b"INFO a chatty library says the same thing again\n"
        raw.write(line * (50 * 1024 * 1024 // len(line)))
        raw.write(b"Traceback (most recent call last):\nRuntimeError: the real cause\n")
        counting = CountingFile(raw)
        tail = sweep._Worker.stderr_tail(SimpleNamespace(stderr=counting))
    assert tail.endswith("RuntimeError: the real cause") and len(tail) <= sweep.STDERR_TAIL_CHARS
    assert counting.read_bytes <= sweep.STDERR_READ_BYTES
