"""The isolated worker process: `python -m benchmark_runners.worker` reads a job (configs of one
model on one backend and device) as JSON on stdin and answers JSON lines on its original
stdout: {"event": "start", "index": i} before each config and {"event": "result", ...} after.
Library prints are redirected to stderr so they cannot corrupt the protocol."""
from __future__ import annotations

import json
import os
import sys


def main() -> int:
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    job = json.load(sys.stdin)

    import torch

    from benchmark_runners.measure import ConfigMeasurer
    from benchmark_runners.records import BenchmarkConfig

    configs = [BenchmarkConfig.from_json(c) for c in job["configs"]]
    threads = configs[0].threads or job.get("default_threads")
    if threads:
        torch.set_num_threads(int(threads))
    measurer = ConfigMeasurer(job["run_id"], job.get("host_environment", {}), job.get("devices", {}))

    def emit(message: dict) -> None:
        protocol.write(json.dumps(message) + "\n")
        protocol.flush()

    for index, config in enumerate(configs):
        emit({"event": "start", "index": index})
        result = measurer.run(config)
        emit({"event": "result", "index": index, "result": result.to_json()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
