"""One benchmark per physical device: the lock every sweep takes, across processes."""
import os
import signal
import subprocess
import sys
import time

import pytest

from benchmark_runners.device_lock import DeviceBusy, hold_devices, physical_device

HOLDER = """
import sys, time
from benchmark_runners.device_lock import hold_devices
with hold_devices([sys.argv[1]]):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def _holder(name: str, seconds: float, env: dict) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, name, str(seconds)], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout.readline().strip() == "held"
    return proc


@pytest.fixture
def lock_env(tmp_path, monkeypatch):
    monkeypatch.setenv("DEVICEFIT_LOCK_DIR", str(tmp_path / "locks"))
    return {**os.environ, "DEVICEFIT_LOCK_DIR": str(tmp_path / "locks")}


def test_devices_sharing_hardware_share_a_lock():
    assert physical_device("cpu") == physical_device("openvino:CPU") == "cpu"
    assert physical_device("cuda") == physical_device("cuda:0") == "cuda-0"
    assert physical_device("cuda:1") == "cuda-1"


def test_a_device_name_never_leaves_the_lock_directory(lock_env, tmp_path):
    for hostile in ("cuda:0/../../x", "cuda:../escape", "cuda:a b"):
        with pytest.raises(ValueError, match="not a device"):
            physical_device(hostile)
    with pytest.raises(ValueError, match="not a device lock name"):
        with hold_devices(["../x"], wait_s=0):
            pass
    assert not (tmp_path / "x.lock").exists()


def test_a_held_device_makes_the_next_holder_wait_then_give_up_naming_the_holder(lock_env):
    proc = _holder("cpu", 30, lock_env)
    try:
        told = []
        started = time.monotonic()
        with pytest.raises(DeviceBusy, match=rf"device cpu is still measuring for pid {proc.pid}"):
            with hold_devices(["cpu"], wait_s=1.5, on_wait=told.append):
                pass
        assert time.monotonic() - started >= 1.4
        assert told and f"pid {proc.pid}" in told[0]
        with hold_devices(["cuda-0"], wait_s=0):  # another device is free
            pass
    finally:
        proc.kill()
        proc.wait()


def test_the_kernel_frees_the_lock_of_a_killed_holder(lock_env):
    proc = _holder("cpu", 60, lock_env)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    with hold_devices(["cpu"], wait_s=2):  # no stale lock to reap
        pass


def test_the_lock_is_reentrant_within_a_process_and_released_at_the_outermost_exit(lock_env):
    with hold_devices(["cpu"], wait_s=0):
        with hold_devices(["cpu", "cuda-0"], wait_s=0):
            pass
        # still held by the outer block: another process cannot take it
        probe = subprocess.run([sys.executable, "-c", "from benchmark_runners.device_lock import hold_devices\n"
                                "with hold_devices(['cpu'], wait_s=0): pass"], capture_output=True, text=True, env=lock_env)
        assert probe.returncode != 0 and "DeviceBusy" in probe.stderr
    probe = subprocess.run([sys.executable, "-c", "from benchmark_runners.device_lock import hold_devices\n"
                            "with hold_devices(['cpu', 'cuda-0'], wait_s=0): pass"], capture_output=True, text=True, env=lock_env)
    assert probe.returncode == 0, probe.stderr


def test_a_bad_wait_bound_is_refused(monkeypatch, lock_env):
    monkeypatch.setenv("DEVICEFIT_DEVICE_WAIT_S", "forever")
    from benchmark_runners.device_lock import BadWaitBound

    with pytest.raises(BadWaitBound, match="DEVICEFIT_DEVICE_WAIT_S"):
        with hold_devices(["cpu"]):
            pass


def test_busy_elsewhere_names_devices_another_process_measures_on(lock_env):
    from benchmark_runners.device_lock import busy_elsewhere

    assert busy_elsewhere(["cpu", "cuda-0"]) == []
    proc = _holder("cpu", 30, lock_env)
    try:
        assert busy_elsewhere(["cpu", "cuda-0"]) == ["cpu"]
    finally:
        proc.kill()
        proc.wait()
    with hold_devices(["cpu"], wait_s=0):
        assert busy_elsewhere(["cpu"]) == []  # this process's own hold is not "elsewhere"


def test_a_lock_directory_that_is_a_file_is_named_not_file_exists(tmp_path, monkeypatch):
    """DEVICEFIT_LOCK_DIR naming a file ended `benchmark` with "File exists: PATH
    (FileExistsError)", which names no problem (found by a fault hunt, 2026-11-29)."""
    from typer.testing import CliRunner

    from benchmark_runners.device_lock import BadLockDir
    from devicefit.cli import app

    blocker = tmp_path / "locks"
    blocker.write_text("")
    monkeypatch.setenv("DEVICEFIT_LOCK_DIR", str(blocker))
    with pytest.raises(BadLockDir, match=f"device lock directory {blocker} is not a directory"):
        with hold_devices(["cpu"], wait_s=0):
            pass
    out = CliRunner().invoke(app, ["benchmark", "--model", "bert-tiny"])
    assert out.exit_code == 2 and "is not a directory (DEVICEFIT_LOCK_DIR names it)" in " ".join(out.output.split()), out.output


def test_an_unknown_device_leaves_no_lock_file(tmp_path, monkeypatch):
    """`benchmark --device tpu` was refused, but only after the busy check had created
    tpu-0.lock in the machine-wide lock directory (found by a fault hunt, 2026-11-29)."""
    from typer.testing import CliRunner

    from devicefit.cli import app

    monkeypatch.setenv("DEVICEFIT_LOCK_DIR", str(tmp_path / "locks"))
    out = CliRunner().invoke(app, ["benchmark", "--model", "bert-tiny", "--device", "tpu"])
    assert out.exit_code == 2 and "unknown device 'tpu'" in out.output, out.output
    assert not list(tmp_path.glob("locks/tpu*"))
