"""One detector per hardware kind (the registry, `benchmark_runners/registry.py`, names them).
Each returns a PlatformInfo that says whether the platform is present, why not when it is not,
and which devicefit backend measures it."""
from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmark_runners.hardware.cpu_budget import detect_cpu_budget
from benchmark_runners.hardware.memory_budget import find_memory_limit

# ISA features that matter for ML kernels (names as in /proc/cpuinfo).
ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
             "avx_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8", "amx_fp16",
             "asimd", "sve", "sve2", "bf16", "i8mm")


@dataclass
class PlatformInfo:
    kind: str
    available: bool
    reason: str | None = None  # why not available (None when available)
    backend: str | None = None  # the devicefit backend that measures it, None if none exists
    devices: list[dict[str, Any]] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _run(cmd: list[str], timeout: float = 5.0) -> str | None:
    if shutil.which(cmd[0]) is None:
        return None
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def _cpuinfo() -> dict[str, str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    first = text.split("\n\n")[0]
    info = {}
    for line in first.splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            info[k.strip()] = v.strip()
    return info


def detect_cpu() -> PlatformInfo:
    import psutil
    import torch

    info = _cpuinfo()
    model = info.get("model name") or info.get("Model") or platform.processor() or platform.machine()
    flags = set((info.get("flags") or info.get("Features") or "").split())
    if platform.system() == "Darwin":
        brand = _run(["sysctl", "-n", "machdep.cpu.brand_string"])
        model = brand.strip() if brand else model
        feats = _run(["sysctl", "-a"]) or ""
        flags |= {m.lower() for m in re.findall(r"hw\.optional\.arm\.FEAT_(\w+): 1", feats)}
    mem = psutil.virtual_memory()
    device = {
        "index": 0,
        "name": model,
        "vendor": info.get("vendor_id"),
        "architecture": platform.machine(),
        "physical_cores": psutil.cpu_count(logical=False),
        "logical_cores": psutil.cpu_count(logical=True),
        "isa_flags": sorted(f for f in ISA_FLAGS if f in flags),
        "memory_total_bytes": mem.total,
        "memory_available_bytes": mem.available,
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
    }
    device.update(budget_keys(mem.total))
    return PlatformInfo("cpu", True, None, "torch", [device], {"os": f"{platform.system()} {platform.release()}"})


# The CPU device's keys that say what this process may use of it (budget_keys).
BUDGET_KEYS = ("cpu_budget", "usable_cpus", "memory_limit_bytes")


def budget_keys(memory_total_bytes: int) -> dict[str, Any]:
    """What this process may use of the CPU (a container's cpuset, its cgroup's CPU quota and
    memory limit), as the CPU device's keys: `cpu_budget` always; `usable_cpus` only where that
    is less than the host (2 CPUs of a 64-CPU host are their own device to a predictor, so it is
    part of the fingerprint then, and absent, the fingerprint unchanged, on a machine whose
    process may use all of it); `memory_limit_bytes` only under a limit below the host's RAM
    (what the memory guard judges by)."""
    budget = detect_cpu_budget()
    keys: dict[str, Any] = {"cpu_budget": budget.to_json()}
    if budget.restricted:
        keys["usable_cpus"] = round(budget.usable_cpus, 2)
    limit = find_memory_limit()
    if limit is not None and limit.limit_bytes < memory_total_bytes:
        keys["memory_limit_bytes"] = limit.limit_bytes
    return keys


def _nvidia_driver() -> str | None:
    out = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    if out:
        return out.strip().splitlines()[0]
    version_file = Path("/proc/driver/nvidia/version")
    if version_file.is_file():
        m = re.search(r"Kernel Module\s+(\S+)", version_file.read_text())
        return m.group(1) if m else None
    return None


def detect_cuda() -> PlatformInfo:
    import torch

    driver = _nvidia_driver()
    details = {"torch_cuda_runtime": torch.version.cuda, "driver_version": driver}
    if torch.version.hip:
        return PlatformInfo("cuda", False, "this torch build targets ROCm (HIP), not CUDA; see rocm", "torch", details=details)
    if torch.version.cuda is None:
        where = f"an NVIDIA driver {driver} is present" if driver else "no NVIDIA driver is present either"
        return PlatformInfo("cuda", False, f"torch {torch.__version__} is a CPU-only build without CUDA; {where}", "torch", details=details)
    if not torch.cuda.is_available():
        why = "no NVIDIA driver found (nvidia-smi absent, /proc/driver/nvidia missing)" if not driver else "the driver reports no usable device"
        return PlatformInfo("cuda", False, f"torch is built with CUDA {torch.version.cuda} but {why}", "torch", details=details)
    devices = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        devices.append({
            "index": i,
            "name": p.name,
            "memory_total_bytes": p.total_memory,
            "compute_capability": f"{p.major}.{p.minor}",
            "multiprocessors": p.multi_processor_count,
            "bf16_supported": p.major >= 8,
            "driver_version": driver,
            "runtime_version": torch.version.cuda,
        })
    details["cudnn_version"] = torch.backends.cudnn.version()
    return PlatformInfo("cuda", True, None, "torch", devices, details)


def detect_rocm() -> PlatformInfo:
    import torch

    kfd = Path("/dev/kfd").exists()
    details = {"torch_hip_runtime": torch.version.hip, "dev_kfd": kfd}
    if not torch.version.hip:
        why = "/dev/kfd exists (an AMD GPU driver is loaded)" if kfd else "no AMD GPU driver (/dev/kfd absent)"
        return PlatformInfo("rocm", False, f"torch {torch.__version__} is not a ROCm build; {why}", "torch", details=details)
    if not torch.cuda.is_available():
        return PlatformInfo("rocm", False, f"torch is built for ROCm {torch.version.hip} but sees no AMD GPU", "torch", details=details)
    devices = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        devices.append({"index": i, "name": p.name, "memory_total_bytes": p.total_memory,
                        "gcn_arch": getattr(p, "gcnArchName", None), "runtime_version": torch.version.hip})
    return PlatformInfo("rocm", True, None, "torch", devices, details)


def detect_mps() -> PlatformInfo:
    import torch

    if platform.system() != "Darwin":
        return PlatformInfo("mps", False, f"MPS needs macOS on Apple silicon; this is {platform.system()} {platform.machine()}", "torch")
    if not torch.backends.mps.is_built():
        return PlatformInfo("mps", False, f"torch {torch.__version__} was built without MPS", "torch")
    if not torch.backends.mps.is_available():
        return PlatformInfo("mps", False, "torch has MPS but macOS reports no usable Metal device (macOS 12.3+ on Apple silicon needed)", "torch")
    import psutil

    device = {"index": 0, "name": f"Apple {platform.machine()} GPU (MPS)",
              "memory_total_bytes": psutil.virtual_memory().total, "unified_memory": True,
              "macos_version": platform.mac_ver()[0]}
    return PlatformInfo("mps", True, None, "torch", [device])


def detect_openvino() -> PlatformInfo:
    try:
        import openvino as ov
    except ImportError as exc:
        return PlatformInfo("openvino", False, f"the openvino package is not installed ({exc})")
    core = ov.Core()
    devices = []
    for name in core.available_devices:
        entry: dict[str, Any] = {"index": len(devices), "name": name}
        for prop in ("FULL_DEVICE_NAME", "OPTIMIZATION_CAPABILITIES"):
            try:
                entry[prop.lower()] = core.get_property(name, prop)
            except RuntimeError:
                pass
        devices.append(entry)
    details = {"version": ov.get_version()}
    if not devices:
        return PlatformInfo("openvino", False, "openvino is installed but reports no device", details=details)
    return PlatformInfo("openvino", True, None, "openvino", devices, details)


QNN_ENV_VARS = ("QNN_SDK_ROOT", "QAIRT_SDK_ROOT", "SNPE_ROOT")


def detect_qnn() -> PlatformInfo:
    for var in QNN_ENV_VARS:
        root = os.environ.get(var)
        if root and Path(root).is_dir():
            libs = sorted(str(p.relative_to(root)) for p in Path(root).glob("lib/*/libQnnHtp*.so"))
            return PlatformInfo("qnn", True, None, None, [{"index": 0, "name": "Qualcomm AI Engine Direct SDK", "sdk_root": root, "htp_libraries": libs[:8]}],
                                {"sdk_env_var": var})
    set_vars = [v for v in QNN_ENV_VARS if os.environ.get(v)]
    why = f"{', '.join(set_vars)} point(s) to a missing directory" if set_vars else f"none of {', '.join(QNN_ENV_VARS)} is set"
    return PlatformInfo("qnn", False, f"Qualcomm AI Engine Direct (QNN) SDK not found: {why}")


def detect_platforms() -> dict[str, PlatformInfo]:
    from benchmark_runners import registry

    out = {}
    for kind, detector in registry.detectors().items():
        try:
            out[kind] = detector()
        except Exception as exc:  # a broken driver must not hide the other platforms
            out[kind] = PlatformInfo(kind, False, f"detection failed: {type(exc).__name__}: {exc}")
    return out
