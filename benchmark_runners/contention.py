"""Was anything else using the CPU while a config was timed?

On a 2-core machine one busy neighbour (an install, a second test run, a browser) can slow a
tiny model forty-fold through OpenMP oversubscription, and the row would look as valid as any
other. So the measuring process samples the host's CPU time around the timed phase: the busy
time of the CPUs this process may run on (`/proc/stat`'s per-CPU lines for the CPUs in its
affinity mask, steal included: on a VM that is a neighbour too) minus its own
(`/proc/self/stat`, every thread of this process). What is left, as a share of the host's
capacity over the same wall time, is what others used. Above CONTENDED_SHARE the config is
measured again once; if the second measurement is contended too, the row keeps the flag
`contended` and the figure, and consumers (predictor training, regression reports, tests that
compare timings) leave it out or say why.

Why the affinity mask and not the host: in a container pinned to 2 CPUs of a 64-CPU host,
the host-wide line counts 62 CPUs no neighbour of ours can take, so one busy neighbour on our 2
CPUs would read as 3% and pass unnoticed (it did, in CI). A neighbour on CPUs we cannot use does
not slow us.

Why a minimum window (MIN_WINDOW_S): /proc/stat charges each 10 ms tick whole to whatever ran
on that CPU when it fired, while our own time is exact. A tiny model's timed phase can be 20 ms,
four ticks on 2 CPUs, and four ticks read a busy neighbour as 0% or 50% by chance (CI read 0.0
beside two spinning loops). So a window shorter than MIN_WINDOW_S is held open, idle, until it
is that long, after the timing is over. We use no CPU meanwhile, so a steady neighbour reads at
least its share (it takes the CPU we leave); one busy only during the short timed phase is
diluted by the wait (a 20 ms burst on both CPUs reads 20% over 0.1 s), the price of a reading
that rounding does not decide. A window that still holds fewer than
MIN_TICKS ticks is not a measurement: None.

Under a CFS quota that restricts (`docker --cpus`, a Kubernetes CPU limit: benchmark_runners/
hardware/cpu_budget.py) the CPUs' busy time misses a neighbour inside the group: it takes quota,
not a CPU, and on a host of 64 CPUs its one CPU is diluted to 1.6%. There the share is also read
from exact counters over the window, and the larger reading counts: the group's CPU time less
this process's (others spending the quota) as a share of the quota, and, over a window in which
the group was not throttled, the time this process's threads spent runnable but waiting for a
CPU (`/proc/self/task/*/schedstat`) as a share of the budget's threads' time. Throttling itself
is not a neighbour: a process whose own demand passes the quota (a 0.5-CPU limit, one thread)
is throttled every period with nothing else in the group, and a thread throttled also waits. The
busy-time reading stays beside them: on the 2-vCPU EPYC, in a group with a one-CPU quota, one
busy loop outside the group left bert-tiny's single thread waiting 0.1-3% of the time yet moved
its p50 from 2.5 to up to 4.0 ms (the neighbour shares the core's caches, not its run queue).

Linux only; elsewhere the share is None ("not measured"), never a guess.
"""
from __future__ import annotations

import functools
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmark_runners.hardware.cpu_budget import CpuBudget, allowed_cpus, detect_cpu_budget, quota_counters

# Share of the host's CPU capacity used by other processes above which a timing is contended.
# An idle host's daemons, the sweep's own parent and the kernel stay around 1-3%; one busy
# process on a 2-core host is 50%.
CONTENDED_SHARE = 0.10

# Our ticks may exceed the CPUs' busy ticks by sampling skew only (the two are read a moment
# apart and accounted differently); beyond this, /proc/stat is not counting our own work.
OWN_SLACK = 1.25
OWN_SLACK_TICKS = 3

# Shortest window a share is read over (see the module's docstring): 0.1 s is 20 ticks on 2 CPUs,
# 5% a tick, so one spinning neighbour (50%) cannot read under CONTENDED_SHARE by rounding.
MIN_WINDOW_S = 0.1
# Fewer ticks than this (all usable CPUs together) and the share is rounding, not a reading;
# a held-open window on one CPU has about 10.
MIN_TICKS = 8

