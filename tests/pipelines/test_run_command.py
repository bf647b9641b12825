"""`devicefit run`: the pipeline through Dagster from the command line, as `make run` does."""
import os
import subprocess
import sys

from devicefit import store
from devicefit.paths import DataPaths
from tests.seeded_data import seeded_data_dir


def devicefit_run(args, env):
    return subprocess.run([sys.executable, "-m", "pipelines.cli", "run", *args], capture_output=True, text=True,
                          timeout=600, env=env)


def test_run_materializes_a_tiny_selection_and_records_dagster_runs(tmp_path):
    home = tmp_path / "dagster_home"
    home.mkdir()
    env = {**os.environ, "DAGSTER_HOME": str(home), "DEVICEFIT_DATA_DIR": str(seeded_data_dir(tmp_path / "data"))}
    out = devicefit_run(["--model", "bert-tiny", "--batch-sizes", "1", "--precision", "fp32", "--no-training-mode"], env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Best precision per config" in out.stdout and "compatibility matrix:" in out.stdout
    # the selection map's models were traced in a helper while the results ran (or it says why not)
    from models.parallel_warm import usable_cpus

    ahead = "during the results: the selection map's models traced in a second process ("
    assert ahead in out.stdout
    assert ("not started (one usable CPU)" in out.stdout) == (usable_cpus() < 2), out.stdout[-2000:]
    # where the wall time went, phase by phase, and the results run's slowest steps by their asset names
    import re

    timing = re.search(r"time: ([\d.]+) s in the pipeline: before measuring ([\d.]+) s, inventory ([\d.]+) s, "
                       r"measuring (\d+) partitions? ([\d.]+) s, (?:waiting for the store's writer [\d.]+ s, )?results ([\d.]+) s; "
                       r"slowest results steps: (.+?) written:", " ".join(out.stdout.split()))
    assert timing, out.stdout[-2000:]
    total, *phases = (float(timing[i]) for i in (1, 2, 3, 5, 6))
    # each phase printed to a tenth of a second: one under 0.05 s (before measuring, where the
    # caches and the hardware detection are warm) reads 0.0
    assert all(p >= 0 for p in phases) and abs(total - sum(phases)) < 0.2 * len(phases), timing[0]
    from pipelines.definitions import defs

    steps = [s.rsplit(" ", 2)[0] for s in timing[7].split(", ")]
    results_steps = {node.name for node in defs.resolve_job_def("results_job").graph.nodes}  # assets and checks
    assert steps and set(steps) <= results_steps, (steps, results_steps)
    con = store.connect(DataPaths(tmp_path / "data").database, read_only=True)
    # torch on the CPU and OpenVINO's CPU plugin, one row each; a model named with --model is
    # measured on every kind, so the browser's too where Chromium is here (wasm, WebGPU)
    from benchmark_runners.browser.chromium import unavailable_reason

    ok = [r[0] for r in con.execute("SELECT backend || '/' || device_kind FROM measurements WHERE status = 'ok'").fetchall()]
    assert sorted(b for b in ok if not b.startswith("browser/")) == ["openvino/openvino", "torch/cpu"]
    assert ("browser/wasm" in ok) == (unavailable_reason() is None), ok
    con.close()
    assert any(home.rglob("*.db"))  # the runs are in the instance's SQLite storage, for the UI
    from dagster import DagsterInstance, DagsterRunStatus

    instance = DagsterInstance.from_config(str(home))
    runs = instance.get_runs()
    assert runs and all(r.status == DagsterRunStatus.SUCCESS for r in runs)
    # each run names the process that executed it, so a later run can tell when it died
    assert all(r.tags.get("devicefit/pid") and r.tags.get("devicefit/host") and r.tags.get("devicefit/process_started")
               for r in runs)


def test_run_refuses_bad_selections_and_a_missing_dagster_home(tmp_path):
    env = {**os.environ, "DEVICEFIT_DATA_DIR": str(seeded_data_dir(tmp_path / "data"))}
    out = devicefit_run(["--hardware", "tpu"], env)
    assert out.returncode == 2 and "unknown hardware tpu" in out.stderr
    out = devicefit_run(["--category", "robots"], env)
    assert out.returncode == 2 and "unknown category robots" in out.stderr
    env.pop("DAGSTER_HOME", None)
    out = devicefit_run(["--model", "bert-tiny", "--batch-sizes", "1", "--precision", "fp32", "--no-training-mode"], env)
    assert out.returncode == 2 and "DAGSTER_HOME is not set" in " ".join(out.stderr.split())


def _run_of(process, run_pids: set[int]) -> int | None:
    """Which `devicefit run` a measurement worker belongs to (its ancestor), or None if it is not one."""
    import psutil

    from tests.pipelines.test_graph import _is_worker

    try:
        return next((p.pid for p in process.parents() if p.pid in run_pids), None) if _is_worker(process) else None
    except psutil.Error:
        return None


def test_two_concurrent_runs_on_one_device_never_measure_at_the_same_time(tmp_path):
    """`devicefit run` executes outside Dagster's run queue: the per-device lock keeps two of them
    apart. Watched from outside: the measurement workers of the two runs never coexist."""
    import time

    import psutil

    procs, errs = [], []
    for name in ("a", "b"):
        home = tmp_path / name / "dagster_home"
        home.mkdir(parents=True)
        env = {**os.environ, "DAGSTER_HOME": str(home), "DEVICEFIT_DATA_DIR": str(seeded_data_dir(tmp_path / name / "data")),
               "DEVICEFIT_LOCK_DIR": str(tmp_path / "locks")}
        errs.append(open(tmp_path / f"{name}.err", "w+"))
        procs.append(subprocess.Popen([sys.executable, "-m", "pipelines.cli", "run", "--model", "bert-tiny", "--hardware", "cpu",
                                       "--batch-sizes", "1,4", "--precision", "fp32", "--no-training-mode"],
                                      env=env, stdout=subprocess.DEVNULL, stderr=errs[-1]))
    pids = {p.pid for p in procs}
    seen: dict[int, list[float]] = {pid: [] for pid in pids}
    overlap = []
    deadline = time.monotonic() + 540
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        now = time.monotonic()
        measuring = {run for proc in psutil.process_iter() if (run := _run_of(proc, pids)) is not None}
        for run in measuring:
            seen[run].append(now)
        if len(measuring) > 1:
            overlap.append(now)
        time.sleep(0.05)
    for p in procs:
        p.wait(timeout=60)
    texts = []
    for f in errs:
        f.seek(0)
        texts.append(f.read())
        f.close()
    assert all(p.returncode == 0 for p in procs), [(p.returncode, t[-3000:]) for p, t in zip(procs, texts) if p.returncode]
    assert all(seen[pid] for pid in pids), "a run's workers were never seen"
    assert not overlap, f"workers of both runs alive at once {len(overlap)} times"
    first, second = sorted(pids, key=lambda pid: seen[pid][0])
    assert seen[first][-1] < seen[second][0]
    assert any("waiting for device cpu" in t for t in texts), texts
