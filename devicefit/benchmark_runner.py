"""`EnhancedHardwareBenchmarkRunner` (spec 002): benchmark a model on the hardware the selector
chooses for it, from Python.

    runner = EnhancedHardwareBenchmarkRunner()
    result = runner.run_benchmark(model_name="bert-base-uncased", model_family="embedding")

"Automatic hardware selection" is the selector's answer among the kinds this host can measure
(HardwareSelector.select_hardware with them declared); the measurement is the CLI's `devicefit
benchmark`: isolated workers, the harness's stopping rules, one row per batch size. With
`database` the rows are stored as `devicefit benchmark --database` stores them (landed and
loaded, once). Nothing is measured on a kind that is not here."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from devicefit.errors import DevicefitError


class BenchmarkRunnerError(DevicefitError, ValueError):
    """A benchmark request that cannot run here (no measurable hardware, a family that is not the model's)."""


class EnhancedHardwareBenchmarkRunner:
    def __init__(self, benchmark_dir: str | Path | None = None, config_path: str | Path | None = None,
                 database: str | Path | None = None):
        """`benchmark_dir`: the data directory the selector answers from; `config_path`: a
        selection config (spec 002); `database`: a DuckDB file to store the rows in (None: not stored)."""
        self.benchmark_dir, self.config_path, self.database = benchmark_dir, config_path, database

    def select(self, model_name: str, model_family: str | None = None, batch_size: int = 1, mode: str = "inference",
               precision: str = "fp32") -> dict[str, Any]:
        """The selector's answer among the kinds this host measures."""
        from benchmark_runners import registry
        from benchmark_runners.hardware import detect_hardware
        from devicefit.select.selector import HardwareSelector

        inventory = detect_hardware()
        here = [k for k in inventory.available_kinds() if k in registry.measurable_kinds()]
        if not here:
            raise BenchmarkRunnerError("no hardware devicefit can measure is available on this host")
        selector = HardwareSelector(benchmark_dir=self.benchmark_dir, config_path=self.config_path, inventory=inventory.to_json(),
                                    record=False)
        return selector.select_hardware(model_family, model_name, batch_size, mode=mode, precision=precision,
                                        available_hardware=here)

    def run_benchmark(self, model_name: str, model_family: str | None = None, hardware: str | None = None,
                      batch_sizes: Sequence[int] = (1,), mode: str = "inference", precision: str = "fp32",
                      max_time_s: float = 10.0) -> dict[str, Any]:
        """Measure `model_name` on `hardware` (default: the selector's primary choice here), one
        config per batch size. Returns the selection that chose the hardware, the device, the run
        id and every row (ok, skipped with its reason, or failed with the error)."""
        from benchmark_runners import registry
        from benchmark_runners.hardware import detect_hardware
        from benchmark_runners.harness import TimingPolicy
        from benchmark_runners.records import BenchmarkConfig
        from benchmark_runners.sweep import new_run_id, run_sweep
        from devicefit.results_io import results_document
        from models.classifier import classify_spec
        from models.resolve import resolve_model

        spec = resolve_model(model_name)
        family = classify_spec(spec).family
        if model_family and family and model_family != family:
            raise BenchmarkRunnerError(f"{spec.name} classifies as {family}, not {model_family}")
        selection = None
        if hardware is None:
            selection = self.select(spec.name, model_family, min(batch_sizes), mode, precision)
            hardware = selection["primary_recommendation"]
        device = hardware if ":" in hardware else registry.partition_device(hardware)
        backend = registry.backend_for_device(device).name
        policy = TimingPolicy(max_time_s=max_time_s)
        configs = [BenchmarkConfig(model=spec.name, device=device, backend=backend, precision=precision, mode=mode, batch_size=b,
                                   policy=policy) for b in batch_sizes]
        run_id = new_run_id()
        inventory = detect_hardware()
        rows = run_sweep(configs, run_id=run_id, inventory=inventory)
        if self.database is not None:
            from devicefit.ingest import store_results_document

            store_results_document(results_document(run_id, rows, inventory.to_json()), self.database)
        return {"model_name": spec.name, "model_family": family, "hardware": registry.kind_of_device(device), "device": device,
                "selection": selection, "run_id": run_id, "results": [r.to_json() for r in rows]}