_PROC_STAT = Path("/proc/stat")
_SELF_STAT = Path("/proc/self/stat")


@dataclass(frozen=True)
class QuotaReading:
    """The counters a quota's share is read from (see the module's docstring), at one moment."""

    cpus: float  # the quota, in CPUs
    threads: int  # the budget's threads: what waiting time is a share of
    usage_us: float | None  # the group's CPU time
    throttled_us: float | None  # its runqueues' throttled time, summed over CPUs
    own_ns: int  # this process's CPU time (exited threads included) and its helpers'
    waiting_ns: dict[int, int] = field(default_factory=dict, compare=False)  # thread id -> time runnable, not running


@dataclass(frozen=True)
class CpuSnapshot:
    host_busy_ticks: int
    host_total_ticks: int
    own_ticks: int
    taken_at: float = field(default=0.0, compare=False)  # time.monotonic() when read
    quota: QuotaReading | None = None  # under a CFS quota that restricts: what the share is read from


def _host_ticks(cpus: set[int] | None = None) -> tuple[int, int] | None:
    """(busy, total) clock ticks since boot of `cpus` (all CPUs when None or when /proc/stat has
    no per-CPU line for them): busy counts user, nice, system, irq, softirq and steal; idle and
    iowait are not busy. guest time is already inside user."""
    try:
        lines = _PROC_STAT.read_text().splitlines()
    except OSError:
        return None
    per_cpu: dict[int, tuple[int, int]] = {}
    whole: tuple[int, int] | None = None
    for line in lines:
        parts = line.split()
        if not parts or not parts[0].startswith("cpu") or len(parts) < 9:
            continue
        user, nice, system, idle, iowait, irq, softirq, steal = (int(v) for v in parts[1:9])
        busy = user + nice + system + irq + softirq + steal
        ticks = (busy, busy + idle + iowait)
        if parts[0] == "cpu":
            whole = ticks
        elif parts[0][3:].isdigit():
            per_cpu[int(parts[0][3:])] = ticks
    if cpus and cpus <= per_cpu.keys() and cpus != per_cpu.keys():
        return sum(per_cpu[c][0] for c in cpus), sum(per_cpu[c][1] for c in cpus)
    return whole


def _ticks_of(stat: Path) -> int | None:
    try:
        text = stat.read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # the command name may hold spaces
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of proc(5))


def _own_ticks(helpers: tuple[int, ...] = ()) -> int | None:
    """This process's user + system clock ticks, all threads (OpenMP and OpenVINO pools
    included), plus those of `helpers`: processes a backend runs its model in (the browser
    backend's Chromium), whose work is the measurement's, not a neighbour's. A helper that ends
    inside the window takes its ticks with it, which can only make the share of others larger
    (the conservative side)."""
    own = _ticks_of(_SELF_STAT)
    if own is None:
        return None
    return own + sum(t for t in (_ticks_of(Path(f"/proc/{pid}/stat")) for pid in helpers) if t is not None)


@functools.lru_cache(maxsize=1)
def _budget() -> CpuBudget:
    """The process's CPU budget, read once: a quota does not change under a measurement."""
    return detect_cpu_budget()


