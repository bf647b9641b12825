"""A dead run never holds the DuckDB writer, a live one is waited for within a bound, and a
signal ends a run that waits in Dagster's own slot queue (issue 21 item 3). Real Dagster
instances and real processes; no measuring, so each test takes seconds."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import psutil
import pytest

from pipelines import run_guard
from pipelines.run_guard import Owner, owner_alive
from pipelines.run_watch import waiting_for_slot
from tests.faults.run_helpers import active_runs, failure_messages, helper, instance, isolated_env, kill_leftovers, wait_for, writer_info


@pytest.fixture(autouse=True)
def _no_leftover_processes():
    yield
    kill_leftovers()


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_owner_liveness_sees_dead_reused_zombie_and_foreign_processes():
    me = psutil.Process()
    assert owner_alive(Owner(me.pid, run_guard.this_host(), me.create_time())) is True
    assert owner_alive(Owner(_dead_pid(), None, None)) is False
    # the pid exists but belongs to a process younger than the run's owner: reused
    assert owner_alive(Owner(me.pid, None, me.create_time() - 3600)) is False
    assert owner_alive(Owner(me.pid, None, None), run_started_at=me.create_time() - 3600) is False
    # an untagged run's live owner that reads a few seconds younger than its run (psutil's start
    # is the kernel's boot time in whole seconds, moved by clock steps) is alive, not reused
    assert owner_alive(Owner(me.pid, None, None), run_started_at=me.create_time() - 30) is True
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    wait_for(lambda: psutil.Process(zombie.pid).status() == psutil.STATUS_ZOMBIE, 30, "the child to exit")
    assert owner_alive(Owner(zombie.pid, None, None)) is False
    zombie.wait()
    assert owner_alive(Owner(_dead_pid(), "another-host", None)) is None  # cannot tell from here


def test_owner_tags_carry_the_kernels_start_mark_which_a_clock_step_cannot_move():
    from pipelines.run_guard import owner_from_tags, owner_tags, process_start_mark

    me = psutil.Process()
    owner = owner_from_tags(owner_tags())
    if process_start_mark(me.pid) is None:
        pytest.skip("no /proc here: the owner's start is recorded as a time")
    assert owner.started == process_start_mark(me.pid) and owner.started.startswith("ticks:")
    assert owner_alive(owner) is True
    # another process's mark on this pid: a reused pid, not the owner
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        wait_for(lambda: process_start_mark(other.pid) is not None, 30, "the child to start")
        assert owner_alive(Owner(me.pid, None, process_start_mark(other.pid))) is False
    finally:
        other.kill()
        other.wait()


@pytest.mark.parametrize("tags", [["owner"], []], ids=["owner-tags", "untagged-older-run"])
def test_a_run_whose_process_died_holding_the_writer_is_marked_failed_and_its_slot_freed(tmp_path, tags):
    env = isolated_env(tmp_path)
    ready = tmp_path / "ready"
    assert helper(["die", str(ready), *tags], env).wait(timeout=120) == -signal.SIGKILL
    inst = instance(env)
    [stale] = active_runs(inst)
    assert writer_info(inst).claimed_slots  # what the issue saw: STARTED, holding the only slot
    reaped = run_guard.reap_stale_runs(inst)
    assert [r.run_id for r in reaped] == [stale.run_id]
    assert inst.get_run_by_id(stale.run_id).status.value == "FAILURE"
    assert any("is gone (killed or crashed)" in m for m in failure_messages(inst, stale.run_id))
    info = writer_info(inst)
    assert not info.claimed_slots and not info.pending_steps
    assert run_guard.reap_stale_runs(inst) == []  # idempotent: nothing marked twice


def test_live_and_foreign_runs_are_left_alone_and_a_bounded_wait_names_the_holder(tmp_path):
    env = isolated_env(tmp_path)
    foreign = helper(["die", str(tmp_path / "f"), "devicefit/pid=1", "devicefit/host=another-host"], env)
    assert foreign.wait(timeout=120) == -signal.SIGKILL
    inst = instance(env)
    [foreign_run] = active_runs(inst)
    assert run_guard.reap_stale_runs(inst) == []  # its owner is on another host: not ours to judge
    inst.report_run_failed(foreign_run, "test: cleared")
    run_guard.reap_stale_runs(inst)  # a finished run's slot is given back
    assert not writer_info(inst).claimed_slots

    holder = helper(["hold", str(tmp_path / "ready"), "owner"], env)
    try:
        wait_for((tmp_path / "ready").exists, 120, "the holder to take the slot", holder)
        [live] = active_runs(inst)
        assert run_guard.reap_stale_runs(inst) == []
        with pytest.raises(run_guard.WriterBusy) as busy:
            run_guard.wait_for_writer(inst, timeout_s=0.5, poll_s=0.1)
        message = str(busy.value)
        assert live.run_id in message and f"pid {holder.pid}" in message and "DEVICEFIT_WRITER_WAIT_S" in message
        assert inst.get_run_by_id(live.run_id).status.value == "STARTED"
    finally:
        holder.kill()
        holder.wait()
    run_guard.wait_for_writer(inst, timeout_s=10, poll_s=0.1)  # its holder died: reaped, then free
    assert inst.get_run_by_id(live.run_id).status.value == "FAILURE"


def _start_watched(tmp_path, env, wait_s: str):
    holder = helper(["hold", str(tmp_path / "held"), "owner"], env)
    wait_for((tmp_path / "held").exists, 120, "the holder to take the slot", holder)
    watched = helper(["watched", str(tmp_path / "run_id"), wait_s], env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    inst = instance(env)
    run_id = wait_for(lambda: (tmp_path / "run_id").exists() and (tmp_path / "run_id").read_text(), 120, "the run id", watched)
    wait_for(lambda: waiting_for_slot(inst, run_id), 120, "the run to queue for the slot", watched)
    return holder, watched, inst, run_id


def test_sigterm_ends_a_run_waiting_in_dagsters_slot_queue(tmp_path):
    env = isolated_env(tmp_path)
    holder, watched, inst, run_id = _start_watched(tmp_path, env, "600")
    try:
        watched.send_signal(signal.SIGTERM)
        out, err = watched.communicate(timeout=60)  # before: ignored, the run waited forever
        assert watched.returncode == 128 + signal.SIGTERM
        assert "stopped by SIGTERM" in err and "waited for a concurrency slot" in err
        assert inst.get_run_by_id(run_id).status.value == "FAILURE"
        assert any("stopped by SIGTERM" in m for m in failure_messages(inst, run_id))
        assert not waiting_for_slot(inst, run_id)
        assert holder.poll() is None  # the live holder keeps its slot
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize(("then", "stop"), [("check", "before its remaining runs started"), ("end", "after its runs ended")])
def test_a_signal_that_lands_in_a_del_prints_no_traceback_and_still_stops(tmp_path, then, stop):
    """Our handler's RunInterrupted raised inside __del__ (or a GC callback) cannot propagate:
    Python printed "Exception ignored in ... Traceback" and dropped it. The watch keeps quiet
    about it and raises it at its next check, or where its block ends."""
    watched = helper(["signal-in-del", then], isolated_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = watched.communicate(timeout=120)
    assert watched.returncode == 128 + signal.SIGTERM, (out, err[-2000:])
    lines = out.splitlines()
    assert lines[0] == "after the collection" and lines[1].startswith(f"stopped by SIGTERM: {stop}") and len(lines) == 2, out
    assert "Exception ignored" not in err and "Traceback" not in err, err[-2000:]


def test_a_wait_in_dagsters_queue_is_bounded_and_names_the_holder(tmp_path):
    env = isolated_env(tmp_path)
    holder, watched, inst, run_id = _start_watched(tmp_path, env, "2")
    try:
        out, err = watched.communicate(timeout=60)
        assert watched.returncode == run_guard.WriterBusy.exit_code
        [holder_run] = [r for r in active_runs(inst) if r.run_id != run_id]
        assert holder_run.run_id in err and f"pid {holder.pid}" in err
        assert inst.get_run_by_id(run_id).status.value == "FAILURE" and not waiting_for_slot(inst, run_id)
    finally:
        holder.kill()
        holder.wait()


def test_a_holder_that_dies_while_we_wait_in_dagsters_queue_is_reaped_and_the_run_proceeds(tmp_path):
    env = isolated_env(tmp_path)
    holder, watched, inst, run_id = _start_watched(tmp_path, env, "600")
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    out, err = watched.communicate(timeout=90)
    assert watched.returncode == 0 and out.strip() == "success", err[-2000:]
    assert not active_runs(inst) and not writer_info(inst).claimed_slots


def test_the_writer_wait_bound_comes_from_the_environment_and_bad_values_are_refused(monkeypatch):
    from pipelines.run import DEFAULT_WRITER_WAIT_S, writer_wait_s

    monkeypatch.delenv("DEVICEFIT_WRITER_WAIT_S", raising=False)
    assert writer_wait_s() == DEFAULT_WRITER_WAIT_S
    monkeypatch.setenv("DEVICEFIT_WRITER_WAIT_S", "2.5")
    assert writer_wait_s() == 2.5
    for bad in ("soon", "-1", "nan", "inf"):
        monkeypatch.setenv("DEVICEFIT_WRITER_WAIT_S", bad)
        with pytest.raises(RuntimeError, match="DEVICEFIT_WRITER_WAIT_S must be a number of seconds"):
            writer_wait_s()
