"""The CPU this process may really use: its affinity mask (which a container's cpuset narrows)
and the CFS bandwidth quota of its cgroup (`docker --cpus`, a Kubernetes CPU limit), which
narrows nothing the scheduler shows but throttles every thread of the group past it.

Why: a worker's default threads were the host's physical cores. In a container limited to 2
CPUs of a 64-CPU host, torch would run 32 OpenMP threads on two CPUs' worth of time, throttled
every period: the oversubscription that slowed bert-tiny forty-fold beside a busy neighbour
(issue 15), now inside the row itself. The workers, OpenVINO's CPU plugin and the device probe
now use `CpuBudget.threads`; on a machine without a cpuset or a quota that is the physical
core count it always was. And the contention check (benchmark_runners/contention.py) cannot
read a quota's neighbours from /proc/stat: under a quota it reads the group's own counters.

The quota is the tightest `cpu.max` (cgroup v2) or `cpu.cfs_quota_us / cpu.cfs_period_us` (v1)
on the path from this process's cgroup up to the hierarchy's mount, as /proc/self/cgroup and
/proc/self/mountinfo place it (a container's namespace root included). Linux only; elsewhere
the budget is the affinity mask or the CPU count, and the quota None ("none found").
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from benchmark_runners.hardware.cgroups import group_dirs, read_text, same_group_in


@dataclass(frozen=True)
class CgroupQuota:
    """A CFS bandwidth limit: `cpus` = quota / period, in the cgroup directory `directory`.
    `stat` is the file with its throttling counters (and, on v2, its usage); `usage` the file
    with the group's CPU time (v1's cpuacct.usage, in nanoseconds), None on v2."""

    cpus: float
    directory: str
    version: int
    stat: str
    usage: str | None = None

    def to_json(self) -> dict:
        return {"cpus": round(self.cpus, 4), "cgroup": self.directory, "cgroup_version": self.version}


@dataclass(frozen=True)
class QuotaCounters:
    """A cgroup's cumulative counters, in microseconds: its CPU time (every process in it) and
    the time its runqueues spent throttled (summed over CPUs, as the kernel keeps it)."""

    usage_us: float | None
    throttled_us: float | None


@dataclass(frozen=True)
class CpuBudget:
    logical_cpus: int  # the host's, as the kernel reports them
    affinity_cpus: int  # in this process's affinity mask
    cores_in_affinity: int | None  # distinct physical cores among them (None: topology unreadable)
    quota: CgroupQuota | None

    @property
    def threads(self) -> int:
        """Threads a measuring process should use: the cores it may run on, and no more than the
        quota's whole CPUs (a thread past them is throttled each period: stalls, not speed)."""
        n = self.cores_in_affinity or self.affinity_cpus
        if self.quota is not None:
            n = min(n, math.floor(self.quota.cpus + 1e-9))
        return max(1, n)

    @property
    def usable_cpus(self) -> float:
        return min(float(self.affinity_cpus), self.quota.cpus) if self.quota is not None else float(self.affinity_cpus)

    @property
    def restricted(self) -> bool:
        """True where a cpuset or a quota leaves this process less than the host's CPUs."""
        return self.affinity_cpus < self.logical_cpus or (self.quota is not None and self.quota.cpus < self.affinity_cpus)

    @property
    def quota_restricts(self) -> bool:
        return self.quota is not None and self.quota.cpus < self.affinity_cpus

    def to_json(self) -> dict:
        return {"logical_cpus": self.logical_cpus, "affinity_cpus": self.affinity_cpus, "cores_in_affinity": self.cores_in_affinity,
                "quota": self.quota.to_json() if self.quota is not None else None, "usable_cpus": round(self.usable_cpus, 4),
                "threads": self.threads}

    def describe(self) -> str:
        parts = [f"{self.affinity_cpus} of {self.logical_cpus} CPUs in the affinity mask"]
        if self.quota is not None:
            parts.append(f"a CFS quota of {self.quota.cpus:g} CPUs (cgroup v{self.quota.version} {self.quota.directory})")
        return ", ".join(parts) + f": {self.threads} thread{'s' if self.threads != 1 else ''}"


def _v2_limit(directory: Path) -> float | None:
    text = read_text(directory / "cpu.max")
    parts = text.split() if text else []
    if len(parts) != 2 or parts[0] == "max":
        return None
    try:
        quota, period = int(parts[0]), int(parts[1])
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def _v1_limit(directory: Path) -> float | None:
    quota, period = read_text(directory / "cpu.cfs_quota_us"), read_text(directory / "cpu.cfs_period_us")
    try:
        q, p = int(quota or ""), int(period or "")
    except ValueError:
        return None
    return q / p if q > 0 and p > 0 else None


