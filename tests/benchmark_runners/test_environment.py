"""What a row records about the process that measured it: here, the allocator, whose settings
move a large batch's time by a third (benchmark_runners.environment.allocator)."""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

from benchmark_runners.environment import (
    ALLOCATOR_PREFIXES,
    ALLOCATOR_VARIABLES,
    allocator_text,
    startup_environment,
    written_allocator_text,
)

# Changes the environment after start, as a library might: the allocators read it at start only.
REPORT = """
import json, os
os.environ.pop("MALLOC_ARENA_MAX", None)
os.environ["MALLOC_TOP_PAD_"] = "1"
from benchmark_runners.environment import allocator
print(json.dumps(allocator()))
"""


def _untuned_environment() -> dict[str, str]:
    """This process's environment without any allocator setting (nor polars' own)."""
    return {k: v for k, v in os.environ.items()
            if not (k.startswith(ALLOCATOR_PREFIXES) or k in (*ALLOCATOR_VARIABLES, "LD_PRELOAD", "_RJEM_MALLOC_CONF"))}


def _allocator_of(extra: dict[str, str]) -> dict:
    env = _untuned_environment()
    out = subprocess.run([sys.executable, "-c", REPORT], env={**env, **extra}, capture_output=True, text=True, check=True, timeout=120)
    return json.loads(out.stdout.splitlines()[-1])


def test_the_allocator_records_the_settings_and_preload_the_process_started_with():
    plain = _allocator_of({})
    assert plain["settings"] == {} and plain["preload"] is None
    libc, version = platform.libc_ver()
    assert plain["libc"] == (f"{libc} {version}" if libc else None)
    preload = "/usr/lib/x86_64-linux-gnu/libc_malloc_debug.so.0"  # a library any glibc system has, harmless to preload
    tuned = _allocator_of({"MALLOC_MMAP_MAX_": "0", "MALLOC_ARENA_MAX": "2", "GLIBC_TUNABLES": "glibc.malloc.trim_threshold=4294967296",
                           "PYTHONMALLOC": "malloc", "TCMALLOC_RELEASE_RATE": "0", "JE_MALLOC_CONF": "background_thread:true",
                           "MALLOCX": "not a malloc setting", **({"LD_PRELOAD": preload} if os.path.exists(preload) else {})})
    # what it started with, not what it set later (MALLOC_ARENA_MAX popped, MALLOC_TOP_PAD_ set)
    assert tuned["settings"] == {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=4294967296", "JE_MALLOC_CONF": "background_thread:true",
                                 "MALLOC_ARENA_MAX": "2", "MALLOC_MMAP_MAX_": "0", "PYTHONMALLOC": "malloc",
                                 "TCMALLOC_RELEASE_RATE": "0"}
    assert tuned["preload"] == (preload if os.path.exists(preload) else None)


def test_a_variable_set_after_start_is_not_in_the_startup_environment(monkeypatch):
    if not os.path.exists("/proc/self/environ"):
        pytest.skip("no /proc/self/environ on this system: os.environ is what is read")
    monkeypatch.setenv("DEVICEFIT_SET_AFTER_START", "1")
    started = startup_environment()
    assert "DEVICEFIT_SET_AFTER_START" not in started and started.get("HOME") == os.environ.get("HOME")


# A parent that imports polars before it starts a process, as the pipeline does before its fork
# server: polars sets _RJEM_MALLOC_CONF in os.environ for its own jemalloc, and the child inherits it.
AFTER_POLARS = f"""
import os, subprocess, sys
import polars
assert "_RJEM_MALLOC_CONF" in os.environ
print(subprocess.run([sys.executable, "-c", {REPORT!r}], capture_output=True, text=True, check=True).stdout)
"""


