"""The CPU budget: affinity mask and cgroup CFS quota, the threads the workers take from it, and
contention read from the quota's own counters (benchmark_runners/hardware/cpu_budget.py)."""
import json
import os
import signal
import subprocess
import sys
import time
import uuid
import warnings
from pathlib import Path

import pytest

from benchmark_runners import contention, sweep
from benchmark_runners.contention import QuotaReading, quota_share
from benchmark_runners.hardware.cpu_budget import CgroupQuota, CpuBudget, detect_cpu_budget, find_quota, quota_counters
from benchmark_runners.records import BenchmarkConfig
from tests.conftest import FAST_POLICY


def _topology(root: Path, cpus: int, threads_per_core: int) -> None:
    for cpu in range(cpus):
        topology = root / "sys" / "devices" / "system" / "cpu" / f"cpu{cpu}" / "topology"
        topology.mkdir(parents=True)
        first = cpu - cpu % threads_per_core
        (topology / "core_cpus_list").write_text(f"{first}-{first + threads_per_core - 1}\n" if threads_per_core > 1 else f"{cpu}\n")
        # what device-tree arm64 writes: core ids restart in each cluster, one package
        (topology / "physical_package_id").write_text("0\n")
        (topology / "core_id").write_text(f"{(cpu // threads_per_core) % 4}\n")


def _proc(root: Path, cgroup: str, mountinfo: str) -> Path:
    proc = root / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text(cgroup)
    (proc / "self" / "mountinfo").write_text(mountinfo)
    return proc


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


V2_MOUNT = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"


def test_a_kubernetes_limit_on_a_64_cpu_host_gives_two_threads(tmp_path):
    """cgroup v2: the tightest cpu.max on the path from the process's group up to the mount is
    the quota (a pod's limit over a container's "max"); the threads are its whole CPUs."""
    proc = _proc(tmp_path, "0::/kubepods/pod1/ctr\n", V2_MOUNT)
    group = tmp_path / "sys" / "fs" / "cgroup"
    _write(group / "kubepods" / "cpu.max", "max 100000\n")
    _write(group / "kubepods" / "pod1" / "cpu.max", "250000 100000\n")
    _write(group / "kubepods" / "pod1" / "ctr" / "cpu.max", "max 100000\n")
    _topology(tmp_path, 64, 2)
    budget = detect_cpu_budget(proc, tmp_path, affinity=set(range(64)), logical=64)
    assert budget.quota is not None and budget.quota.cpus == 2.5 and budget.quota.version == 2
    assert budget.quota.directory.endswith("kubepods/pod1")
    assert budget.cores_in_affinity == 32 and budget.threads == 2
    assert budget.restricted and budget.quota_restricts and budget.usable_cpus == 2.5
    assert "2.5 CPUs" in budget.describe() and budget.to_json()["threads"] == 2


def test_a_docker_container_sees_its_own_group_at_the_mount(tmp_path):
    """cgroup v1 in a container: /proc/self/cgroup names the host's path, which mountinfo shows as
    the mount's root; cpu and cpuacct share the hierarchy, so the usage file is beside the quota."""
    proc = _proc(tmp_path, "4:cpu,cpuacct:/docker/abc\n3:memory:/docker/abc\n",
                 "40 31 0:33 /docker/abc /sys/fs/cgroup/cpu,cpuacct ro - cgroup cgroup rw,cpu,cpuacct\n")
    group = tmp_path / "sys" / "fs" / "cgroup" / "cpu,cpuacct"
    _write(group / "cpu.cfs_quota_us", "150000\n")
    _write(group / "cpu.cfs_period_us", "100000\n")
    _write(group / "cpuacct.usage", "5000000000\n")
    _write(group / "cpu.stat", "nr_periods 10\nnr_throttled 3\nthrottled_time 7000000\n")
    quota = find_quota(proc, tmp_path)
    assert quota is not None and quota.cpus == 1.5 and quota.version == 1
    counters = quota_counters(quota)
    assert counters.usage_us == 5_000_000 and counters.throttled_us == 7_000
    budget = detect_cpu_budget(proc, tmp_path, affinity={0, 1, 2, 3}, logical=4)
    assert budget.threads == 1  # 1.5 CPUs: a second thread would be throttled every period


