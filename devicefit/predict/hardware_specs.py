"""Peak compute and memory bandwidth per device, with where each figure comes from.

A device is a hardware kind on one host (`device_key`: "cpu@cpu-e1d9c1f8fde0"), a GPU named by
its own fingerprint too ("cuda@cpu-92023180236e+cuda-463cf67299a5": cloud GPU boxes share one
host CPU fingerprint): two CPUs of different vendors are two devices, and a store that holds both scores each row against the
peaks of the device that measured it (`measured_device_specs`). Preferred: that device's probe
(measured). Otherwise a published datasheet figure for a reference device of that kind,
labelled as such. Kinds with neither get None: no number is made up for them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from benchmark_runners import registry
from benchmark_runners.hardware.probe import HALF_PRECISIONS
from benchmark_runners.speed_reference import copy_rate, mean_gflops, per_worker, typical_rates

# The most a probe is moved to its device's typical speed. Wider than a row's clamp
# (speed_reference.MAX_FACTOR, 1.5): the reading and the probe are taken within two seconds of
# each other, so a slow minute slows both alike; a probe of the AMD EPYC VM read 1.8x below its run.
PROBE_MAX_FACTOR = 2.0
# A probe the kernel places within this factor of the typical speed stays as measured: over 126
# probes of the calm VM, scaling every probe by its reading doubled the peak's spread (CV 2.9% ->
# 6.1%, one probe moved 1.5x); with this band none moved, and run 10's 1.8x slow probe would.
PROBE_DEAD_BAND = 1.25


@dataclass(frozen=True)
class DeviceSpec:
    kind: str
    name: str
    peak_gflops: float  # fp32 matmul
    bandwidth_gbs: float
    source: str  # "measured_probe" or "published_spec: <reference>"
    memory_gb: float | None = None  # device memory of the published reference (None: ask the inventory)
    # Probed bf16 / fp16 matmul GFLOP/s (benchmark_runners.hardware.probe); None: not measured,
    # and the half-precision GEMM prior is the fp32 peak x operator_roofline.PRECISION_SPEEDUP.
    bf16_gflops: float | None = None
    fp16_gflops: float | None = None

    def half_rates(self) -> dict[str, float]:
        """The half-precision matmul rates the probe measured, by precision (only those measured)."""
        return {p: rate for p in HALF_PRECISIONS if (rate := getattr(self, f"{p}_gflops"))}


# Datasheet figures (dense fp32 non-tensor-core GFLOP/s, memory bandwidth GB/s).
PUBLISHED_SPECS = {
    "cuda": DeviceSpec("cuda", "NVIDIA A100 80GB SXM", 19_500, 2_039, "published_spec: NVIDIA A100 datasheet (19.5 TFLOP/s FP32, 2,039 GB/s, 80 GB)", 80),
    "rocm": DeviceSpec("rocm", "AMD Instinct MI250X", 47_900, 3_277, "published_spec: AMD MI250X datasheet (47.9 TFLOP/s FP32, 3.2 TB/s, 128 GB)", 128),
    "mps": DeviceSpec("mps", "Apple M2 GPU (10-core)", 3_600, 100, "published_spec: Apple M2 (3.6 TFLOP/s FP32, 100 GB/s, 16 GB unified memory configuration)", 16),
}
PUBLISHED_BY_NAME = {
    "H100": DeviceSpec("cuda", "NVIDIA H100 80GB HBM3", 67_000, 3_350, "published_spec: NVIDIA H100 SXM datasheet (67 TFLOP/s FP32, 3.35 TB/s, 80 GB)", 80),
    "H200": DeviceSpec("cuda", "NVIDIA H200", 67_000, 4_800, "published_spec: NVIDIA H200 datasheet (67 TFLOP/s FP32, 4.8 TB/s, 141 GB)", 141),
    "A100": PUBLISHED_SPECS["cuda"],
    "L4": DeviceSpec("cuda", "NVIDIA L4", 30_300, 300, "published_spec: NVIDIA L4 datasheet (30.3 TFLOP/s FP32, 300 GB/s, 24 GB)", 24),
    "T4": DeviceSpec("cuda", "NVIDIA T4", 8_100, 320, "published_spec: NVIDIA T4 datasheet (8.1 TFLOP/s FP32, 320 GB/s, 16 GB)", 16),
}


def spec_from_probe(kind: str, name: str | None, probe: dict, typical_reference: float | None = None,
                    typical_copy: float | None = None) -> DeviceSpec | None:
    """The device's peaks from its probe; None for a failed probe or one without both figures.
    The compute peaks are the matmul's median rate (`typical_matmul_share`), the bandwidth the
    copy's best. With `typical_reference` (the rate the speed-reference kernel had around the
    device's rows), the compute peaks are put at that speed (`probe_speed_factor`); with `typical_copy` (the copy
    kernel's typical rate in the device's workers), the bandwidth likewise
    (`probe_bandwidth_factor`); the source says by how much."""
    if not isinstance(probe, dict) or "error" in probe:
        return None
    best, bandwidth = probe.get("matmul_gflops_best"), probe.get("memory_bandwidth_gbs_best")
    if not (_positive(best) and _positive(bandwidth)):
        return None
    share = typical_matmul_share(probe)
    factor = probe_speed_factor(probe, typical_reference)
    copy_factor = probe_bandwidth_factor(probe, typical_copy)
    half = {p: float(v) * share * factor if _positive(v := probe.get(f"matmul_gflops_{p}_best")) else None
            for p in HALF_PRECISIONS}
    source = "measured_probe" if share == 1.0 else "measured_probe (the matmul's median)"
    if factor != 1.0:
        at_probe = max(probe["speed_reference"]["before_gflops"], probe["speed_reference"]["after_gflops"])
        source += (f" (compute peaks x{factor:.3g}: the speed reference read {at_probe:.0f} GFLOP/s at the probe, "
                   f"{typical_reference:.0f} typical around the device's rows)")
    if copy_factor != 1.0:
        source += (f" (bandwidth x{copy_factor:.3g}: the copy reference read {copy_rate(probe['speed_reference']):.1f} GB/s "
                   f"at the probe, {typical_copy:.1f} typical in the device's workers)")
    return DeviceSpec(kind, name or kind, float(best) * share * factor, float(bandwidth) * copy_factor, source,
                      bf16_gflops=half["bf16"], fp16_gflops=half["fp16"])


def typical_matmul_share(probe: dict) -> float:
    """The probe's median fp32 matmul rate over its best (1.0 where the median is missing or not
    below the best, and for a probe taken beside another process, `contended`, whose median lands
    in the scheduler's slices where its best does not): the compute peaks are put at the median.
    A row's latency is a median of its calls, and so is the speed reference that scales rows and
    probes to their device's typical speed; the best of the probe's (up to 30) matmul repetitions
    is the fastest moment of its second instead. Over the AMD EPYC VM's runs 31-39 and the Xeon's
    run 40 the best was 0.92-1.24x the rows' typical reference (mean 1.10), the median 0.85-1.12x
    (mean 1.02): the median is the rate the rows ran at. With the median (runs 38 and 39
    of the EPYC each beside run 40 of the Xeon), leave-one-device-out latency went from a mean
    over the four devices of 16.3% to 13.8% and 16.4% to 15.5%, held out unchanged
    (docs/measurement-log.md). The half-precision probes keep only their best: taken at the
    same share."""
    best, median = probe.get("matmul_gflops_best"), probe.get("matmul_gflops_median")
    if not (_positive(best) and _positive(median)) or median >= best or probe.get("contended"):
        return 1.0
    return float(median) / float(best)


def probe_speed_factor(probe: dict, typical_reference: float | None) -> float:
    """How much faster the device typically ran than at its probe: the speed-reference kernel's
    typical rate around the device's rows over its rate at the probe, the faster of the two
    readings there (one may catch a dip the probe's own repetitions did not; one reading is ten
    milliseconds: 126 probes of the calm AMD EPYC VM had a 2.9% CV in their peak and 6% in the
    readings' mean). Moved only by at least PROBE_DEAD_BAND either way, at most
    PROBE_MAX_FACTOR; 1.0 where either figure is missing, and for a probe taken beside another
    process (`contended`): there a reading lands in the scheduler's slices, not a slow minute
    (with a busy loop beside 20 probes at 0.55x their idle peak, the readings were 17 or 180,
    and one probe read 17 twice and would have moved 2x). The compute peaks only: the kernel is
    a compute-bound matmul; over the 126 calm probes the copy bandwidth did not follow the
    readings (correlation -0.03 in logs). The bandwidth has its own reading
    (`probe_bandwidth_factor`). By the full ratio, not the rows' speed_reference.TRACKING power:
    the probe's peak and the reading are the same kind of kernel (an fp32 matmul with the same
    threads) two seconds apart, where a model's time follows only part of the reading's swing."""
    reference = probe.get("speed_reference")
    if mean_gflops(reference) is None:
        return 1.0
    return _moved(max(reference["before_gflops"], reference["after_gflops"]), typical_reference, probe)


def probe_bandwidth_factor(probe: dict, typical_copy: float | None) -> float:
    """How much more bandwidth the device typically had than at its probe: the copy kernel's
    typical rate in the device's workers over its rate at the probe (speed_reference.py), with
    the compute factor's dead band, clamp and contention rule. On the Zen 4 EPYC VM the kernel
    tracked the probe's 256 MiB copy through the VM's two bandwidth states (34 and 53 GB/s;
    correlation 0.94 in logs over 16 pairs), so the dead band keeps a probe within a state as
    measured and moves one taken in the state the run did not mostly see."""
    return _moved(copy_rate(probe.get("speed_reference")), typical_copy, probe)


def _moved(at_probe: float | None, typical: float | None, probe: dict) -> float:
    """typical / at_probe, 1.0 inside the dead band or where either is missing or the probe was
    contended, clamped to PROBE_MAX_FACTOR."""
    if not (_positive(at_probe) and _positive(typical)) or probe.get("contended"):
        return 1.0
    factor = typical / at_probe
    if 1 / PROBE_DEAD_BAND < factor < PROBE_DEAD_BAND:
        return 1.0
    return min(max(factor, 1 / PROBE_MAX_FACTOR), PROBE_MAX_FACTOR)


def _positive(v: Any) -> bool:
    """A probe figure fit to scale predictions by: a positive finite number (not a bool)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def published_spec(kind: str, device_name: str | None = None) -> DeviceSpec | None:
    if device_name:
        for key, spec in PUBLISHED_BY_NAME.items():
            if key in device_name:
                return spec
    return PUBLISHED_SPECS.get(kind)


