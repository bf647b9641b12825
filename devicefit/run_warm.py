"""Before a `devicefit run` measures anything, compute on both cores what it would otherwise
compute on one while nothing is measured: the catalog's facts (the model_catalog asset) and
the memory floor of every config it will measure (the sweep's memory guard, at the start of
each partition). Both are meta-device traces, single-threaded, stored in the derived cache;
the asset and the guard then read them back. On a 2-core AMD EPYC the catalog took about 22 s
and the floors about 20 s of `make run`, each on one core.

Nothing here changes what is measured or stored: a task that fails is the guard's own failure
later (it measures without a floor and says so), and a cache that is already warm costs a read.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from benchmark_runners.hardware import HardwareInventory
from benchmark_runners.records import BenchmarkConfig
from devicefit.profiles import Selection
from models.parallel_warm import WarmReport, warm

log = logging.getLogger("devicefit.run_warm")


@dataclass(frozen=True)
class WarmTask:
    """One model's catalog row (`config` None), or the memory floor of one config, standing for
    every config of its model, mode and sequence length (the largest batch: its floor traces
    batch 1 and 2, which the others' floors read)."""

    model: str
    config: BenchmarkConfig | None = None

    def __str__(self) -> str:
        if self.config is None:
            return f"catalog row of {self.model}"
        c = self.config
        return f"memory floor of {c.model} {c.mode} batch {c.batch_size}" + (f" seq {c.seq_length}" if c.seq_length else "")


def warm_task(task: WarmTask) -> None:
    """Compute what `task` stands for (into the derived cache); the value is not needed here."""
    if task.config is None:
        from devicefit.catalog_facts import catalog_row
        from models.catalog import load_catalog

        catalog_row(load_catalog()[task.model])
    else:
        from benchmark_runners.memory_guard import memory_floor_of

        memory_floor_of(task.config)


def run_warm_tasks(selection: Selection, partition_keys: list[str], inventory: HardwareInventory) -> list[WarmTask]:
    """The catalog rows not yet cached, then one floor per (model, mode, sequence length) of the
    configs the partitions measure on this host's available devices. A partition whose device is
    not here is left out: its run reports that."""
    from devicefit.catalog_facts import catalog_row_cached
    from devicefit.errors import DevicefitError
    from devicefit.pipeline import local_partition_configs
    from models.catalog import load_catalog

    tasks = [WarmTask(name) for name, spec in load_catalog().items() if not catalog_row_cached(spec)]
    available = set(inventory.available_kinds())
    largest: dict[tuple, BenchmarkConfig] = {}
    for key in partition_keys:
        try:
            target, configs = local_partition_configs(key, selection, inventory)
        except (DevicefitError, LookupError, ValueError) as exc:
            log.info("no memory floors warmed for %s: %s", key, exc)
            continue
        if target.kind not in available:
            continue
        for c in configs:
            group = (c.model, c.mode, c.seq_length, c.new_tokens)
            if group not in largest or c.batch_size > largest[group].batch_size:
                largest[group] = c
    return tasks + [WarmTask(c.model, c) for c in largest.values()]


def warm_for_run(selection: Selection, partition_keys: list[str], inventory: HardwareInventory) -> WarmReport:
    """Compute `run_warm_tasks` on this process and a helper (models.parallel_warm)."""
    report = warm(run_warm_tasks(selection, partition_keys, inventory), warm_task)
    log.info("warmed %d cache entries in %.1f s (%d here, %d by the helper: %s)", report.tasks, report.seconds,
             report.by_caller, report.by_helper, report.helper)
    return report
