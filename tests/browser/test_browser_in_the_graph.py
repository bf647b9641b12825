"""The browser kinds through the asset graph: a wasm partition measured for real beside the CPU's,
then the store's aggregates (speed-up against the CPU's fp32), the compatibility matrix (wasm
measured, with the CPU probe's figures labelled as the CPU it runs on) and the comparative
analysis (a wasm column). Skipped, with the reason, where the browser cannot run."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import dagster as dg
import pytest

from benchmark_runners.browser.chromium import unavailable_reason
from devicefit.paths import DataPaths
from tests.conftest import local_partition

REASON = unavailable_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"no browser here: {REASON}")
ONE = {"ops": {"measurements": {"config": {"batch_sizes": [1], "precisions": ["fp32"], "training_mode": False}}}}


@pytest.fixture(scope="module")
def browser_run(tmp_path_factory):
    from assets.inventory import hardware_inventory, model_catalog
    from assets.measurements import measurements
    from assets.resources import devicefit_resources
    from assets.results import aggregated_results, benchmark_results, compatibility_matrix

    root = tmp_path_factory.mktemp("browser-graph")
    assets = [hardware_inventory, model_catalog, measurements, benchmark_results, aggregated_results, compatibility_matrix]
    resources = devicefit_resources(str(root))
    instance = dg.DagsterInstance.ephemeral()
    assert dg.materialize(assets, selection="key:hardware_inventory", resources=resources, instance=instance).success
    scratch_before = set(Path(tempfile.gettempdir()).glob("devicefit-browser-*"))
    for kind in ("cpu", "wasm"):
        key = local_partition("bert-tiny", kind, instance=instance)
        assert dg.materialize(assets, selection="key:measurements", partition_key=key, run_config=ONE,
                              resources=resources, instance=instance).success
    # the worker gave its page back before exiting: no input files left behind in /tmp
    assert set(Path(tempfile.gettempdir()).glob("devicefit-browser-*")) <= scratch_before
    assert dg.materialize(assets, selection="key:benchmark_results+", resources=resources, instance=instance).success
    return DataPaths(root)


def test_wasm_rows_are_aggregated_against_the_cpus_fp32(browser_run):
    from devicefit import store

    with store.opened(browser_run.database, read_only=True) as con:
        rows = {r["device_kind"]: r for r in store.aggregates(con) if r["model"] == "bert-tiny"}
    assert set(rows) == {"cpu", "wasm"}
    wasm, cpu = rows["wasm"], rows["cpu"]
    assert wasm["backend"] == "browser" and wasm["p50_ms"] > 0
    assert wasm["speedup_vs_cpu_fp32"] == pytest.approx(cpu["p50_ms"] / wasm["p50_ms"], rel=1e-6)


def test_the_compatibility_matrix_and_the_analysis_carry_wasm(browser_run):
    from devicefit import store
    from devicefit.reports.analysis import comparative_analysis

    matrix = json.loads((browser_run.outputs / "compatibility_matrix.json").read_text())
    from models.catalog import FAMILIES
    from models.classifier import classify_spec
    from models.resolve import resolve_model

    family = classify_spec(resolve_model("bert-tiny")).family
    assert family in FAMILIES
    wasm = matrix["model_families"][family]["hardware_compatibility"]["wasm"]
    assert wasm["source"] == "measured" and wasm["compatible"] and wasm["models_measured"] == ["bert-tiny"]
    assert wasm["performance_rating"] is not None  # rated against the CPU it runs on
    with store.opened(browser_run.database, read_only=True) as con:
        columns, rows = comparative_analysis(store.aggregates(con))
    assert any(c.startswith("wasm") and c.endswith("p50_ms") for c in columns), columns
    assert any(r.get(next(c for c in columns if c.startswith("wasm") and c.endswith("p50_ms"))) for r in rows)
