"""`devicefit run` end to end (issue 21 item 3): a run killed while it loads does not block the
next one, and a run waiting for the writer ends on SIGTERM. Before the fix both hung forever
(the timeouts here turn a hang into a failure). Each test measures one tiny config. And a
SIGTERM while the run warms its caches, before measuring, ends it there: the warm-up counted the
stop as one task's failure and went on with the rest (about 90 s of a fresh `make run`)."""
from __future__ import annotations

import json
import signal
import subprocess
import threading

import pytest

from devicefit import store
from devicefit.paths import DataPaths
from tests.faults.run_helpers import (
    RUN_ARGS,
    active_runs,
    devicefit_run,
    failure_messages,
    helper,
    instance,
    isolated_env,
    kill_leftovers,
    wait_for,
    writer_info,
)


@pytest.fixture(autouse=True)
def _no_leftover_processes():
    yield
    kill_leftovers()


def _landing_rows(data: DataPaths) -> int:
    return sum(len(json.loads(p.read_text())["results"]) for p in data.raw.glob("*.json"))


def test_a_run_killed_while_it_loads_does_not_block_the_next(tmp_path):
    env = isolated_env(tmp_path)
    killed = helper(["run", "kill-after-load", str(tmp_path / "loaded"), "--", *RUN_ARGS], env,
                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _, err = killed.communicate(timeout=300)
    assert killed.returncode == -signal.SIGKILL and (tmp_path / "loaded").exists(), err[-2000:]
    inst = instance(env)
    [stale] = [r for r in active_runs(inst) if r.job_name == "results_job"]
    assert writer_info(inst).claimed_slots  # the killed run holds the only writer slot

    rerun = devicefit_run(env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = rerun.communicate(timeout=300)  # before the fix: measured, then waited forever
    assert rerun.returncode == 0, err[-3000:]
    assert "stale run marked failed" in err and stale.run_id in err
    assert inst.get_run_by_id(stale.run_id).status.value == "FAILURE"
    assert any("is gone (killed or crashed)" in m for m in failure_messages(inst, stale.run_id))
    assert not active_runs(inst) and not writer_info(inst).claimed_slots
    data = DataPaths(tmp_path / "data")
    con = store.connect(data.database, read_only=True)
    try:
        rows = con.execute("SELECT count(*), count(DISTINCT (run_id, config_key)) FROM measurements").fetchone()
    finally:
        con.close()
    assert rows == (_landing_rows(data), _landing_rows(data))  # loaded twice, stored once


def test_sigterm_ends_a_run_that_waits_for_the_writer(tmp_path):
    env = isolated_env(tmp_path)
    holder = helper(["hold", str(tmp_path / "held")], env)
    try:
        wait_for((tmp_path / "held").exists, 120, "the holder to take the slot", holder)
        inst = instance(env)
        [held] = active_runs(inst)
        run = devicefit_run(env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(iter(run.stderr.readline, "")), daemon=True)
        reader.start()
        # it says so when it starts waiting for the writer the holder keeps
        try:
            wait_for(lambda: any("waiting up to" in line for line in lines), 300, "the run to wait for the writer", run)
        except AssertionError as exc:  # say why: what the run printed, and whether the holder still ran
            reader.join(timeout=10)
            states = [r.status.value for r in inst.get_runs() if r.run_id == held.run_id]
            raise AssertionError(f"{exc}; the holder process {'runs' if holder.poll() is None else 'ended'}, its run "
                                 f"{states}; the run's stderr: {''.join(lines)[-3000:]}") from None
        assert run.poll() is None and held.run_id in " ".join(" ".join(lines).split())
        run.send_signal(signal.SIGTERM)
        run.wait(timeout=60)  # before the fix: SIGTERM ignored, waited forever
        reader.join(timeout=10)
        err = "".join(lines)
        assert run.returncode == 128 + signal.SIGTERM, err[-3000:]
        assert "stopped by SIGTERM" in " ".join(err.split())
        assert [r.run_id for r in active_runs(inst)] == [held.run_id] and holder.poll() is None  # the live holder is untouched
        assert [s.run_id for s in writer_info(inst).claimed_slots] == [held.run_id]
    finally:
        holder.kill()
        holder.wait()


def test_sigterm_while_the_caches_warm_ends_the_run_there(tmp_path):
    scratch, cache = tmp_path / "tmp", tmp_path / "cache"
    scratch.mkdir()
    cache.mkdir()  # empty: the catalog's facts alone keep the warm-up busy for many seconds
    env = isolated_env(tmp_path, TMPDIR=str(scratch), DEVICEFIT_CACHE_DIR=str(cache))
    run = devicefit_run(env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(run.stderr.readline, "")), daemon=True)
    reader.start()
    # models.parallel_warm's scratch directory exists while the warm-up runs, and only then
    wait_for(lambda: list(scratch.glob("devicefit-warm-*")), 300, "the warm-up to start", run)
    run.send_signal(signal.SIGTERM)
    run.wait(timeout=120)
    reader.join(timeout=10)
    err = " ".join("".join(lines).split())
    assert run.returncode == 128 + signal.SIGTERM, err[-3000:]
    # stopped where it was, not after the warm-up ("before its remaining runs started")
    assert "stopped by SIGTERM: before its runs finished" in err, err[-3000:]
    assert "Traceback" not in err
    assert not list(scratch.glob("devicefit-warm-*"))  # its helper's directory went with it
    assert not list((tmp_path / "data" / "raw").glob("*.json")) if (tmp_path / "data" / "raw").exists() else True
    assert not active_runs(instance(env))  # no Dagster run was started, none left STARTED


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_before_the_first_run_ends_it_with_one_line(tmp_path, signum):
    """Between the partition count and the first run `devicefit run` imports Dagster's definitions
    (seconds): a signal there ended it with Python's defaults (death by SIGTERM without a word, a
    KeyboardInterrupt traceback)."""
    env = isolated_env(tmp_path)
    run = devicefit_run(env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(run.stderr.readline, "")), daemon=True)
    reader.start()
    wait_for(lambda: any("partitions" in line for line in lines), 300, "the partition count", run)
    run.send_signal(signum)
    run.wait(timeout=120)
    reader.join(timeout=10)
    err = "".join(lines)
    assert run.returncode == 128 + signum, err[-3000:]
    last = [line for line in err.splitlines() if line.strip()][-1]
    assert f"stopped by {signal.Signals(signum).name}" in last and "Traceback" not in err, err[-3000:]
    assert not active_runs(instance(env))