def test_no_quota_leaves_the_cores_of_the_affinity_mask(tmp_path):
    proc = _proc(tmp_path, "0::/user.slice\n", V2_MOUNT)
    _write(tmp_path / "sys" / "fs" / "cgroup" / "user.slice" / "cpu.max", "max 100000\n")
    _write(tmp_path / "sys" / "fs" / "cgroup" / "cpu.max", "not a quota\n")  # unreadable: ignored
    _topology(tmp_path, 8, 2)
    whole = detect_cpu_budget(proc, tmp_path, affinity=set(range(8)), logical=8)
    assert whole.quota is None and whole.threads == 4 and not whole.restricted
    # a cpuset of two SMT siblings is one core: one thread, and a restricted budget
    pinned = detect_cpu_budget(proc, tmp_path, affinity={0, 1}, logical=8)
    assert pinned.threads == 1 and pinned.restricted and not pinned.quota_restricts


def test_files_that_are_absent_or_garbage_give_no_quota(tmp_path):
    assert find_quota(tmp_path / "no-proc", tmp_path) is None
    proc = _proc(tmp_path, "garbage\n0::/a\n", "garbage line\n" + V2_MOUNT)
    _write(tmp_path / "sys" / "fs" / "cgroup" / "a" / "cpu.max", "-5 100000\n")
    assert find_quota(proc, tmp_path) is None
    # a group outside what the mount shows is not read at all
    other = _proc(tmp_path / "other", "0::/elsewhere\n", "30 23 0:26 /mine /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n")
    _write(tmp_path / "other" / "sys" / "fs" / "cgroup" / "cpu.max", "100000 100000\n")
    assert find_quota(other, tmp_path / "other") is None
    assert quota_counters(None) is None
    # a group above the namespace's root ("/../x") is not under the mount; escaped mount points are read
    outside = _proc(tmp_path / "ns", "0::/../x\n", V2_MOUNT)
    _write(tmp_path / "ns" / "sys" / "fs" / "cgroup" / "cpu.max", "100000 100000\n")
    assert find_quota(outside, tmp_path / "ns") is None
    spaced = _proc(tmp_path / "sp", "0::/\n", "30 23 0:26 / /sys/fs/cgroup\\040x rw - cgroup2 cgroup2 rw\n")
    _write(tmp_path / "sp" / "sys" / "fs" / "cgroup x" / "cpu.max", "100000 100000\n")
    assert find_quota(spaced, tmp_path / "sp").cpus == 1.0
    gone = CgroupQuota(1.0, str(tmp_path / "gone"), 2, str(tmp_path / "gone" / "cpu.stat"))
    assert quota_counters(gone) is None


def _reading(usage_s: float | None, throttled_s: float | None, own_s: float, waiting_s: dict[int, float],
             cpus: float = 2.0, threads: int = 2) -> QuotaReading:
    return QuotaReading(cpus, threads, None if usage_s is None else usage_s * 1e6, None if throttled_s is None else throttled_s * 1e6,
                        int(own_s * 1e9), {tid: int(w * 1e9) for tid, w in waiting_s.items()})


def test_under_a_quota_others_in_the_group_and_waiting_for_a_cpu_count():
    """1 s of a 2-CPU quota: others in the group spending 1 CPU-second is half of it; our
    threads waiting 0.2 s of the budget's 2 thread-seconds is 10%."""
    before = _reading(10.0, 1.0, 5.0, {1: 1.0, 2: 0.0})
    assert quota_share(before, _reading(12.0, 1.0, 6.0, {1: 1.0, 2: 0.0}), 1.0) == pytest.approx(0.5)
    assert quota_share(before, _reading(11.0, 1.0, 6.0, {1: 1.2, 2: 0.0}), 1.0) == pytest.approx(0.1)
    assert quota_share(before, _reading(11.0, 1.0, 6.0, {1: 1.0, 2: 0.0}), 1.0) == 0.0  # all of the group's time was ours
    # a thread that ended takes nothing back; one that started counts what it waited
    assert quota_share(before, _reading(11.0, 1.0, 6.0, {1: 1.0, 3: 0.4}), 1.0) == pytest.approx(0.2)
    assert quota_share(before, before, 0.0) is None
    assert quota_share(_reading(None, None, 0, {}), _reading(None, None, 1, {1: 1.0}), 1.0) is None  # nothing readable
    # the snapshots carry it: other_cpu_share reads the quota's counters beside /proc/stat's ticks
    host_idle = dict(host_busy_ticks=0, host_total_ticks=0, own_ticks=0)
    a = contention.CpuSnapshot(**host_idle, taken_at=100.0, quota=before)
    b = contention.CpuSnapshot(**host_idle, taken_at=101.0, quota=_reading(12.0, 1.0, 6.0, {1: 1.0}))
    assert contention.other_cpu_share(a, b) == pytest.approx(0.5)


