"""Helpers (no tests) for the run-fault tests: an isolated Dagster instance and data dir, and
processes that behave like a `devicefit run` at its worst moments. Run as
`python -m tests.faults.run_helpers MODE ...` from the repository root:

  hold READY [k=v ...]     a Dagster run takes the duckdb_writer slot, touches READY, then holds it
  die READY [k=v ...]      the same run, killed by SIGKILL while it holds the slot
  watched READY WAIT_S     a pool run executed under devicefit's RunWatch (it waits for the slot)
  signal-in-del [check|end] SIGTERM arrives under RunWatch while an object's __del__ runs;
                           then the watch is asked (check) or its block simply ends (end)
  run MODE READY -- ARGS   `devicefit run ARGS` where the load is made to misbehave:
                           kill-after-load: SIGKILL right after the landing files were loaded
                           slow-commit: the first commit of measurement rows waits 120 s

Tags given as k=v are added to the run (`owner` adds devicefit's owner tags)."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUN_ARGS = ["--model", "bert-tiny", "--hardware", "cpu", "--batch-sizes", "1", "--precision", "fp32", "--no-training-mode"]


def isolated_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A DAGSTER_HOME with the project's dagster.yaml (the duckdb_writer pool of 1) and a data dir
    holding the session's hardware detection (tests.seeded_data: the runs here are about faults,
    not detection)."""
    from tests.seeded_data import seeded_data_dir

    home = tmp_path / "dagster_home"
    home.mkdir(exist_ok=True)
    shutil.copy(ROOT / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    return {**os.environ, "DAGSTER_HOME": str(home), "DEVICEFIT_DATA_DIR": str(seeded_data_dir(tmp_path / "data")),
            "PYTHONPATH": str(ROOT), **extra}


def instance(env: dict[str, str]):
    from dagster import DagsterInstance

    old = os.environ.get("DAGSTER_HOME")
    os.environ["DAGSTER_HOME"] = env["DAGSTER_HOME"]
    try:
        return DagsterInstance.get()
    finally:
        if old is None:
            os.environ.pop("DAGSTER_HOME")
        else:
            os.environ["DAGSTER_HOME"] = old


_STARTED: list[subprocess.Popen] = []


def _start(command: list[str], env: dict[str, str], **kwargs) -> subprocess.Popen:
    proc = subprocess.Popen(command, cwd=ROOT, env=env, **kwargs)
    _STARTED.append(proc)
    return proc


def helper(args: list[str], env: dict[str, str], **kwargs) -> subprocess.Popen:
    return _start([sys.executable, "-m", "tests.faults.run_helpers", *args], env, **kwargs)


def devicefit_run(env: dict[str, str], *args: str, **kwargs) -> subprocess.Popen:
    return _start([sys.executable, "-m", "pipelines.cli", "run", *(args or RUN_ARGS)], env, **kwargs)


def kill_leftovers() -> None:
    """A test that failed (or timed out on a hang) leaves no process of its own behind."""
    while _STARTED:
        proc = _STARTED.pop()
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def wait_for(predicate, timeout: float, what: str, proc: subprocess.Popen | None = None, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"process exited ({proc.returncode}) before {what}")
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


def writer_info(inst):
    return inst.event_log_storage.get_concurrency_info("duckdb_writer")


def active_runs(inst) -> list:
    from dagster import RunsFilter

    from pipelines.run_guard import active_statuses

    return list(inst.get_runs(RunsFilter(statuses=active_statuses())))


def failure_messages(inst, run_id: str) -> list[str]:
    from dagster import DagsterEventType

    kinds = {DagsterEventType.PIPELINE_FAILURE, DagsterEventType.ENGINE_EVENT}
    return [e.message or e.user_message for e in inst.all_logs(run_id, of_type=kinds)]


# ---- the helper processes ----------------------------------------------------------------------
def _pool_job(body):
    import dagster as dg

    @dg.asset(pool="duckdb_writer", name="benchmark_results")
    def writer() -> None:
        body()

    defs = dg.Definitions(assets=[writer], jobs=[dg.define_asset_job("results_job", selection="benchmark_results")],
                          executor=dg.in_process_executor)
    return defs.resolve_job_def("results_job")


def _tags(items: list[str]) -> dict[str, str]:
    tags: dict[str, str] = {}
    for item in items:
        if item == "owner":
            from pipelines.run_guard import owner_tags

            tags.update(owner_tags())
        else:
            key, value = item.split("=", 1)
            tags[key] = value
    return tags


def _hold_or_die(mode: str, ready: Path, tags: dict[str, str]) -> None:
    import dagster as dg

    def body():
        ready.touch()
        if mode == "die":
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(600)

    _pool_job(body).execute_in_process(instance=dg.DagsterInstance.get(), tags=tags, raise_on_error=False)


def _watched(ready: Path, wait_s: float) -> None:
    import uuid

    import dagster as dg

    from pipelines.run_watch import RunWatch

    inst = dg.DagsterInstance.get()
    with RunWatch(inst, writer_wait_s=wait_s, poll_s=0.5) as watch:
        run_id = str(uuid.uuid4())
        ready.write_text(run_id)
        with watch.running(run_id, "results_job", uses_pools=True):
            result = _pool_job(lambda: None).execute_in_process(instance=inst, run_id=run_id, raise_on_error=False)
    print("success" if result.success else "failure")


def _signal_in_del(then: str) -> None:
    """RunWatch's handler raises where Python can only report it (a __del__, as a garbage
    collector's callback during Dagster's imports does): prints what happened after, and the
    stop the watch raises later."""
    import dagster as dg

    from pipelines.run_watch import RunInterrupted, RunWatch

    class SignalledWhileCollected:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGTERM)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:  # the handler runs at one of these iterations
                pass

    try:
        with RunWatch(dg.DagsterInstance.get(), writer_wait_s=60) as watch:
            obj = SignalledWhileCollected()
            del obj
            print("after the collection", flush=True)
            if then == "check":
                watch.check()
        print("not stopped", flush=True)
    except RunInterrupted as exc:
        print(exc, flush=True)
        raise SystemExit(exc.exit_code) from None


