"""What a row records about the process that measured it: here, the allocator, whose settings
move a large batch's time by a third (benchmark_runners.environment.allocator)."""
from __future__ import annotations

import os
import platform

from benchmark_runners.environment import allocator, process_environment


def test_the_allocator_records_the_malloc_settings_and_preload_the_process_runs_with(monkeypatch):
    for name in [k for k in os.environ if k.startswith("MALLOC_") or k in ("GLIBC_TUNABLES", "LD_PRELOAD")]:
        monkeypatch.delenv(name)
    plain = allocator()
    assert plain["settings"] == {} and plain["preload"] is None
    libc, version = platform.libc_ver()
    assert plain["libc"] == (f"{libc} {version}" if libc else None)
    monkeypatch.setenv("MALLOC_MMAP_MAX_", "0")
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=4294967296")
    monkeypatch.setenv("LD_PRELOAD", "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2")
    monkeypatch.setenv("MALLOCX", "not a malloc setting")
    tuned = process_environment()["allocator"]
    assert tuned["settings"] == {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=4294967296", "MALLOC_MMAP_MAX_": "0"}
    assert tuned["preload"] == "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