def test_polars_own_jemalloc_setting_is_not_an_allocator_difference():
    out = subprocess.run([sys.executable, "-c", AFTER_POLARS], env=_untuned_environment(), capture_output=True, text=True, check=True, timeout=120)
    after_polars = json.loads(out.stdout.strip().splitlines()[-1])
    # the same record as a worker started by a process that never imported polars (`devicefit benchmark`)
    assert after_polars == _allocator_of({}) and after_polars["settings"] == {}
    # rows recorded while it was counted read as the defaults, so a comparison with them notes nothing
    recorded = {"libc": "glibc 2.36", "preload": None, "settings": {"_RJEM_MALLOC_CONF": "dirty_decay_ms:500,muzzy_decay_ms:1000"}}
    assert allocator_text(recorded) == "glibc 2.36 (defaults)"
    assert allocator_text({**recorded, "settings": {**recorded["settings"], "MALLOC_MMAP_MAX_": "0"}}) == "glibc 2.36, MALLOC_MMAP_MAX_=0"
    # and so does the text a CI report of that time wrote
    assert written_allocator_text("glibc 2.36, _RJEM_MALLOC_CONF=dirty_decay_ms:500,muzzy_decay_ms:1000") == "glibc 2.36 (defaults)"
    assert written_allocator_text("glibc 2.36, MALLOC_MMAP_MAX_=0, _RJEM_MALLOC_CONF=a:1") == "glibc 2.36, MALLOC_MMAP_MAX_=0"
    assert written_allocator_text("glibc 2.36, LD_PRELOAD=/x/libjemalloc.so.2") == "glibc 2.36, LD_PRELOAD=/x/libjemalloc.so.2"


def test_a_setting_only_an_allocator_not_preloaded_reads_is_no_tuning():
    """TCMALLOC_* without tcmalloc preloaded, jemalloc's MALLOC_CONF without jemalloc, and glibc's
    MALLOC_* once another allocator replaced glibc's tune nothing: recorded, but the row reads as
    its real tuning, so it is compared and trained with its twins (noticed at stop 72)."""
    from benchmark_runners.environment import allocator_tuning_parts

    glibc = {"libc": "glibc 2.36", "preload": None}
    assert allocator_text({**glibc, "settings": {"TCMALLOC_RELEASE_RATE": "0", "MALLOC_CONF": "background_thread:true"}}) \
        == "glibc 2.36 (defaults)"
    assert allocator_text({**glibc, "settings": {"MALLOC_ARENA_MAX": "2", "TCMALLOC_RELEASE_RATE": "0"}}) == "glibc 2.36, MALLOC_ARENA_MAX=2"
    tcmalloc = {"libc": "glibc 2.36", "preload": "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"}
    assert allocator_tuning_parts({**tcmalloc, "settings": {"TCMALLOC_RELEASE_RATE": "0", "MALLOC_ARENA_MAX": "2"}}) == [
        f"LD_PRELOAD={tcmalloc['preload']}", "TCMALLOC_RELEASE_RATE=0"]
    jemalloc = {"libc": "glibc 2.36", "preload": "libjemalloc.so.2"}
    assert allocator_tuning_parts({**jemalloc, "settings": {"MALLOC_CONF": "background_thread:true", "PYTHONMALLOC": "malloc"}}) == [
        "LD_PRELOAD=libjemalloc.so.2", "MALLOC_CONF=background_thread:true", "PYTHONMALLOC=malloc"]
    recorded = _allocator_of({"TCMALLOC_RELEASE_RATE": "0"})
    assert recorded["settings"] == {"TCMALLOC_RELEASE_RATE": "0"}  # what the process had, kept as provenance
    assert allocator_tuning_parts(recorded) == []
    # a CI report written before the rule reads as the tuning it was
    assert written_allocator_text("glibc 2.36, TCMALLOC_RELEASE_RATE=0") == "glibc 2.36 (defaults)"
    assert written_allocator_text("glibc 2.36, LD_PRELOAD=libtcmalloc.so.4, TCMALLOC_RELEASE_RATE=0") == \
        "glibc 2.36, LD_PRELOAD=libtcmalloc.so.4, TCMALLOC_RELEASE_RATE=0"