class _SlowCommit:
    """A DuckDB connection whose first commit of measurement rows waits (the load's critical moment)."""

    fired = False

    def __init__(self, con, ready: Path):
        self._con, self._ready, self._inserted = con, ready, False

    def __getattr__(self, name):
        return getattr(self._con, name)

    def _maybe_wait(self) -> None:
        if self._inserted and not _SlowCommit.fired:
            _SlowCommit.fired = True
            self._ready.touch()
            time.sleep(120)

    def execute(self, sql, *args, **kwargs):
        text = " ".join(str(sql).split()).upper()
        if "INSERT INTO MEASUREMENTS" in text:
            self._inserted = True
        if text.rstrip(";") in ("COMMIT", "COMMIT TRANSACTION", "END", "END TRANSACTION"):
            self._maybe_wait()
        return self._con.execute(sql, *args, **kwargs)

    def executemany(self, sql, *args, **kwargs):
        if "INSERT INTO MEASUREMENTS" in " ".join(str(sql).split()).upper():
            self._inserted = True
        return self._con.executemany(sql, *args, **kwargs)

    def commit(self):
        self._maybe_wait()
        return self._con.commit()


def _patched_run(mode: str, ready: Path, args: list[str]) -> None:
    import assets.results

    if mode == "kill-after-load":
        real_load = assets.results.load_results

        def load_then_die(paths, con=None):
            report = real_load(paths, con)
            ready.touch()
            os.kill(os.getpid(), signal.SIGKILL)
            return report

        assets.results.load_results = load_then_die
    elif mode == "slow-commit":
        import duckdb  # every writer's connection, whether store.connect's or dagster-duckdb's DuckDBResource's

        real_connect = duckdb.connect

        def connect(*a, **kw):
            con = real_connect(*a, **kw)
            read_only = kw.get("read_only") or (kw.get("config") or {}).get("access_mode") == "READ_ONLY"
            return con if read_only else _SlowCommit(con, ready)

        duckdb.connect = connect
    else:
        raise SystemExit(f"unknown run mode {mode}")
    from pipelines.cli import main as console_script

    sys.argv = ["devicefit", "run", *args]
    console_script()  # as the console script enters


def main(argv: list[str]) -> None:
    mode, rest = argv[0], argv[1:]
    if mode in ("hold", "die"):
        _hold_or_die(mode, Path(rest[0]), _tags(rest[1:]))
    elif mode == "watched":
        _watched(Path(rest[0]), float(rest[1]))
    elif mode == "signal-in-del":
        _signal_in_del(rest[0])
    elif mode == "run":
        _patched_run(rest[0], Path(rest[1]), rest[3:] if rest[2:3] == ["--"] else rest[2:])
    else:
        raise SystemExit(f"unknown helper mode {mode}")


if __name__ == "__main__":
    main(sys.argv[1:])