def test_throttling_by_our_own_demand_is_not_a_neighbour():
    """A 0.5-CPU quota throttles one spinning thread every period, and a throttled thread waits:
    over a throttled window the waiting time is not read, and the group's usage less ours is 0."""
    before = _reading(10.0, 1.0, 5.0, {1: 0.0}, cpus=0.5, threads=1)
    after = _reading(10.5, 1.25, 5.5, {1: 0.5}, cpus=0.5, threads=1)  # 1 s: ran 0.5 s, waited 0.5 s throttled
    assert quota_share(before, after, 1.0) == 0.0
    # without a throttling counter, waiting time cannot be told from our own throttling: not read
    assert quota_share(_reading(10.0, None, 5.0, {1: 0.0}), _reading(10.5, None, 5.5, {1: 0.5}), 1.0) == 0.0


def test_the_sweep_gives_its_workers_the_budgets_threads(monkeypatch, tiny_models):
    """A worker's default threads are the budget's, not the host's physical cores."""
    monkeypatch.setattr(sweep, "detect_cpu_budget", lambda: CpuBudget(64, 64, 32, CgroupQuota(1.0, "/x", 2, "/x/cpu.stat")))
    [row] = sweep.run_sweep([BenchmarkConfig(model=str(tiny_models["text"]), policy=FAST_POLICY)])
    assert row.status == "ok", row.error
    assert row.environment["torch_threads"] == 1


def _child_cgroup(quota_cpus: float) -> list[Path]:
    """A new cgroup with a CFS quota, as its directories (a process joins it by writing its pid
    to each one's cgroup.procs): v1, at the root of the cpu hierarchy and of cpuacct's where
    that is mounted apart (as Docker does on v1: the group's usage is counted there); v2, under
    this process's own group, which needs the cpu controller delegated to it. Skips where this
    machine does not let the tests make one (not root, no cpu controller, v2 without delegation)."""
    name = f"devicefit-test-{uuid.uuid4().hex[:8]}"
    v1, acct = Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup/cpuacct")
    made: list[Path] = []
    try:
        if (v1 / "cpu.cfs_quota_us").exists():
            made.append(v1 / name)
            made[-1].mkdir()
            (made[-1] / "cpu.cfs_quota_us").write_text(str(int(quota_cpus * 100_000)))
            if (acct / "cpuacct.usage").exists() and not (v1 / "cpuacct.usage").exists():
                made.append(acct / name)
                made[-1].mkdir()
            return made
        own = Path("/sys/fs/cgroup") / Path(Path("/proc/self/cgroup").read_text().split("0::", 1)[1].strip()).relative_to("/")
        made.append(own / name)
        made[-1].mkdir()
        (made[-1] / "cpu.max").write_text(f"{int(quota_cpus * 100_000)} 100000")
        return made
    except (OSError, IndexError, ValueError) as exc:
        for path in reversed(made):
            path.rmdir()
        pytest.skip(f"cannot make a cgroup with a CPU quota here: {type(exc).__name__}: {exc}")


def remove_cgroup(path: Path) -> None:
    """Remove a group a test made: anything still in it (a process a library started) is killed
    first, and a killed process leaves it a moment later. One that will not go is warned about."""
    for _ in range(100):
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            for pid in (path / "cgroup.procs").read_text().split() if (path / "cgroup.procs").exists() else []:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
    warnings.warn(f"the test's cgroup {path} could not be removed")