def _waiting(helpers: tuple[int, ...]) -> dict[int, int] | None:
    """Thread id -> ns spent runnable but waiting for a CPU, of every thread of this process and
    of `helpers` (each thread's schedstat); None where this kernel keeps none."""
    out: dict[int, int] = {}
    for pid in ("self", *map(str, helpers)):
        try:
            tasks = list(Path(f"/proc/{pid}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                fields = (task / "schedstat").read_text().split()
            except OSError:
                continue  # a thread that ended meanwhile
            if len(fields) >= 2 and task.name.isdigit():
                out[int(task.name)] = int(fields[1])
    return out or None


def _own_ns(helpers: tuple[int, ...]) -> int:
    """This process's CPU time, threads that ended included (as the group's usage counts them),
    plus its helpers' (their /proc stat, in clock ticks)."""
    tick_ns = 1e9 / os.sysconf("SC_CLK_TCK")
    return time.process_time_ns() + int(sum(t for t in (_ticks_of(Path(f"/proc/{pid}/stat")) for pid in helpers) if t) * tick_ns)


def _quota_reading(helpers: tuple[int, ...]) -> QuotaReading | None:
    budget = _budget()
    if not budget.quota_restricts:
        return None
    counters, waiting = quota_counters(budget.quota), _waiting(helpers)
    if counters is None or waiting is None:
        return None
    return QuotaReading(budget.quota.cpus, budget.threads, counters.usage_us, counters.throttled_us, _own_ns(helpers), waiting)


def snapshot(helpers: tuple[int, ...] = ()) -> CpuSnapshot | None:
    host, own = _host_ticks(allowed_cpus()), _own_ticks(helpers)
    if host is None or own is None:
        return None
    return CpuSnapshot(host[0], host[1], own, time.monotonic(), _quota_reading(helpers))


def share_since(before: CpuSnapshot | None, helpers: tuple[int, ...] = ()) -> float | None:
    """The share of others since `before`, the window first held open (idle) until it is
    MIN_WINDOW_S long: the way every caller should close a window it timed something in."""
    if before is None:
        return None
    rest = before.taken_at + MIN_WINDOW_S - time.monotonic()
    if rest > 0:
        time.sleep(rest)
    return other_cpu_share(before, snapshot(helpers))


def other_cpu_share(before: CpuSnapshot | None, after: CpuSnapshot | None) -> float | None:
    """Share of the CPU capacity this process may use that other processes used between the two
    snapshots, in [0, 1]; under a restricting quota the larger of that and `quota_share`; None
    when neither is measurable (no /proc, or fewer than MIN_TICKS ticks between them)."""
    if before is None or after is None:
        return None
    host = _busy_share(before, after)
    if before.quota is None or after.quota is None:
        return host
    quota = quota_share(before.quota, after.quota, after.taken_at - before.taken_at)
    return max((s for s in (host, quota) if s is not None), default=None)


def _busy_share(before: CpuSnapshot, after: CpuSnapshot) -> float | None:
    """Others' share of the busy time of the CPUs in the affinity mask (the module's docstring)."""
    total = after.host_total_ticks - before.host_total_ticks
    if total < MIN_TICKS:
        return None
    busy, own = after.host_busy_ticks - before.host_busy_ticks, after.own_ticks - before.own_ticks
    if own > OWN_SLACK * busy + OWN_SLACK_TICKS:
        # Our own work is part of the CPUs' busy time; counters that do not hold it (a sandbox's
        # synthetic /proc/stat) cannot see a neighbour either: not measured, rather than "none".
        return None
    return min(1.0, max(0.0, (busy - own) / total))


def quota_share(before: QuotaReading, after: QuotaReading, wall_s: float) -> float | None:
    """Under a quota, the larger of: others' CPU time in the group (its usage less ours) as a
    share of the quota, and the time our threads waited for a CPU as a share of the budget's
    threads' time, counted only over a window in which the group was not throttled (a thread
    throttled waits too, and our own demand past the quota throttles us: a 0.5-CPU quota does so
    every period with one thread). None over no time or with neither readable."""
    if wall_s <= 0:
        return None
    shares = []
    if after.usage_us is not None and before.usage_us is not None:
        others_s = (after.usage_us - before.usage_us) / 1e6 - (after.own_ns - before.own_ns) / 1e9
        shares.append(others_s / (wall_s * after.cpus))
    if after.throttled_us is not None and before.throttled_us is not None and after.throttled_us == before.throttled_us:
        waited_ns = sum(max(0, ns - before.waiting_ns.get(tid, 0)) for tid, ns in after.waiting_ns.items())
        shares.append(waited_ns / 1e9 / (wall_s * after.threads))
    return min(1.0, max(0.0, *shares)) if shares else None


def is_contended(share: float | None) -> bool | None:
    return None if share is None else share > CONTENDED_SHARE
