"""What a row needs to be reproduced and compared: versions, threads, host, git commit."""
from __future__ import annotations

import gc
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from benchmark_runners.hardware.cpu_budget import detect_cpu_budget

# Recorded for every row; each registered backend adds its own (Backend.packages).
PACKAGES = ("torch", "transformers", "numpy", "devicefit")


def _version(pkg: str) -> str | None:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


def git_commit(path: Path | None = None) -> dict[str, Any]:
    """The commit of the code that measured (and whether the tree had local changes)."""
    cwd = path or Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5)
        if commit.returncode != 0:
            return {"commit": None, "dirty": None}
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd,
                               capture_output=True, text=True, timeout=5)
        return {"commit": commit.stdout.strip(), "dirty": bool(dirty.stdout.strip())}
    except (OSError, subprocess.TimeoutExpired):
        return {"commit": None, "dirty": None}


def versions() -> dict[str, str | None]:
    """The core packages' versions, then each registered backend's own (Backend.versions)."""
    from benchmark_runners import registry

    out = {p: _version(p) for p in PACKAGES}
    for backend in registry.backends().values():
        out.update(backend.versions())
    return out


def host_environment() -> dict[str, Any]:
    """Collected once per sweep in the parent, copied into every row."""
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "hostname": platform.node(),
        "versions": versions(),
        "git": git_commit(),
    }


# What the C library's and Python's allocators read when the process starts, beside LD_PRELOAD:
# glibc's MALLOC_* (MALLOC_CONF is jemalloc's), jemalloc's prefixed build, tcmalloc's, and
# which allocator Python's own small objects use.
ALLOCATOR_VARIABLES = ("GLIBC_TUNABLES", "PYTHONMALLOC", "JE_MALLOC_CONF")
ALLOCATOR_PREFIXES = ("MALLOC_", "TCMALLOC_")
# Not an allocator setting of the measured process: polars sets _RJEM_MALLOC_CONF in os.environ
# when it is imported, for the jemalloc linked into its own library (its symbols prefixed, so no
# model's tensor comes from it). Every process started after the import inherits it: the
# pipeline's workers had it and a `devicefit benchmark` worker did not, and a comparison of the
# two said "the allocator differs" where nothing differed. Rows recorded it from b87674a until
# this was known; allocator_text leaves it out of theirs.
NOT_ALLOCATOR_SETTINGS = ("_RJEM_MALLOC_CONF",)


# Settings only one replacement allocator reads (tcmalloc's TCMALLOC_*, jemalloc's MALLOC_CONF):
# they tune nothing unless that allocator is preloaded, and glibc's own MALLOC_* tune nothing once
# one is. Recorded as the process had them; left out of the tuning a row is compared and trained
# by (allocator_tuning_parts): a stray TCMALLOC_RELEASE_RATE in a shell's profile made every row
# "measured with allocator TCMALLOC_...", and the predictors counted them apart from their twins.
REPLACEMENT_ALLOCATORS = {"tcmalloc": ("TCMALLOC_",), "jemalloc": ("MALLOC_CONF", "JE_MALLOC_CONF")}


def tunes_allocator(name: str, preload: Any) -> bool:
    """Whether the setting `name` configures an allocator of a process started with this
    LD_PRELOAD (None: nothing preloaded)."""
    preloaded = str(preload or "").lower()
    for allocator_name, prefixes in REPLACEMENT_ALLOCATORS.items():
        if name.startswith(prefixes):
            return allocator_name in preloaded
    replaced = any(a in preloaded for a in (*REPLACEMENT_ALLOCATORS, "mimalloc"))
    return not (name.startswith("MALLOC_") and replaced)  # glibc's malloc, unless a preload replaced it


def is_allocator_setting(name: str) -> bool:
    """Whether an environment variable configures an allocator the measured process uses."""
    return (name.startswith(ALLOCATOR_PREFIXES) or name in ALLOCATOR_VARIABLES) and name not in NOT_ALLOCATOR_SETTINGS


def startup_environment() -> dict[str, str]:
    """The environment this process was started with (Linux: /proc/self/environ), which is what
    its allocators read, once, at start: a variable set in os.environ later changes nothing for
    them, and a forked worker runs with the settings its fork server started with. os.environ
    where that cannot be read."""
    try:
        raw = Path("/proc/self/environ").read_bytes()
    except OSError:
        return dict(os.environ)
    pairs = (item.partition(b"=") for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, _, v in pairs}


