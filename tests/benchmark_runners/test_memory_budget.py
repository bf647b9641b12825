"""A container's memory limit, which the host's free memory does not show: found on the
process's cgroup path and used by the memory guard (benchmark_runners/hardware/memory_budget.py)."""
import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from benchmark_runners import memory_guard
from benchmark_runners.hardware import detect_hardware
from benchmark_runners.hardware.memory_budget import MemoryLimit, find_memory_limit
from benchmark_runners.records import BenchmarkConfig
from tests.benchmark_runners.test_cpu_budget import V2_MOUNT, _proc, _write, remove_cgroup

GIB = 2**30


def test_a_pod_limit_less_its_usage_is_what_is_left(tmp_path):
    """cgroup v2: the pod's memory.max over the container's "max"; page cache, active or not, is
    reclaimed before an OOM kill, so it counts as free (weights read twice sit on the active list)."""
    proc = _proc(tmp_path, "0::/kubepods/pod1/ctr\n", V2_MOUNT)
    group = tmp_path / "sys" / "fs" / "cgroup" / "kubepods" / "pod1"
    _write(group / "memory.max", f"{4 * GIB}\n")
    _write(group / "memory.current", f"{GIB}\n")
    _write(group / "memory.stat", f"anon 100\ninactive_file {GIB // 4}\nactive_file {GIB // 8}\nshmem 7\n")
    _write(group / "ctr" / "memory.max", "max\n")
    _write(group / "ctr" / "memory.current", "5\n")
    limit = find_memory_limit(proc, tmp_path)
    assert limit is not None and limit.limit_bytes == 4 * GIB and limit.version == 2 and limit.directory.endswith("pod1")
    assert limit.available_bytes == 4 * GIB - (GIB - GIB // 4 - GIB // 8)


def test_v1_writes_no_limit_as_the_largest_long(tmp_path):
    proc = _proc(tmp_path, "5:memory:/docker/abc\n", "41 31 0:34 /docker/abc /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n")
    group = tmp_path / "sys" / "fs" / "cgroup" / "memory"
    _write(group / "memory.limit_in_bytes", "9223372036854771712\n")
    assert find_memory_limit(proc, tmp_path) is None
    _write(group / "memory.limit_in_bytes", f"{2 * GIB}\n")
    _write(group / "memory.usage_in_bytes", f"{3 * GIB}\n")  # over the limit, counting cache: nothing left
    _write(group / "memory.stat", "total_inactive_file 0\n")
    limit = find_memory_limit(proc, tmp_path)
    assert limit.limit_bytes == 2 * GIB and limit.available_bytes == 0
    assert find_memory_limit(tmp_path / "absent", tmp_path) is None
    # v1's hierarchical counters (total_*), not the group's own; a tighter ancestor wins
    nested = _proc(tmp_path / "n", "5:memory:/a/b\n", "41 31 0:34 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n")
    a = tmp_path / "n" / "sys" / "fs" / "cgroup" / "memory" / "a"
    _write(a / "memory.limit_in_bytes", f"{GIB}\n")
    _write(a / "memory.usage_in_bytes", f"{GIB // 2}\n")
    _write(a / "memory.stat", f"inactive_file 1\nactive_file 1\ntotal_inactive_file {GIB // 8}\ntotal_active_file {GIB // 8}\n")
    _write(a / "b" / "memory.limit_in_bytes", f"{8 * GIB}\n")
    _write(a / "b" / "memory.usage_in_bytes", f"{GIB // 4}\n")
    limit = find_memory_limit(nested, tmp_path / "n")
    assert limit.directory.endswith("/a") and limit.available_bytes == GIB - (GIB // 2 - GIB // 4)


def test_the_guard_judges_by_the_limit_where_it_is_less_than_the_host(monkeypatch):
    inventory = detect_hardware(probe=False)
    config = BenchmarkConfig(model="bert-tiny", device="cpu", batch_size=4096)
    small = MemoryLimit(GIB // 8, 0, 0, "/sys/fs/cgroup/pod", 2)
    monkeypatch.setattr(memory_guard, "find_memory_limit", lambda: small)
    available, where = memory_guard.free_memory(config, inventory)
    assert available == GIB // 8 and "cgroup memory limit of 0.1 GiB" in where
    reason = memory_guard.memory_refusal(config, inventory)
    assert reason is not None and "cgroup memory limit" in reason
    monkeypatch.setattr(memory_guard, "find_memory_limit", lambda: MemoryLimit(2**50, 0, 0, "/huge", 2))
    assert memory_guard.free_memory(config, inventory)[1] == "available on this host"


_IN_LIMIT = """
import json, psutil
from benchmark_runners import memory_guard
from benchmark_runners.records import BenchmarkConfig
inventory = None  # the host's CPU is judged by the host's memory and the group's: no device table needed
config = BenchmarkConfig(model="bert-base-uncased", device="cpu", batch_size=512)
print(json.dumps({"free": memory_guard.free_memory(config, inventory), "refusal": memory_guard.memory_refusal(config, inventory),
                  "floor": memory_guard.memory_floor_of(config).total_bytes, "host": psutil.virtual_memory().available}))
"""


@pytest.mark.skipif(not Path("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists(),
                    reason="no cgroup v1 memory controller here to make a limited group in")
def test_a_real_memory_limit_refuses_what_the_host_would_take(tmp_path):
    """In a real cgroup limited to 1 GiB, bert-base at batch 512 (a floor of about 2.5 GiB, which
    this host's free memory would take) is refused before anything is allocated, naming the limit."""
    path = Path("/sys/fs/cgroup/memory") / f"devicefit-test-{uuid.uuid4().hex[:8]}"
    try:
        path.mkdir()
        (path / "memory.limit_in_bytes").write_text(str(GIB))
    except OSError as exc:
        pytest.skip(f"cannot make a memory-limited cgroup here: {exc}")
    try:
        out = subprocess.run(["sh", "-c", f'echo $$ > {path / "cgroup.procs"} && exec "$0" -c "$1"', sys.executable, _IN_LIMIT],
                             capture_output=True, text=True, timeout=300, cwd=Path(__file__).resolve().parents[2])
        assert out.returncode == 0, out.stderr[-2000:]
        result = json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        remove_cgroup(path)
    if result["floor"] > memory_guard.FREE_SHARE * result["host"]:
        pytest.skip(f"this host has {result['host'] / GIB:.1f} GiB free: it would refuse the config without the limit too")
    available, where = result["free"]
    assert available <= GIB and "cgroup memory limit of 1.0 GiB" in where
    assert result["refusal"] is not None and "cgroup memory limit" in result["refusal"]
