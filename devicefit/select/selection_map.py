"""The selection map of spec 002 (and spec 000's /hardware/map): for every family, the
recommendation per model-size category and mode, and per batch size.

Each cell is answered by the selector for a real catalog model of that family and size
category (named in the cell as `model`), never by a rule of thumb; a category the catalog has
no model for is listed under `no_model` instead of being filled in. A text-generation model's
inference cells are answered in the generation scenario (TPOT, TTFT, decode tokens/s at the
default 256-token prompt and 64 new tokens), as its users run it; each cell names its
`scenario`.
"""
from __future__ import annotations

import contextlib
import copy
import tempfile
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from benchmark_runners import registry
from devicefit.contracts import SELECTION_MAP_FORMAT
from devicefit.select.selector import HardwareSelector, SelectionError
from models.analysis import parameter_count
from models.catalog import FAMILIES, load_catalog
from models.classifier import classify_spec

if TYPE_CHECKING:
    from models.parallel_warm import Ahead

DEFAULT_MAP_BATCH_SIZES = (1, 4, 16, 32, 64)
MODES = ("inference", "training")
SIZE_CATEGORIES = ("small", "medium", "large", "xlarge")


def representatives(selector: HardwareSelector) -> dict[str, dict[str, tuple[str, int]]]:
    """family -> size category -> (the catalog model closest to the category's middle, its parameters)."""
    out: dict[str, dict[str, list[tuple[str, int]]]] = {}
    for spec in load_catalog().values():
        family = classify_spec(spec).family
        if family is None:
            continue
        params = parameter_count(spec)
        out.setdefault(family, {}).setdefault(selector.config.size_category(params), []).append((spec.name, params))
    # The median model of each category stands for it.
    return {f: {c: sorted(ms, key=lambda m: m[1])[len(ms) // 2] for c, ms in cats.items()} for f, cats in out.items()}


def scenario(model: str, family: str, mode: str) -> str:
    """The mode a cell is selected on: a text-generation model that generates is judged on its
    generation figures, never on one forward pass."""
    if mode == "inference" and family == "text_generation":
        from benchmark_runners.generation import generation_reason
        from models.resolve import resolve_model

        if generation_reason(resolve_model(model)) is None:
            return "generation"
    return mode


def _cell(selector: HardwareSelector, model: str, family: str, batch: int, mode: str, hardware: list[str]) -> dict[str, Any]:
    mode = scenario(model, family, mode)
    try:
        r = selector.select_hardware(family, model, batch, mode=mode, available_hardware=hardware)
    except (SelectionError, ValueError) as exc:
        return {"primary": None, "fallbacks": [], "model": model, "batch_size": batch, "scenario": mode, "reason": str(exc)}
    return {"primary": r["primary_recommendation"], "fallbacks": r["fallback_options"], "model": model, "batch_size": batch,
            "scenario": mode, "prediction_source": r["prediction_source"],
            "excluded": {k: s["excluded"] for k, s in r["all_scores"].items() if s["excluded"]}}


def _warm_cells(task: tuple[HardwareSelector, str, str, tuple[tuple[int, str], ...], list[str]]) -> None:
    """One model's cells, computed for the traces they leave in the derived cache, in
    models.parallel_warm's helper or in this process. Nothing is recorded: the map computes its
    cells again after, and those are what a recording selector serves, once."""
    selector, family, model, requests, hardware = task
    quiet = copy.copy(selector)
    quiet.predictor = copy.copy(selector.predictor)
    quiet.predictor.record = False
    for batch, mode in requests:
        _cell(quiet, model, family, batch, mode, hardware)


Cell = tuple[tuple[str, ...], str, str, int, str]  # (where in the map, family, model, batch, mode)


def _map_cells(selector: HardwareSelector, families: list[str], batches: list[int]) -> tuple[dict[str, Any], list[Cell]]:
    """The map's skeleton (each family's `no_model` categories) and the cells to answer."""
    reps = representatives(selector)
    out: dict[str, Any] = {}
    cells: list[Cell] = []
    for family in families:
        cats = reps.get(family, {})
        out[family] = {"model_sizes": {}, "no_model": [c for c in SIZE_CATEGORIES if c not in cats]}
        for category in SIZE_CATEGORIES:
            if category in cats:
                cells += [((family, "model_sizes", category, mode), family, cats[category][0], 1 if mode == "inference" else 8, mode)
                          for mode in MODES]
        if cats:
            # Batch-size rows use the family's smallest category's representative.
            model = cats[next(c for c in SIZE_CATEGORIES if c in cats)][0]
            cells += [((family, "inference", "batch_sizes", str(b)), family, model, b, "inference") for b in batches]
    return out, cells


def _warm_tasks(selector: HardwareSelector, cells: list[Cell], hardware: list[str]) -> list[tuple]:
    """One `_warm_cells` task per model: its cells' (batch, mode) requests."""
    by_model: dict[tuple[str, str], list[tuple[int, str]]] = {}
    for _, family, model, batch, mode in cells:
        by_model.setdefault((family, model), []).append((batch, mode))
    return [(selector, f, m, tuple(r), hardware) for (f, m), r in by_model.items()]


# The helpers `traces_ahead` started, while their blocks run.
_ahead: list["Ahead"] = []


@contextlib.contextmanager
def traces_ahead(inventory: dict[str, Any], families: list[str] | None = None) -> Iterator["Ahead"]:
    """A helper process tracing the default map's models into the derived cache while this
    process does other work, until the map itself starts (it stops the helper and traces
    what is left on both cores). `devicefit run` wraps its results run in it: the steps before
    the map (loading, predictors, reports) leave a core mostly idle, and a fresh run's map
    spent 20-27 s of a 47 s results run counting and tracing on a 2-core AMD EPYC."""
    from models.parallel_warm import ahead

    with ahead([(inventory, list(families or FAMILIES))], _trace_map, preload=("torch", "transformers")) as helper:
        _ahead.append(helper)
        try:
            yield helper
        finally:
            _ahead.remove(helper)


def _trace_map(task: tuple[dict[str, Any], list[str]]) -> None:
    """In the helper: the map's representatives (their parameter counts) and every cell's
    traces, largest model first (the map step does the small ones left, on both cores). The
    cells need no predictor to be traced, so this selector has none (an empty directory): the
    map's own selector, with the trained one, reads the traces back and answers the cells."""
    inventory, families = task
    with tempfile.TemporaryDirectory(prefix="devicefit-map-ahead-") as empty:
        selector = HardwareSelector(benchmark_dir=empty, inventory=inventory, record=False)
        _, cells = _map_cells(selector, families, list(DEFAULT_MAP_BATCH_SIZES))
        tasks = _warm_tasks(selector, cells, list(registry.kind_names()))
        for task_of_model in sorted(tasks, key=lambda t: parameter_count(load_catalog()[t[2]]), reverse=True):
            _warm_cells(task_of_model)


def _stop_ahead() -> None:
    for helper in list(_ahead):
        helper.stop()


def selection_map(selector: HardwareSelector, model_families: list[str] | None = None, batch_sizes: list[int] | None = None,
                  hardware_platforms: list[str] | None = None, helpers: int | None = 0) -> dict[str, Any]:
    """`helpers`: models.parallel_warm's helper processes that trace the representatives'
    models first (None: one where two CPUs are usable; 0, the default: none, as a server
    answering a request wants). The cells are the same either way."""
    families = list(model_families or FAMILIES)
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        raise SelectionError(f"unknown model families {', '.join(unknown)}; known: {', '.join(FAMILIES)}")
    batches = list(dict.fromkeys(batch_sizes or DEFAULT_MAP_BATCH_SIZES))  # each row once, as asked
    if any(b < 1 for b in batches):
        raise SelectionError(f"batch sizes must be positive integers, got {batches}")
    hardware = list(dict.fromkeys(hardware_platforms or registry.kind_names()))
    unknown = [k for k in hardware if k not in registry.kind_names()]
    if unknown:  # else every cell came out None ("no hardware") and the map was written, exit 0
        raise SelectionError(f"unknown hardware {', '.join(unknown)}; known: {', '.join(registry.kind_names())}")
    out, cells = _map_cells(selector, families, batches)
    _stop_ahead()  # what a helper started ahead (`traces_ahead`) finished is on disk; the rest is done here
    if helpers != 0:
        from models.parallel_warm import warm

        warm(_warm_tasks(selector, cells, hardware), _warm_cells, helpers=helpers)
    for where, family, model, batch, mode in cells:
        place = out
        for key in where[:-1]:
            place = place.setdefault(key, {})
        place[where[-1]] = _cell(selector, model, family, batch, mode, hardware)
    return {
        "format": SELECTION_MAP_FORMAT,
        "timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "model_families": out, "batch_sizes": batches, "hardware_platforms": hardware,
        "config_source": selector.config.source, "predictor_version": selector.predictor.predictor.version(),
    }
