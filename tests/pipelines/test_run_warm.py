"""devicefit.run_warm: the traces a run needs before it measures, listed once per model, mode and
sequence length, and computed so that the memory guard then traces nothing."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import models.catalog
import models.op_profile as op_profile
from benchmark_runners.hardware import detect_hardware
from benchmark_runners.memory_guard import memory_floor_of
from devicefit.catalog_facts import catalog_row
from devicefit.pipeline import local_partition_configs
from devicefit.profiles import Selection
from devicefit.run_warm import run_warm_tasks, warm_task
from models.parallel_warm import warm
from models.resolve import resolve_model
from tests.conftest import local_partition


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DEVICEFIT_CACHE_DIR", str(tmp_path / "cache"))
    op_profile.forget_in_process()
    yield tmp_path / "cache"
    op_profile.forget_in_process()


def test_one_floor_per_model_mode_and_sequence_at_its_largest_batch(fresh_cache, monkeypatch):
    specs = {name: resolve_model(name) for name in ("bert-tiny", "gpt2")}
    monkeypatch.setattr(models.catalog, "load_catalog", lambda: specs)
    catalog_row(specs["bert-tiny"])  # cached: not listed again
    inventory = detect_hardware(probe=False)
    keys = [local_partition("bert-tiny"), local_partition("gpt2"), "cuda|gpt2"]  # no CUDA device here: left out
    tasks = run_warm_tasks(Selection(), keys, inventory)
    assert [str(t) for t in tasks if not t.configs] == ["catalog row of gpt2"]
    assert not [t for t in tasks if t.backend]  # torch on the CPU keeps nothing on disk between processes
    floors = sorted((c.model, c.mode, c.seq_length or 0, c.batch_size) for t in tasks for c in t.configs)
    assert floors == [("bert-tiny", "inference", 0, 16), ("bert-tiny", "training", 0, 16),
                      ("gpt2", "generation", 0, 1), ("gpt2", "inference", 0, 16), ("gpt2", "inference", 512, 4)]


def warm_task_beside_the_helper(task) -> None:
    """warm_task, the caller's first waiting until the helper has begun one: both take part."""
    marker = Path(os.environ["DEVICEFIT_TEST_WARM_MARKER"])
    if os.getpid() != int(os.environ["DEVICEFIT_TEST_WARM_CALLER"]):
        marker.touch()
    else:
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
    warm_task(task)


def test_after_the_warm_up_the_memory_guard_traces_nothing(fresh_cache, monkeypatch, tmp_path):
    inventory = detect_hardware(probe=False)
    key = local_partition("bert-tiny")
    floors = [t for t in run_warm_tasks(Selection(), [key], inventory) if t.configs and not t.backend]
    monkeypatch.setenv("DEVICEFIT_TEST_WARM_MARKER", str(tmp_path / "helper-began"))
    monkeypatch.setenv("DEVICEFIT_TEST_WARM_CALLER", str(os.getpid()))
    report = warm(floors, warm_task_beside_the_helper, helpers=1)
    assert report.failed == [] and report.by_caller == report.by_helper == 1 and len(floors) == 2
    assert len(list((fresh_cache / "trace").glob("*.json"))) == 4  # inference and training, batch 1 and 2

    def no_tracing(*args, **kwargs):
        raise AssertionError("traced again after the warm-up")

    monkeypatch.setattr(op_profile, "_run_trace", no_tracing)
    op_profile.forget_in_process()  # what the helper computed, and what this process did, both come from disk now
    _, configs = local_partition_configs(key, Selection(), inventory)
    assert len(configs) > 2
    for config in configs:
        assert memory_floor_of(config).total_bytes > 0


def test_openvino_configs_that_share_an_ir_are_one_task(fresh_cache):
    inventory = detect_hardware(probe=False)
    if "openvino" not in inventory.available_kinds():
        pytest.skip(f"OpenVINO is not available here: {inventory.platforms['openvino'].reason}")
    tasks = [t for t in run_warm_tasks(Selection(), [local_partition("gpt2", "openvino")], inventory) if t.backend]
    shapes = sorted((t.configs[0].mode, t.configs[0].seq_length or 0, sorted({(c.precision, c.batch_size) for c in t.configs}))
                    for t in tasks)
    both = [(p, b) for p in ("bf16", "fp32") for b in (1, 4, 16)]
    assert shapes == [("generation", 0, [("fp32", 1)]), ("inference", 0, both), ("inference", 512, [(p, b) for p, b in both if b < 16])]
    assert {t.backend for t in tasks} == {"openvino"}


def test_backend_caches_come_last_longest_last_for_the_helper_to_take_first():
    """The helper claims from the back: the GenAI export (the longest fill, a separate
    exporter) is its first task, then the conversions from the largest model down; the traces
    stay at the front, for this process."""
    from benchmark_runners.records import BenchmarkConfig
    from devicefit.run_warm import WarmTask, _expected_cost

    fills = [WarmTask(m, (BenchmarkConfig(m, mode=mode, seq_length=seq),), "openvino")
             for m, mode, seq in [("gpt2", "generation", None), ("bert-tiny", "inference", 128), ("gpt2", "inference", 512),
                                  ("gpt2", "inference", 128), ("resnet-18", "inference", None)]]
    order = [str(t) for t in sorted(fills, key=_expected_cost)]
    assert order == ["openvino cache of bert-tiny inference seq 128", "openvino cache of resnet-18 inference",
                     "openvino cache of gpt2 inference seq 128", "openvino cache of gpt2 inference seq 512",
                     "openvino cache of gpt2 generation"]