def device_specs(inventory: dict) -> dict[str, DeviceSpec]:
    """Kind -> spec: this machine's probes first, then published references for the rest."""
    specs: dict[str, DeviceSpec] = {}
    platforms = inventory.get("platforms", {})
    for device, probe in (inventory.get("probes") or {}).items():
        kind = registry.kind_of_device(device)
        devices = platforms.get(kind, {}).get("devices") or [{}]
        spec = spec_from_probe(kind, devices[0].get("name"), probe)
        if spec and kind not in specs:
            specs[kind] = spec
    for kind in PUBLISHED_SPECS:
        specs.setdefault(kind, published_spec(kind))
    openvino = platforms.get("openvino", {})
    if openvino.get("available") and any(d.get("name") == "CPU" for d in openvino.get("devices") or []) and "cpu" in specs:
        specs["openvino"] = openvino_on_cpu(specs["cpu"])
    for kind, info in platforms.items():  # wasm, and WebGPU on a software adapter: the CPU does the work
        devices = info.get("devices") or [{}]
        if kind not in specs and info.get("available") and "cpu" in specs and runs_on_cpu(kind, bool(devices[0].get("software"))):
            specs[kind] = on_cpu(kind, specs["cpu"])
    return specs


def runs_on_cpu(kind: str, software: bool = False) -> bool:
    """Whether a kind's measurements run on the host CPU's cores (beside the CPU itself): wasm,
    WebGPU on a software adapter. OpenVINO's CPU plugin is its own case (its devices have names)."""
    return kind != "cpu" and kind in registry.kind_names() and registry.physical_kind(kind, software=software) == "cpu" and kind != "openvino"