def find_quota(proc: Path = Path("/proc"), root: Path = Path("/")) -> CgroupQuota | None:
    """The tightest CFS quota on this process's cgroup path, v2 or v1; None where none is set
    or the files are not there (not Linux, no cgroup filesystem mounted)."""
    best: CgroupQuota | None = None
    for d in group_dirs("cpu", proc, root):
        cpus = _v2_limit(d.path) if d.version == 2 else _v1_limit(d.path)
        if cpus is None or (best is not None and cpus >= best.cpus):
            continue
        if d.version == 2:
            best = CgroupQuota(cpus, str(d.path), 2, str(d.path / "cpu.stat"))
        else:  # v1 counts the group's CPU time in cpuacct, beside cpu or in a hierarchy of its own
            acct = same_group_in("cpuacct", d, proc, root)
            best = CgroupQuota(cpus, str(d.path), 1, str(d.path / "cpu.stat"), str(acct / "cpuacct.usage") if acct else None)
    return best


def quota_counters(quota: CgroupQuota | None) -> QuotaCounters | None:
    """The quota's group's counters now; None without a quota, or where its files are gone."""
    if quota is None:
        return None
    stat: dict[str, int] = {}
    for line in (read_text(Path(quota.stat)) or "").splitlines():
        name, _, value = line.partition(" ")
        if value.strip().isdigit():
            stat[name] = int(value)
    if quota.version == 2:
        usage = stat.get("usage_usec")
        throttled = stat.get("throttled_usec")
    else:
        raw = read_text(Path(quota.usage)) if quota.usage else None
        usage = int(raw) / 1000 if raw and raw.isdigit() else None
        throttled = stat["throttled_time"] / 1000 if "throttled_time" in stat else None
    if usage is None and throttled is None:
        return None
    return QuotaCounters(usage, throttled)


def _cores(cpus: set[int], root: Path) -> int | None:
    """Physical cores among `cpus`: their distinct SMT-sibling sets (sysfs `core_cpus_list`, or
    `thread_siblings_list` on older kernels), as psutil counts a whole machine's; None where
    unreadable. Not (package, core_id) pairs: on device-tree arm64 and RISC-V boards core ids
    restart in each cluster, so those pairs merge whole clusters."""
    siblings = set()
    for cpu in cpus:
        topology = root / "sys" / "devices" / "system" / "cpu" / f"cpu{cpu}" / "topology"
        group = read_text(topology / "core_cpus_list") or read_text(topology / "thread_siblings_list")
        if group is None:
            return None
        siblings.add(group)
    return len(siblings) or None


def _cpu_list(text: str | None) -> set[int] | None:
    """"0-3,8,10-11" as a set; None for anything else."""
    out: set[int] = set()
    try:
        for part in (text or "").split(","):
            first, _, last = part.strip().partition("-")
            out.update(range(int(first), int(last or first) + 1))
    except ValueError:
        return None
    return out or None


# Set, they make libgomp pin the main thread to one place when torch loads it, and
# sched_getaffinity reads the calling thread's mask: {0} on a machine nothing restricts.
OPENMP_BINDING_ENV = ("OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY", "KMP_AFFINITY")


def _cpuset(proc: Path, root: Path) -> set[int] | None:
    """The CPUs the process's cpuset cgroup allows (v2 `cpuset.cpus.effective`, v1
    `cpuset.effective_cpus`), from its own group; None where not readable."""
    for d in group_dirs("cpuset", proc, root):
        cpus = _cpu_list(read_text(d.path / ("cpuset.cpus.effective" if d.version == 2 else "cpuset.effective_cpus")))
        if cpus is not None:
            return cpus
    return None


def allowed_cpus(proc: Path = Path("/proc"), root: Path = Path("/")) -> set[int]:
    """The CPUs this process may run on: its affinity mask, or where an OpenMP binding variable
    is set (it narrows the main thread's own mask, not the process's), its cpuset cgroup's."""
    try:
        mask = set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return set(range(os.cpu_count() or 1))
    binding = any(os.environ.get(v, "").strip().lower() not in ("", "false", "disabled", "none") for v in OPENMP_BINDING_ENV)
    return (_cpuset(proc, root) or set(range(os.cpu_count() or len(mask)))) if binding else mask


def detect_cpu_budget(proc: Path = Path("/proc"), root: Path = Path("/"), affinity: set[int] | None = None,
                      logical: int | None = None) -> CpuBudget:
    """This process's budget now (a few small files: cheap enough to read per sweep). The
    arguments stand in for the machine's own in tests. With every CPU allowed the cores are
    psutil's count, as the workers' threads always were."""
    affinity = affinity if affinity is not None else allowed_cpus(proc, root)
    logical = max(logical or os.cpu_count() or len(affinity), len(affinity))
    cores = None
    if len(affinity) == logical and root == Path("/"):
        try:
            import psutil

            cores = min(psutil.cpu_count(logical=False) or logical, logical)
        except ImportError:
            pass
    cores = cores or _cores(affinity, root)
    return CpuBudget(logical, len(affinity), cores, find_quota(proc, root))


def restricted_threads() -> int | None:
    """The budget's threads where a cpuset or a quota restricts this process, else None (leave
    a library's own default, which sees the whole machine, as it is)."""
    budget = detect_cpu_budget()
    return budget.threads if budget.restricted else None
