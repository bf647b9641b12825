"""Probe one device in this fresh process, under the constraint profile its environment carries
(set by devices.probe_under before the process started), and print the figures as one JSON line.

    python -m devicefit.fleet.probe_process DEVICE [THREADS]

DEVICE is torch's name ("cpu", "cuda:0"). The ISA actually in force is recorded beside the
figures (ATen's capability, oneDNN's cap as read back from the environment), so a registered
profile says what ran, not only what was asked."""
from __future__ import annotations

import json
import os
import sys


def main(argv: list[str]) -> int:
    device, threads = argv[0], (int(argv[1]) if len(argv) > 1 and argv[1] else None)
    import torch

    if threads:
        torch.set_num_threads(threads)
    from benchmark_runners.hardware.probe import probe_device

    # No per-backend GEMM suite: a profile's threads and ISA cap reach torch only, and OpenVINO
    # (which takes no profile: devicefit/fleet/constraints.py) would read the whole CPU's rate.
    result = probe_device(device, gemm_suite=False).to_json()
    result["aten_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    result["onednn_max_cpu_isa"] = os.environ.get("ONEDNN_MAX_CPU_ISA")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