def openvino_on_cpu(cpu: DeviceSpec, cpu_id: str = "") -> DeviceSpec:
    """OpenVINO's CPU plugin on a probed CPU (`cpu_id`: that CPU's device id, named in the
    source): the same peaks, its own fitted efficiency, and none of the probe's half-precision
    matmuls, which are torch's kernels, not OpenVINO's."""
    where = f", {cpu_id}" if cpu_id else ""
    return replace(cpu, kind="openvino", name=f"OpenVINO CPU plugin on {cpu.name}", source=f"{cpu.source} (the CPU OpenVINO runs on{where})",
                   bf16_gflops=None, fp16_gflops=None)


def on_cpu(kind: str, cpu: DeviceSpec) -> DeviceSpec:
    """The CPU probe's peaks for a kind that runs on that CPU, labelled so (its efficiency there is
    its own, fitted from its rows)."""
    return DeviceSpec(kind, f"{kind} on {cpu.name}", cpu.peak_gflops, cpu.bandwidth_gbs, f"{cpu.source} (the CPU {kind} runs on)", cpu.memory_gb)


def device_key(kind: str, host: str | None) -> str:
    """A measured device: its kind on one host. A host is its CPU's fingerprint (hostnames
    repeat across machines: both development VMs are "vm"), else its hostname."""
    return f"{kind}@{host}" if host else kind


