"""Peak memory of the measuring process and, on GPUs, of the device allocator.

On Linux the kernel keeps the process's resident high-water mark (VmHWM) and lets a process
reset it (`echo 5 > /proc/self/clear_refs`), so the peak is exact and costs nothing while the
model runs. Elsewhere a background thread samples RSS every 10 ms (and says so).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import re
import threading
from pathlib import Path

import psutil

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def _read_hwm_bytes() -> int | None:
    try:
        m = re.search(r"VmHWM:\s+(\d+)\s+kB", _STATUS.read_text())
    except OSError:
        return None
    return int(m.group(1)) * 1024 if m else None


def reset_process_hwm(pid: int) -> bool:
    """Reset another process's peak-RSS mark (VmHWM) to its current RSS (`clear_refs` 5, Linux
    4.0+; the same user or root); False where the kernel or permissions refuse."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def process_hwm_bytes(pid: int) -> int | None:
    """Another process's peak RSS since start or its last reset (VmHWM); None if unreadable."""
    try:
        m = re.search(r"VmHWM:\s+(\d+)\s+kB", Path(f"/proc/{pid}/status").read_text())
    except OSError:
        return None
    return int(m.group(1)) * 1024 if m else None


def _can_reset_hwm() -> bool:
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return _read_hwm_bytes() is not None


@functools.cache
def _malloc_trim():
    """glibc's malloc_trim, or None. Looked up once: find_library runs `ldconfig -p` in a
    subprocess each time (3 ms, and a fork), twice a config."""
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        return getattr(ctypes.CDLL(name), "malloc_trim", None)
    except OSError:
        return None


def release_free_heap() -> None:
    """Return freed heap pages to the OS (glibc), so an earlier, larger config's leftovers do
    not count towards the next config's peak."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


class PeakRSS:
    def __init__(self, sample_interval_s: float = 0.01):
        self._proc = psutil.Process()
        self.method = "kernel_vmhwm" if _can_reset_hwm() else "sampled_rss_10ms"
        self._interval = sample_interval_s
        self._peak = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def current_bytes(self) -> int:
        return self._proc.memory_info().rss

    def reset(self) -> None:
        if self.method == "kernel_vmhwm":
            _CLEAR_REFS.write_text("5")
            return
        self.stop()
        self._peak = self.current_bytes()
        self._stop.clear()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(self._interval):
            self._peak = max(self._peak, self.current_bytes())

    def peak_bytes(self) -> int:
        if self.method == "kernel_vmhwm":
            return _read_hwm_bytes() or self.current_bytes()
        return max(self._peak, self.current_bytes())

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None


def device_memory_reset(device: str) -> None:
    from benchmark_runners.registry import torch_device_string

    device = torch_device_string(device)
    if device.startswith("cuda"):
        import torch

        torch.cuda.reset_peak_memory_stats(device)


def device_memory_peaks(device: str) -> dict[str, int | None]:
    """Peak allocated/reserved bytes of the device allocator since the last reset."""
    import torch

    from benchmark_runners.registry import torch_device_string

    device = torch_device_string(device)
    if device.startswith("cuda"):
        return {"device_allocated_peak_bytes": torch.cuda.max_memory_allocated(device),
                "device_reserved_peak_bytes": torch.cuda.max_memory_reserved(device)}
    if device == "mps":  # MPS exposes no peak; the driver's current allocation is what it has
        return {"device_allocated_peak_bytes": torch.mps.current_allocated_memory(),
                "device_reserved_peak_bytes": torch.mps.driver_allocated_memory()}
    return {"device_allocated_peak_bytes": None, "device_reserved_peak_bytes": None}
