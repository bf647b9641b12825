"""Chaos: kill -9 `devicefit run` at random points, rerun, and count what went wrong.

Each round starts `devicefit run` on a tiny selection, kills the parent with SIGKILL at a random
point of a random phase (measure: while the worker measures; land: as a landing file appears;
load: as the DuckDB load writes), then reruns to completion under a timeout (a run that does not
finish in time is a hang) and audits the store against the landing files:

  lost        (run_id, config_key) rows in a landing file that the store does not hold
  duplicated  rows stored more than once under the same (run_id, config_key)
  extra       stored rows no landing file holds (left over from a replaced file)
  unloaded    landing files whose current content is not the loaded one
  stale runs  Dagster runs still STARTING/STARTED afterwards; held slots: writer slots still held

    python benchmarks/chaos_kills.py [--kills 20] [--seed 21] [--timeout 600] [--hardware cpu]

The tests (tests/faults/test_chaos.py) use the same functions on a few kills."""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run as a script from anywhere
PHASES = ("measure", "land", "load")
SELECTION = ["--model", "bert-tiny", "--batch-sizes", "1", "--precision", "fp32", "--no-training-mode"]


def isolated_env(root: Path) -> dict[str, str]:
    """Its own DAGSTER_HOME (the project's dagster.yaml: one duckdb_writer slot) and data dir."""
    home = root / "dagster_home"
    home.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    return {**os.environ, "DAGSTER_HOME": str(home.resolve()), "DEVICEFIT_DATA_DIR": str((root / "data").resolve()),
            "PYTHONPATH": str(ROOT)}


def start_run(env: dict[str, str], hardware: str, log: Path) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen([sys.executable, "-m", "pipelines.cli", "run", *SELECTION, "--hardware", hardware],
                                cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=out)


def _data(env: dict[str, str]) -> Path:
    return Path(env["DEVICEFIT_DATA_DIR"])


def _landing_state(data: Path) -> dict[str, float]:
    raw = data / "raw"
    return {p.name: p.stat().st_mtime_ns for p in raw.glob("*.json")} if raw.is_dir() else {}


def _db_state(data: Path) -> tuple[int, int]:
    """(mtime of the write-ahead log, of the database): either changes when a load writes. A WAL
    can outlive a killed writer, so its presence alone says nothing."""
    def mtime(path: Path) -> int:
        try:
            return path.stat().st_mtime_ns
        except FileNotFoundError:
            return 0
    return mtime(data / "devicefit.duckdb.wal"), mtime(data / "devicefit.duckdb")


@dataclass
class Kill:
    phase: str
    delay_s: float
    killed: bool  # False: the run finished (or failed) before the kill point
    returncode: int | None
    seconds: float
    left_runs: int = 0  # Dagster runs it left STARTED (the next run must reap them)
    left_slots: int = 0  # duckdb_writer slots it left claimed or queued


def kill_at(env: dict[str, str], phase: str, rng: random.Random, hardware: str, log: Path, timeout: float = 600) -> Kill:
    """Start a run and SIGKILL its parent process at a random point of `phase`."""
    data = _data(env)
    landed = _landing_state(data)
    delay = {"measure": rng.uniform(0.5, 6.0), "land": rng.uniform(0.0, 0.5), "load": rng.uniform(0.0, 0.1)}[phase]
    start = time.monotonic()
    proc = start_run(env, hardware, log)

    after_landing: list[tuple[int, int]] = []  # the database as it was when the landing file appeared

    def triggered() -> bool:
        if phase == "measure":
            return b"measuring" in log.read_bytes()
        if phase == "land":
            return _landing_state(data) != landed
        # load: the first database write after landing (measuring may write the database too)
        if not after_landing:
            if _landing_state(data) != landed:
                after_landing.append(_db_state(data))
            return False
        return _db_state(data) != after_landing[0]

    try:
        while proc.poll() is None and not triggered():
            if time.monotonic() - start > timeout:
                break
            time.sleep(0.005 if phase == "load" else 0.02)  # the load and its slot last well under a second
        deadline = time.monotonic() + delay
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        killed = proc.poll() is None
        if killed:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    runs, slots = _dagster_leftovers(env)
    return Kill(phase, round(delay, 3), killed, proc.returncode, round(time.monotonic() - start, 1), len(runs), len(slots))


@dataclass
class Rerun:
    returncode: int | None
    hung: bool
    seconds: float
    stderr_tail: str


def rerun(env: dict[str, str], hardware: str, log: Path, timeout: float) -> Rerun:
    start = time.monotonic()
    proc = start_run(env, hardware, log)
    try:
        proc.wait(timeout=timeout)
        hung = False
    except subprocess.TimeoutExpired:
        hung = True
    finally:
        if proc.poll() is None:  # a hang, or this script was interrupted
            proc.kill()
            proc.wait()
    return Rerun(None if hung else proc.returncode, hung, round(time.monotonic() - start, 1), log.read_text(errors="replace")[-3000:])


@dataclass
class Audit:
    landing_files: int = 0
    landing_rows: int = 0
    stored_rows: int = 0
    lost: int = 0
    duplicated: int = 0
    extra: int = 0
    unloaded: list[str] = field(default_factory=list)
    quarantined: list[str] = field(default_factory=list)
    stale_runs: list[str] = field(default_factory=list)
    held_slots: list[str] = field(default_factory=list)

    @property
    def exactly_once(self) -> bool:
        return not (self.lost or self.duplicated or self.extra or self.unloaded or self.quarantined
                    or self.stale_runs or self.held_slots)


