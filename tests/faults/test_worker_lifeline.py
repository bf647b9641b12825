"""A measurement worker never outlives the process that started it: kill -9 of the parent (a
`devicefit run` or `devicefit benchmark` stopped hard) ends the worker at once, so it does not
measure on beside the next run and slow it down."""
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil

PARENT = """
import sys
from benchmark_runners.harness import TimingPolicy
from benchmark_runners.records import BenchmarkConfig
from benchmark_runners.sweep import run_sweep

def on_event(event):
    if event.kind == "config_started":
        print(event.worker_pid, flush=True)

# ci_target 0 never converges: the worker would measure for the whole minute
policy = TimingPolicy(ci_target=0.0, max_time_s=60.0, warmup_max_time_s=0.5)
run_sweep([BenchmarkConfig(model="bert-tiny", policy=policy, timeout_s=300)], on_event=on_event)
"""


def test_kill_9_of_the_parent_ends_its_worker():
    """...and the worker removes its scratch directory, which the killed parent no longer can."""
    scratch_before = set(Path(tempfile.gettempdir()).glob("devicefit-worker-*"))
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True,
                              cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    worker = None
    try:
        worker = psutil.Process(int(parent.stdout.readline()))  # the worker is measuring now
        assert worker.is_running()
        # The fork server the worker came from (benchmark_runners/zygote.py) must not outlive it either.
        servers = [p for p in psutil.Process(parent.pid).children() if "benchmark_runners.zygote" in " ".join(p.cmdline())]
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=30)
        try:
            worker.wait(timeout=15)
        except psutil.TimeoutExpired:
            raise AssertionError("the worker kept measuring after its parent was killed") from None
        for server in servers:
            try:
                server.wait(timeout=15)
            except psutil.TimeoutExpired:
                server.kill()
                raise AssertionError("the worker fork server outlived its parent") from None
        assert not set(Path(tempfile.gettempdir()).glob("devicefit-worker-*")) - scratch_before
    finally:
        if parent.poll() is None:
            parent.kill()
        if worker is not None and worker.is_running():
            worker.kill()
