"""The memory this process's cgroup lets it have: a container's memory limit (`docker
--memory`, a Kubernetes memory limit), which the host's free memory does not show.

Why: the memory guard (benchmark_runners/memory_guard.py) refuses a config whose floor does not
fit in what is free, read from psutil: the host's. In a container limited to 4 GiB on a 256 GiB
host it would let a 20 GiB config through, and the kernel's OOM killer would end the worker (a
failed row, after the model's build) or a process beside it. The limit is the tightest
`memory.max` (v2) or `memory.limit_in_bytes` (v1) from the process's group up to the mount;
what is left under it is the limit less the group's usage, its page cache (active and inactive
file pages, which the kernel reclaims before it kills, as the host's MemAvailable counts them)
counted as free: a container whose earlier configs read 700 MiB of weights twice had them on the
active list, and counting them as used refused a 421 MiB config in a 1 GiB group where 800 MiB
could still be allocated.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from benchmark_runners.hardware.cgroups import group_dirs, read_text

# v1 writes "no limit" as the largest page-aligned long (9223372036854771712); v2 as "max".
UNLIMITED_FROM = 2**60


@dataclass(frozen=True)
class MemoryLimit:
    limit_bytes: int
    usage_bytes: int | None  # the group's, now (page cache included)
    reclaimable_bytes: int  # its page cache (active and inactive files), which the kernel reclaims before an OOM kill
    directory: str
    version: int

    @property
    def available_bytes(self) -> int:
        """What a new allocation may still take under the limit."""
        used = (self.usage_bytes or 0) - self.reclaimable_bytes
        return max(0, self.limit_bytes - max(0, used))

    def to_json(self) -> dict:
        return {"limit_bytes": self.limit_bytes, "available_bytes": self.available_bytes, "cgroup": self.directory,
                "cgroup_version": self.version}


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _stat(path: Path, *keys: str) -> int:
    """The sum of `keys` in a memory.stat file (0 for those absent)."""
    total = 0
    for line in (read_text(path) or "").splitlines():
        name, _, value = line.partition(" ")
        if name in keys:
            total += _int(value.strip()) or 0
    return total


def find_memory_limit(proc: Path = Path("/proc"), root: Path = Path("/")) -> MemoryLimit | None:
    """The tightest memory limit on this process's cgroup path with its group's usage; None where
    none is set or the files are not there (not Linux, no memory controller mounted)."""
    best: MemoryLimit | None = None
    for d in group_dirs("memory", proc, root):
        if d.version == 2:
            limit = _int(read_text(d.path / "memory.max"))  # "max": no limit, None here
            usage = _int(read_text(d.path / "memory.current"))
            reclaimable = _stat(d.path / "memory.stat", "active_file", "inactive_file")
        else:
            limit = _int(read_text(d.path / "memory.limit_in_bytes"))
            usage = _int(read_text(d.path / "memory.usage_in_bytes"))
            reclaimable = _stat(d.path / "memory.stat", "total_active_file", "total_inactive_file")
        if limit is None or limit <= 0 or limit >= UNLIMITED_FROM:
            continue
        found = MemoryLimit(limit, usage, reclaimable, str(d.path), d.version)
        if best is None or found.available_bytes < best.available_bytes:
            best = found
    return best
