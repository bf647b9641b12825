"""Clocks for one timed iteration, with optional phase marks (forward/backward/optimizer).

CPU work is timed with perf_counter_ns. CUDA work is asynchronous, so it is timed with CUDA
events recorded on the stream and read after a synchronize; MPS has no public events, so the
MPS clock synchronizes at every mark and reads perf_counter_ns.
"""
from __future__ import annotations

import time
from typing import Callable, Protocol


class IterationClock(Protocol):
    def begin(self) -> None: ...
    def mark(self, phase: str) -> None: ...
    def end(self) -> tuple[int, dict[str, int]]:
        """Total nanoseconds of the iteration and nanoseconds per marked phase."""
        ...


class HostClock:
    """perf_counter_ns, optionally synchronizing a device first (MPS)."""

    def __init__(self, synchronize=None):
        self._sync = synchronize
        self._marks: list[tuple[str, int]] = []

    def begin(self) -> None:
        if self._sync:
            self._sync()
        self._marks = [("", time.perf_counter_ns())]

    def mark(self, phase: str) -> None:
        if self._sync:
            self._sync()
        self._marks.append((phase, time.perf_counter_ns()))

    def end(self) -> tuple[int, dict[str, int]]:
        if self._sync:
            self._sync()
        end = time.perf_counter_ns()
        phases = {name: t - self._marks[i][1] for i, (name, t) in enumerate(self._marks[1:])}
        return end - self._marks[0][1], phases


class CudaEventClock:
    """CUDA events around the iteration and at each phase mark; one synchronize at the end."""

    def __init__(self, device: str):
        import torch

        self._torch = torch
        self._device = torch.device(device)
        self._events: list[tuple[str, object]] = []

    def _event(self):
        ev = self._torch.cuda.Event(enable_timing=True)
        ev.record(self._torch.cuda.current_stream(self._device))
        return ev

    def begin(self) -> None:
        self._events = [("", self._event())]

    def mark(self, phase: str) -> None:
        self._events.append((phase, self._event()))

    def end(self) -> tuple[int, dict[str, int]]:
        last = self._event()
        last.synchronize()
        start = self._events[0][1]
        phases = {}
        prev = start
        for name, ev in self._events[1:]:
            phases[name] = int(prev.elapsed_time(ev) * 1e6)
            prev = ev
        return int(start.elapsed_time(last) * 1e6), phases


def clock_for(device: str) -> IterationClock:
    from benchmark_runners.registry import torch_device_string

    device = torch_device_string(device)
    if device.startswith("cuda"):
        return CudaEventClock(device)
    if device == "mps":
        import torch

        return HostClock(torch.mps.synchronize)
    return HostClock()


def repeat_calls(fn: Callable[[], None], sync: Callable[[], None], budget_s: float, max_reps: int = 30) -> list[float]:
    """Seconds of each call of `fn` (then `sync`) after one untimed call, which pays allocation and
    kernel selection: at least three, then until `budget_s` has passed or `max_reps`."""
    fn()
    sync()  # warm-up: first call pays allocation and kernel selection
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < 3 or (time.perf_counter() - start < budget_s and len(times) < max_reps):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return times
