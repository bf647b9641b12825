"""A host CPU's bf16 (and fp16) GEMM speed-up over fp32, from what was measured on that host.

A fit carried to a device no row measured (`transfer_roofline`) scales its bf16 GEMM rate by the
ratio of the two devices' probed bf16 matmuls, and falls back to the fp32 peaks where either
device has none. OpenVINO's CPU devices never have one (the probe's bf16 matmul is torch's
kernel, not OpenVINO's), and probes taken before the probe measured bf16 have none, so between
the Xeon with AMX and the Zen 4 EPYC (`../shared/datasets/`) the fp32 peaks carried OpenVINO's
bf16: its bf16 runs 3.4x its fp32 on the Xeon and 1.9x on the EPYC, and leave-one-device-out
predicted bf16 1.5x too slow on the one and 1.7x too fast on the other.

Each host's speed-up is measured anyway, as torch runs it, by one of two measures:

- `rows`: torch's roofline fitted on the host's own rows, with at least MIN_HALF_ROWS of them in
  the half precision: the ratio of its fitted GEMM rates, on real models' shapes;
- `probe`: the host CPU's probe, its bf16 matmul over its fp32 matmul.

A transfer scales the bf16 rate by the fp32 peaks' ratio times the two hosts' speed-ups' ratio,
taken by the same measure on both hosts where they share one (rows first), else by the rows of
one and the probe of the other (the Xeon's files have rows and no bf16 probe, the EPYC's quick
runs a probe and no bf16 rows; at bert-base's shapes this EPYC's F.linear bf16 runs 2.2-2.5x its
fp32, where the probe's 256-wide matmul read 1.54-1.9x: the probe now measures it at its fp32
matmul's size, 1024, where it reads 2.1-2.3x, benchmark_runners.hardware.probe). The backend's own bf16 efficiency is thus
carried like its fp32 one. Only devices that run on the host's CPU (the CPU, OpenVINO's CPU
plugin) take a host's speed-up: a GPU behind the same host has its own.
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from benchmark_runners.hardware.probe import HALF_PRECISIONS
from devicefit.predict.hardware_specs import host_of, is_profiled, key_accelerator, kind_of

if TYPE_CHECKING:
    from devicefit.predict.hardware_specs import DeviceSpec
    from devicefit.predict.operator_roofline import OperatorRoofline

CPU_RUN_KINDS = ("cpu", "openvino")  # kinds whose GEMMs are the host CPU's (a GPU's key names its own fingerprint)
MIN_HALF_ROWS = 6  # a fitted half-precision rate from fewer rows is mostly its prior (2x fp32)
MEASURES = ("rows", "probe")  # in order of preference
MIN_NATIVE_SPEEDUP = 1.0  # a probed half matmul slower than fp32 is emulated (with_probed_half)

# host -> precision -> measure -> (rate over fp32, where it comes from)
Speedups = dict[str, dict[str, dict[str, tuple[float, str]]]]


def on_host_cpu(device: str) -> bool:
    """Whether a device key ("openvino@<host>", "cpu@<host>+t1") computes on its host's CPU."""
    return kind_of(device) in CPU_RUN_KINDS and key_accelerator(device) is None and bool(host_of(device))


def _machine_cpu(device: str) -> bool:
    """A machine's own CPU device: the one whose rows and probe measure the host's speed-up."""
    return kind_of(device) == "cpu" and on_host_cpu(device) and not is_profiled(device)


def host_speedups(roofline: dict[str, "OperatorRoofline"], specs: dict[str, "DeviceSpec"]) -> Speedups:
    """Per host fingerprint and half precision, each measure of torch's speed-up over fp32 there.
    `roofline` is keyed "<device>|<backend>"; only torch's fit of a machine's own CPU rows counts
    (not a transferred fit, a profile's, or another backend's)."""
    out: Speedups = {}
    for key, fit in sorted(roofline.items()):
        device, backend = key.rsplit("|", 1)
        if backend != "torch" or fit.transferred_from is not None or not _machine_cpu(device):
            continue
        fp32 = fit.values.get("linear_gflops_fp32")
        for p in HALF_PRECISIONS:
            n = (fit.precision_rows or {}).get(p, 0)
            if fp32 and n >= MIN_HALF_ROWS and (half := fit.values.get(f"linear_gflops_{p}")):
                out.setdefault(host_of(device), {}).setdefault(p, {})["rows"] = (
                    half / fp32, f"{device}'s {n} {p} rows: fitted GEMM rate {half / fp32:.2f}x fp32")
    for device, spec in sorted(specs.items()):
        if _machine_cpu(device):
            for p, rate in spec.half_rates().items():
                out.setdefault(host_of(device), {}).setdefault(p, {})["probe"] = (
                    rate / spec.peak_gflops, f"{device}'s probe: {p} matmul {rate / spec.peak_gflops:.2f}x fp32")
    return out