def accelerator_of(row: dict) -> str | None:
    """The fingerprint of the hardware a row ran on when that is not the host's CPU (a GPU), so
    two GPUs behind one host CPU stay two devices; None for the CPU and what runs on it, and for
    a row that names no hardware fingerprint."""
    fingerprint = row.get("hardware_fingerprint")
    host = row.get("host_fingerprint")
    if not fingerprint or fingerprint == host:
        return None
    return fingerprint if registry.own_device(row["device_kind"], _software_row(row)) else None


def row_device(row: dict) -> str:
    """The device a stored measurement row was taken on: its kind on its host, plus the
    accelerator's own fingerprint for a GPU ("cuda@<host>+cuda-<fingerprint>": the host's CPU
    does not tell an H100 from an H200), plus a constraint profile, which makes the same
    hardware another device ("cpu@<host>+t1"); the aggregates key their rows alike (host and
    accelerator columns)."""
    host = row.get("host_fingerprint") or row.get("hostname")
    qualifiers = [q for q in (accelerator_of(row), row.get("device_profile")) if q]
    return device_key(row["device_kind"], "+".join([host, *qualifiers]) if host else host)


def kind_of(device: str) -> str:
    return device.split("@", 1)[0]


def host_of(device: str) -> str:
    """The machine a device is on ("" for a device keyed by kind alone); the profiles of one
    machine's CPU ("cpu@<host>+t1") are on that machine."""
    return device.split("@", 1)[1].split("+", 1)[0] if "@" in device else ""


def machine_of(device: str) -> str:
    """The machine a device is, profiles aside: its host, and a GPU's own fingerprint (an H100
    box and an H200 box behind one host CPU fingerprint are two machines)."""
    accelerator = key_accelerator(device)
    return f"{host_of(device)}+{accelerator}" if accelerator else host_of(device)


def _qualifiers(device: str) -> list[str]:
    return device.split("@", 1)[1].split("+")[1:] if "@" in device else []


def key_accelerator(device: str) -> str | None:
    """The GPU fingerprint a device key names ("cuda@<host>+cuda-..."), else None."""
    return next((q for q in _qualifiers(device) if q.startswith(kind_of(device) + "-")), None)


def is_profiled(device: str) -> bool:
    """Whether a device key names a constraint profile ("cpu@<host>+t1"), not only hardware (a
    GPU's own fingerprint, "cuda@<host>+cuda-...", is hardware)."""
    return any(not q.startswith(kind_of(device) + "-") for q in _qualifiers(device))


def default_devices(devices: list[str], local_host: str | None, local_hardware: frozenset[str] = frozenset()) -> dict[str, str]:
    """The device a prediction for a bare kind ("cpu") answers for, from the training rows'
    devices (one entry per row): this machine's, when it measured that kind (of two GPUs behind
    its host fingerprint, the one `local_hardware` lists); else the device with the most rows."""
    counts: dict[str, int] = {}
    for d in devices:
        counts[d] = counts.get(d, 0) + 1

    def local(d: str) -> bool:  # on this machine, as it is (no profile); of two GPUs behind its host fingerprint, its own
        own = key_accelerator(d)
        return (bool(local_host) and host_of(d) == local_host and not is_profiled(d)
                and (own is None or not local_hardware or own in local_hardware))

    out: dict[str, str] = {}
    for device in sorted(counts, key=lambda d: (not local(d), -counts[d], d)):
        out.setdefault(kind_of(device), device)
    return out