_IN_QUOTA = """
import json, subprocess, sys, time
import torch
from benchmark_runners import contention
from benchmark_runners.hardware.cpu_budget import detect_cpu_budget
from benchmark_runners.measure import ConfigMeasurer
from benchmark_runners.records import BenchmarkConfig
from tests.conftest import FAST_POLICY
budget = detect_cpu_budget()
torch.set_num_threads(budget.threads)  # as the sweep's worker does

def quota_share_of_a_busy_window(seconds=0.6):
    before = contention.snapshot()
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        pass
    after = contention.snapshot()
    return contention.quota_share(before.quota, after.quota, after.taken_at - before.taken_at)

alone = quota_share_of_a_busy_window()  # our own demand past the quota: throttled, no neighbour
hog = subprocess.Popen([sys.executable, "-c", "print('spinning', flush=True)\\nwhile True: pass"], stdout=subprocess.PIPE, text=True)
assert hog.stdout.readline().strip() == "spinning"
try:
    beside = quota_share_of_a_busy_window()
    row = ConfigMeasurer("t", {}, {"cpu": {"name": "cpu", "fingerprint": "cpu-test"}}).run(BenchmarkConfig(model=sys.argv[1], policy=FAST_POLICY))
finally:
    hog.kill()
print(json.dumps({"budget": budget.to_json(), "alone": alone, "beside": beside, "recorded": row.environment.get("cpu_budget"),
                  "status": row.status, "error": row.error, "share": row.other_cpu_share, "contended": row.contended,
                  "attempts": row.contention_attempts}))
"""


@pytest.mark.skipif(not Path("/proc/self/cgroup").exists(), reason="cgroups are Linux's")
def test_a_neighbour_inside_a_real_quota_is_read_from_the_groups_counters(tiny_models):
    """In a real cgroup with a half-CPU quota: the budget reads one thread and the row records it;
    alone, a busy loop is throttled by its own demand every period and reads no neighbour; beside
    a busy loop in the same group (it takes quota, not a CPU: on a host of many CPUs /proc/stat
    would dilute it to nothing) the group's counters alone read it, and the config is contended."""
    paths = _child_cgroup(0.5)
    join = " && ".join(f'echo $$ > {path / "cgroup.procs"}' for path in paths)
    child = subprocess.Popen(["sh", "-c", f'{join} && exec "$0" -c "$1" "$2"', sys.executable, _IN_QUOTA,
                              str(tiny_models["text"])], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             cwd=Path(__file__).resolve().parents[2], start_new_session=True)
    try:
        stdout, stderr = child.communicate(timeout=300)
    finally:
        try:
            os.killpg(child.pid, signal.SIGKILL)  # the hog too, should the child have died before killing it
        except ProcessLookupError:
            pass
        child.wait()
        for path in paths:
            remove_cgroup(path)
    assert child.returncode == 0, stderr[-2000:]
    result = json.loads(stdout.strip().splitlines()[-1])
    assert result["budget"]["quota"]["cpus"] == 0.5 and result["budget"]["threads"] == 1
    assert result["recorded"] == result["budget"]  # the row says what it ran within
    assert result["alone"] is not None and result["alone"] < contention.CONTENDED_SHARE, result
    assert result["beside"] > contention.CONTENDED_SHARE, result
    assert result["status"] == "ok", result["error"]
    assert result["contended"] is True and result["attempts"] == 2 and result["share"] > contention.CONTENDED_SHARE, result


def test_the_probe_reads_the_cpu_at_the_budgets_threads(monkeypatch):
    """torch's default threads see every CPU; the probe is taken at the workers' threads and
    torch's setting is given back after."""
    import torch

    from benchmark_runners.hardware import cpu_budget
    from benchmark_runners.hardware.probe import probe_device

    before = torch.get_num_threads()
    if before < 2:
        pytest.skip("one thread is all this machine gives torch: nothing to hold back")
    monkeypatch.setattr(cpu_budget, "restricted_threads", lambda: 1)
    assert probe_device("cpu", budget_s=0.02).threads == 1
    assert torch.get_num_threads() == before