def transfer_factors(source: str, target: str, speedups: Speedups) -> dict[str, tuple[float, str]]:
    """For a fit carried from `source` to `target`: per half precision both hosts have a
    speed-up for, the target's over the source's (what multiplies the fp32 peaks' ratio), by
    the same measure on both where they share one, and the figures it comes from."""
    if not (on_host_cpu(source) and on_host_cpu(target)):
        return {}
    theirs, ours = speedups.get(host_of(target), {}), speedups.get(host_of(source), {})
    out = {}
    for p in HALF_PRECISIONS:
        t, s = theirs.get(p, {}), ours.get(p, {})
        shared = [m for m in MEASURES if m in t and m in s]
        pair = (t[shared[0]], s[shared[0]]) if shared else \
            (next((t[m] for m in MEASURES if m in t), None), next((s[m] for m in MEASURES if m in s), None))
        if pair[0] and pair[1]:
            out[p] = (pair[0][0] / pair[1][0], f"{pair[0][1]}; {pair[1][1]}")
    return out


def with_probed_half(fit: "OperatorRoofline", device: str, precision: str, mode: str) -> "OperatorRoofline | None":
    """`device`'s own torch fit answering a half precision none of its rows were in: its fitted fp32
    GEMM rate times its own probe's matmul speed-up in that precision (the `probe` measure above),
    every other fitted rate as it is. None where the fit covers the precision already, does not
    cover fp32 in that mode (training: no fitted backward), its spec had no such probe figure, or
    the device does not compute on its host's CPU with torch (a GPU's tensor cores, OpenVINO's
    kernels: not what the probe's F.linear measured, and not validated).

    Why: the alternative is the efficiency measured on the kind's rows in that precision, which
    are another CPU's (the Zen 4 EPYC's quick runs measure no torch bf16; the Xeon's AMX rows put
    its bf16 at 3.1x fp32, this EPYC's is about 2.1x), or an assumed 25% of peak where there are
    none. On 12 torch bf16 configs measured on the EPYC (6 models, batch 1 and 8) the served answer
    was 29.0% off (all too fast), 11.6% by this with the probe's matmul at 1024 (21.0% with its
    256-wide reading), as the EPYC's fp32 answers are (10.9%). Only where the probe runs the half
    precision at least as fast as fp32 (native: MIN_NATIVE_SPEEDUP): where it is emulated,
    convolutions and matmuls between activations fall to kernels far slower than the probed
    F.linear, which the fp32 fit cannot know. fp16 on this EPYC (F.linear 0.19x fp32): resnet-18
    took 1.17 s at batch 1 (26 ms in fp32), gpt2 13.9 s (0.28 s); this extension said 0.13 and
    1.1 s, the static rule 0.07 and 0.64 s; both links stay out of their bands there."""
    if precision not in HALF_PRECISIONS or fit.backend != "torch" or kind_of(device) != "cpu" \
            or fit.covers(precision, mode) or not fit.covers("fp32", mode):
        return None
    rate, fp32 = (fit.half_gflops or {}).get(precision), fit.values.get("linear_gflops_fp32")
    if not (rate and fp32 and fit.peak_gflops > 0):
        return None
    speedup = rate / fit.peak_gflops
    if speedup < MIN_NATIVE_SPEEDUP:
        return None
    return replace(fit, values={**fit.values, f"linear_gflops_{precision}": fp32 * speedup},
                   half_by_probe={precision: f"no {precision} row: its {precision} GEMM rate is its fitted fp32 rate x its probe's "
                                             f"{precision} matmul over fp32, {speedup:.2f}x"})
