"""Chaos (issue 21, Deliver 5): `devicefit run` killed with SIGKILL at random points of measuring,
landing and loading, then rerun: the rerun finishes (a hang fails the test by its timeout) and
every landed row is stored exactly once, with no run left STARTED and no writer slot held.
And SIGTERM in the middle of the DuckDB load: the rows are whole or absent, the run is marked
failed with the reason, the exit is non-zero with one line, and the next run proceeds.

Every run here is real work (one tiny config measured), so the default test makes three kills;
`-m slow` makes twenty. The seed is DEVICEFIT_CHAOS_SEED (default 21)."""
from __future__ import annotations

import os
import random
import signal
import subprocess

import pytest

from benchmarks.chaos_kills import PHASES, audit, kill_at, rerun
from tests.faults.run_helpers import RUN_ARGS, active_runs, failure_messages, helper, instance, isolated_env, kill_leftovers, writer_info

RERUN_TIMEOUT_S = 300
SEED = int(os.environ.get("DEVICEFIT_CHAOS_SEED", "21"))


@pytest.fixture(autouse=True)
def _no_leftover_processes():
    yield
    kill_leftovers()


def _chaos(tmp_path, phases: list[str], rng: random.Random) -> None:
    env = isolated_env(tmp_path)
    kills = [kill_at(env, phase, rng, "cpu", tmp_path / f"kill-{i}.log", timeout=RERUN_TIMEOUT_S)
             for i, phase in enumerate(phases)]
    assert any(k.killed for k in kills), kills
    assert any(k.left_runs for k in kills), kills  # the reruns had a dead run to deal with
    final = rerun(env, "cpu", tmp_path / "rerun.log", timeout=RERUN_TIMEOUT_S)
    assert not final.hung, f"the rerun after {kills} hung (> {RERUN_TIMEOUT_S} s): {final.stderr_tail}"
    assert final.returncode == 0, final.stderr_tail
    found = audit(env)
    assert found.landing_files == 1 and found.landing_rows > 0, found
    assert found.exactly_once, (kills, found)
    assert found.stored_rows == found.landing_rows


def test_kill_9_at_measure_land_and_load_then_rerun_stores_every_row_once(tmp_path):
    _chaos(tmp_path, list(PHASES), random.Random(SEED))


@pytest.mark.slow
def test_twenty_random_kills_then_rerun_store_every_row_once(tmp_path):
    rng = random.Random(SEED)
    _chaos(tmp_path, [rng.choice(PHASES) for _ in range(20)], rng)


def test_sigterm_mid_load_leaves_rows_whole_or_absent_and_the_next_run_proceeds(tmp_path):
    env = isolated_env(tmp_path)
    ready = tmp_path / "committing"
    run = helper(["run", "slow-commit", str(ready), "--", *RUN_ARGS], env, stdout=subprocess.DEVNULL,
                 stderr=subprocess.PIPE, text=True)
    deadline_s = RERUN_TIMEOUT_S
    while not ready.exists():  # the load inserted its rows and waits to commit them
        assert run.poll() is None, run.stderr.read()[-3000:]
        deadline_s -= 0.1
        assert deadline_s > 0, "the load never reached its commit"
        subprocess.run(["sleep", "0.1"])
    run.send_signal(signal.SIGTERM)
    _, err = run.communicate(timeout=60)
    assert run.returncode == 128 + signal.SIGTERM, err[-3000:]
    last = [line for line in err.splitlines() if line.strip()][-1]
    assert "stopped by SIGTERM" in last and "whole or absent" in last, err[-3000:]
    assert "Traceback" not in err and "InterruptedError" not in err, err[-3000:]  # a stop, not a crash

    inst = instance(env)
    [results] = [r for r in inst.get_runs() if r.job_name == "results_job"]
    assert results.status.value == "FAILURE"
    assert any("stopped by SIGTERM" in m for m in failure_messages(inst, results.run_id))
    assert not active_runs(inst) and not writer_info(inst).claimed_slots
    found = audit(env)
    assert found.stored_rows == 0 and found.duplicated == 0, found  # the interrupted source: absent, not half-stored
    assert not found.stale_runs and not found.held_slots and not found.quarantined

    final = rerun(env, "cpu", tmp_path / "rerun.log", timeout=RERUN_TIMEOUT_S)
    assert not final.hung and final.returncode == 0, final.stderr_tail
    found = audit(env)
    assert found.exactly_once and found.stored_rows == found.landing_rows > 0, found