def measured_device_specs(rows: list[dict], hardware: list[tuple]) -> dict[str, DeviceSpec]:
    """The spec of every device `rows` were measured on, from the store's `hardware` rows
    (fingerprint, kind, name, probe): the device's own probe; for OpenVINO's CPU plugin, the
    probe of the CPU it ran on (the row's host); else a published figure for its name. A device
    with none of these is left out (its rows are counted as unscored by training). A probe with
    a speed-reference reading is put at the typical speed its rows ran at (`probe_speed_factor`),
    and one with a copy reading at the typical bandwidth its workers read (`probe_bandwidth_factor`)."""
    import json

    known = {fp: (name, json.loads(probe) if isinstance(probe, str) else probe) for fp, _kind, name, probe in hardware}
    typical = typical_reference_by_probe(rows, known)
    typical_copy = typical_reference_by_probe(rows, known, copy_rate, one_a_worker=True)

    def from_probe(kind: str, fingerprint: str | None, name: str | None, probe: Any) -> DeviceSpec | None:
        return spec_from_probe(kind, name, probe, typical.get(fingerprint or ""), typical_copy.get(fingerprint or ""))

    specs: dict[str, DeviceSpec] = {}
    for r in rows:
        device = row_device(r)
        if device in specs:
            continue
        kind = r["device_kind"]
        # A profiled device's own probe (registered under its device id); else the hardware's.
        own = r.get("device_id") if r.get("device_id") in known else r.get("hardware_fingerprint")
        name, probe = known.get(own or "", (r.get("device_name"), None))
        if r.get("device_profile") and r.get("device_id") not in known:
            continue  # the unconstrained hardware's peaks would misdescribe it: unscored until registered
        spec = from_probe(kind, own, name, probe)
        host = known.get(r.get("host_fingerprint"))
        if spec is None and kind == "openvino" and (name == "CPU" or registry.runs_on_host_cpu(r.get("device") or "")) and host:
            cpu = from_probe("cpu", r.get("host_fingerprint"), *host)
            if cpu:
                spec = openvino_on_cpu(cpu)
        if spec is None and host and runs_on_cpu(kind, _software_row(r)):
            cpu = from_probe("cpu", r.get("host_fingerprint"), *host)
            spec = on_cpu(kind, cpu) if cpu else None
        spec = spec or published_spec(kind, r.get("device_name"))
        if spec:
            specs[device] = spec
    return specs


def typical_reference_by_probe(rows: list[dict], known: dict[str, tuple], rate=mean_gflops,
                               one_a_worker: bool = False) -> dict[str, float]:
    """Per probed fingerprint, the median speed-reference rate (`rate` of a row's reading: the
    compute kernel's, around each config, or `copy_rate`, one a worker) of the rows its probe
    describes (devicefit.predict.speed): a profiled device's under its device id, every other
    row that ran on the host CPU (torch's, OpenVINO's CPU plugin's: the worker reads the same
    kernels with the same threads) under the host's fingerprint. A reading taken `one_a_worker`
    (the copy kernel's), which each of the worker's configs carries, counts once (`per_worker`).
    Fewer than MIN_READINGS readings: absent."""
    readings: dict[str, list[tuple]] = {}
    for r in rows:
        value = rate(r.get("speed_reference"))
        if value is None:
            continue
        key = r.get("device_id") if r.get("device_profile") else r.get("host_fingerprint")
        if key in known:
            readings.setdefault(key, []).append((r.get("run_id"), value))
    return typical_rates({k: per_worker(v) if one_a_worker else [value for _run, value in v] for k, v in readings.items()})


def training_specs(rows: list[dict], hardware: list[tuple], inventory: dict) -> tuple[dict[str, DeviceSpec], str | None]:
    """What training scores rows against: each measured device's spec from the store, plus this
    machine's and the published specs per kind (the fallback chain's, for kinds never measured);
    and this machine's host fingerprint, whose devices answer predictions asked by kind."""
    cpu = ((inventory.get("platforms") or {}).get("cpu") or {}).get("devices") or [{}]
    return {**device_specs(inventory), **measured_device_specs(rows, hardware)}, cpu[0].get("fingerprint")


def _software_row(row: dict) -> bool:
    """Whether a row was measured on a software device (its backend_config says so)."""
    from devicefit.store.loading import on_software_adapter

    return on_software_adapter(row.get("backend_config"))