def allocator() -> dict[str, Any]:
    """The C library and the allocator settings the process started with (ALLOCATOR_VARIABLES and
    ALLOCATOR_PREFIXES, an LD_PRELOAD such as jemalloc or tcmalloc). At batch 16 a torch row's time
    depends on them: mobilenet-v2 took 95k minor page faults a call with glibc's defaults and ran
    453 ms, 295 ms with MALLOC_MMAP_MAX_=0 (the 2-core AVX2 EPYC, 2026-11-30). devicefit measures
    whatever the process was started with; the row says what that was."""
    libc, version = platform.libc_ver()
    started = startup_environment()
    settings = {k: v for k, v in sorted(started.items()) if is_allocator_setting(k)}
    return {"libc": f"{libc} {version}" if libc else None, "preload": started.get("LD_PRELOAD") or None, "settings": settings}


def allocator_text(value: Any) -> str | None:
    """A row's `allocator` (above) in one line, the same text for the same settings: "glibc 2.36
    (defaults)", or with what was set ("glibc 2.36, LD_PRELOAD=libjemalloc.so.2,
    MALLOC_MMAP_MAX_=0"). None for a row that did not record it (older rows, other sources) or
    a value not shaped as allocator() writes it (a baseline file is read without the landing
    schema's check). A setting that configures no allocator of the measured process
    (NOT_ALLOCATOR_SETTINGS, which rows recorded for a while) is left out."""
    tuning = allocator_tuning_parts(value)
    if tuning is None:
        return None
    return ", ".join([str(value.get("libc") or "unknown libc"), *tuning]) if tuning else f"{value.get('libc') or 'unknown libc'} (defaults)"


def allocator_tuning_parts(value: Any) -> list[str] | None:
    """What a row's `allocator` says was tuned, without the C library: its LD_PRELOAD and settings
    ("LD_PRELOAD=libjemalloc.so.2", "MALLOC_MMAP_MAX_=0"; empty: the defaults), as allocator_text
    writes them; a setting no allocator of the process reads (tunes_allocator) is left out. None
    where the value is not shaped as allocator() writes it."""
    if not isinstance(value, dict):
        return None
    settings = value.get("settings") if isinstance(value.get("settings"), dict) else {}
    preload = [f"LD_PRELOAD={value['preload']}"] if value.get("preload") else []
    return preload + [f"{k}={v}" for k, v in sorted(settings.items())
                      if str(k) not in NOT_ALLOCATOR_SETTINGS and tunes_allocator(str(k), value.get("preload"))]


def written_allocator_text(text: str) -> str:
    """An allocator_text read back from a file written before NOT_ALLOCATOR_SETTINGS and settings
    no allocator reads (tunes_allocator) were left out (a CI report's `current_allocator`),
    without them: "glibc 2.36,
    _RJEM_MALLOC_CONF=dirty_decay_ms:500,muzzy_decay_ms:1000" reads "glibc 2.36 (defaults)". A
    setting's own value holds no ", " (jemalloc's and glibc's separate theirs with "," or ":")."""
    parts = text.split(", ")
    preload = next((p.partition("=")[2] for p in parts if p.startswith("LD_PRELOAD=")), None)
    kept = [p for p in parts if p.partition("=")[0] not in NOT_ALLOCATOR_SETTINGS
            and (p.startswith("LD_PRELOAD=") or "=" not in p or tunes_allocator(p.partition("=")[0], preload))]
    if len(kept) == len(parts):
        return text
    return ", ".join(kept) if len(kept) > 1 else f"{kept[0]} (defaults)"


def process_environment() -> dict[str, Any]:
    """Collected in the worker: what the measuring process really ran with."""
    import torch

    return {
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        # An ISA cap as the worker was started with it (constraints.ISA_CAPS), beside what ATen chose.
        "onednn_max_cpu_isa": os.environ.get("ONEDNN_MAX_CPU_ISA"),
        "mkl_enable_instructions": os.environ.get("MKL_ENABLE_INSTRUCTIONS"),
        "cuda_runtime": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "quantized_engine": torch.backends.quantized.engine,
        # Objects the garbage collector no longer walks (benchmark_runners.worker.freeze_imports):
        # 0 in a process that did not freeze its imports, whose full collections cost 100x more.
        "gc_frozen_objects": gc.get_freeze_count(),
        # The CPUs it may use (affinity, cgroup quota) and the threads they allow: where a quota
        # restricts, its contention figures come from the group's counters (contention.py).
        "cpu_budget": detect_cpu_budget().to_json(),
        "allocator": allocator(),
    }
