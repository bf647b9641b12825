"""Before a `devicefit run` measures anything, compute on both cores what it would otherwise
compute on one while nothing is measured: the catalog's facts (the model_catalog asset), the
memory floor of every config it will measure (the sweep's memory guard, at the start of each
partition), and what a backend keeps on disk between processes (OpenVINO's conversions, torch's
reference outputs and the GenAI export: `Backend.fill_cache`). The first two are meta-device
traces, single-threaded, stored in the derived cache; the conversions are mostly
single-threaded too. The asset, the guard and the workers then read them back. On a 2-core AMD
EPYC the catalog took about 22 s of `make run`, the floors about 20 s and OpenVINO's
conversions and export about 55 s, each on one core.

Nothing here changes what is measured: a task that fails is the guard's or the worker's own
failure later (the guard measures without a floor and says so; the worker converts again, and
its row says how it fared), and a cache that is already warm costs a read. An OpenVINO row's
`conversion.source` says "disk cache" where the conversion was done here, as on any later run.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from benchmark_runners.hardware import HardwareInventory
from benchmark_runners.records import BenchmarkConfig
from devicefit.profiles import Selection
from models.errors import Interrupted
from models.parallel_warm import WarmReport, warm

log = logging.getLogger("devicefit.run_warm")
# What the helper imports while this process lists the tasks (6 s of imports on a 2-core AMD
# EPYC, the helper's own about as long): its first tasks are conversions.
HELPER_PRELOAD = ("torch", "transformers", "openvino")


@dataclass(frozen=True)
class WarmTask:
    """One model's catalog row (no configs); the memory floor of `configs[0]`, standing for
    every config of its model, mode and sequence length (the largest batch: its floor traces
    batch 1 and 2, which the others' floors read); or `backend`'s cache for the configs that
    share one of its `cache_key`s."""

    model: str
    configs: tuple[BenchmarkConfig, ...] = ()
    backend: str | None = None

    def __str__(self) -> str:
        if not self.configs:
            return f"catalog row of {self.model}"
        c = self.configs[0]
        if self.backend:
            return f"{self.backend} cache of {c.model} {c.mode}" + (f" seq {c.seq_length}" if c.seq_length else "")
        return f"memory floor of {c.model} {c.mode} batch {c.batch_size}" + (f" seq {c.seq_length}" if c.seq_length else "")


def warm_task(task: WarmTask) -> None:
    """Compute what `task` stands for (into the caches); the value is not needed here."""
    if not task.configs:
        from devicefit.catalog_facts import catalog_row
        from models.catalog import load_catalog

        catalog_row(load_catalog()[task.model])
    elif task.backend:
        from benchmark_runners import registry
        from models.resolve import resolve_model

        registry.backend(task.backend).fill_cache(resolve_model(task.model), list(task.configs))
    else:
        from benchmark_runners.memory_guard import memory_floor_of

        memory_floor_of(task.configs[0])


def run_warm_tasks(selection: Selection, partition_keys: list[str], inventory: HardwareInventory) -> list[WarmTask]:
    """The catalog rows not yet cached, one floor per (model, mode, sequence length) of the
    configs the partitions measure on this host's available devices, and one backend cache per
    backend `cache_key`. A partition whose device is not here is left out: its run reports that."""
    from benchmark_runners import registry
    from devicefit.catalog_facts import catalog_row_cached
    from devicefit.errors import DevicefitError
    from devicefit.pipeline import local_partition_configs
    from models.catalog import load_catalog

    tasks = [WarmTask(name) for name, spec in load_catalog().items() if not catalog_row_cached(spec)]
    available = set(inventory.available_kinds())
    largest: dict[tuple, BenchmarkConfig] = {}
    shared: dict[tuple, list[BenchmarkConfig]] = {}
    for key in partition_keys:
        try:
            target, configs = local_partition_configs(key, selection, inventory)
        except Interrupted:  # SIGINT/SIGTERM (a DevicefitError too): not a partition that cannot be warmed
            raise
        except (DevicefitError, LookupError, ValueError) as exc:
            log.info("nothing warmed for %s: %s", key, exc)
            continue
        if target.kind not in available:
            continue
        backend = registry.backend_of_kind(target.kind)
        for c in configs:
            group = (c.model, c.mode, c.seq_length, c.new_tokens)
            if group not in largest or c.batch_size > largest[group].batch_size:
                largest[group] = c
            cache_key = backend.cache_key(c) if backend is not None else None
            if cache_key is not None:
                shared.setdefault((backend.name, cache_key), []).append(c)
    # The helper takes from the back, so the backends' caches go there longest last (the longest
    # first for the helper), and the short traces here: the two meet on the shortest
    # conversions. In arbitrary order, gpt2's GenAI export (22 s on one core) came last
    # and this process waited 15 s of a 63 s warm-up for it.
    fills = sorted((WarmTask(cs[0].model, tuple(cs), name) for (name, _), cs in shared.items()), key=_expected_cost)
    return tasks + [WarmTask(c.model, (c,)) for c in largest.values()] + fills


def _expected_cost(task: WarmTask) -> tuple[bool, float]:
    """What orders a backend's cache fills: an export for generation (a separate exporter, the
    longest) after the rest, then parameters times tokens (conversion and reference forward)."""
    from models.analysis import parameter_count
    from models.resolve import resolve_model

    c = task.configs[0]
    try:
        parameters = float(parameter_count(resolve_model(c.model)))
    except Interrupted:
        raise
    except Exception:  # noqa: BLE001 - an order only; the fill itself reports what is wrong
        parameters = 0.0
    return c.mode == "generation", parameters * max(c.seq_length or 128, 128)


def warm_for_run(selection: Selection, partition_keys: list[str], inventory: HardwareInventory) -> WarmReport:
    """Compute `run_warm_tasks` on this process and a helper (models.parallel_warm), which
    starts first and imports HELPER_PRELOAD while this process lists them."""
    report = warm(lambda: run_warm_tasks(selection, partition_keys, inventory), warm_task, preload=HELPER_PRELOAD)
    log.info("warmed %d cache entries in %.1f s (%d here, %d by the helper: %s)", report.tasks, report.seconds,
             report.by_caller, report.by_helper, report.helper)
    return report