def audit(env: dict[str, str]) -> Audit:
    """The store against the landing files, and the Dagster instance for runs left behind."""
    from devicefit import store
    from devicefit.landing import QUARANTINE_DIR

    data = _data(env)
    result = Audit()
    expected: set[tuple[str, str]] = set()
    con = store.connect(data / "devicefit.duckdb", read_only=True)
    try:
        for path in sorted((data / "raw").glob("*.json")):
            blob = path.read_bytes()
            document = json.loads(blob)
            rows = {(r["run_id"], r["config_key"]) for r in document["results"]}
            result.landing_files += 1
            result.landing_rows += len(document["results"])
            expected |= rows
            source_key = document.get("source_key") or path.stem
            loaded = con.execute("SELECT sha256 FROM sources WHERE source_key = ?", [source_key]).fetchall()
            if loaded != [(hashlib.sha256(blob).hexdigest(),)]:
                result.unloaded.append(f"{path.name}: loaded as {loaded}")
        stored = con.execute("SELECT run_id, config_key, count(*) FROM measurements GROUP BY ALL").fetchall()
    finally:
        con.close()
    result.stored_rows = sum(n for _, _, n in stored)
    keys = {(run_id, key) for run_id, key, _ in stored}
    result.duplicated = sum(n - 1 for _, _, n in stored)
    result.lost = len(expected - keys)
    result.extra = len(keys - expected)
    quarantine = data / "raw" / QUARANTINE_DIR
    result.quarantined = sorted(p.name for p in quarantine.iterdir()) if quarantine.is_dir() else []
    result.stale_runs, result.held_slots = _dagster_leftovers(env)
    return result


def _dagster_leftovers(env: dict[str, str]) -> tuple[list[str], list[str]]:
    from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

    old = os.environ.get("DAGSTER_HOME")
    os.environ["DAGSTER_HOME"] = env["DAGSTER_HOME"]
    try:
        instance = DagsterInstance.get()
    finally:
        if old is None:
            os.environ.pop("DAGSTER_HOME")
        else:
            os.environ["DAGSTER_HOME"] = old
    active = [DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING, DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING]
    runs = [f"{r.run_id} ({r.job_name}, {r.status.value})" for r in instance.get_runs(RunsFilter(statuses=active))]
    info = instance.event_log_storage.get_concurrency_info("duckdb_writer")
    slots = [f"{s.run_id}/{s.step_key}" for s in info.claimed_slots] + [f"{p.run_id}/{p.step_key} (queued)" for p in info.pending_steps]
    return runs, slots


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=21)
    parser.add_argument("--timeout", type=float, default=600, help="seconds a rerun may take before it counts as a hang")
    parser.add_argument("--hardware", default="cpu", help="kinds to measure, as `devicefit run --hardware`")
    parser.add_argument("--keep", type=Path, help="work in this directory and keep it (default: a temp dir, removed)")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    root = args.keep or Path(tempfile.mkdtemp(prefix="devicefit-chaos-"))
    root.mkdir(parents=True, exist_ok=True)
    env = isolated_env(root)
    left = {"kills that left a run STARTED": 0, "kills that left the writer slot held": 0}
    totals = {"lost": 0, "duplicated": 0, "extra": 0, "unloaded": 0, "stale runs": 0, "held slots": 0, "hangs": 0, "failed reruns": 0}
    try:
        for i in range(args.kills):
            phase = rng.choice(PHASES)
            kill = kill_at(env, phase, rng, args.hardware, root / f"kill-{i}.log", args.timeout)
            left["kills that left a run STARTED"] += kill.left_runs > 0
            left["kills that left the writer slot held"] += kill.left_slots > 0
            again = rerun(env, args.hardware, root / f"rerun-{i}.log", args.timeout)
            totals["hangs"] += again.hung
            totals["failed reruns"] += again.returncode not in (0, None)
            found = audit(env)
            for key, value in (("lost", found.lost), ("duplicated", found.duplicated), ("extra", found.extra),
                               ("unloaded", len(found.unloaded)), ("stale runs", len(found.stale_runs)),
                               ("held slots", len(found.held_slots))):
                totals[key] += value
            print(f"kill {i + 1}/{args.kills}: {phase} +{kill.delay_s:.2f}s at {kill.seconds:.1f}s "
                  f"({'killed' if kill.killed else f'ended first, rc {kill.returncode}'}, left {kill.left_runs} "
                  f"STARTED run(s), {kill.left_slots} writer slot(s)); rerun "
                  f"{'HUNG' if again.hung else f'rc {again.returncode}'} in {again.seconds:.1f}s; "
                  f"rows stored {found.stored_rows} / landed {found.landing_rows}, lost {found.lost}, "
                  f"duplicated {found.duplicated}, extra {found.extra}, unloaded {len(found.unloaded)}, "
                  f"stale runs {len(found.stale_runs)}, held slots {len(found.held_slots)}", flush=True)
            if again.returncode not in (0, None):
                print(f"  rerun stderr: {again.stderr_tail[-600:]}", flush=True)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    print(f"{args.kills} kills (seed {args.seed}, host {os.uname().nodename}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f}): " + ", ".join(f"{k} {v}" for k, v in {**left, **totals}.items()))
    return 0 if all(v == 0 for v in totals.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