def test_a_restricted_cpu_is_its_own_device(monkeypatch):
    """2 CPUs of a 64-CPU host are not the host to a predictor: `usable_cpus` joins the
    fingerprint where the budget restricts, and is absent (the fingerprint as it always was)
    where it does not."""
    from benchmark_runners.hardware import platforms
    from benchmark_runners.hardware.inventory import device_fingerprint

    whole = platforms.detect_cpu().devices[0]
    monkeypatch.setattr(platforms, "detect_cpu_budget", lambda: CpuBudget(64, 64, 32, CgroupQuota(2.0, "/pod", 2, "/pod/cpu.stat")))
    limited = platforms.detect_cpu().devices[0]
    assert limited["usable_cpus"] == 2.0 and limited["cpu_budget"]["threads"] == 2
    assert device_fingerprint("cpu", limited) != device_fingerprint("cpu", {k: v for k, v in limited.items() if k != "usable_cpus"})
    if not detect_cpu_budget().restricted:  # the fingerprint from the keys it had before budgets existed
        before = ("name", "vendor", "architecture", "physical_cores", "logical_cores", "isa_flags", "memory_total_bytes",
                  "compute_capability", "multiprocessors", "gcn_arch")
        assert "usable_cpus" not in whole
        assert device_fingerprint("cpu", whole) == device_fingerprint("cpu", {k: whole[k] for k in before if k in whole})


def test_an_openmp_binding_is_not_a_cpuset(tmp_path, monkeypatch):
    """OMP_PROC_BIND and its kin make libgomp pin the main thread to one place when torch loads
    it, and sched_getaffinity reads that thread's mask ({0} on a machine nothing restricts):
    with one of them set the CPUs allowed are the cpuset cgroup's."""
    from benchmark_runners.hardware import cpu_budget

    proc = _proc(tmp_path, "3:cpuset:/\n", "34 31 0:31 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset\n")
    _write(tmp_path / "sys" / "fs" / "cgroup" / "cpuset" / "cpuset.effective_cpus", "0-7\n")
    _topology(tmp_path, 8, 1)
    monkeypatch.setattr(cpu_budget.os, "sched_getaffinity", lambda pid: {0})
    for variable in cpu_budget.OPENMP_BINDING_ENV:
        monkeypatch.delenv(variable, raising=False)
    assert detect_cpu_budget(proc, tmp_path, logical=8).affinity_cpus == 1  # a real mask of one CPU (taskset -c 0)
    monkeypatch.setenv("OMP_PROC_BIND", "close")
    bound = detect_cpu_budget(proc, tmp_path, logical=8)
    assert bound.affinity_cpus == 8 and bound.threads == 8 and not bound.restricted
    monkeypatch.setenv("OMP_PROC_BIND", "false")  # binding off: the mask is the process's again
    assert detect_cpu_budget(proc, tmp_path, logical=8).affinity_cpus == 1


def test_a_cache_written_under_another_budget_is_detected_again(tmp_path, monkeypatch):
    """A container sharing the host's data directory (same boot id), or `taskset`, must not read
    the fingerprint and probe an unrestricted process cached, nor the other way round."""
    from benchmark_runners.hardware import cpu_budget, detect_hardware, platforms

    cache = tmp_path / "hardware.json"
    whole = detect_hardware(refresh=True, cache_path=cache)  # probed: the cache is written
    if any(p.get("contended") for p in whole.probes.values()):
        pytest.skip("the probe was disturbed by another process, so no cache was kept to read back")
    assert detect_hardware(probe=False, cache_path=cache).from_cache
    limited = CpuBudget(2, 1, 1, None)
    monkeypatch.setattr(cpu_budget, "detect_cpu_budget", lambda *a, **k: limited)
    monkeypatch.setattr(platforms, "detect_cpu_budget", lambda *a, **k: limited)
    again = detect_hardware(probe=False, cache_path=cache)
    assert not again.from_cache
    cpu = again.platforms["cpu"].devices[0]
    assert cpu["usable_cpus"] == 1.0 and cpu["fingerprint"] != whole.platforms["cpu"].devices[0]["fingerprint"]
    kept = json.loads(cache.read_text())  # asking which devices exist under another budget takes no probe away
    assert kept["probes"]["cpu"]["matmul_gflops_best"] == whole.probes["cpu"]["matmul_gflops_best"]
    rewritten = detect_hardware(refresh=True, cache_path=cache)
    assert detect_hardware(probe=False, cache_path=cache).from_cache or any(
        p.get("contended") for p in rewritten.probes.values())  # the same budget reads its own cache
