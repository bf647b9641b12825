"""A host CPU's bf16 (and fp16) GEMM speed-up over fp32, from what was measured on that host.

A fit carried to a device no row measured (`transfer_roofline`) scales its bf16 GEMM rate by the
ratio of the two devices' probed bf16 matmuls, and falls back to the fp32 peaks where either
device has none. OpenVINO's CPU devices never have one (the probe's bf16 matmul is torch's
kernel, not OpenVINO's), and probes taken before the probe measured bf16 have none, so between
the Xeon with AMX and the Zen 4 EPYC (`../shared/datasets/`) the fp32 peaks carried OpenVINO's
bf16: its bf16 runs 3.4x its fp32 on the Xeon and 1.9x on the EPYC, and leave-one-device-out
predicted bf16 1.5x too slow on the one and 1.7x too fast on the other.

Each host's speed-up is measured anyway, as torch runs it (the same measure on both sides of a
transfer, so that the backend's own bf16 efficiency is carried like its fp32 one), in order:

1. torch's roofline fitted on the host's own rows in both precisions: the ratio of its fitted
   GEMM rates, on real models' shapes;
2. the host CPU's probe: its bf16 matmul over its fp32 matmul.

A transfer then scales the bf16 rate by the fp32 peaks' ratio times the two hosts' speed-ups'
ratio. Only devices that run on the host's CPU (the CPU, OpenVINO's CPU plugin) take a host's
speed-up: a GPU behind the same host has its own.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from benchmark_runners.hardware.probe import HALF_PRECISIONS
from devicefit.predict.hardware_specs import host_of, is_profiled, key_accelerator, kind_of

if TYPE_CHECKING:
    from devicefit.predict.hardware_specs import DeviceSpec
    from devicefit.predict.operator_roofline import OperatorRoofline

CPU_RUN_KINDS = ("cpu", "openvino")  # kinds whose GEMMs are the host CPU's (a GPU's key names its own fingerprint)

Speedups = dict[str, dict[str, tuple[float, str]]]  # host -> precision -> (rate over fp32, where it comes from)


def runs_on_host_cpu(device: str) -> bool:
    return kind_of(device) in CPU_RUN_KINDS and key_accelerator(device) is None and bool(host_of(device))


def host_speedups(roofline: dict[str, "OperatorRoofline"], specs: dict[str, "DeviceSpec"]) -> Speedups:
    """Per host fingerprint, per half precision: torch's rate over its fp32 rate on that host
    and where the figure comes from. `roofline` is keyed "<device>|<backend>"; only a fit of the
    device's own rows counts (not a transferred one), and only a machine's own CPU device (not
    its constraint profiles)."""
    out: Speedups = {}
    for key, fit in sorted(roofline.items()):
        device = key.rsplit("|", 1)[0]
        if kind_of(device) != "cpu" or fit.transferred_from is not None or not runs_on_host_cpu(device) or is_profiled(device):
            continue
        fp32 = fit.values.get("linear_gflops_fp32")
        for p in HALF_PRECISIONS:
            if fp32 and (half := fit.values.get(f"linear_gflops_{p}")):
                out.setdefault(host_of(device), {})[p] = (half / fp32, f"{device}'s {p} rows: fitted GEMM rate {half / fp32:.2f}x fp32")
    for device, spec in sorted(specs.items()):
        if kind_of(device) != "cpu" or not runs_on_host_cpu(device) or is_profiled(device):
            continue
        for p, rate in spec.half_rates().items():
            out.setdefault(host_of(device), {}).setdefault(p, (rate / spec.peak_gflops,
                                                              f"{device}'s probe: {p} matmul {rate / spec.peak_gflops:.2f}x fp32"))
    return out


def transfer_factors(source: str, target: str, speedups: Speedups) -> dict[str, tuple[float, str]]:
    """For a fit carried from `source` to `target`: per half precision both hosts have a
    speed-up for, the target's over the source's (what multiplies the fp32 peaks' ratio), and
    the two figures it comes from."""
    if not (runs_on_host_cpu(source) and runs_on_host_cpu(target)):
        return {}
    theirs, ours = speedups.get(host_of(target), {}), speedups.get(host_of(source), {})
    return {p: (theirs[p][0] / ours[p][0], f"{theirs[p][1]}; {ours[p][1]}")
            for p in HALF_PRECISIONS if p in theirs and p in ours}
