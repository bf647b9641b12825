"""The isolated worker process: `python -m benchmark_runners.worker` reads a job (configs of one
model on one backend and device) as JSON on stdin and answers JSON lines on its original
stdout: {"event": "start", "index": i} before each config and {"event": "result", ...} after.
Library prints are redirected to stderr so they cannot corrupt the protocol."""
from __future__ import annotations

import gc
import json
import os
import shutil
import sys

from benchmark_runners.paths import worker_scratch
from models.lifeline import follow_parent

# The exit status when the parent that started this worker is gone: nobody is left to read results.
ORPHANED_EXIT = 75
# The model whose classes the worker imports while it waits for its job.
PRELOAD_ENV = "DEVICEFIT_PRELOAD_MODEL"


def _preload(model: str) -> None:
    """Import the transformers class of the model this worker will measure (seconds for a
    family's module, which the parent's job cannot speed up). A name that does not resolve is
    left for the measurement to report."""
    if not model:
        return
    try:
        from models.inputs import model_class
        from models.resolve import resolve_model

        model_class(resolve_model(model))
    except Exception:  # noqa: BLE001 - reported by the config that needs it, with its own context
        pass


def freeze_imports() -> None:
    """Move every object alive now (the imported modules: some 370,000 of them with torch and
    transformers) out of the garbage collector's reach. They live as long as the process, so a
    collection can free none of them, yet each full one walked them all: 230-290 ms on a 2-core
    AMD EPYC, at every model the worker releases (an OpenVINO worker does so between batch
    sizes). After the freeze a full collection takes about 2 ms; a model loaded later is
    collected as before. (Timed loops were never touched: only young-generation collections,
    under 0.2 ms, happen inside them, frozen or not.)"""
    gc.collect()
    gc.freeze()


def main() -> int:
    # The lifeline sweep._Worker gave it; a parent killed outright leaves the worker's scratch
    # directory (paths.WORKER_SCRATCH_ENV) to the worker, which removes it before it ends.
    scratch = worker_scratch()
    follow_parent(ORPHANED_EXIT, (lambda: shutil.rmtree(scratch, ignore_errors=True)) if scratch else None)
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    # Imports first: they take seconds, and the parent decides what to send (its memory guard
    # traces each config's model) while they run, so the two overlap instead of adding up.
    import torch

    from benchmark_runners.measure import ConfigMeasurer
    from benchmark_runners.records import BenchmarkConfig, BenchmarkResult

    _preload(os.environ.pop(PRELOAD_ENV, ""))
    freeze_imports()

    job = json.load(sys.stdin)
    configs = [BenchmarkConfig.from_json(c) for c in job["configs"]]
    threads = configs[0].threads or job.get("default_threads")
    if threads:
        torch.set_num_threads(int(threads))
    measurer = ConfigMeasurer(job["run_id"], job.get("host_environment", {}), job.get("devices", {}))
    measurer.remember([BenchmarkResult.from_json(r) for r in job.get("earlier", [])])  # a restarted group's rows so far

    def emit(message: dict) -> None:
        protocol.write(json.dumps(message) + "\n")
        protocol.flush()

    try:
        for index, config in enumerate(configs):
            emit({"event": "start", "index": index})
            result = measurer.run(config)
            emit({"event": "result", "index": index, "result": result.to_json()})
    finally:
        measurer.shutdown()  # os._exit below skips every cleanup the backends registered
    return 0


if __name__ == "__main__":
    status = main()
    # Every result is written and flushed; the interpreter's teardown with torch loaded takes
    # about a second the parent would wait for (and a CPU the next worker would share). Skip it.
    sys.stderr.flush()
    os._exit(status)
